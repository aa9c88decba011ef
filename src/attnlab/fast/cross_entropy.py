"""The fused loss: ``W_o`` and the label-smoothed cross-entropy in fewer passes (notes §3, §21).

Plain equivalent: ``logits = model.output(hidden)`` then ``F.cross_entropy(logits, labels,
label_smoothing=ε, ignore_index=<pad>)``, plus a second ``F.cross_entropy`` for the NLL (perplexity)
and an ``argmax`` for the accuracy — :func:`attnlab.training.losses.sequence_loss` when the fast
kernels are off (``train.kernels``, see :mod:`attnlab.fast`). :func:`sequence_cross_entropy` returns
the same sums from the same hidden states.

Padding rows are removed *before* ``W_o`` (V × D, most of a small Transformer's FLOPs);
:class:`SmoothedCrossEntropy` computes the smoothed loss, the NLL, the accuracy and the gradient from a
single ``log_softmax``; :class:`LinearCrossEntropy` (the CPU) runs ``W_o`` and the loss over chunks of
rows in a reused buffer, so the ``(N, V)`` logits are never stored. Why: docs/explanations/fast-kernels.md;
timed by ``bench/kernels.py`` (row ``loss``; bench/RESULTS.md, Throughput).

Dimension key: B batch, T target len, N non-pad target tokens, D model dim, V target vocab.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attnlab.data.vocab import PAD


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
        y = labels[:, None]
        picked = logp.gather(1, y)  # (N, 1) log p[y]
        # Sums run per row in the input dtype, then in float64: no float64 copy of (N, V).
        nll = -picked.sum(dtype=torch.float64)
        smooth = -logp.sum(dim=-1).sum(dtype=torch.float64) / logp.shape[-1] if smoothing else nll.new_zeros(())
        num_correct = (picked.squeeze(1) >= logp.amax(dim=-1)).sum()
        if ctx.needs_input_grad[0]:
            grad = logp.exp_()  # (N, V) softmax, in place of logp (no longer needed)
            if smoothing:
                grad.sub_(smoothing / logp.shape[-1])
            grad.scatter_add_(1, y, grad.new_full((y.shape[0], 1), smoothing - 1.0))
            ctx.save_for_backward(grad)
            ctx.in_dtype = logits.dtype
        loss_sum = (nll * (1.0 - smoothing) + smooth * smoothing).to(x.dtype)
        nll_sum = nll.to(x.dtype)
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


CHUNK_BYTES = 12 << 20  # logits per chunk in LinearCrossEntropy (12 MiB of float32: ~180 rows of a 17k vocabulary)


_SCRATCH: dict[tuple, Tensor] = {}


def _scratch(name: str, rows: int, cols: int, like: Tensor) -> Tensor:
    """A ``(rows, cols)`` buffer kept between calls (contents undefined), for the training path only.

    A fresh multi-megabyte CPU tensor is a fresh ``mmap``: every one of its pages faults on first
    touch, and the chunk's GEMM pays for it (bench/RESULTS.md, Throughput).
    The buffers only grow (12 MiB of logits and one augmented W_o per device and dtype) and are shared
    by the process: the training loop is single-threaded, and inference never takes this path."""
    key = (name, like.device, like.dtype)
    buf = _SCRATCH.get(key)
    if buf is None or buf.numel() < rows * cols:
        buf = _SCRATCH[key] = torch.empty(rows * cols, dtype=like.dtype, device=like.device)
    return buf[: rows * cols].view(rows, cols)


def _augmented(x: Tensor, column: Tensor | float, out: Tensor) -> Tensor:
    """``[x, column, 0…]`` written into ``out``: the bias folded into the matmul as one more input column
    (``torch.addmm`` would first copy the bias into every row of the output: a whole pass over the logits).
    ``out`` is padded to a multiple of 8 columns — a ragged inner dimension costs the GEMM more than the zeros."""
    d = x.shape[1]
    out[:, :d] = x
    out[:, d] = column
    out[:, d + 1 :] = 0
    return out


class LinearCrossEntropy(torch.autograd.Function):
    """``SmoothedCrossEntropy(hidden @ weightᵀ + bias, labels, ε)`` without the ``(N, V)`` logits.

    ``forward(hidden (N, D), weight (V, D), bias (V,) or None, labels (N,), ε, want_grad, chunk)``
    returns ``(loss_sum, nll_sum, num_correct)`` like :class:`SmoothedCrossEntropy`. Rows are taken
    ``chunk`` at a time and each chunk's logits ``z`` live only while it is processed.

    The gradient ``g = p − ε/V − (1 − ε)·onehot(y)`` (``p = softmax(z)``) is never written out: only
    ``p`` is, in place over ``z`` by one fused row-wise softmax, and the two other terms reach the
    products as cheap corrections — ``∂hidden = p W − (1 − ε) W[y] − (ε/V) Σ_v W_v`` (a row gather and
    a constant row), ``∂W = Σ pᵀ h − (1 − ε) Σ onehot(y)ᵀ h − (ε/V) 1 (Σ h)`` (an ``index_add_`` and one
    rank-one update at the end), ``∂b`` likewise. So a chunk costs three GEMMs and four streaming
    passes (max, row sums, softmax, column sums), where writing ``g`` costs ten. The statistics come
    from the same passes: ``lse = max z − log max p`` (the largest ``p`` is ``1/Σ exp(z − max z)``), so
    ``−log p[y] = lse − z[y]`` and ``mean_v(−log p) = lse − mean_v z``; a row counts as correct when
    ``z[y]`` ties the maximum. The backward scales the stored gradients in place (one backward per forward).
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, labels: Tensor, smoothing: float,
                want_grad: bool, chunk: int) -> tuple[Tensor, Tensor, Tensor]:
        (n, d), v = hidden.shape, weight.shape[0]
        need_h, need_w, need_b = (want_grad and bool(ctx.needs_input_grad[i]) for i in range(3))
        want = need_h or need_w or need_b
        if bias is not None:
            width = (d + 8) // 8 * 8
            h_in = _augmented(hidden, 1.0, hidden.new_empty(n, width))
            w_in = _augmented(weight, bias, _scratch("weight", v, width, hidden) if want else hidden.new_empty(v, width))
        else:
            h_in, w_in = hidden, weight
        w_in_t = w_in.t()
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = None  # (V, D), created by the first chunk's product (no separate zero-fill pass)
        grad_b = torch.zeros_like(bias) if need_b and bias is not None else None
        nll = hidden.new_zeros((), dtype=torch.float64)
        smooth = hidden.new_zeros((), dtype=torch.float64)
        correct = torch.zeros((), dtype=torch.int64, device=hidden.device)
        for s in range(0, n, chunk):
            y = labels[s : s + chunk, None]  # (c, 1)
            rows = h_in[s : s + chunk]
            z = torch.mm(rows, w_in_t, out=_scratch("logits", len(rows), v, hidden)) if want else rows @ w_in_t
            z_y = z.gather(1, y).squeeze(1)  # (c,)
            z_max = z.amax(dim=-1)
            correct += (z_y >= z_max).sum()
            z_sum = z.sum(dim=-1) if smoothing else None
            if want:
                p = torch.ops.aten._softmax.out(z, -1, False, out=z)  # in place: z is not needed again
                lse = z_max.double() - p.amax(dim=-1).double().log()
            else:
                lse = torch.logsumexp(z, dim=-1).double()
            nll += (lse - z_y.double()).sum()
            if z_sum is not None:
                smooth += (lse - z_sum.double() / v).sum()
            if not want:
                continue
            if grad_h is not None:
                torch.mm(p, weight, out=grad_h[s : s + chunk])
            if need_w:
                h = hidden[s : s + chunk]
                grad_w = p.t() @ h if grad_w is None else grad_w.addmm_(p.t(), h)
            if grad_b is not None:
                grad_b += p.sum(dim=0)
        if want:  # the −(1 − ε)·onehot(y) and −ε/V terms of g, folded in once
            hit, spread = smoothing - 1.0, smoothing / v
            if grad_h is not None:
                grad_h.add_(weight[labels], alpha=hit)
                if spread:
                    grad_h.sub_(weight.sum(dim=0), alpha=spread)
            if grad_w is not None:
                grad_w.index_add_(0, labels, hidden, alpha=hit)
                if spread:
                    grad_w.sub_(hidden.sum(dim=0), alpha=spread)
            if grad_b is not None:
                grad_b.index_add_(0, labels, grad_b.new_ones(n), alpha=hit)
                grad_b.sub_(spread * n)
        loss_sum = (nll * (1.0 - smoothing) + smooth * smoothing).to(hidden.dtype)
        ctx.save_for_backward(grad_h, grad_w, grad_b)
        nll_sum = nll.to(hidden.dtype)
        ctx.mark_non_differentiable(nll_sum, correct)
        return loss_sum, nll_sum, correct

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor, _grad_correct: Tensor):
        grads = tuple(None if g is None else g.mul_(grad_loss) for g in ctx.saved_tensors)
        return (*grads, None, None, None, None)


