import json
import math

import pytest
import torch
from safetensors.torch import load_file

from attnlab import runs
from attnlab.training.loop import NonFiniteLossError, train
from tests.conftest import tiny_config


def _weights(run):
    return load_file(str(runs.resolve_checkpoint(run, "last") / runs.WEIGHTS))


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_resume_equals_uninterrupted(tmp_path, kind):
    # An open-ended schedule: this test lengthens the budget on resume (6 -> 12 steps), which re-plans a
    # budgeted schedule by design; test_budget.py checks that a budgeted run resumed after a signal is exact.
    cfg12 = tiny_config(kind, "train.max_steps=12", "train.log_every=1", "train.schedule=inverse_sqrt")
    cfg6 = tiny_config(kind, "train.max_steps=6", "train.log_every=1", "train.schedule=inverse_sqrt")
    train(cfg12, tmp_path / "straight", progress=False)
    train(cfg6, tmp_path / "stopped", progress=False)
    res = train(cfg12, tmp_path / "stopped", resume=True, progress=False)
    assert res.step == 12
    a, b = _weights(tmp_path / "straight"), _weights(tmp_path / "stopped")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    losses = lambda run: [r["loss"] for r in runs.read_metrics(run) if r.get("event") == "train"]  # noqa: E731
    assert losses(tmp_path / "straight") == losses(tmp_path / "stopped")


def test_run_folder_describes_itself(tiny_runs):
    run = tiny_runs("transformer")
    for name in ("config.toml", "tokenizers.json", "meta.json", "metrics.jsonl", "probes.jsonl"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "meta.json").read_text())
    assert meta["seed"] == 42 and "torch" in meta["versions"] and meta["steps"] == 40
    assert meta["data_stats"]
    last = runs.resolve_checkpoint(run, "last")
    manifest = runs.verify_checkpoint(last)
    assert set(manifest["files"]) == {"model.safetensors", "state.pt"}
    valid = [r for r in runs.read_metrics(run) if r.get("event") == "valid"]
    assert valid and math.isfinite(valid[-1]["valid_loss"]) and "valid_bleu" in valid[-1]
    assert (run / "curves.png").stat().st_size > 1000
    # Where the invocation's seconds went: every part of a step budget's run, none negative, and together
    # (setup aside) the training seconds meta reports (the parts do not overlap), to rounding.
    wall = meta["wall_s"]
    assert {"setup", "batch", "agree", "update", "log", "valid_loss", "valid_bleu", "probes", "checkpoint",
            "other"} <= set(wall)
    assert all(v >= 0 for v in wall.values()) and wall["update"] > 0
    training = sum(v for k, v in wall.items() if k != "setup")
    assert training == pytest.approx(meta["elapsed_s"], abs=0.002 * len(wall) + 0.05)


def test_existing_run_needs_resume(tiny_runs):
    from attnlab.errors import AttnlabError

    with pytest.raises(AttnlabError, match="--resume"):
        train(tiny_config("transformer", "train.max_steps=1"), tiny_runs("transformer"), progress=False)


def test_nonfinite_losses_skip_then_stop(tmp_path, monkeypatch, capsys):
    """From the 4th call on the loss is NaN: those updates are skipped, then the run stops, naming it."""
    import attnlab.training.loop as loop

    real = loop.sequence_loss
    calls = {"n": 0}

    def poisoned(model, batch, label_smoothing=0.0):
        out = real(model, batch, label_smoothing)
        calls["n"] += 1
        if calls["n"] > 3 and model.training:
            out.loss_sum = out.loss_sum * float("nan")
        return out

    # one open-ended schedule for both runs: a budgeted one would plan 3 and 50 updates differently
    train(tiny_config("transformer", "train.max_steps=3", "train.schedule=inverse_sqrt"), tmp_path / "three",
          progress=False)
    monkeypatch.setattr(loop, "sequence_loss", poisoned)
    cfg = tiny_config("transformer", "train.max_steps=50", "train.max_nonfinite=3", "train.schedule=inverse_sqrt")
    with pytest.raises(NonFiniteLossError, match="3 consecutive non-finite steps .first: loss"):
        train(cfg, tmp_path / "run", progress=False)
    assert "update skipped" in capsys.readouterr().err
    a, b = _weights(tmp_path / "three"), _weights(tmp_path / "run")
    for k in a:  # the skipped steps left the weights exactly as after step 3
        assert torch.equal(a[k], b[k]), k
