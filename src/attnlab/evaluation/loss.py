"""The teacher-forced loss of each sentence (notes §3, §22): the model reads the source and the reference's
decoder input ``<bos> y…`` at once, and each reference token's negative log-likelihood is summed per sentence.

Per sentence rather than per batch, so that any resample of the sentences is scored from sums (the paired
bootstrap of ``attnlab heads``); the sums over a batch equal the training loss's ``nll_sum`` without label
smoothing (:func:`attnlab.training.losses.sequence_loss`, a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.data.batching import collate
from attnlab.data.vocab import PAD
from attnlab.translator import teacher_forced

__all__ = ["sentence_nll"]


def sentence_nll(model: nn.Module, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]],
                 device: torch.device, batch_size: int = 64) -> tuple[list[float], list[int]]:
    """``(nll, tokens)``: each sentence's summed negative log-likelihood of its target ``tgt[i]`` given
    ``src[i]`` (nats, ``<eos>`` included, ``<pad>`` skipped), and its number of target tokens; in batches of
    ``batch_size``, in eval mode and without gradients (:func:`attnlab.translator.teacher_forced`)."""
    nll: list[float] = []
    tokens: list[int] = []
    for start in range(0, len(src), batch_size):
        idx = list(range(start, min(start + batch_size, len(src))))
        batch = collate([src[i] for i in idx], [tgt[i] for i in idx], idx).to(device)
        out = teacher_forced(model, batch, device, need_weights=False, compute_logits=False)
        with torch.inference_mode():
            logits = model.output(out.hidden).float()  # (B, T, V)
            ce = F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD,
                                 reduction="none").view(batch.tgt_out.shape)  # (B, T), 0 on padding
        nll += ce.sum(1).double().cpu().tolist()
        tokens += (batch.tgt_out != PAD).sum(1).cpu().tolist()
    return nll, tokens