def linear_cross_entropy(
    hidden: Tensor, output: nn.Linear, labels: Tensor, label_smoothing: float = 0.0, chunk: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``smoothed_cross_entropy(output(hidden), labels, ε)`` computed chunk by chunk (see
    :class:`LinearCrossEntropy`); ``chunk`` rows at a time (default: :data:`CHUNK_BYTES` of logits)."""
    if chunk is None:
        chunk = max(16, CHUNK_BYTES // (4 * output.out_features))
    want_grad = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (hidden, output.weight, output.bias)
    )
    return LinearCrossEntropy.apply(hidden, output.weight, output.bias, labels, float(label_smoothing),
                                    want_grad, int(chunk))


def sequence_cross_entropy(
    hidden: Tensor, output: nn.Module, targets: Tensor, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor, int, int]:
    """``(loss_sum, nll_sum, num_tokens, num_correct)`` of ``output(hidden)`` against ``targets``, pads skipped.

    ``hidden (B, T, D)`` are the decoder's final states, ``output`` its ``W_o`` (``nn.Linear``),
    ``targets (B, T)`` the labels with ``<pad>`` where there is none. Only the non-pad rows reach
    ``W_o``; on the CPU in float32 they go through :func:`linear_cross_entropy` (the logits never
    stored), anywhere else through :func:`smoothed_cross_entropy` on their logits. ``nll_sum`` is
    detached; ``num_correct`` counts ties with the best logit as correct.
    """
    keep = targets != PAD  # (B, T)
    hidden = hidden[keep]  # (N, D): only real target positions reach W_o
    labels = targets[keep]  # (N,)
    if hidden.device.type == "cpu" and hidden.dtype == torch.float32 and isinstance(output, nn.Linear):
        # CPU: W_o and the loss in cache-sized chunks, the (N, V) logits never stored.
        loss_sum, nll_sum, correct = linear_cross_entropy(hidden, output, labels, label_smoothing)
    else:
        # GPU (bf16 autocast): logits then the fused loss; memory bandwidth is not the limit there.
        loss_sum, nll_sum, correct = smoothed_cross_entropy(output(hidden), labels, label_smoothing)
    return loss_sum, nll_sum.detach(), int(labels.numel()), int(correct)
