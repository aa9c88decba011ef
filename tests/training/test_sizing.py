"""train.size=auto (training/sizing.py): the compute budget picks a tier; keys the user set always win."""

from __future__ import annotations

import pytest
import torch

from attnlab import config as C
from attnlab import device
from attnlab.training import sizing


def _cfg(kind: str, *items: str) -> C.Config:
    return C.apply_overrides(C.preset(kind), ["data.dataset=fra-eng", *items])


@pytest.mark.parametrize("peak,minutes,tier", [(64, 1.5, "tiny"), (64, 12, "small"), (322, 1.5, "tiny"),
                                               (210, 1.5, "tiny"), (322, 2.5, "small"),
                                               (322, 15, "medium"), (322, 60, "base"), (64, 60, "medium")])
def test_compute_budget_picks_the_tier(peak, minutes, tier):
    cfg, why = sizing.resolve(_cfg("transformer", f"train.max_minutes={minutes}"), peak=peak)
    assert cfg.train.size == tier
    assert f"machine {peak} GFLOP/s, budget {minutes:g} min" in why and f"size {tier}" in why
    if tier == "tiny":
        assert cfg.model.num_hiddens == 128 and cfg.data.tokenizer == "word" and cfg.data.batch_tokens == 400
    if tier == "base":
        assert cfg.model == C.preset("transformer").model and cfg.data.batch_tokens == 2500


def test_explicit_settings_win():
    cfg = _cfg("transformer", "train.max_minutes=1.5", "model.num_hiddens=64", "data.batch_tokens=3000")
    sized, _ = sizing.resolve(cfg, frozenset({"model.num_hiddens", "data.batch_tokens"}), peak=64)
    assert sized.train.size == "tiny" and sized.model.num_hiddens == 64 and sized.data.batch_tokens == 3000
    assert sized.model.ffn_num_hiddens == 512  # the tier's, not set by the user
    # without the CLI's list of keys, the keys that differ from the preset count as the user's
    inferred, _ = sizing.resolve(cfg, peak=64)
    assert inferred.model.num_hiddens == 64 and inferred.data.batch_tokens == 3000


def test_base_and_unbudgeted_runs_keep_the_preset():
    base, why = sizing.resolve(_cfg("bahdanau", "train.max_minutes=2", "train.size=base"), peak=64)
    assert why == "" and base.model == C.preset("bahdanau").model
    open_ended, _ = sizing.resolve(_cfg("bahdanau", "train.max_steps=100"), peak=64)
    assert open_ended.train.size == "base" and open_ended.data == _cfg("bahdanau").data


def test_resolving_twice_changes_nothing():
    once, _ = sizing.resolve(_cfg("bahdanau", "train.max_minutes=2"), peak=64)
    twice, _ = sizing.resolve(once, peak=64)
    assert once == twice and once.train.size == "tiny" and once.model.num_layers == 1


def test_matmul_probe_measures_something():
    assert device.measure_peak_gflops(seconds=0.05, n=128) > 0.1
    assert device.measure_peak_gflops(seconds=0, n=64) > 0  # no time left: still one timed batch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_matmul_probe_on_cuda_in_the_dtype_given():
    assert device.measure_peak_gflops(seconds=0.2, device="cuda", dtype=torch.bfloat16) > 0


def test_cli_train_prints_its_choice(tmp_path, capsys, monkeypatch, fra_eng_zip):
    """A budgeted `attnlab train` with no size says what it chose and why (the probe replaced by 64 GFLOP/s)."""
    from attnlab.cli import main

    monkeypatch.setattr(device, "measure_peak_gflops", lambda *a, **k: 64.0)
    assert main(["train", "--model", "transformer", "--out", str(tmp_path / "r"), "--data", str(fra_eng_zip),
                 "--max-minutes", "0.05", "--quiet", "data.max_pairs=3000", "train.eval_max_sentences=8"]) == 0
    err = capsys.readouterr().err
    assert "machine 64 GFLOP/s, budget 0.05 min" in err and "size tiny" in err
    saved = C.load_toml(tmp_path / "r" / "config.toml")
    assert saved.train.size == "tiny" and saved.data.max_pairs == 3000 and saved.model.num_hiddens == 128


