"""The encoder-only family (notes §28.2–3): BERT's masking statistics, the loss on the chosen positions
only, attention that sees the future (and the decoder-only's that does not), the one causal mask of
§28.3, a tiny model that learns to fill, and resume == uninterrupted."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from attnlab import runs
from attnlab.attention import masks, multi_head
from attnlab.config import ModelConfig
from attnlab.data.batching import collate
from attnlab.data.specials import BOS, EOS, MASK, PAD, SPECIALS
from attnlab.models import build_model, traits
from attnlab.models.encoder_only import CannotGenerateError, mask_tokens
from attnlab.training.loop import train
from attnlab.training.losses import masked_lm_loss, sequence_loss
from tests.conftest import tiny_config

V = 40
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny(kind: str = "encoder-only", **over) -> ModelConfig:
    kw = dict(kind=kind, num_hiddens=16, num_layers=2, num_heads=2, ffn_num_hiddens=32, dropout=0.0)
    return ModelConfig(**{**kw, **over})


def sources(lengths, seed=0):
    """A batch of sources ``x1..xm <eos> <pad>…`` with words drawn from the non-special ids."""
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(len(SPECIALS), V, (n,), generator=g).tolist() for n in lengths]
    return collate(seqs, [[] for _ in seqs], list(range(len(seqs))))


def test_masking_follows_berts_15_80_10_10():
    b = sources([100] * 400)  # 100 words per row: exactly 15 chosen per row
    inputs, labels = mask_tokens(b.src, b.src_valid_lens, V, torch.Generator().manual_seed(1))
    chosen = labels != PAD
    assert (chosen.sum(1) == 15).all()
    n = int(chosen.sum())
    as_mask = (inputs[chosen] == MASK).float().mean().item()
    kept = (inputs[chosen] == b.src[chosen]).float().mean().item()  # a random word can equal the original
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - (0.1 + 0.1 / (V - len(SPECIALS)))) < 0.015, (as_mask, kept, n)
    swapped = chosen & (inputs != MASK) & (inputs != b.src)
    assert (inputs[swapped] >= len(SPECIALS)).all()  # a random *word*, never a special
    assert torch.equal(inputs[~chosen], b.src[~chosen])  # nothing else is touched
    assert torch.equal(labels[chosen], b.src[chosen])


def test_padding_and_eos_are_never_chosen_and_every_sentence_gets_a_mask():
    b = sources([1, 2, 3, 7, 20, 33], seed=3)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        inputs, labels = mask_tokens(b.src, b.src_valid_lens, V, g)
        chosen = labels != PAD
        words = torch.arange(b.src.shape[1])[None, :] < (b.src_valid_lens - 1)[:, None]
        assert not (chosen & ~words).any()  # never <eos>, never <pad>
        assert (chosen.sum(1) == torch.tensor([1, 1, 1, 1, 3, 5])).all()  # max(1, round(0.15 m))
        assert torch.equal(inputs[~words], b.src[~words])


def test_masks_come_from_the_generator_or_the_global_rng():
    b = sources([12, 9, 30])
    one = mask_tokens(b.src, b.src_valid_lens, V, torch.Generator().manual_seed(5))
    two = mask_tokens(b.src, b.src_valid_lens, V, torch.Generator().manual_seed(5))
    assert all(torch.equal(x, y) for x, y in zip(one, two))
    torch.manual_seed(9)
    a = mask_tokens(b.src, b.src_valid_lens, V)
    torch.manual_seed(9)
    c = mask_tokens(b.src, b.src_valid_lens, V)  # the checkpointed RNG decides: resume redraws the same masks
    assert all(torch.equal(x, y) for x, y in zip(a, c))


def test_the_loss_is_the_cross_entropy_of_the_chosen_positions_only():
    torch.manual_seed(0)
    model = build_model(tiny(), V, 7).eval()
    b = sources([5, 9, 14], seed=2)
    out = masked_lm_loss(model, b, generator=torch.Generator().manual_seed(4))
    inputs, labels = mask_tokens(b.src, b.src_valid_lens, V, torch.Generator().manual_seed(4))
    logits = model(inputs, b.src_valid_lens).logits  # (B, S, V)
    chosen = labels != PAD
    ref = F.cross_entropy(logits[chosen], labels[chosen], reduction="sum")
    assert out.num_tokens == int(chosen.sum())
    torch.testing.assert_close(out.nll_sum, ref.detach(), **TOL)
    # weighted so that the loop's division by the target-token count gives the mean per masked token
    torch.testing.assert_close(out.loss_sum / b.num_tgt_tokens, ref / out.num_tokens, **TOL)
    # the loop's one entry point dispatches on the model's traits
    same = sequence_loss(model, b, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(same.nll_sum, out.nll_sum)


def test_traits_and_outputs():
    cfg = tiny()
    t = traits(cfg)
    assert t.task == "fill" and set(t.attention) == {"enc_self"} and not t.one_sequence
    assert traits(tiny("decoder-only")).task == traits(tiny("transformer")).task == "translate"
    model = build_model(cfg, V, 7).eval()
    b = sources([4, 6])
    out = model(b.src, b.src_valid_lens, b.tgt_in, need_weights=True)
    assert out.logits.shape == (2, b.src.shape[1], V)  # a source word at every source position
    assert out.attention["enc_self"].shape == (2, 2, 2, b.src.shape[1], b.src.shape[1])
    assert model.output.weight is model.src_embedding.weight
    enc = model.encode(b.src, b.src_valid_lens)
    with pytest.raises(CannotGenerateError, match="attnlab fill"):
        model.init_state(enc, b.src_valid_lens)


def test_encoder_only_sees_later_tokens_and_decoder_only_does_not():
    """§28.2: change a later token; an earlier position's output moves for the encoder-only model only."""
    torch.manual_seed(0)
    enc = build_model(tiny(), V, V).eval()
    dec = build_model(tiny("decoder-only"), V, V).eval()
    b = sources([6, 6], seed=5)
    changed = b.src.clone()
    changed[:, 4] = (changed[:, 4] - len(SPECIALS) + 1) % (V - len(SPECIALS)) + len(SPECIALS)
    h, h2 = enc(b.src, b.src_valid_lens).hidden, enc(changed, b.src_valid_lens).hidden
    assert (h[:, :4] - h2[:, :4]).abs().max() > 1e-3  # bidirectional: position 1 sees position 5
    w = enc(b.src, b.src_valid_lens, need_weights=True).attention["enc_self"]
    assert (w.triu(1) > 0).any() and torch.all(w.sum(-1) > 0.999)  # a full matrix, not triangular
    # the decoder-only model reads the target under a causal mask: earlier target outputs do not move
    src = torch.tensor([[5, EOS]] * 2)
    vl = torch.tensor([2, 2])
    tgt = torch.cat([torch.full((2, 1), BOS), b.src[:, :5]], 1)
    tgt2 = torch.cat([torch.full((2, 1), BOS), changed[:, :5]], 1)
    d, d2 = dec(src, vl, tgt).hidden, dec(src, vl, tgt2).hidden
    torch.testing.assert_close(d[:, :5], d2[:, :5], **TOL)
    assert (d[:, 5] - d2[:, 5]).abs().max() > 1e-3
    assert torch.all(dec(src, vl, tgt, need_weights=True).attention["self"].triu(1) == 0)


