"""CUDA checks (marked `gpu`; skipped without a CUDA device). Run by bench/gpu_check.sh on a lent GPU.

They prove the GPU path is real: the model, loss and decoding run on the device, bf16 autocast is
used, the fused loss agrees with the textbook one there, and SDPA takes a fused kernel in training.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab.data.batching import collate
from attnlab.decoding import beam_search, greedy_search
from attnlab.device import autocast, pick_device
from attnlab.fast import smoothed_cross_entropy
from attnlab.models import build_model
from attnlab.training.losses import sequence_loss
from tests.conftest import tiny_config

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _batch():
    return collate([[4, 5, 6, 7], [8, 9], [10]], [[11, 12], [13, 14, 15, 16], [17]], [0, 1, 2])


def test_auto_device_is_cuda():
    assert pick_device("auto").type == "cuda"


def test_fused_loss_matches_cross_entropy_on_cuda():
    torch.manual_seed(0)
    logits = torch.randn(64, 1000, device="cuda", requires_grad=True)
    labels = torch.randint(0, 1000, (64,), device="cuda")
    loss, nll, _ = smoothed_cross_entropy(logits, labels, 0.1)
    loss.backward()
    got = logits.grad.clone()
    logits.grad = None
    want = F.cross_entropy(logits, labels, label_smoothing=0.1, reduction="sum")
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got, logits.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(
        nll, F.cross_entropy(logits.detach(), labels, reduction="sum"), rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "decoder-only", "seq2seq"])
def test_bf16_training_step_on_cuda(kind):
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = build_model(tiny_config(kind).model, 30, 30).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = _batch().to(device)
    with autocast(device, True):
        out = sequence_loss(model, batch, 0.1)
    assert out.loss_sum.dtype == torch.float32 and torch.isfinite(out.loss_sum)
    (out.loss_sum / out.num_tokens).backward()
    assert all(p.grad is None or p.grad.is_cuda for p in model.parameters())
    opt.step()
    # The same loss in fp32 on the CPU is close: bf16 changes rounding, not the maths.
    cpu = model.float().cpu().eval()
    with torch.no_grad():
        ref = sequence_loss(cpu, _batch(), 0.1).loss_sum
    model.to(device).eval()
    with torch.no_grad(), autocast(device, True):
        again = sequence_loss(model, batch, 0.1).loss_sum
    assert again.item() == pytest.approx(ref.item(), rel=5e-2)


def test_sdpa_fused_kernel_in_training():
    """The Transformer's attention runs a fused SDPA kernel (flash / memory-efficient / cuDNN), not the math one."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = tiny_config("transformer", "model.num_hiddens=64", "model.num_heads=2").model
    model = build_model(cfg, 30, 30).to(device).train()
    batch = _batch().to(device)
    with sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]
    ):
        with autocast(device, True):
            out = sequence_loss(model, batch, 0.1)  # raises if only the math kernel could serve a call
        out.loss_sum.backward()


def test_decoding_on_cuda_equals_cpu():
    torch.manual_seed(0)
    model = build_model(tiny_config("transformer").model, 30, 30).eval()
    src = _batch().src
    valid = _batch().src_valid_lens
    cpu_greedy = [h.tokens for h in greedy_search(model, src, valid, 8)]
    cpu_beam = [h[0].tokens for h in beam_search(model, src, valid, 3, 8)]
    model = model.cuda()
    gpu_greedy = [h.tokens for h in greedy_search(model, src.cuda(), valid.cuda(), 8)]
    gpu_beam = [h[0].tokens for h in beam_search(model, src.cuda(), valid.cuda(), 3, 8)]
    assert gpu_greedy == cpu_greedy
    assert gpu_beam == cpu_beam
