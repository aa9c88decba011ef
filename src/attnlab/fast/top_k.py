"""Per-row top-k of decoding's log-probabilities by blocks of columns (notes §22: greedy and beam search).

Plain equivalent: ``Tensor.topk(k, dim=-1)`` (beam search: each beam's ``K`` best tokens) and
``Tensor.max(dim=-1)`` (greedy search: the argmax) — what :mod:`attnlab.decoding` calls when the
fast kernels are off (``train.kernels``, see :mod:`attnlab.fast`).

On the CPU ``topk`` (and ``max`` with indices) over each row of a decoder's logits runs a scalar
selection per row, far slower than the vectorised ``amax``; :func:`top_k_rows` ranks only the
``k`` blocks of 64 columns with the largest maxima. Timed by ``bench/kernels.py`` (rows ``topk4`` and
``top1``; bench/RESULTS.md, Throughput).

Dimension key: R rows, V columns (the vocabulary), k values kept per row.
"""

from __future__ import annotations

import torch
from torch import Tensor

TOPK_BLOCK = 64  # columns per block in top_k_rows


def top_k_rows(x: Tensor, k: int, block: int = TOPK_BLOCK) -> tuple[Tensor, Tensor]:
    """``x.topk(k, dim=-1)`` of a ``(R, V)`` tensor with small ``k`` — the same values, best first.

    The row is cut into blocks of ``block`` columns: a row's ``k`` best values lie in the ``k``
    blocks with the largest maxima (a block whose maximum is below the ``k``-th best value holds none
    of them), and only those ``k · block`` values are ranked. Among exactly equal values the index
    returned may differ from ``topk``'s (which is unspecified there too), and so may the indices of
    ``-inf`` or NaN values (a ``-inf`` may come back with a repeated index past the last real column,
    clamped to ``V − 1``); the searches only use finite candidates. ``k > V`` returns ``V`` columns.
    Off the CPU, or when the row has no more than ``k`` full blocks, it is ``x.topk``.
    """
    rows, v = x.shape
    n_full = v // block
    if x.device.type != "cpu" or n_full <= k:
        return x.topk(min(k, v), dim=-1)
    block_max = x[:, : n_full * block].view(rows, n_full, block).amax(dim=-1)  # (R, n_full)
    if v > n_full * block:  # the ragged last block
        block_max = torch.cat([block_max, x[:, n_full * block :].amax(dim=-1, keepdim=True)], dim=1)
    first = block_max.topk(k, dim=-1).indices * block  # (R, k) first column of each chosen block
    cols = (first[:, :, None] + torch.arange(block, device=x.device)).view(rows, k * block)  # (R, k·block)
    past_end = cols >= v  # only in the ragged block
    cols = cols.clamp_(max=v - 1)
    values = x.gather(1, cols).masked_fill_(past_end, float("-inf"))  # (R, k·block)
    top, at = values.topk(k, dim=-1)  # (R, k) each
    return top, cols.gather(1, at)
