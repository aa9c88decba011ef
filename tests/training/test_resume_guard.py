"""`--resume` may change only what the allowlist names (issue 15, items 6, 7, 8 and 13's tie_embeddings).

Every refusal is one line naming the keys with their saved and given values, and comes before
anything in the run folder is written: afterwards the run translates exactly as before.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnlab import config as C
from attnlab import runs
from attnlab.errors import AttnlabError
from attnlab.training.loop import train
from tests.cli.test_cli import assert_one_line_error, attnlab
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def run3(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("resume") / "run3"
    train(tiny_config("transformer", "train.max_steps=3"), run, progress=False)
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def _snapshot(run: Path) -> dict[str, bytes]:
    """Every file of the run folder (LAST, BEST, checkpoints, config.toml, logs) by relative path."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


@pytest.mark.slow
@pytest.mark.parametrize("override", ["model.max_positions=256", "model.tie_embeddings=false"])
def test_cli_resume_refuses_a_model_change_and_the_run_still_translates(run3, tmp_path, override):
    """Pass: exit 2 with one line naming the key, saved and given values and another --out; not a byte of
    the run folder changes, and `attnlab translate` on it still works."""
    run = _copy(run3, tmp_path)
    before = _snapshot(run)
    key, value = override.split("=")
    saved = getattr(runs.read_run(run).config.model, key.split(".")[1])
    proc = attnlab("train", "--resume", "--out", str(run), "--quiet", "train.max_steps=5", override)
    assert_one_line_error(proc, key)
    line = proc.stderr.strip()
    assert f"saved {saved!r}" in line and "given" in line and "another --out" in line, line
    assert _snapshot(run) == before
    tr = attnlab("translate", str(run), "twenty-one")
    assert tr.returncode == 0 and "error" not in tr.stderr, tr.stderr


@pytest.mark.slow
def test_cli_resume_refuses_a_changed_split_and_seed(run3, tmp_path):
    """Pass: `--resume data.test_frac=0.3 train.seed=7` exits 2 with one line naming both keys."""
    run = _copy(run3, tmp_path)
    before = _snapshot(run)
    proc = attnlab("train", "--resume", "--out", str(run), "--quiet", "data.test_frac=0.3", "train.seed=7")
    assert_one_line_error(proc, "data.test_frac: saved 0.03, given 0.3")
    assert "train.seed: saved 42, given 7" in proc.stderr
    assert _snapshot(run) == before


@pytest.mark.parametrize("override", [
    "train.lr=0.5", "train.warmup_steps=1", "train.schedule=constant", "train.optimizer=adam",
    "train.weight_decay=0.0", "train.betas=0.8,0.9", "train.label_smoothing=0.0", "train.clip_grad_norm=0.5",
    "train.seed=7", "train.amp=false", "data.test_frac=0.3", "data.valid_frac=0.1", "data.num_steps=12",
    "data.numbers_size=500", "data.batch_tokens=500", "model.dropout=0.3", "model.num_layers=2",
    "model.tie_embeddings=false", "model.max_positions=256",
])
def test_library_resume_refuses_changes_outside_the_allowlist(run3, tmp_path, override):
    """Pass: train(..., resume=True) raises one AttnlabError line naming the key before writing anything
    (config.toml keeps the value that was used)."""
    run = _copy(run3, tmp_path)
    before = _snapshot(run)
    cfg = C.apply_overrides(runs.read_run(run).config, ["train.max_steps=5", override])
    with pytest.raises(AttnlabError) as err:
        train(cfg, run, resume=True, progress=False)
    msg = str(err.value)
    assert override.split("=")[0] + ": saved" in msg and "given" in msg and "--out" in msg, msg
    assert "\n" not in msg
    assert _snapshot(run) == before


def test_refusal_names_saved_and_given_values(run3, tmp_path):
    run = _copy(run3, tmp_path)
    cfg = C.apply_overrides(runs.read_run(run).config, ["train.lr=0.5"])
    with pytest.raises(AttnlabError, match=r"train\.lr: saved 0\.003, given 0\.5"):
        train(cfg, run, resume=True, progress=False)


