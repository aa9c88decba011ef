"""The loss: cross-entropy of the teacher-forced outputs over the non-pad target tokens (the notes' §3, §21).

The decoder's final states ``h`` go through the output layer, ``logits = W_o h + b_o`` (the model's
``output``, an ``nn.Linear``), and the loss is ``F.cross_entropy`` with label smoothing, skipping the
``<pad>`` labels with ``ignore_index``. It is returned as sums, with the plain negative log-likelihood
(for perplexity) and the count of correct argmax predictions beside it.

On the CPU the same sums come from :func:`attnlab.fast.sequence_cross_entropy` instead: ``W_o`` and the
loss fused over chunks of rows, the ``(B, T, V)`` logits never stored (1.79× this path's ``nn.Linear`` +
``F.cross_entropy``, ``bench/kernels.py``). ``train.kernels`` chooses, see :mod:`attnlab.fast`; the
tests in tests/fast/ check that both paths give the same loss, NLL, accuracy and gradients.

Dimension key: B batch, T target len, D model dim, V target vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import fast
from attnlab.data.vocab import PAD


@dataclass
class LossOutput:
    loss_sum: Tensor  # scalar: summed (label-smoothed) cross-entropy over non-pad tokens
    nll_sum: Tensor  # scalar: summed plain negative log-likelihood (for perplexity), no grad
    num_tokens: int  # non-pad target tokens
    num_correct: int  # the label's probability is the highest among them


def sequence_loss(model: nn.Module, batch, label_smoothing: float = 0.0) -> LossOutput:
    """Teacher-forced loss of ``batch`` (decoder input ``<bos> y…``, labels ``y… <eos>``, then ``<pad>``).

    Returns sums, not means, so that callers can normalise by the token count of the whole
    (possibly distributed) batch. Under ``no_grad`` / ``inference_mode`` nothing is kept for a backward.
    """
    out = model(batch.src, batch.src_valid_lens, batch.tgt_in, compute_logits=False)
    if fast.enabled(model, out.hidden.device):  # the same sums, W_o and the loss fused (attnlab/fast/)
        return LossOutput(*fast.sequence_cross_entropy(out.hidden, model.output, batch.tgt_out, label_smoothing))
    logits = model.output(out.hidden)  # (B, T, V): W_o h + b_o
    # float32: under bf16 autocast the softmax needs float32's range.
    logits, labels = logits.flatten(0, 1).float(), batch.tgt_out.flatten()  # (B*T, V), (B*T,)
    loss_sum = F.cross_entropy(logits, labels, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum")
    with torch.no_grad():  # what the log reports: perplexity and accuracy
        nll_sum = F.cross_entropy(logits, labels, ignore_index=PAD, reduction="sum") if label_smoothing else loss_sum
        real = labels != PAD  # (B*T,)
        num_correct = int((logits.argmax(dim=-1) == labels)[real].sum())
    return LossOutput(loss_sum, nll_sum.detach(), int(real.sum()), num_correct)
