"""The four model families behind one protocol: padding invariance, no future leak, valid attention
maps, KV-cached / step decoding == full forward, state selection, and each overfits a tiny batch."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from attnlab.attention.positional import SequenceTooLongError
from attnlab.config import Config, ConfigError, ModelConfig
from attnlab.data.vocab import BOS, EOS, PAD
from attnlab.models import BUILDERS, build_model

KINDS = ["seq2seq", "bahdanau", "transformer", "decoder-only"]  # the translation families (they decode)
ALL_KINDS = [*KINDS, "encoder-only"]  # and the masked LM (tests/models/test_encoder_only.py)
ATTENTION_KEYS = {
    "seq2seq": set(),
    "bahdanau": {"cross"},
    "transformer": {"enc_self", "dec_self", "cross"},
    "decoder-only": {"self"},
    "encoder-only": {"enc_self"},
}
SRC_V, TGT_V = 13, 11
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny(kind: str, **over) -> ModelConfig:
    kw = dict(
        kind=kind, num_hiddens=16, embed_size=16, num_layers=2, num_heads=2, ffn_num_hiddens=32, dropout=0.0
    )
    kw.update(over)
    return ModelConfig(**kw)


def make(kind: str, seed: int = 0, **over):
    torch.manual_seed(seed)
    return build_model(tiny(kind, **over), SRC_V, TGT_V).eval()


def batch(seed: int = 1):
    """Source rows ending in <eos> then <pad>; target input <bos> y… then <pad>."""
    g = torch.Generator().manual_seed(seed)
    vl = torch.tensor([6, 3, 1, 4])
    src = torch.randint(4, SRC_V, (4, 6), generator=g)
    src[torch.arange(4), vl - 1] = EOS
    src[torch.arange(6)[None, :] >= vl[:, None]] = PAD
    tgt = torch.randint(4, TGT_V, (4, 5), generator=g)
    tgt[:, 0] = BOS
    return src, vl, tgt


VARIANTS = [
    ("seq2seq", {}),
    ("seq2seq", {"bidirectional": True}),
    ("bahdanau", {}),
    ("bahdanau", {"bidirectional": True}),
    ("transformer", {}),
    ("transformer", {"norm_first": False, "positional": "learned"}),
    ("decoder-only", {}),
    ("decoder-only", {"norm_first": False, "positional": "learned", "tie_embeddings": False}),
]
IDS = [k + ("-bidirectional" if o.get("bidirectional") else "-post-learned" if o else "") for k, o in VARIANTS]


@pytest.mark.parametrize(("kind", "over"), VARIANTS, ids=IDS)
def test_forward_shapes_and_attention_dicts(kind, over):
    m = make(kind, **over)
    src, vl, tgt = batch()
    out = m(src, vl, tgt, need_weights=True)
    assert out.logits.shape == (4, 5, TGT_V) and out.hidden.shape == (4, 5, 16)
    torch.testing.assert_close(m.output(out.hidden), out.logits)
    assert set(out.attention) == ATTENTION_KEYS[kind]
    S, T, L, H = 6, 5, 2, 2
    expected = {
        "enc_self": (4, L, H, S, S),
        "dec_self": (4, L, H, T, T),
        "cross": (4, L, H, T, S) if kind == "transformer" else (4, 1, 1, T, S),
        "self": (4, L, H, S + T, S + T),
    }
    for name, w in out.attention.items():
        assert w.shape == expected[name], name
    assert m(src, vl, tgt, compute_logits=False).logits is None
    assert m(src, vl, tgt).attention == {}
    assert isinstance(m.output, torch.nn.Linear) and m.config.kind == kind


@pytest.mark.parametrize("kind", KINDS)
def test_attention_rows_sum_to_one_and_masked_entries_are_exactly_zero(kind):
    m = make(kind)
    src, vl, tgt = batch()
    att = m(src, vl, tgt, need_weights=True).attention
    S = src.shape[1]
    src_pad = torch.arange(S)[None, :] >= vl[:, None]  # (B, S)
    for name, w in att.items():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]), **TOL)
        if name in ("enc_self", "cross"):
            assert torch.all(w.masked_select(src_pad[:, None, None, None, :]) == 0), name
        if name == "dec_self":
            assert torch.all(w.triu(1) == 0)  # lower-triangular: no peeking at later target tokens
            T = w.shape[-1]
            assert (w.masked_select(torch.ones(T, T, dtype=torch.bool).tril()) > 0).all()
        if name == "self":
            assert torch.all(w.triu(1) == 0)
            assert torch.all(w[..., :S].masked_select(src_pad[:, None, None, None, :]) == 0)


@pytest.mark.parametrize(("kind", "over"), VARIANTS, ids=IDS)
def test_padding_does_not_change_valid_outputs(kind, over):
    m = make(kind, **over)
    src, vl, tgt = batch()
    ref = m(src, vl, tgt).logits
    # more padding on both sides, and garbage instead of <pad> in every padded slot
    g = torch.Generator().manual_seed(7)
    src2 = torch.cat([src, torch.full((4, 3), PAD)], dim=1)
    pad_slots = torch.arange(9)[None, :] >= vl[:, None]
    src2[pad_slots] = torch.randint(4, SRC_V, (int(pad_slots.sum()),), generator=g)
    tgt2 = torch.cat([tgt, torch.randint(4, TGT_V, (4, 2), generator=g)], dim=1)
    out = m(src2, vl, tgt2).logits
    torch.testing.assert_close(out[:, :5], ref, **TOL)
    # and a padded row equals the same sentence decoded alone, unpadded
    alone = m(src[2:3, :1], vl[2:3], tgt[2:3]).logits
    torch.testing.assert_close(alone, ref[2:3], **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_no_information_flows_from_future_target_tokens(kind):
    m = make(kind)
    src, vl, tgt = batch()
    ref = m(src, vl, tgt).logits
    for t in range(1, 5):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] - 4 + 1) % (TGT_V - 4) + 4  # a different real token
        out = m(src, vl, changed).logits
        torch.testing.assert_close(out[:, :t], ref[:, :t], **TOL)
        assert (out[:, t] - ref[:, t]).abs().max() > 1e-4  # ...while position t itself does see it


@pytest.mark.parametrize(("kind", "over"), VARIANTS, ids=IDS)
def test_step_decoding_equals_full_forward(kind, over):
    m = make(kind, **over)
    src, vl, tgt = batch()
    full = m(src, vl, tgt, need_weights=True)
    state = m.init_state(m.encode(src, vl), vl)
    logps, steps = [], []
    for t in range(tgt.shape[1]):
        out = m.step(tgt[:, t], state, need_weights=True)
        assert out.logits.shape == (4, TGT_V)
        logps.append(F.log_softmax(out.logits, -1))
        steps.append(out.attention)
        state = out.state
    torch.testing.assert_close(torch.stack(logps, 1), F.log_softmax(full.logits, -1), **TOL)
    # the step weights are the rows of the full maps
    S = src.shape[1]
    for t, att in enumerate(steps):
        for name, w in att.items():
            ref = full.attention[name][..., t : t + 1, :]
            if name == "dec_self":
                ref = ref[..., : t + 1]
            if name == "self":
                ref = full.attention[name][..., S + t : S + t + 1, : S + t + 1]
            torch.testing.assert_close(w, ref, **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_state_select_reorders_and_expands_rows(kind):
    m = make(kind)
    src, vl, tgt = batch()
    state = m.init_state(m.encode(src, vl), vl)
    state = m.step(tgt[:, 0], state).state
    index = torch.tensor([3, 1, 1, 0])  # beam search: reorder, repeat, drop row 2
    picked = m.step(tgt[index, 1], state.select(index)).logits
    direct = m.step(tgt[:, 1], state).logits
    torch.testing.assert_close(picked, direct[index], **TOL)


@pytest.mark.parametrize("kind", ["transformer", "decoder-only"])
def test_step_does_not_modify_its_input_state(kind):
    m = make(kind)
    src, vl, tgt = batch()
    state = m.init_state(m.encode(src, vl), vl)
    a = m.step(tgt[:, 0], state).logits
    b = m.step(tgt[:, 0], state).logits  # the same state again: caches must not have grown
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", ["transformer", "decoder-only"])
def test_tied_embeddings_and_length_limit(kind):
    m = make(kind, max_positions=8)
    assert m.output.weight is m.tgt_embedding.weight
    assert make(kind, tie_embeddings=False).output.weight is not make(kind).tgt_embedding.weight
    src, vl, tgt = batch()
    with pytest.raises(SequenceTooLongError, match="max_positions=8"):
        m(src, vl, torch.cat([tgt, tgt], 1))


def test_build_model_dict_and_errors():
    assert set(BUILDERS) == set(ALL_KINDS)
    assert build_model(Config(model=tiny("transformer")), 5, 6).output.out_features == 6
    cfg = tiny("transformer")
    object.__setattr__(cfg, "kind", "lstm")  # bypass the frozen config's own validation
    with pytest.raises(ConfigError, match="choose one of"):
        build_model(cfg, 5, 5)
    with pytest.raises(ConfigError, match="vocabulary"):
        build_model(tiny("seq2seq"), 0, 5)


@pytest.mark.parametrize("kind", KINDS)
def test_training_mode_with_dropout_gives_finite_gradients(kind):
    m = make(kind, dropout=0.3).train()
    src, vl, tgt = batch()
    m(src, vl, tgt).logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def _overfit(kind: str, steps: int, lr: float) -> tuple[float, float]:
    """Train on 4 fixed sentence pairs; return (final loss, seconds)."""
    torch.manual_seed(0)
    m = build_model(tiny(kind, num_hiddens=32, embed_size=32, ffn_num_hiddens=64), SRC_V, TGT_V).train()
    src, vl, tgt = batch()
    tgt_valid = torch.tensor([5, 4, 3, 5])
    labels = torch.cat([tgt[:, 1:], torch.full((4, 1), EOS)], 1)
    labels[torch.arange(5)[None, :] >= tgt_valid[:, None]] = PAD
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    start = time.perf_counter()
    for _ in range(steps):
        loss = F.cross_entropy(
            m(src, vl, tgt).logits.reshape(-1, TGT_V), labels.reshape(-1), ignore_index=PAD
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item(), time.perf_counter() - start


@pytest.mark.parametrize("kind", KINDS)
def test_each_family_overfits_a_tiny_batch(kind):
    loss, seconds = _overfit(kind, steps=150, lr=1e-2)
    assert loss < 0.05, f"{kind} did not overfit: loss {loss:.3f} after 150 steps ({seconds:.1f}s)"


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_traits_describe_what_the_model_returns(kind):
    """Inspection and the web page trust ``traits``: its kinds, layers and heads must be the model's own."""
    import functools

    from torch import nn

    from attnlab.models import traits

    cfg = tiny(kind, num_layers=3, num_heads=4)
    t = traits(cfg)
    model = build_model(cfg, SRC_V, TGT_V).eval()
    assert type(model).traits(cfg) == t
    src, vl, tgt = batch()
    out = model(src, vl, tgt, need_weights=True)
    assert set(t.attention) == ATTENTION_KEYS[kind] == set(out.attention)
    for name, w in out.attention.items():
        assert w.shape[1] == t.attention[name] and w.shape[2] == t.heads, (name, w.shape, t)
    assert t.recurrent == (kind in ("seq2seq", "bahdanau"))
    tables = [functools.reduce(getattr, name.split("."), model) for name in t.embeddings]
    assert all(isinstance(e, nn.Embedding) for e in tables)
    assert {id(m) for m in model.modules() if isinstance(m, nn.Embedding)} == {id(e) for e in tables}
    # the decoder-only model's target follows the source in one position table
    assert t.max_target_len(100, 30) == (69 if kind == "decoder-only" else 100)
    # the task: a translation model predicts each target position in its vocabulary, a fill model each source one
    rows, vocab = (src.shape[1], SRC_V) if t.task == "fill" else (tgt.shape[1], TGT_V)
    assert t.task in ("translate", "fill") and out.logits.shape == (4, rows, vocab)