def test_a_key_set_to_its_preset_value_survives_the_tier(tmp_path, monkeypatch, fra_eng_zip):
    """`model.num_hiddens=256` is the preset's value; the tiny tier would make it 128. The CLI sizes the run, then
    the library's train() settles the tier again: both must see the key as the user's."""
    from attnlab.cli import main

    monkeypatch.setattr(device, "measure_peak_gflops", lambda *a, **k: 64.0)
    assert main(["train", "--model", "transformer", "--out", str(tmp_path / "r"), "--data", str(fra_eng_zip),
                 "--max-minutes", "0.05", "--quiet", "data.max_pairs=3000", "train.eval_max_sentences=8",
                 "model.num_hiddens=256"]) == 0
    saved = C.load_toml(tmp_path / "r" / "config.toml")
    assert saved.train.size == "tiny" and saved.model.num_hiddens == 256 and saved.data.batch_tokens == 400


@pytest.mark.slow
def test_the_cli_and_the_notebook_settle_the_size_once_and_alike(tmp_path, monkeypatch, fra_eng_zip):
    """`attnlab train` passes train.size=auto through; the training session settles it, once, for the CLI and for
    ``attnlab.train`` alike, and both runs record the same sized config (the probe replaced by 64 GFLOP/s)."""
    import attnlab
    from attnlab.cli import main

    monkeypatch.setattr(device, "measure_peak_gflops", lambda *a, **k: 64.0)
    calls = []
    resolve = sizing.resolve
    monkeypatch.setattr(sizing, "resolve", lambda cfg, *a, **k: calls.append(cfg.train.size) or resolve(cfg, *a, **k))
    items = ["data.max_pairs=3000", "train.eval_max_sentences=8", "train.max_steps=2", "train.max_minutes=1"]
    assert main(["train", "--model", "transformer", "--out", str(tmp_path / "cli"), "--data", str(fra_eng_zip),
                 "--quiet", *items]) == 0
    assert calls == ["auto"]  # not once in the CLI and again in the session
    attnlab.train("transformer", tmp_path / "api", [f"data.data_path={fra_eng_zip}", *items], progress=False)
    assert calls == ["auto", "auto"]
    cli, api = (C.load_toml(tmp_path / name / "config.toml") for name in ("cli", "api"))
    assert cli.train.size == api.train.size == "tiny"
    assert (cli.model, cli.data, cli.train) == (api.model, api.data, api.train)


@pytest.mark.parametrize("kind", ["seq2seq", "bahdanau", "transformer", "decoder-only"])
@pytest.mark.parametrize("tier", [t.name for t in sizing.NAMED_TIERS])
def test_every_tier_builds_every_model(kind, tier):
    from attnlab.models import build_model

    cfg, _ = sizing.resolve(_cfg(kind, f"train.size={tier}", "train.max_minutes=1"), peak=64)
    assert cfg.train.size == tier
    model = build_model(cfg.model, 50, 60)
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_the_notes_size_is_the_notes_shapes(kind):
    """--size notes: 32-wide embeddings and states and an output layer W_o (V_tgt, 32) of its own (notes §5–8)."""
    from attnlab.models import build_model

    cfg, _ = sizing.resolve(_cfg(kind, "train.size=notes", "train.max_minutes=1.5"), peak=64)
    assert cfg.train.size == "notes" and cfg.model.num_hiddens == 32 and not cfg.model.tie_embeddings
    model = build_model(cfg.model, 50, 60)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert (60, 32) in shapes.values() and (60,) in shapes.values()  # W_o and b_o
    assert (50, 32) in shapes.values()  # the source embedding
    assert sum(s == (60, 32) for s in shapes.values()) == 2  # the target embedding and W_o, not tied


def test_no_budget_picks_the_notes_size():
    for peak in (1, 64, 1000, 100_000):
        for minutes in (0.1, 1.5, 60):
            cfg, _ = sizing.resolve(_cfg("bahdanau", f"train.max_minutes={minutes}"), peak=peak)
            assert cfg.train.size != "notes"
