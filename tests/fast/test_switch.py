"""train.kernels: one setting picks the fast kernels or the plain code, and both paths give the same results."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attnlab import config as C
from attnlab import fast
from attnlab.data.batching import collate
from attnlab.decoding import beam_search, greedy_search
from attnlab.models import build_model
from attnlab.training.losses import sequence_loss
from attnlab.training.resume import RESUME_MAY_CHANGE
from tests.conftest import tiny_config

KINDS = ("seq2seq", "bahdanau", "transformer", "decoder-only")


def _model(kind: str, kernels: str | None = None, seed: int = 0, *extra: str) -> nn.Module:
    torch.manual_seed(seed)
    model = build_model(tiny_config(kind, *extra).model, 23, 29)
    return model if kernels is None else fast.apply(model, kernels, "cpu")


def _batch():
    return collate([[4, 5, 6], [7, 8], [9]], [[10, 11], [12, 13, 14, 15], [16]], [0, 1, 2])


def _dropouts(model: nn.Module) -> list[type]:
    return [type(m) for m in model.modules() if isinstance(m, nn.Dropout)]


def test_auto_means_fast_everywhere_as_before_the_split():
    """On the CPU the kernels were measured to pay; off it the fused loss was the loss before (#16:
    no behaviour change) until a GPU measurement says otherwise."""
    assert fast.resolve("auto", "cpu") == "fast" and fast.resolve("auto", torch.device("cpu")) == "fast"
    assert fast.resolve("auto", torch.device("cuda", 0)) == "fast"
    assert fast.resolve("auto", "mps") == "fast"
    for device in ("cpu", "cuda"):
        assert fast.resolve("fast", device) == "fast" and fast.resolve("plain", device) == "plain"
    with pytest.raises(ValueError, match="auto, fast, plain"):
        fast.resolve("quick", "cpu")


def test_the_setting_is_validated_defaults_to_auto_and_may_change_on_resume():
    assert C.TrainConfig().kernels == "auto" and C.KERNELS == fast.KERNELS
    assert C.apply_overrides(C.preset("transformer"), ["train.kernels=plain"]).train.kernels == "plain"
    with pytest.raises(C.ConfigError, match="train.kernels='quick' is not valid; choose one of: auto, fast, plain"):
        C.TrainConfig(kernels="quick")
    assert "train.kernels" in RESUME_MAY_CHANGE


@pytest.mark.parametrize("kind", KINDS)
def test_apply_swaps_every_dropout_both_ways_and_keeps_the_state_dict(kind):
    """Models build nn.Dropout; apply(fast) makes each one the lane Dropout (same p, mode), apply(plain) undoes it."""
    model = _model(kind, None, 0, "model.scratch_gru=true")  # nn.GRU has no dropout module, the scratch GRU has
    before = {k: v.clone() for k, v in model.state_dict().items()}
    plain_ps = [(m.p, m.inplace) for m in model.modules() if isinstance(m, nn.Dropout)]
    assert plain_ps and set(_dropouts(model)) == {nn.Dropout}
    model.eval()
    assert fast.apply(model, "fast", "cpu") is model and model.kernels == "fast"
    assert set(_dropouts(model)) == {fast.Dropout}
    assert [(m.p, m.inplace) for m in model.modules() if isinstance(m, nn.Dropout)] == plain_ps
    assert not any(m.training for m in model.modules() if isinstance(m, nn.Dropout))  # eval mode kept
    after = model.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    fast.apply(model, "plain", "cpu")
    assert model.kernels == "plain" and set(_dropouts(model)) == {nn.Dropout}
    fast.apply(model, "auto", torch.device("cuda"))  # auto: the fast kernels (each plain where it cannot apply)
    assert model.kernels == "fast" and set(_dropouts(model)) == {fast.Dropout}


def test_a_dropout_registered_twice_stays_one_module():
    shared = nn.Dropout(0.2)
    model = nn.Sequential(nn.Linear(3, 3), shared, nn.Sequential(shared, nn.Linear(3, 3)))
    fast.apply(model, "fast", "cpu")
    assert type(model[1]) is fast.Dropout and model[1] is model[2][0]


def test_the_fast_dropout_draws_what_the_lane_dropout_always_drew():
    """A model applied "fast" masks exactly as fast.Dropout does at the same seed (the old models' dropout)."""
    x = torch.randn(64, 32)
    torch.manual_seed(7)
    want = fast.Dropout(0.1).train()(x)
    model = fast.apply(nn.Sequential(nn.Dropout(0.1)), "fast", "cpu").train()
    torch.manual_seed(7)
    assert torch.equal(model(x), want)


def test_enabled_reads_the_applied_choice_through_a_wrapper():
    model = _model("transformer")
    assert not hasattr(model, "kernels")
    assert fast.enabled(model, "cpu") and fast.enabled(model, torch.device("cuda"))  # never applied: auto
    fast.apply(model, "plain", "cpu")
    assert not fast.enabled(model, "cpu")

    class Wrapper(nn.Module):  # what DistributedDataParallel looks like from outside: the model as .module
        def __init__(self, module: nn.Module) -> None:
            super().__init__()
            self.module = module

    assert not fast.enabled(Wrapper(model), "cpu")
    fast.apply(model, "fast", "cpu")
    assert fast.enabled(Wrapper(model), "cpu")


@pytest.mark.parametrize("kind", KINDS)
def test_plain_and_fast_sequence_loss_agree(kind, monkeypatch):
    """Same loss, NLL, token count, accuracy and gradients from F.cross_entropy and from the fused kernel."""
    calls = []
    fused = fast.sequence_cross_entropy
    monkeypatch.setattr(fast, "sequence_cross_entropy", lambda *a: calls.append(1) or fused(*a))
    results = {}
    for kernels in ("plain", "fast"):
        model = _model(kind, kernels).eval()  # eval: the two dropouts draw different masks
        out = sequence_loss(model, _batch(), 0.1)
        grads = torch.autograd.grad(out.loss_sum, list(model.parameters()), allow_unused=True)
        results[kernels] = (out, grads)
        assert len(calls) == (kernels == "fast")  # the setting picked the path
    (plain, g_plain), (fused_out, g_fast) = results["plain"], results["fast"]
    torch.testing.assert_close(plain.loss_sum, fused_out.loss_sum, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain.nll_sum, fused_out.nll_sum, rtol=1e-5, atol=1e-5)
    assert not plain.nll_sum.requires_grad
    assert plain.num_tokens == fused_out.num_tokens == 2 + 1 + 4 + 1 + 1 + 1
    assert plain.num_correct == fused_out.num_correct
    for a, b in zip(g_plain, g_fast):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_plain_nll_is_the_unsmoothed_loss():
    model = _model("transformer", "plain").eval()
    smoothed, unsmoothed = sequence_loss(model, _batch(), 0.2), sequence_loss(model, _batch(), 0.0)
    torch.testing.assert_close(smoothed.nll_sum, unsmoothed.loss_sum.detach())
    torch.testing.assert_close(unsmoothed.nll_sum, unsmoothed.loss_sum.detach())
    assert smoothed.loss_sum.item() != pytest.approx(unsmoothed.loss_sum.item())


@pytest.mark.parametrize("kind", KINDS)
def test_plain_and_fast_searches_agree(kind, monkeypatch):
    """argmax / topk and the block top-k choose the same tokens with the same scores."""
    calls = []
    block_top_k = fast.top_k_rows
    monkeypatch.setattr(fast, "top_k_rows", lambda *a: calls.append(1) or block_top_k(*a))
    src = torch.tensor([[4, 5, 6, 2], [7, 8, 2, 1], [9, 2, 1, 1]])
    valid = torch.tensor([4, 3, 2])
    got = {}
    for kernels in ("plain", "fast"):
        model = _model(kind, kernels, seed=3)
        with torch.no_grad():  # peakier outputs than a fresh init: no near-ties
            model.output.weight.normal_(0.0, 2.0)
        n = len(calls)
        greedy = greedy_search(model, src, valid, 6)
        beam = beam_search(model, src, valid, 3, 6, nbest=2)
        assert (len(calls) > n) == (kernels == "fast")  # the setting picked the kernel
        got[kernels] = [(h.tokens, round(h.score, 4), h.finished) for h in greedy] + [
            (h.tokens, round(h.score, 4), h.finished) for hyps in beam for h in hyps
        ]
    assert got["plain"] == got["fast"]


def test_training_honours_the_setting(tmp_path, monkeypatch):
    """A plain run never reaches attnlab/fast/; an auto run on the CPU trains through it."""
    from attnlab.training.loop import train

    calls = []
    fused = fast.sequence_cross_entropy
    monkeypatch.setattr(fast, "sequence_cross_entropy", lambda *a: calls.append(1) or fused(*a))
    train(tiny_config("transformer", "train.max_steps=2", "train.kernels=plain"), tmp_path / "plain", progress=False)
    assert not calls
    train(tiny_config("transformer", "train.max_steps=2"), tmp_path / "auto", progress=False)
    assert calls
