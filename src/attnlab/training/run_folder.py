"""The training side of a run folder (its layout and readers are in ``attnlab/runs.py``): refuse a
folder that holds another run, write what describes the run (resolved config, tokenizers, seed,
versions, data statistics, command line), forget log lines a killed process left after its last
checkpoint, redraw ``curves.png`` as the run goes, and close the description at the end."""

from __future__ import annotations

import json
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy
import sacrebleu
import safetensors
import torch

from attnlab import __version__, runs
from attnlab import config as config_mod
from attnlab.config import Config
from attnlab.errors import AttnlabError
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.training.resume import set_aside_dead_records
from attnlab.training.tensorboard import BOARD_DIR

RECORDS = (runs.METRICS, "probes.jsonl")  # the run's append-only logs


def versions() -> dict[str, str]:
    return {"attnlab": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "sacrebleu": sacrebleu.__version__, "safetensors": safetensors.__version__,
            "platform": platform.platform()}


def prepare_run_dir(cfg: Config, out_dir: Path, resume: bool, restarted: bool = False) -> None:
    """Check that ``out_dir`` suits a new run (or holds one to resume); ``restarted``: torchrun restarted
    this job before its first checkpoint, so the folder's files are this job's own and start over."""
    if restarted and not resume:
        for name in RECORDS:
            (out_dir / name).unlink(missing_ok=True)
        shutil.rmtree(out_dir / BOARD_DIR, ignore_errors=True)  # its event files are this job's too
        return
    if resume:
        if not (out_dir / "checkpoints" / "LAST").is_file():
            raise AttnlabError(f"--resume: {out_dir} holds no checkpoint to resume from; drop --resume to start a new run")
        return
    if (out_dir / "checkpoints").exists() and any((out_dir / "checkpoints").iterdir()):
        raise AttnlabError(f"{out_dir} already holds a run; add --resume to continue it or choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for moved in set_aside_dead_records(out_dir, (*RECORDS, BOARD_DIR)):  # a run that died before saving
        print(f"note: {out_dir} held records of a run with no checkpoint; moved them to {moved.name}", file=sys.stderr)


def drop_records_after(out_dir: Path, step: int) -> None:
    """Forget log lines of steps after ``step`` (work lost with a killed process, redone on resume)."""
    for name in RECORDS:
        path = out_dir / name
        if not path.is_file():
            continue
        kept = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                if json.loads(line).get("step", 0) > step:
                    continue
            except (ValueError, AttributeError):
                continue  # a torn last line
            kept.append(line)
        atomic_write_text(path, "".join(x + "\n" for x in kept))


def write_run_files(out_dir: Path, cfg: Config, prepared, model: torch.nn.Module, device: torch.device,
                    world_size: int, argv: list[str] | None) -> None:
    """``config.toml`` (every default written out), ``tokenizers.json`` and ``meta.json``."""
    atomic_write_text(out_dir / runs.CONFIG, config_mod.dumps_toml(runs.run_config(cfg)))  # no corpus path
    atomic_write_json(out_dir / runs.TOKENIZERS, {"src": prepared.src_tok.to_json(), "tgt": prepared.tgt_tok.to_json()})
    meta = {"seed": cfg.train.seed, "versions": versions(), "device": str(device), "threads": torch.get_num_threads(),
            "world_size": world_size, "argv": argv or sys.argv, "data_stats": prepared.stats,
            "model_parameters": sum(p.numel() for p in model.parameters()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_json(out_dir / runs.META, meta)


def finish_meta(out_dir: Path, facts: dict[str, Any]) -> None:
    """Add how the run ended to ``meta.json`` and draw ``curves.png`` (when matplotlib is there)."""
    meta_path = out_dir / runs.META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    meta.update({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **facts})
    atomic_write_json(meta_path, meta)
    try:
        from attnlab.inspection.plots import plot_curves  # matplotlib is heavy: loaded only to draw

        plot_curves(out_dir)
    except ImportError:
        pass


class CurvesPainter:
    """Redraws ``curves.png`` after a validation (rank 0), so the curves can be watched while a run goes.

    One draw (matplotlib, PNG only) measured 0.66-0.81 s on a busy 2-core Xeon, about 30 % of a validation
    of the 15-minute fra-eng Transformer (2.1-2.3 s: loss on 1,000 pairs, BLEU on 200 sentences, 4 probes)
    and more than a tiny run's whole validation. So a draw is skipped while the time since the previous
    one is under :attr:`RATIO` times what that one cost: drawing then takes at most 1/RATIO of the run's
    wall time, whatever the validation cadence. :func:`finish_meta` draws at the end in any case (PNG
    and SVG). A failing disk or a missing matplotlib never stops training.
    """

    RATIO = 50

    def __init__(self) -> None:
        self.cost_s = 0.0  # what the last draw took
        self.last_end: float | None = None
        self.draws = self.skipped = 0

    def after_validation(self, run_dir: Path) -> bool:
        """Redraw ``run_dir/curves.png`` unless it is too soon (see the class docstring); True when drawn."""
        start = time.perf_counter()
        if self.last_end is not None and start - self.last_end < self.RATIO * self.cost_s:
            self.skipped += 1
            return False
        try:
            import matplotlib.figure  # noqa: F401  (its import is paid once, not a draw's cost)

            from attnlab.inspection.plots import plot_curves
        except ImportError:
            return False
        start = time.perf_counter()
        try:
            plot_curves(run_dir, formats=("png",))
        except OSError as e:
            print(f"warning: could not redraw {run_dir / 'curves.png'} ({e.strerror or e}); training goes on",
                  file=sys.stderr)
        self.last_end = time.perf_counter()
        self.cost_s = self.last_end - start
        self.draws += 1
        return True
