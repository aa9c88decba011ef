"""Dropout with a cheaper mask on the CPU (notes §20: dropout on every sublayer's output).

Plain equivalent: ``nn.Dropout`` — what every model builds; :func:`attnlab.fast.apply` swaps it
for :class:`Dropout` when the fast kernels are on (``train.kernels``, see :mod:`attnlab.fast`).

``nn.Dropout`` draws one Bernoulli sample per element from the CPU generator; on a small Transformer
that costs more than all its attention kernels (bench/RESULTS.md, Throughput). Here one 64-bit
draw (``random_`` over the whole int64 range) gives four 16-bit lanes, and an element is dropped
when its lane falls in the lowest ``round(p · 2¹⁶)`` of the 65,536 values: the same distribution up
to ``p``'s rounding to a multiple of 2⁻¹⁶ (0.1 becomes 0.100006) for a quarter of the generator
calls. The scaled mask is kept in ``x``'s dtype, so forward and backward are one multiplication each
(a float mask costs 4 bytes an element where ``nn.Dropout`` keeps 1).
Masks still come from ``torch``'s default generator, so ``torch.manual_seed`` and a checkpoint's
saved RNG state reproduce them exactly.

Timed by ``bench/kernels.py`` (rows ``dropout_ffn`` and ``dropout_model``; bench/RESULTS.md, Throughput).

Anywhere else — CUDA (where PyTorch's fused dropout kernel is already cheap), half precision,
``p`` that rounds to 0 or 1 (below 2⁻¹⁷ or above 1 − 2⁻¹⁷), evaluation mode — it is ``nn.Dropout``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_LANES = 4  # 16-bit lanes per int64 draw


def keep_mask(shape: torch.Size, p: float, dtype: torch.dtype = torch.float32,
              device: torch.device | None = None) -> Tensor:
    """``shape`` of ``1/(1 − p')`` where an element is kept and 0 where it is dropped, dropped with
    probability ``p' = round(p · 65536) / 65536``; needs ``0 < p' < 1``."""
    n = shape.numel()
    bits = torch.empty((n + _LANES - 1) // _LANES, dtype=torch.int64, device=device).random_(-(2**63), None)
    lanes = bits.view(torch.int16)[:n].view(shape)  # each lane uniform over [-32768, 32767]
    cut = round(p * 65536)
    # bool → float has no vectorised CPU kernel; uint8 → float has, hence the view.
    keep = (lanes >= cut - 32768).view(torch.uint8).to(dtype)
    return keep.mul_(65536 / (65536 - cut))


class _Mask(torch.autograd.Function):
    """``x · mask``; the gradient is ``grad · mask`` (the mask itself gets none; differentiable again)."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor) -> Tensor:
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad: Tensor):
        (mask,) = ctx.saved_tensors
        return grad * mask, None


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same arguments, same state) with the cheaper CPU mask described above."""

    def forward(self, x: Tensor) -> Tensor:
        if (
            self.training
            and 0 < round(self.p * 65536) < 65536  # else p rounds to 0 or 1: nn.Dropout's exact draw
            and not self.inplace
            and x.device.type == "cpu"
            and x.dtype in (torch.float32, torch.float64)
        ):
            return _Mask.apply(x, keep_mask(x.shape, self.p, x.dtype, x.device))
        return super().forward(x)