def test_the_decoder_only_and_the_decoder_share_one_causal_mask(monkeypatch):
    """§28.3: GPT's causal mask *is* the Transformer decoder's masked self-attention mask — one
    function (attention/masks.py), one result — and the encoder-only model never calls it."""
    calls = []

    def spy(q_len, k_len=None, device=None):
        m = masks.causal_mask(q_len, k_len, device)
        calls.append(m)
        return m

    monkeypatch.setattr(multi_head, "causal_mask", spy)
    torch.manual_seed(0)
    T, S = 5, 3
    src = torch.tensor([[6, 7, EOS]])
    vl = torch.tensor([S])
    tgt = torch.tensor([[BOS, 8, 9, 10, 11]])
    tr = build_model(tiny("transformer"), V, V).eval()
    w_dec = tr(src, vl, tgt, need_weights=True).attention["dec_self"]  # (1, L, H, T, T)
    dec_masks, calls[:] = list(calls), []
    gpt = build_model(tiny("decoder-only"), V, V).eval()
    w_gpt = gpt(src, vl, tgt, need_weights=True).attention["self"]  # (1, L, H, S + T, S + T)
    gpt_masks, calls[:] = list(calls), []
    build_model(tiny(), V, V).eval()(src, vl, need_weights=True)
    assert calls == []  # the encoder-only model: no causal mask at all
    assert len(dec_masks) == len(gpt_masks) == 2  # one per layer, from the same function
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    for m_dec, m_gpt in zip(dec_masks, gpt_masks):
        assert torch.equal(m_dec, lower)
        assert torch.equal(m_gpt[S:, S:], m_dec)  # the target block of GPT's mask is the decoder's mask
        assert torch.equal(m_gpt, torch.ones(S + T, S + T, dtype=torch.bool).tril())
    # and what the weights show is that mask: zero exactly where it forbids
    assert torch.equal(w_dec[0] > 0, lower.expand_as(w_dec[0]))
    assert torch.equal(w_gpt[0, ..., S:, S:] > 0, lower.expand_as(w_gpt[0, ..., S:, S:]))


def test_a_tiny_model_learns_to_fill_a_tiny_set():
    torch.manual_seed(0)
    model = build_model(tiny(num_hiddens=32, ffn_num_hiddens=64), V, V).train()
    b = sources([6, 7, 5, 8], seed=11)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(300):
        out = masked_lm_loss(model, b)
        opt.zero_grad()
        (out.loss_sum / b.num_tgt_tokens).backward()
        opt.step()
    model.eval()
    right = total = 0
    for row in range(4):  # every word position masked alone
        n = int(b.src_valid_lens[row]) - 1
        for pos in range(n):
            x = b.src[row : row + 1].clone()
            x[0, pos] = MASK
            logits = model(x, b.src_valid_lens[row : row + 1]).logits
            right += int(logits[0, pos].argmax() == b.src[row, pos])
            total += 1
    assert right / total >= 0.9, f"fill accuracy {right}/{total}"


def test_resume_equals_uninterrupted(tmp_path):
    cfg12 = tiny_config("encoder-only", "train.max_steps=12", "train.log_every=1", "train.schedule=inverse_sqrt")
    cfg6 = tiny_config("encoder-only", "train.max_steps=6", "train.log_every=1", "train.schedule=inverse_sqrt")
    train(cfg12, tmp_path / "straight", progress=False)
    train(cfg6, tmp_path / "stopped", progress=False)
    assert train(cfg12, tmp_path / "stopped", resume=True, progress=False).step == 12
    weights = lambda run: load_file(str(runs.resolve_checkpoint(run, "last") / runs.WEIGHTS))  # noqa: E731
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "stopped")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = lambda run: [r["loss"] for r in runs.read_metrics(run) if r.get("event") == "train"]  # noqa: E731
    assert losses(tmp_path / "straight") == losses(tmp_path / "stopped")
    valid = [r for r in runs.read_metrics(tmp_path / "straight") if r.get("event") == "valid"]
    assert "valid_fill_acc" in valid[-1] and "valid_bleu" not in valid[-1]
