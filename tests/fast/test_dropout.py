"""The CPU dropout (attnlab.fast.dropout) against its plain twin nn.Dropout: distribution, gradient and switches."""

import pytest
import torch
from torch import nn

from attnlab.fast.dropout import Dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.9])
def test_drop_rate_and_scale_match_nn_dropout(p):
    torch.manual_seed(0)
    y = Dropout(p).train()(torch.ones(1000, 1000))
    dropped = (y == 0).float().mean().item()
    assert dropped == pytest.approx(p, abs=0.003)  # 1e6 draws: ± 0.0005 standard error
    kept = y[y != 0]
    assert torch.allclose(kept, torch.full_like(kept, 1 / (1 - round(p * 65536) / 65536)))
    assert y.mean().item() == pytest.approx(1.0, abs=0.01)  # unbiased, like nn.Dropout


def test_every_16_bit_lane_is_uniform():
    """Four elements share one 64-bit draw; each lane position must drop at the same rate."""
    torch.manual_seed(1)
    m = keep_mask(torch.Size([400_000, 4]), 0.25)
    rates = (m == 0).float().mean(dim=0)
    assert torch.all((rates - 0.25).abs() < 0.004), rates


def test_gradient_is_the_same_mask():
    torch.manual_seed(2)
    x = torch.randn(37, 29, dtype=torch.float64, requires_grad=True)
    y = Dropout(0.2).train()(x)
    g = torch.randn_like(y)
    y.backward(g)
    scale = y.detach() / x.detach()  # the mask, per element (x has no zeros)
    assert 0 < int((scale == 0).sum()) < scale.numel()  # something was dropped, not everything
    torch.testing.assert_close(x.grad, g * scale)
    assert set(torch.unique(scale.round(decimals=6)).tolist()) <= {0.0, round(1 / (1 - 13107 / 65536), 6)}


def test_seeded_masks_repeat_and_odd_sizes_work():
    x = torch.ones(3, 5, 7)  # 105 elements: not a multiple of four lanes
    torch.manual_seed(3)
    a = Dropout(0.5).train()(x)
    torch.manual_seed(3)
    b = Dropout(0.5).train()(x)
    c = Dropout(0.5).train()(x)  # the generator moved on: another mask
    assert torch.equal(a, b) and a.shape == x.shape and not torch.equal(a, c)


def test_eval_mode_and_edge_probabilities_are_nn_dropout():
    x = torch.randn(8, 8)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert torch.equal(Dropout(0.0).train()(x), x)
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))
    assert isinstance(Dropout(0.1), nn.Dropout)  # same state dict, same isinstance checks


@pytest.mark.parametrize("p", [1e-6, 1 - 1e-6])
def test_probabilities_that_round_to_0_or_1_fall_back_to_nn_dropout(p):
    """round(p * 65536) would be 0 (never drop) or 65536 (divide by zero): nn.Dropout's draw instead."""
    torch.manual_seed(4)
    y = Dropout(p).train()(torch.ones(100_000))
    dropped = int((y == 0).sum())
    assert (dropped < 10) if p < 0.5 else (dropped > 99_990)
    assert torch.isfinite(y).all()


def test_double_backward_works_like_nn_dropout():
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(5)
    y = Dropout(0.3).train()(x)
    (g,) = torch.autograd.grad((y**2).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    mask = y.detach() / x.detach()
    torch.testing.assert_close(gg, 2 * mask**2)
