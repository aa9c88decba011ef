"""The loss path: cross-entropy over non-pad target tokens only (the notes' §3, §21).

More than half of a small Transformer's FLOPs sit in the output layer ``W_o`` (V × D) and its
softmax, so padding rows are removed *before* the projection: the model returns its final
hidden states and only the rows whose label is not ``<pad>`` go through ``model.output``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab.data.vocab import PAD


@dataclass
class LossOutput:
    loss_sum: Tensor  # scalar: summed (label-smoothed) cross-entropy over non-pad tokens
    nll_sum: Tensor  # scalar: summed plain negative log-likelihood (for perplexity), no grad
    num_tokens: int  # non-pad target tokens
    num_correct: int  # argmax == label among them


def sequence_loss(model: nn.Module, batch, label_smoothing: float = 0.0) -> LossOutput:
    """Teacher-forced loss of ``batch`` (decoder input ``<bos> y…``, labels ``y… <eos>``).

    Returns sums, not means, so that callers can normalise by the token count of the whole
    (possibly distributed) batch.
    """
    out = model(batch.src, batch.src_valid_lens, batch.tgt_in, compute_logits=False)
    keep = batch.tgt_out != PAD  # (B, T)
    hidden = out.hidden[keep]  # (N, D): only real target positions reach W_o
    labels = batch.tgt_out[keep]  # (N,)
    logits = model.output(hidden)  # (N, V)
    loss_sum = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing, reduction="sum")
    with torch.no_grad():
        if label_smoothing:
            nll_sum = F.cross_entropy(logits.float(), labels, reduction="sum")
        else:
            nll_sum = loss_sum.detach()
        correct = int((logits.argmax(-1) == labels).sum())
    return LossOutput(loss_sum, nll_sum, int(labels.numel()), correct)
