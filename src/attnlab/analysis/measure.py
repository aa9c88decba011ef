"""Forward + backward throughput of one model, shared by `attnlab scaling` and `attnlab compare`.

Counted FLOPs are the matrix products (``mm``, ``addmm``, ``bmm`` and fused attention, whose CPU kernel
torch's counter does not know: :data:`EXTRA_FLOP_FORMULAS` adds it); element-wise work (softmax, gates,
LayerNorm) is not counted, as in Kaplan et al. 2020's ``6N`` rule. Times are the best of a few
repetitions, the figure least disturbed by other work on the machine; a time estimate takes their median
(:func:`typical_time`). The notes' §26 and §28.1 say why
the GRU's tokens/s fall with sentence length while the Transformer's hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from attnlab.data.batching import Batch, collate
from attnlab.data.vocab import EOS
from attnlab.device import autocast
from attnlab.training.losses import sequence_loss

FIRST_ID = EOS + 1  # the first ordinary token id (specials below it): random benchmark sentences use ids >= it


def _sdpa_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:  # noqa: ARG001
    """Fused attention forward: ``Q Kᵀ`` and ``P V``, ``2·B·H·Q·K·(Dh + Dv)`` (causal counted in full,
    as torch counts its GPU kernels)."""
    *batch, q_len, dh = query
    return 2 * math.prod(batch) * q_len * key[-2] * (dh + value[-1])


def _sdpa_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:  # noqa: ARG001
    """Its backward: four products of the forward's size (dV, dP, dQ, dK)."""
    return 2 * _sdpa_flops(query, key, value)


#: FLOP formulas FlopCounterMode lacks: the CPU's fused attention (torch counts only the GPU kernels)
EXTRA_FLOP_FORMULAS: dict[Any, Callable[..., int]] = {}
if hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
    EXTRA_FLOP_FORMULAS[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] = _sdpa_flops
    EXTRA_FLOP_FORMULAS[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward] = _sdpa_backward_flops


def counted_flops(fn: Callable[[], Any]) -> int:
    """The matrix-product FLOPs of running ``fn()`` (forward and, if ``fn`` calls it, backward)."""
    with FlopCounterMode(display=False, custom_mapping=EXTRA_FLOP_FORMULAS) as counter:
        fn()
    return int(counter.get_total_flops())


def forward_backward(model: nn.Module, batch: Batch, label_smoothing: float) -> None:
    """One teacher-forced training pass without the update (the loss as ``train_step`` computes it)."""
    model.zero_grad(set_to_none=True)
    with autocast(batch.src.device):  # bf16 on CUDA, as train_step runs it (train.amp's default)
        out = sequence_loss(model, batch, label_smoothing)
    (out.loss_sum / max(out.num_tokens, 1)).backward()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _times(fn: Callable[[], Any], reps: int, device: torch.device) -> list[float]:
    """Seconds of each of ``reps`` calls of ``fn`` after one untimed warm-up call."""
    fn()
    _sync(device)
    times = []
    for _rep in range(max(reps, 1)):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return times


def best_time(fn: Callable[[], Any], reps: int, device: torch.device) -> float:
    """Seconds of the fastest of ``reps`` calls of ``fn`` after one untimed warm-up call."""
    return min(_times(fn, reps, device))


def typical_time(fn: Callable[[], Any], reps: int, device: torch.device) -> float:
    """Seconds of the median of ``reps`` calls of ``fn`` after one untimed warm-up call: what a long run of such
    calls takes on average while other programs come and go, where the fastest (:func:`best_time`) is the
    machine at its least disturbed — right for comparing kernels, optimistic for a time estimate."""
    times = sorted(_times(fn, reps, device))
    return times[len(times) // 2]


def random_batch(batch_size: int, src_len: int, tgt_len: int, src_vocab: int, tgt_vocab: int,
                 generator: torch.Generator) -> Batch:
    """``batch_size`` random sentence pairs with no padding: sources of ``src_len`` tokens and
    teacher-forcing tensors of ``tgt_len`` positions (``<eos>`` and ``<bos>`` included)."""
    src = torch.randint(FIRST_ID, src_vocab, (batch_size, src_len - 1), generator=generator).tolist()
    tgt = torch.randint(FIRST_ID, tgt_vocab, (batch_size, tgt_len - 1), generator=generator).tolist()
    return collate(src, tgt, list(range(batch_size)))


def measure_throughput(model: nn.Module, lengths: tuple[int, ...], tokens: int, reps: int, label_smoothing: float,
                       device: torch.device, src_vocab: int, tgt_vocab: int) -> list[dict[str, float]]:
    """Forward + backward of one batch of about ``tokens`` target tokens at each length ``T`` (source
    and target both ``T`` long, no padding, ``tokens // T`` sentences): time, tokens/s, FLOPs/token.

    At equal tokens the Transformer's matrix products keep their size (B·T rows) whatever T; the
    GRU's S + T sequential steps each multiply only B = tokens / T rows."""
    model.train()
    generator = torch.Generator().manual_seed(0)
    rows = []
    for length in lengths:
        batch = random_batch(max(1, tokens // length), length, length, src_vocab, tgt_vocab, generator).to(device)
        n = batch.num_tgt_tokens
        flops = counted_flops(lambda b=batch: forward_backward(model, b, label_smoothing))
        seconds = best_time(lambda b=batch: forward_backward(model, b, label_smoothing), reps, device)
        rows.append({"length": length, "batch_size": len(batch.src), "tokens": n, "seconds": seconds,
                     "tokens_per_s": n / seconds, "flops_per_token": flops / n, "gflops_per_s": flops / seconds / 1e9})
    model.zero_grad(set_to_none=True)
    return rows
