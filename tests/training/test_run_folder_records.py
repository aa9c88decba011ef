"""Run-folder records and checkpoint folders (issue 15, items 10, 11, 12 and 13's keep_checkpoints)."""

from __future__ import annotations

import builtins
import errno
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from attnlab import runs
from attnlab.training.loop import train
from tests.conftest import tiny_config


class Tiny(nn.Module):
    def __init__(self, fill: float) -> None:
        super().__init__()
        self.output = nn.Linear(3, 2)
        with torch.no_grad():
            self.output.weight.fill_(fill)


def _weight(path: Path) -> torch.Tensor:
    return load_file(str(path / runs.WEIGHTS))["output.weight"]


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_a_stale_step_folder_is_replaced_not_reused(tmp_path, monkeypatch, exchange):
    """A save of step 2 died after its folder was renamed into place, before LAST named it. The next
    save of step 2 must write its own weights there (LAST then names what it validated)."""
    if not exchange:  # the fallback where renameat2 is not available
        monkeypatch.setattr(runs.checkpoint, "_exchange", lambda a, b: False)
    runs.save_checkpoint(tmp_path, 1, Tiny(1.0), {"step": 1})
    runs.save_checkpoint(tmp_path, 2, Tiny(2.0), {"step": 2})  # the dead run's save of step 2 ...
    (tmp_path / "checkpoints" / "LAST").write_text("step-0000001\n")  # ... died before LAST was written
    runs.save_checkpoint(tmp_path, 2, Tiny(7.0), {"step": 2, "mine": True})
    last = runs.resolve_checkpoint(tmp_path, "last")
    assert last.name == "step-0000002"
    runs.verify_checkpoint(last)
    assert torch.all(_weight(last) == 7.0)
    assert runs.load_state(last)["mine"] is True
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["LAST", "step-0000001", "step-0000002"]


@pytest.mark.parametrize("keep", [0, 1, 2, 3])
def test_keep_checkpoints_keeps_that_many_besides_best_and_last(tmp_path, keep):
    """Pass: as config.py documents: `keep_checkpoints` step folders besides `best` and `last`."""
    runs.save_checkpoint(tmp_path, 1, Tiny(1.0), {}, keep=keep, best=True)
    for s in range(2, 9):
        runs.save_checkpoint(tmp_path, s, Tiny(float(s)), {}, keep=keep)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    others = [f"step-{s:07d}" for s in range(8 - keep, 8)]
    assert names == ["step-0000001", *others, "step-0000008"]


def test_a_new_run_moves_a_dead_runs_records_aside(tmp_path):
    """A run that died before its first checkpoint left metrics.jsonl and probes.jsonl: the next run in
    that folder starts them afresh; the old lines are kept in metrics.jsonl.old / probes.jsonl.old."""
    run = tmp_path / "run"
    run.mkdir()
    dead = {"event": "train", "step": 999, "loss": 123.0}
    (run / runs.METRICS).write_text(json.dumps(dead) + "\n")
    (run / "probes.jsonl").write_text(json.dumps({"step": 999, "sentence": "dead"}) + "\n")
    train(tiny_config("transformer", "train.max_steps=2", "train.log_every=1"), run, progress=False)
    steps = [r.get("step") for r in runs.read_metrics(run)]
    assert 999 not in steps and 2 in steps
    probes = [json.loads(x) for x in (run / "probes.jsonl").read_text().splitlines()]
    assert probes and all(p["step"] != 999 for p in probes)
    assert json.loads((run / "metrics.jsonl.old").read_text()) == dead
    assert json.loads((run / "probes.jsonl.old").read_text())["step"] == 999


def test_full_disk_on_the_record_appends_warns_and_the_run_still_saves(tmp_path, monkeypatch, capsys):
    """Appending to metrics.jsonl / probes.jsonl raises OSError(ENOSPC) throughout the run (validations
    included): each file gets one warning line on stderr, and the run still writes its checkpoints."""
    real_open = builtins.open

    def full_disk_open(file, mode="r", *args, **kwargs):
        if "a" in mode and Path(str(file)).name in (runs.METRICS, "probes.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full_disk_open)
    cfg = tiny_config("transformer", "train.max_steps=4", "train.eval_every=2", "train.log_every=1")
    res = train(cfg, tmp_path / "run", progress=False)
    monkeypatch.setattr(builtins, "open", real_open)
    assert res.step == 4
    last = runs.resolve_checkpoint(tmp_path / "run", "last")
    assert last.name == "step-0000004"
    runs.verify_checkpoint(last)
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 2, warnings
    assert any("probes.jsonl" in w for w in warnings) and any("metrics.jsonl" in w for w in warnings)
    assert all("No space left" in w and "free some space" in w for w in warnings)


def test_a_failed_append_leaves_no_torn_line(tmp_path, monkeypatch, capsys):
    """A write that stops half-way (the disk filled) is cut back, so the next record starts a clean line."""
    path = tmp_path / runs.METRICS
    assert runs.append_jsonl(path, [{"step": 1}])
    real_open = builtins.open

    class HalfWriter:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            if len(data) > 4:
                return self.f.write(data[:4])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(builtins, "open", lambda *a, **k: HalfWriter(real_open(*a, **k)))
    assert not runs.append_jsonl(path, [{"step": 2, "loss": 1.5}])
    monkeypatch.setattr(builtins, "open", real_open)
    assert runs.append_jsonl(path, [{"step": 3}])
    assert [r["step"] for r in runs.read_metrics(tmp_path)] == [1, 3]
    assert path.read_text() == '{"step": 1}\n{"step": 3}\n'
    assert capsys.readouterr().err.count("warning:") == 1
