"""The loss: cross-entropy of the teacher-forced outputs over the non-pad target tokens (the notes' §3, §21).

The decoder's final states ``h`` go through the output layer, ``logits = W_o h + b_o`` (the model's
``output``, an ``nn.Linear``), and the loss is ``F.cross_entropy`` with label smoothing, skipping the
``<pad>`` labels with ``ignore_index``. It is returned as sums, with the plain negative log-likelihood
(for perplexity) and the count of correct argmax predictions beside it.

On the CPU the same sums come from :func:`attnlab.fast.sequence_cross_entropy` instead: ``W_o`` and the
loss fused over chunks of rows, the ``(B, T, V)`` logits never stored (timed against this path by
``bench/kernels.py``: bench/RESULTS.md, Throughput). ``train.kernels`` chooses, see :mod:`attnlab.fast`; the
tests in tests/fast/ check that both paths give the same loss, NLL, accuracy and gradients.

A model whose traits say ``task == "fill"`` (the encoder-only masked LM, notes §28.2) has no target:
:func:`sequence_loss` hands it to :func:`masked_lm_loss`, the same cross-entropy on the masked
source positions only (BERT's objective, ``models/encoder_only.py``), so the loop never asks which.

Dimension key: B batch, T target len, D model dim, V target vocab.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attnlab import fast
from attnlab.data.vocab import PAD
from attnlab.models import traits
from attnlab.models.encoder_only import mask_tokens


@dataclass
class LossOutput:
    loss_sum: Tensor  # scalar: summed (label-smoothed) cross-entropy over non-pad tokens
    nll_sum: Tensor  # scalar: summed plain negative log-likelihood (for perplexity), no grad
    num_tokens: int  # non-pad target tokens
    num_correct: int  # the label's probability is the highest among them


def sequence_loss(model: nn.Module, batch, label_smoothing: float = 0.0,
                  generator: torch.Generator | None = None) -> LossOutput:
    """Teacher-forced loss of ``batch`` (decoder input ``<bos> y…``, labels ``y… <eos>``, then ``<pad>``).

    Returns sums, not means, so that callers can normalise by the token count of the whole
    (possibly distributed) batch. Under ``no_grad`` / ``inference_mode`` nothing is kept for a backward.
    A fill model's loss is :func:`masked_lm_loss` (``generator`` draws its masks; unused otherwise).
    """
    if traits(getattr(model, "module", model).config).task == "fill":  # a DDP wrapper answers for its model
        return masked_lm_loss(model, batch, label_smoothing, generator)
    out = model(batch.src, batch.src_valid_lens, batch.tgt_in, compute_logits=False)
    return token_loss(model, out.hidden, batch.tgt_out, label_smoothing)


def masked_lm_loss(model: nn.Module, batch, label_smoothing: float = 0.0,
                   generator: torch.Generator | None = None) -> LossOutput:
    """BERT's masked-LM loss on the batch's sources (:func:`~attnlab.models.encoder_only.mask_tokens`):
    the model reads the corrupted source and is scored on the chosen positions only.

    ``nll_sum``, ``num_tokens`` and ``num_correct`` count the chosen positions (``valid_acc`` is then
    the masked-token accuracy). ``loss_sum`` is weighted by ``batch.num_tgt_tokens / num_tokens``:
    the loop divides every loss by the batch's target-token count (``train_step``'s ``scale``), and the
    weight turns that into the mean over the masked positions, so lr and clipping mean what they mean
    for the other families. ``generator`` draws the masks (validation passes a seeded one).
    """
    vocab = model.output.out_features
    inputs, labels = mask_tokens(batch.src, batch.src_valid_lens, vocab, generator)  # (B, S) each
    out = model(inputs, batch.src_valid_lens, batch.tgt_in, compute_logits=False)
    loss = token_loss(model, out.hidden, labels, label_smoothing)
    loss.loss_sum = loss.loss_sum * (batch.num_tgt_tokens / max(loss.num_tokens, 1))
    return loss


def token_loss(model: nn.Module, hidden: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> LossOutput:
    """Cross-entropy of ``model.output(hidden)`` (``hidden (B, T, D)``) against ``labels (B, T)``,
    ``<pad>`` labels skipped: the fast CPU kernel or ``nn.Linear`` + ``F.cross_entropy``."""
    if fast.enabled(model, hidden.device):  # the same sums, W_o and the loss fused (attnlab/fast/)
        return LossOutput(*fast.sequence_cross_entropy(hidden, model.output, labels, label_smoothing))
    logits = model.output(hidden)  # (B, T, V): W_o h + b_o
    # float32: under bf16 autocast the softmax needs float32's range.
    logits, labels = logits.flatten(0, 1).float(), labels.flatten()  # (B*T, V), (B*T,)
    loss_sum = F.cross_entropy(logits, labels, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum")
    with torch.no_grad():  # what the log reports: perplexity and accuracy
        nll_sum = F.cross_entropy(logits, labels, ignore_index=PAD, reduction="sum") if label_smoothing else loss_sum
        real = labels != PAD  # (B*T,)
        num_correct = int((logits.argmax(dim=-1) == labels)[real].sum())
    return LossOutput(loss_sum, nll_sum.detach(), int(real.sum()), num_correct)
