"""The training side of a run folder (its layout and readers are in :mod:`attnlab.runs`): refuse a
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

from attnlab import config as config_mod
from attnlab import runs
from attnlab._version import __version__
from attnlab.config import Config
from attnlab.errors import AttnlabError
from attnlab.files import atomic_write_json, atomic_write_text, writable_folder
from attnlab.i18n import _
from attnlab.training.resume import set_aside_dead_records
from attnlab.training.run_lock import LOCK_FILE
from attnlab.training.tensorboard import BOARD_DIR

RECORDS = (runs.METRICS, "probes.jsonl")  # the run's append-only logs


def versions() -> dict[str, str]:
    return {"attnlab": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "sacrebleu": sacrebleu.__version__, "safetensors": safetensors.__version__,
            "platform": platform.platform()}


def _is_run(out_dir: Path) -> bool:
    """True when ``meta.json`` is the one :func:`write_run_files` writes (a run, perhaps one that died
    before its first checkpoint)."""
    try:
        meta = json.loads((out_dir / runs.META).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("versions"), dict) and "attnlab" in meta["versions"]


def _is_dead_record(name: str) -> bool:
    """A name a run's records take (``metrics.jsonl``, ``tensorboard/``, a set-aside ``….old.2``, ``checkpoints/``,
    ``train.lock``, which training takes before it checks the folder)."""
    base = name.split(".old", 1)[0] if ".old" in name else name
    return base in (*RECORDS, BOARD_DIR) or name in (runs.CHECKPOINTS, LOCK_FILE)


def _check_new_run_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` whose files a new run would overwrite: only a new or empty folder, a run
    (its ``meta.json`` is attnlab's) or a folder holding nothing but a run's records may take one."""
    if out_dir.exists() and not out_dir.is_dir():
        raise AttnlabError(_("--out {out_dir} is a file, not a folder; choose an empty or new folder "
                             "for the run").format(out_dir=out_dir))
    try:
        names = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    except OSError as e:
        raise AttnlabError(_("could not read --out {out_dir}: {why}; choose another folder").format(out_dir=out_dir, why=e.strerror or e)) from None
    if not names or _is_run(out_dir):
        return
    foreign = [n for n in names if not _is_dead_record(n)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise AttnlabError(_("--out {out_dir} is not empty and is not a run folder (it holds {shown}), "
                             "so training would overwrite its files; choose an empty or new folder, or "
                             "--resume to continue a run").format(out_dir=out_dir, shown=shown))


def check_run_dir(out_dir: Path, resume: bool) -> None:
    """Refuse, writing nothing, an ``out_dir`` that cannot take this run: with ``resume``, one without a
    checkpoint; else one whose files a new run would overwrite, or that already holds a run. Training
    checks this before it locks the folder, so a refused folder is left without a ``train.lock``."""
    if resume:
        if not runs.has_checkpoint(out_dir):
            raise AttnlabError(_("--resume: {out_dir} holds no checkpoint to resume from; drop "
                                 "--resume to start a new run").format(out_dir=out_dir))
        return
    _check_new_run_dir(out_dir)
    if runs.checkpoint_root(out_dir).exists() and any(runs.checkpoint_root(out_dir).iterdir()):
        raise AttnlabError(_("{out_dir} already holds a run; add --resume to continue it or choose "
                             "another --out").format(out_dir=out_dir))


def prepare_run_dir(cfg: Config, out_dir: Path, resume: bool, restarted: bool = False) -> None:
    """Check that ``out_dir`` suits a new run (or holds one to resume); ``restarted``: torchrun restarted
    this job before its first checkpoint, so the folder's files are this job's own and start over.

    A new run never overwrites what is not a run's: ``out_dir`` must be new, empty, a run folder
    without checkpoints (one that died before saving: its records are set aside) or hold only such
    records. Raises :class:`AttnlabError` with one line otherwise, and for a folder it cannot write.
    """
    if restarted and not resume:
        for name in RECORDS:
            (out_dir / name).unlink(missing_ok=True)
        shutil.rmtree(out_dir / BOARD_DIR, ignore_errors=True)  # its event files are this job's too
        return
    check_run_dir(out_dir, resume)
    if resume:
        return
    writable_folder(out_dir, "--out", keep=True)  # created, and a bad --out fails before training
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
        try:
            atomic_write_text(path, "".join(x + "\n" for x in kept))
        except OSError as e:
            raise AttnlabError(_("could not rewrite {path} to resume the run: {why}; its checkpoints "
                                 "are untouched: free some space and resume again").format(path=path, why=e.strerror or e)) from None


def write_run_files(out_dir: Path, cfg: Config, prepared, model: torch.nn.Module, device: torch.device,
                    world_size: int, argv: list[str] | None) -> None:
    """``config.toml`` (every default written out, no corpus path), ``tokenizers.json`` and ``meta.json``;
    a disk that refuses them (full, read-only) is one line, before any checkpoint is written."""
    meta = {"seed": cfg.train.seed, "versions": versions(), "device": str(device), "threads": torch.get_num_threads(),
            "world_size": world_size, "argv": argv or sys.argv, "data_stats": prepared.stats,
            "model_parameters": sum(p.numel() for p in model.parameters()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    files = {runs.CONFIG: config_mod.dumps_toml(runs.run_config(cfg)),  # no corpus path: the run can move
             runs.TOKENIZERS: {"src": prepared.src_tok.to_json(), "tgt": prepared.tgt_tok.to_json()},
             runs.META: meta}
    for name, content in files.items():
        try:
            if isinstance(content, str):
                atomic_write_text(out_dir / name, content)
            else:
                atomic_write_json(out_dir / name, content)
        except OSError as e:
            raise AttnlabError(_("could not write {value}: {why}; free some space or choose another "
                                 "--out (no checkpoint was written or changed)").format(value=out_dir / name, why=e.strerror or e)) from None


def finish_meta(out_dir: Path, facts: dict[str, Any]) -> None:
    """Add how the run ended to ``meta.json`` and draw ``curves.png`` (when matplotlib is there).

    Called after the final checkpoint is saved: a disk that refuses ``meta.json`` is one line that
    says so (:class:`AttnlabError`); one that refuses the drawing is a warning, as during the run.
    """
    meta_path = out_dir / runs.META
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        meta = {}
    meta.update({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **facts})
    try:
        atomic_write_json(meta_path, meta)
    except OSError as e:
        raise AttnlabError(_("could not write {meta_path}: {why}; the run's checkpoints are saved, "
                             "only this record of how it ended is missing: free some space").format(meta_path=meta_path, why=e.strerror or e)) from None
    try:
        from attnlab.viz.curves import plot_curves  # matplotlib is heavy: loaded only to draw

        plot_curves(out_dir)
    except ImportError:
        pass
    except OSError as e:
        print(f"warning: could not draw {out_dir / 'curves.png'} ({e.strerror or e}); the run is saved",
              file=sys.stderr)


class CurvesPainter:
    """Redraws ``curves.png`` after a validation (rank 0), so the curves can be watched while a run goes.

    One draw costs a sizeable share of a validation, more than a tiny run's whole validation
    (bench/RESULTS.md, "Figures moved out of the source"). So a draw is skipped while the time since the previous
    one is under :attr:`RATIO` times what that one cost: drawing then takes at most 1/RATIO of the run's
    wall time, whatever the validation cadence. :func:`finish_meta` draws at the end in any case (PNG
    and SVG). A failing disk or a missing matplotlib never stops training.
    """

    RATIO = 50

    def __init__(self) -> None:
        self.enabled = True  # False: a run nobody watches while it trains (the demo's): drawn at the end only
        self.cost_s = 0.0  # what the last draw took
        self.last_end: float | None = None
        self.draws = self.skipped = 0

    def after_validation(self, run_dir: Path) -> bool:
        """Redraw ``run_dir/curves.png`` unless it is too soon (see the class docstring); True when drawn."""
        start = time.perf_counter()
        if not self.enabled or self.last_end is not None and start - self.last_end < self.RATIO * self.cost_s:
            self.skipped += 1
            return False
        try:
            import matplotlib.figure  # noqa: F401  (its import is paid once, not a draw's cost)

            from attnlab.viz.curves import plot_curves
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