def test_resume_accepts_the_allowlisted_changes_and_records_them(run3, tmp_path):
    """Pass: budgets, cadence, device, probes, data_path and [decode] may change; config.toml records them."""
    run = _copy(run3, tmp_path)
    overrides = ["train.max_steps=5", "train.log_every=1", "train.eval_every=5", "train.save_every=4",
                 "train.keep_checkpoints=1", "train.eval_max_sentences=4", "train.max_nonfinite=3",
                 "train.threads=1", "train.device=cpu", "train.probe_sentences=one,two",
                 "decode.beam_size=2", "decode.max_len_b=5"]
    cfg = C.apply_overrides(runs.read_run(run).config, overrides)
    res = train(cfg, run, resume=True, progress=False)
    assert res.step == 5
    saved = runs.read_run(run).config
    assert saved.train.max_steps == 5 and saved.decode.beam_size == 2
    assert saved.train.probe_sentences == ("one", "two")


def test_every_key_outside_the_allowlist_is_refused_even_one_added_later():
    """Pass: a difference in any key not on the allowlist (or a key only one side has) is reported."""
    from attnlab.training.resume import RESUME_MAY_CHANGE, RESUME_MAY_CHANGE_SECTIONS, resume_differences

    base = C.to_dict(C.Config())
    for section, values in base.items():
        for key in values:
            given = C.to_dict(C.Config())
            given[section][key] = "<changed>"
            found = [k for k, _, _ in resume_differences(base, given)]
            allowed = section in RESUME_MAY_CHANGE_SECTIONS or f"{section}.{key}" in RESUME_MAY_CHANGE
            assert found == ([] if allowed else [f"{section}.{key}"]), (section, key, found)
    later = C.to_dict(C.Config())
    later["train"]["some_future_knob"] = 1
    assert [k for k, _, _ in resume_differences(base, later)] == ["train.some_future_knob"]
    assert {k.split(".")[0] for k in RESUME_MAY_CHANGE} <= {"train", "data"}


@pytest.mark.parametrize("override", ["decode.max_len_a=inf", "train.max_minutes=inf", "train.min_lr_ratio=-5",
                                      "train.weight_decay=nan", "decode.length_penalty=-inf"])
def test_cli_refuses_non_finite_and_out_of_range_floats_on_resume_and_on_a_new_run(run3, tmp_path, capsys, override):
    """Pass: one `error:` line naming the key, exit 2, the run untouched. These passed before and failed
    silently: max_len_a=inf cut every output to 1 token, max_minutes=inf stopped at step 0,
    min_lr_ratio=-5 trained on a negative lr, weight_decay=nan was reported as a too-high lr."""
    from attnlab.cli import main

    run = _copy(run3, tmp_path)
    before = _snapshot(run)
    key = override.split("=")[0]
    for argv in (["train", "--resume", "--out", str(run)],
                 ["train", "--model", "transformer", "--dataset", "numbers", "--out", str(tmp_path / "new")]):
        assert main([*argv, "--quiet", "train.max_steps=4", override]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {key}="), lines
    assert _snapshot(run) == before
    assert not (tmp_path / "new").exists()


def test_resume_checks_the_weights_shapes_before_building_the_model_config_toml_describes(run3, tmp_path, monkeypatch):
    """config.toml and the manifest's record of the model both edited to 128 layers of width 16384 (about
    400 G parameters): `--resume` found them in agreement and built that model before load_weights looked
    at the weights file, which ships the 1-layer one."""
    import json

    import torch

    from attnlab.training import session

    run = _copy(run3, tmp_path)
    cfg_path = run / runs.CONFIG
    huge = {"num_layers": C.MAX_LAYERS, "num_hiddens": C.MAX_WIDTH, "ffn_num_hiddens": C.MAX_FFN}
    lines = [f"{k} = {huge[k]}" if (k := line.split(" =")[0]) in huge else line
             for line in cfg_path.read_text().splitlines()]
    cfg_path.write_text("\n".join(lines) + "\n")
    manifest_path = runs.resolve_checkpoint(run, "last") / runs.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["model"].update(huge)
    manifest_path.write_text(json.dumps(manifest))
    real = session.build_model

    def only_on_meta(*args, **kwargs):
        assert torch.get_default_device().type == "meta", "a model was built before the checkpoint was verified"
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "build_model", only_on_meta)
    monkeypatch.setattr(runs.loader, "build_model", only_on_meta)  # the loader builds the shapes it checks
    with pytest.raises(AttnlabError, match="does not fit the transformer model its config describes") as err:
        train(C.apply_overrides(runs.read_run(run).config, ["train.max_steps=5"]), run, resume=True, progress=False)
    assert "\n" not in str(err.value)
