"""The loss path: cross-entropy over non-pad target tokens only (the notes' §3, §21).

More than half of a small Transformer's FLOPs sit in the output layer ``W_o`` (V × D) and its
softmax, so padding rows are removed *before* the projection: the model returns its final
hidden states and only the rows whose label is not ``<pad>`` go through ``model.output``.

The softmax itself is the other big cost: every pass over the ``(N, V)`` logits reads and writes
tens of megabytes (V ≈ 17k words on fra-eng). :class:`SmoothedCrossEntropy` therefore computes
the label-smoothed loss, the plain NLL (for perplexity), the accuracy *and the gradient* from a
single ``log_softmax``; its backward is one multiplication. ``F.cross_entropy`` with
``label_smoothing`` plus a second plain ``F.cross_entropy`` for the NLL plus an ``argmax`` made
about eight such passes per step; this makes four (bench/RESULTS.md records the gain).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnlab.data.vocab import PAD


@dataclass
class LossOutput:
    loss_sum: Tensor  # scalar: summed (label-smoothed) cross-entropy over non-pad tokens
    nll_sum: Tensor  # scalar: summed plain negative log-likelihood (for perplexity), no grad
    num_tokens: int  # non-pad target tokens
    num_correct: int  # the label's probability is the highest among them


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy with PyTorch's definition, fused with its gradient.

    ``loss = Σ_n [(1 − ε) · (−log p_n[y_n]) + ε · mean_v(−log p_n[v])]`` — exactly
    ``F.cross_entropy(logits, labels, label_smoothing=ε, reduction="sum")``. Its gradient with
    respect to the logits is ``softmax − ((1 − ε) · onehot(y) + ε / V)`` per row, computed in the
    forward pass (in place over the log-probabilities, so no extra ``(N, V)`` buffer) and scaled by
    the incoming gradient in the backward pass.

    ``forward(logits (N, V), labels (N,), ε)`` returns ``(loss_sum, nll_sum, num_correct)``, all 0-dim;
    only ``loss_sum`` carries a gradient. ``num_correct`` counts rows whose label has the highest
    log-probability (ties count as correct, unlike ``argmax`` which picks the first).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, labels: Tensor, smoothing: float) -> tuple[Tensor, Tensor, Tensor]:
        # Half-precision logits (bf16 autocast on CUDA) are upcast: the softmax needs float32 range.
        x = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
        logp = torch.log_softmax(x, dim=-1)  # (N, V)
        picked = logp.gather(1, labels[:, None]).squeeze(1)  # (N,) log p[y]
        nll_sum = -picked.sum()
        loss_sum = nll_sum * (1.0 - smoothing)
        if smoothing:
            loss_sum = loss_sum - logp.mean(dim=-1).sum() * smoothing
        num_correct = (picked >= logp.amax(dim=-1)).sum()
        if ctx.needs_input_grad[0]:
            grad = logp.exp_()  # (N, V) softmax, in place of logp (no longer needed)
            if smoothing:
                grad.sub_(smoothing / logp.shape[-1])
            grad.scatter_add_(1, labels[:, None], grad.new_full((labels.shape[0], 1), smoothing - 1.0))
            ctx.save_for_backward(grad)
            ctx.in_dtype = logits.dtype
        ctx.mark_non_differentiable(nll_sum, num_correct)
        return loss_sum, nll_sum, num_correct

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor, _grad_correct: Tensor):
        (grad,) = ctx.saved_tensors
        # Scaled in place: a fresh (N, V) buffer would cost as much as the multiplication itself.
        # Hence one backward per forward: a second one (retain_graph=True) fails autograd's version
        # check ("modified by an inplace operation") instead of returning a wrong gradient.
        return grad.mul_(grad_loss).to(ctx.in_dtype), None, None


def smoothed_cross_entropy(
    logits: Tensor, labels: Tensor, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor, Tensor]:
    """``(loss_sum, nll_sum, num_correct)`` of ``logits (N, V)`` against ``labels (N,)``; see
    :class:`SmoothedCrossEntropy`. Under ``no_grad``/``inference_mode`` no gradient is prepared."""
    return SmoothedCrossEntropy.apply(logits, labels, float(label_smoothing))


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
    loss_sum, nll_sum, correct = smoothed_cross_entropy(logits, labels, label_smoothing)
    return LossOutput(loss_sum, nll_sum.detach(), int(labels.numel()), int(correct))


def reference_loss(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> tuple[Tensor, Tensor]:
    """The unfused definition ``(loss_sum, nll_sum)`` with ``F.cross_entropy`` (for tests and readers)."""
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing, reduction="sum")
    return loss, F.cross_entropy(logits.float(), labels, reduction="sum").detach()
