"""Checkpoint averaging: the mean of a run's last N checkpoints, a checkpoint like the others.

Averaging the weights of the last few checkpoints of one run (Vaswani et al. 2017, §6.1: the last 5
checkpoints for the base models; fairseq's, OpenNMT's and JoeyNMT's ``average_checkpoints``) smooths the
noise of the final updates at no training cost. The result is written as ``RUN/checkpoints/averaged/``
(``model.safetensors`` and a ``manifest.json`` that names its sources, verified like every checkpoint),
so every command takes it as ``--checkpoint averaged``. It has no ``state.pt``: training does not resume
from a mean. Rotation only removes ``step-N`` folders, so it stays until it is averaged again.

Averaging pays among checkpoints near convergence. A budgeted run's newest manifest records when its lr
began to decay, and keeps ``train.average_last`` checkpoints of that phase: ``from_decay`` averages exactly
those written in it, and :func:`decay_note` says when the last N reach back into the flat phase.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

from attnlab.errors import CheckpointError
from attnlab.i18n import _
from attnlab.runs.checkpoint import (
    _save_failed,
    check_safetensors_header,
    checkpoint_root,
    decay_checkpoints,
    run_decay_start,
    step_checkpoints,
    step_of,
    verify_checkpoint,
    write_checkpoint_folder,
)
from attnlab.runs.folder import WEIGHTS, is_export, read_run

__all__ = ["AVERAGED", "average_checkpoints", "average_tensors", "decay_note"]

AVERAGED = "averaged"  # the default name of the averaged checkpoint, `--checkpoint averaged`
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def average_tensors(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of ``states`` (same names and shapes), summed in float64 and cast back to each
    tensor's dtype; a tensor that is not floating point (a count, an index) is the last state's."""
    out = {}
    for k, last in states[-1].items():
        if last.is_floating_point():
            total = torch.zeros(last.shape, dtype=torch.float64)
            for s in states:
                total += s[k].to(torch.float64)
            out[k] = (total / len(states)).to(last.dtype).contiguous()
        else:
            out[k] = last.clone()
    return out


def _read(path: Path) -> dict[str, torch.Tensor]:
    wpath = path / WEIGHTS
    check_safetensors_header(wpath)
    try:
        return load_file(str(wpath))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(_("{wpath} is not a valid safetensors file ({reason}); it was not loaded")
                              .format(wpath=wpath, reason=reason)) from None


def decay_note(run_dir: str | Path, last: int) -> str | None:
    """One line when some of the ``last`` newest step checkpoints were written before the run's lr began to
    decay (which, and how many of the newest lie in the decay phase); None otherwise or when the run does
    not record its decay (no budget)."""
    start = run_decay_start(run_dir)
    chosen = step_checkpoints(run_dir)[-last:] if last > 0 else []
    early = [p.name for p in chosen if (step_of(p.name) or 0) <= start] if start is not None else []
    if not early:
        return None
    k = len(decay_checkpoints(run_dir))
    fix = (_("`--last {k}` (or --from-decay) would average only those written in it, near convergence").format(k=k)
           if k else _("none was written in it; train with train.average_last=5 to keep some"))
    return _("warning: steps {steps} were written before the learning rate began to decay (after update {start}); "
             "{fix}").format(steps=", ".join(str(step_of(n)) for n in early), start=start, fix=fix)


def average_checkpoints(run_dir: str | Path, last: int | None = None, name: str = AVERAGED,
                        from_decay: bool = False) -> Path:
    """Write ``RUN/checkpoints/<name>/``, the mean of the run's ``last`` newest ``step-N`` checkpoints, or with
    ``from_decay`` of every one written in the lr's decay phase (:func:`~attnlab.runs.decay_checkpoints`).

    Each source is verified first (:func:`~attnlab.runs.verify_checkpoint`: sha256, the run's config and
    vocabularies); they must hold the same tensors. The folder is written under a temporary name and
    renamed into place, replacing an earlier one of that name. Returns the folder. Raises
    :class:`CheckpointError` (one line) for an exported folder, fewer than ``last`` checkpoints, none in the
    decay phase, a bad ``name`` or a write the disk refuses.
    """
    run_dir = Path(run_dir)
    if from_decay:
        return _average(run_dir, _decay_sources(run_dir, name), name)
    if last is None or last < 1:
        raise CheckpointError(_("--last {n} must be at least 1: the number of newest checkpoints to average")
                              .format(n=last))
    _check_target(run_dir, name)
    steps = step_checkpoints(run_dir)
    if len(steps) < last:
        raise CheckpointError(_("{run} holds {k} step checkpoints ({names}), fewer than --last {n}; average "
                                "fewer, or train with train.keep_checkpoints={n} (and train.save_every) to keep "
                                "more").format(run=run_dir, k=len(steps), names=", ".join(p.name for p in steps)
                                               or "-", n=last))
    return _average(run_dir, steps[-last:], name)


def _check_target(run_dir: Path, name: str) -> None:
    if not _NAME.fullmatch(name) or step_of(name) is not None or name.lower() in ("best", "last"):
        raise CheckpointError(_("--name {name} cannot name a checkpoint: use letters, digits, '.', '_' or '-', "
                                "and neither best, last nor step-N (default: averaged)").format(name=name))
    if is_export(run_dir):
        raise CheckpointError(_("{run} is an exported folder holding one model; average the run folder it came "
                                "from").format(run=run_dir))
    read_run(run_dir)  # a run folder, readable: its config and tokenizers


def _decay_sources(run_dir: Path, name: str) -> list[Path]:
    _check_target(run_dir, name)
    start = run_decay_start(run_dir)
    if start is None:
        raise CheckpointError(_("--from-decay: {run} records no decay phase (a run without a budget, or saved by an "
                                "older attnlab); use --last N").format(run=run_dir))
    chosen = decay_checkpoints(run_dir)
    if not chosen:
        raise CheckpointError(_("--from-decay: {run} holds no checkpoint written after update {start}, when its "
                                "learning rate began to decay; train with train.average_last=5, or use --last N")
                              .format(run=run_dir, start=start))
    return chosen


def _average(run_dir: Path, chosen: list[Path], name: str) -> Path:
    states = []
    for path in chosen:
        verify_checkpoint(path)
        states.append(_read(path))
    first = {k: tuple(v.shape) for k, v in states[0].items()}
    for path, s in zip(chosen[1:], states[1:]):
        if {k: tuple(v.shape) for k, v in s.items()} != first:
            raise CheckpointError(_("{path} holds other tensors than {first}; only checkpoints of one model can "
                                    "be averaged").format(path=path, first=chosen[0]))
    step = step_of(chosen[-1].name)
    sources = [p.name for p in chosen]
    blob = safetensors_bytes(average_tensors(states), metadata={"step": str(step), "averaged": ",".join(sources)})
    root = checkpoint_root(run_dir)
    try:
        return write_checkpoint_folder(root, name, {WEIGHTS: blob}, {"step": step, "averaged": sources},
                                       Path(run_dir))
    except OSError as e:
        raise _save_failed(root, name, e) from None
