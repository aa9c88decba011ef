"""Word alignment read from gradients instead of attention (notes §25, §27.5): the saliency map.

Ding, Xu and Koehn (2019, "Saliency-driven word alignment interpretation for neural machine
translation") link each target word to the source word whose embedding most changes the model's
probability of it. For a gold pair force-decoded through the model (teacher forcing, §3), row ``k``
of the map is the size of the gradient of ``log p(y_k | y_<k, x)`` with respect to each source
piece's embedding, ``‖∂ log p(y_k) / ∂ e(x_j)‖₂``, over the source pieces and ``<eos>``, normalised
to sum to 1 so that it reads like an attention row. :func:`attnlab.analysis.align.extract.word_matrix`
and ``extract_links`` then turn it into links exactly as they do a head's map, at the predicting step
(shift 0: row ``k`` already *is* the gradient of the word ``y_k``).

Why a gradient and not a head: a head's weights say where one layer reads from, while the gradient
measures what the whole model's output depends on, through every layer, residual and head at once.
Input × gradient and integrated gradients (:mod:`attnlab.analysis.attribution`) sign their scores;
the gradient's size is what Ding et al. found aligns best, and it needs one backward pass per
sentence: the ``T`` rows are ``T`` copies of the sentence in one batch, copy ``k`` differentiating
its own ``y_k``.

Dimension key: T target pieces + ``<eos>``, S source pieces + ``<eos>``, E embedding size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from attnlab.analysis.align.extract import Side
from attnlab.analysis.attribution import LogProb
from attnlab.data.batching import collate
from attnlab.i18n import N_
from attnlab.models import traits

#: Ding et al. (2019): the method and its label in reports.
SALIENCY_LABEL = N_("gradient saliency ‖∂ log p(word) / ∂ source embedding‖ (Ding et al. 2019)")


def saliency_map(model, pair: tuple[Side, Side], device: torch.device) -> Tensor:
    """``(1, T, S)``: row ``k`` = ``‖∂ log p(y_k) / ∂ e(x_j)‖₂`` over the source pieces ``j`` (and the
    source ``<eos>``), normalised to sum to 1; rows ``0 … n−1`` are the target pieces, row ``n`` the
    target ``<eos>``. One forward and one backward pass of ``T`` copies of the pair."""
    src, tgt = pair
    batch = collate([src.ids], [tgt.ids], [0])
    T = len(tgt.ids) + 1
    f = LogProb(model, traits(model.config).embeddings[0], batch, T, device)
    x = f.embedded.expand(T, -1, -1).clone().requires_grad_(True)  # (T, S, E)
    with torch.enable_grad():  # the caller may be under no_grad; the gradient is the point here
        f(x).diagonal().sum().backward()  # copy k differentiates only its own log p(y_k)
    g = x.grad.float().norm(dim=-1)  # (T, S)
    return (g / g.sum(-1, keepdim=True).clamp_min(1e-12))[None].cpu()


def saliency_maps(tr, pairs: Sequence[tuple[Side, Side]]) -> Iterator[tuple[int, Tensor]]:
    """:func:`saliency_map` of every pair, in order: ``(index, (1, n+1, m+1))``, shaped as one head's
    map of :func:`attnlab.analysis.align.score.cross_maps` after ``stack_heads``."""
    for i, pair in enumerate(pairs):
        yield i, saliency_map(tr.model, pair, tr.device)
