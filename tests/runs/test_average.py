"""`attnlab average`: the averaged checkpoint is the mean of the last N checkpoints' tensors, and every
command that loads a checkpoint takes it (translate, evaluate, export)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from attnlab.cli import main
from attnlab.errors import CheckpointError
from attnlab.runs import load_model, run_decay_start, step_checkpoints
from attnlab.runs.average import average_checkpoints
from tests.conftest import tiny_config


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A tiny run that kept its step checkpoints every 10 of 40 steps, and those of its lr's decay (after
    update 33, train.average_last=5 by default: 34, 36, 37, 39 and the final 40)."""
    from attnlab.training.loop import train

    run = tmp_path_factory.mktemp("avg") / "run"
    train(tiny_config("transformer", "train.max_steps=40", "train.save_every=10", "train.keep_checkpoints=4"), run,
          progress=False)
    return run


def test_the_average_is_the_mean_of_the_last_n(saved_run):
    steps = step_checkpoints(saved_run)
    assert [p.name for p in steps][-3:] == ["step-0000037", "step-0000039", "step-0000040"]
    path = average_checkpoints(saved_run, 3)
    got = load_file(str(path / "model.safetensors"))
    sources = [load_file(str(p / "model.safetensors")) for p in steps[-3:]]
    for k, v in got.items():
        want = sum(s[k].double() for s in sources) / 3
        torch.testing.assert_close(v, want.to(v.dtype))
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["averaged"] == [p.name for p in steps[-3:]] and manifest["step"] == 40


def test_fewer_checkpoints_than_asked_is_one_error(saved_run):
    with pytest.raises(CheckpointError, match="train.keep_checkpoints=10"):
        average_checkpoints(saved_run, 10)
    with pytest.raises(CheckpointError, match="--name best"):
        average_checkpoints(saved_run, 2, name="best")


def test_every_command_loads_the_averaged_checkpoint(saved_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    assert main(["average", str(run), "--last", "2"]) == 0
    assert "--checkpoint averaged" in capsys.readouterr().out
    loaded = load_model(run, "averaged")
    assert loaded.checkpoint.name == "averaged"
    assert main(["translate", str(run), "--checkpoint", "averaged", "twenty one"]) == 0
    assert capsys.readouterr().out.strip()
    assert main(["evaluate", str(run), "--checkpoint", "averaged", "--max-sentences", "4", "--quiet"]) == 0
    report = json.loads((run / "eval-test-first4-averaged.json").read_text(encoding="utf-8"))
    assert report["checkpoint"]["name"] == "averaged"
    assert main(["export", str(run), str(tmp_path / "exp"), "--checkpoint", "averaged"]) == 0
    spec = json.loads((tmp_path / "exp" / "config.json").read_text(encoding="utf-8"))
    assert spec["source"]["checkpoint"] == "averaged"
    exported = load_model(tmp_path / "exp")
    for k, v in exported.model.state_dict().items():
        torch.testing.assert_close(v, loaded.model.state_dict()[k])


def test_the_last_n_reaching_before_the_decay_warn_in_one_line(saved_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    assert [p.name for p in step_checkpoints(run)] == [f"step-{s:07d}" for s in (10, 20, 30, 34, 36, 37, 39, 40)]
    assert main(["average", str(run), "--last", "7"]) == 0  # a warning, not an error: the average is written
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: steps 20, 30 were written before the learning rate began "
                                               "to decay (after update 33)") and "`--last 5`" in err[0], err
    assert (run / "checkpoints" / "averaged").is_dir()
    assert main(["average", str(run), "--last", "5"]) == 0
    assert capsys.readouterr().err == ""


def test_from_decay_averages_exactly_the_decay_checkpoints(saved_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(saved_run, run)
    assert run_decay_start(run) == 33
    assert main(["average", str(run), "--from-decay"]) == 0
    assert capsys.readouterr().err == ""
    manifest = json.loads((run / "checkpoints" / "averaged" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["averaged"] == [f"step-{s:07d}" for s in (34, 36, 37, 39, 40)]
    want = average_checkpoints(run, 5, name="same")  # the same five, as the newest five
    got = load_file(str(run / "checkpoints" / "averaged" / "model.safetensors"))
    for k, v in load_file(str(want / "model.safetensors")).items():
        assert torch.equal(got[k], v), k
