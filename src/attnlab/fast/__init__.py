"""The measured CPU kernels, beside the plain code they stand in for, and the one setting that picks them.

attnlab's models, loss and searches read as the notes do: every model builds ``nn.Dropout``, the
loss is ``F.cross_entropy(label_smoothing=ε, ignore_index=<pad>)`` on ``W_o h + b_o``
(training/losses.py), greedy search takes the ``argmax`` and beam search ``topk`` (decoding/). On
a CPU those three cost more than they must, and this package holds what replaces them there, each
with its plain equivalent named in the module's docstring:

- :mod:`attnlab.fast.cross_entropy` — ``W_o`` and the smoothed loss over chunks of rows, the
  ``(N, V)`` logits never stored (instead of ``nn.Linear`` + ``F.cross_entropy``);
- :mod:`attnlab.fast.dropout` — masks from one int64 draw per four elements (instead of ``nn.Dropout``);
- :mod:`attnlab.fast.top_k` — per-row top-k by blocks of 64 columns (instead of ``topk`` / ``max(dim)``).

Each computes the same maths as its plain twin; tests/fast/ checks every pair against each other, and
``bench/kernels.py`` times them (bench/RESULTS.md, Throughput). The settings and how :func:`apply`
swaps the modules: docs/explanations/fast-kernels.md.

One setting, ``train.kernels`` (:data:`attnlab.config.KERNELS`: ``fast``, ``auto``, ``plain``), chooses;
:func:`apply` records it on the model and :func:`enabled` reads it back. The choice changes speed,
not the maths: losses agree to rounding, and ``--resume`` may change the setting.
"""

from __future__ import annotations

import torch
from torch import nn

from attnlab.config import KERNELS
from attnlab.fast.cross_entropy import (
    LinearCrossEntropy,
    SmoothedCrossEntropy,
    linear_cross_entropy,
    sequence_cross_entropy,
    smoothed_cross_entropy,
)
from attnlab.fast.dropout import Dropout
from attnlab.fast.top_k import top_k_rows

__all__ = [
    "Dropout",
    "KERNELS",
    "LinearCrossEntropy",
    "SmoothedCrossEntropy",
    "apply",
    "enabled",
    "linear_cross_entropy",
    "resolve",
    "sequence_cross_entropy",
    "smoothed_cross_entropy",
    "top_k_rows",
]


def resolve(kernels: str, device: torch.device | str) -> str:
    """``"fast"`` or ``"plain"``: what the setting ``kernels`` means on ``device``.

    Raises:
        ValueError: if ``kernels`` is not one of :data:`KERNELS`.
    """
    if kernels not in KERNELS:
        raise ValueError(f"kernels={kernels!r} is not valid; choose one of: {', '.join(KERNELS)}")
    torch.device(device)  # a device that does not parse is refused here, whatever the setting
    return "fast" if kernels == "auto" else kernels


def apply(model: nn.Module, kernels: str, device: torch.device | str) -> nn.Module:
    """Set ``model`` (in place) to the fast kernels or the plain code, as ``kernels`` means on ``device``.

    Every ``nn.Dropout`` becomes :class:`Dropout` for the fast kernels, and back for the plain code
    (the same ``p``, ``inplace`` and train/eval mode; a module registered twice stays one module); the
    resolved choice is kept as ``model.kernels`` for :func:`enabled`. Returns ``model``.
    """
    choice = resolve(kernels, device)
    old, new = (nn.Dropout, Dropout) if choice == "fast" else (Dropout, nn.Dropout)
    swapped: dict[int, nn.Module] = {}  # id(old module) -> its replacement
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is old:
                if id(child) not in swapped:
                    swapped[id(child)] = new(child.p, child.inplace).train(child.training)
                setattr(parent, name, swapped[id(child)])
    model.kernels = choice
    return model


def enabled(model: nn.Module, device: torch.device | str) -> bool:
    """Whether ``model``'s loss and searches should take the fast kernels on ``device``.

    The choice :func:`apply` recorded, or ``"auto"`` for a model it never saw. A
    ``DistributedDataParallel`` wrapper answers for the model it wraps.
    """
    inner = getattr(model, "module", model)
    return resolve(getattr(inner, "kernels", "auto"), device) == "fast"
