"""The fused loss kernels (attnlab.fast.cross_entropy) equal the textbook F.cross_entropy definition,
and training/losses.py gives the same sums on its plain and its fast path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attnlab import fast
from attnlab.data.batching import collate
from attnlab.fast import linear_cross_entropy, smoothed_cross_entropy
from attnlab.models import build_model
from attnlab.training.losses import sequence_loss
from tests.conftest import tiny_config


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_loss_nll_and_gradient_equal_cross_entropy(eps):
    torch.manual_seed(0)
    logits = torch.randn(40, 57, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 57, (40,))
    labels[:5] = logits.detach()[:5].argmax(-1)  # some rows correct for sure
    loss, nll, correct = smoothed_cross_entropy(logits, labels, eps)
    (loss * 0.37).backward()
    grad = logits.grad.clone()
    logits.grad = None
    want = F.cross_entropy(logits, labels, label_smoothing=eps, reduction="sum")
    (want * 0.37).backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(nll.double(), F.cross_entropy(logits.detach(), labels, reduction="sum"))
    torch.testing.assert_close(grad, logits.grad)
    assert int(correct) == int((logits.detach().argmax(-1) == labels).sum())
    assert not nll.requires_grad and not correct.requires_grad


def test_gradient_matches_finite_differences():
    torch.manual_seed(1)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    y = torch.randint(0, 7, (3,))
    smoothed_cross_entropy(x, y, 0.2)[0].backward()
    h = 1e-6
    for i, j in [(0, 0), (1, 3), (2, int(y[2]))]:
        e = torch.zeros_like(x)
        e[i, j] = h
        fd = (
            smoothed_cross_entropy(x.detach() + e, y, 0.2)[0]
            - smoothed_cross_entropy(x.detach() - e, y, 0.2)[0]
        ) / (2 * h)
        assert x.grad[i, j].item() == pytest.approx(fd.item(), abs=1e-7)


def test_bf16_logits_give_float32_loss_and_bf16_grad():
    torch.manual_seed(2)
    logits = torch.randn(8, 30).to(torch.bfloat16).requires_grad_()
    labels = torch.randint(0, 30, (8,))
    loss, _, _ = smoothed_cross_entropy(logits, labels, 0.1)
    assert loss.dtype == torch.float32
    loss.backward()
    assert logits.grad.dtype == torch.bfloat16
    want = torch.func.grad(lambda t: F.cross_entropy(t, labels, label_smoothing=0.1, reduction="sum"))(
        logits.detach().float()
    )
    torch.testing.assert_close(logits.grad.float(), want, atol=1e-2, rtol=1e-2)


def test_no_gradient_buffer_under_inference_mode():
    logits = torch.randn(4, 9, requires_grad=True)
    with torch.inference_mode():
        loss, nll, correct = smoothed_cross_entropy(logits, torch.tensor([0, 1, 2, 3]), 0.1)
    assert loss.item() == pytest.approx(
        F.cross_entropy(
            logits.detach(), torch.tensor([0, 1, 2, 3]), label_smoothing=0.1, reduction="sum"
        ).item(),
        rel=1e-6,
    )


@pytest.mark.parametrize("kernels", ["fast", "plain"])
@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_sequence_loss_equals_full_logits_cross_entropy(kind, kernels):
    """Projecting only non-pad rows + the fused loss (and the plain path) == cross-entropy over all logits ignoring <pad>."""
    torch.manual_seed(3)
    model = fast.apply(build_model(tiny_config(kind).model, 23, 29), kernels, "cpu").train(False)
    batch = collate([[4, 5, 6], [7, 8], [9]], [[10, 11], [12, 13, 14, 15], [16]], [0, 1, 2])
    out = sequence_loss(model, batch, 0.1)
    full = model(batch.src, batch.src_valid_lens, batch.tgt_in).logits  # (B, T, V)
    want = F.cross_entropy(
        full.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=1, label_smoothing=0.1, reduction="sum"
    )
    torch.testing.assert_close(out.loss_sum, want, rtol=1e-5, atol=1e-5)
    assert out.num_tokens == batch.num_tgt_tokens == 2 + 1 + 4 + 1 + 1 + 1
    grads = torch.autograd.grad(out.loss_sum, list(model.parameters()), allow_unused=True)
    model.zero_grad()
    want_grads = torch.autograd.grad(want, list(model.parameters()), allow_unused=True)
    for g, w in zip(grads, want_grads):
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6)


def test_second_backward_is_refused_not_wrong():
    """The backward scales its saved gradient in place, so autograd's version check refuses a second one."""
    x = torch.randn(3, 5, requires_grad=True)
    loss, _, _ = smoothed_cross_entropy(x, torch.tensor([0, 1, 2]), 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_linear_cross_entropy_equals_linear_then_cross_entropy(bias, chunk):
    """W_o + loss in chunks (CPU path) == nn.Linear then F.cross_entropy: loss, NLL, accuracy, all gradients."""
    torch.manual_seed(4)
    out = torch.nn.Linear(6, 31, bias=bias).double()
    hidden = torch.randn(40, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 31, (40,))
    loss, nll, correct = linear_cross_entropy(hidden, out, labels, 0.1, chunk=chunk)
    (loss * 0.37).backward()
    got = [hidden.grad, out.weight.grad] + ([out.bias.grad] if bias else [])
    got = [g.clone() for g in got]
    hidden.grad = None
    out.zero_grad()
    logits = out(hidden)
    want = F.cross_entropy(logits, labels, label_smoothing=0.1, reduction="sum")
    (want * 0.37).backward()
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(nll, F.cross_entropy(logits.detach(), labels, reduction="sum"))
    assert int(correct) == int((logits.detach().argmax(-1) == labels).sum())
    for g, w in zip(got, [hidden.grad, out.weight.grad] + ([out.bias.grad] if bias else [])):
        torch.testing.assert_close(g, w)


def test_chunked_loss_with_a_tied_weight_adds_both_gradients():
    """W_o shared with the embedding: the weight's gradient is the sum of both uses, as without chunks."""
    torch.manual_seed(5)
    emb = torch.nn.Embedding(13, 4).double()
    out = torch.nn.Linear(4, 13).double()
    out.weight = emb.weight
    ids, labels = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([3, 4, 5, 6, 7, 8])
    grads = []
    for fused in (True, False):
        emb.zero_grad()
        hidden = torch.tanh(emb(ids)).flatten(0, 1)
        if fused:
            loss = linear_cross_entropy(hidden, out, labels, 0.1, chunk=4)[0]
        else:
            loss = F.cross_entropy(out(hidden), labels, label_smoothing=0.1, reduction="sum")
        loss.backward()
        grads.append(emb.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1])


def test_chunked_loss_without_gradients_stores_none():
    out = torch.nn.Linear(5, 11)
    hidden = torch.randn(9, 5, requires_grad=True)
    labels = torch.randint(0, 11, (9,))
    with torch.no_grad():
        loss, nll, _ = linear_cross_entropy(hidden, out, labels, 0.0, chunk=2)
    assert not loss.requires_grad
    assert loss.item() == pytest.approx(nll.item()) and loss.item() == pytest.approx(
        F.cross_entropy(out(hidden).detach(), labels, reduction="sum").item(), rel=1e-5
    )
    loss, _, _ = linear_cross_entropy(hidden, out, labels, 0.1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
