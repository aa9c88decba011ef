"""Checkpoint averaging: the mean of a run's last N checkpoints, a checkpoint like the others.

Averaging the weights of the last few checkpoints of one run (Vaswani et al. 2017, §6.1: the last 5
checkpoints for the base models; fairseq's, OpenNMT's and JoeyNMT's ``average_checkpoints``) smooths the
noise of the final updates at no training cost. The result is written as ``RUN/checkpoints/averaged/``
(``model.safetensors`` and a ``manifest.json`` that names its sources, verified like every checkpoint),
so every command takes it as ``--checkpoint averaged``. It has no ``state.pt``: training does not resume
from a mean. Rotation only removes ``step-N`` folders, so it stays until it is averaged again.
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
    step_checkpoints,
    step_of,
    verify_checkpoint,
    write_checkpoint_folder,
)
from attnlab.runs.folder import WEIGHTS, is_export, read_run

__all__ = ["AVERAGED", "average_checkpoints", "average_tensors"]

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


def average_checkpoints(run_dir: str | Path, last: int, name: str = AVERAGED) -> Path:
    """Write ``RUN/checkpoints/<name>/``, the mean of the run's ``last`` newest ``step-N`` checkpoints.

    Each source is verified first (:func:`~attnlab.runs.verify_checkpoint`: sha256, the run's config and
    vocabularies); they must hold the same tensors. The folder is written under a temporary name and
    renamed into place, replacing an earlier one of that name. Returns the folder. Raises
    :class:`CheckpointError` (one line) for an exported folder, fewer than ``last`` checkpoints, a bad
    ``name`` or a write the disk refuses.
    """
    run_dir = Path(run_dir)
    if last < 1:
        raise CheckpointError(_("--last {n} must be at least 1: the number of newest checkpoints to average")
                              .format(n=last))
    if not _NAME.fullmatch(name) or step_of(name) is not None or name.lower() in ("best", "last"):
        raise CheckpointError(_("--name {name} cannot name a checkpoint: use letters, digits, '.', '_' or '-', "
                                "and neither best, last nor step-N (default: averaged)").format(name=name))
    if is_export(run_dir):
        raise CheckpointError(_("{run} is an exported folder holding one model; average the run folder it came "
                                "from").format(run=run_dir))
    read_run(run_dir)  # a run folder, readable: its config and tokenizers
    steps = step_checkpoints(run_dir)
    if len(steps) < last:
        raise CheckpointError(_("{run} holds {k} step checkpoints ({names}), fewer than --last {n}; average "
                                "fewer, or train with train.keep_checkpoints={n} (and train.save_every) to keep "
                                "more").format(run=run_dir, k=len(steps), names=", ".join(p.name for p in steps)
                                               or "-", n=last))
    chosen = steps[-last:]
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
