"""Tiny fake models obeying the decoding protocol, whose best outputs are known by hand.

``PrefixModel``: the next-token distribution is looked up from a table keyed by
``(sentence key, generated prefix)``; the sentence key is ``src[:, 0]``. The decoder state holds the
whole fed prefix as a tensor, so a wrong ``select`` (rows mixed up when beams are reordered or
finished rows dropped) changes the prefix and therefore the answer.

Attention (with ``need_weights``): ``cross (B, 1, 1, 1, S)`` is one-hot on source position
``sum(generated prefix) % src_valid_len`` (so it too depends on the row's own history);
``dec_self (B, 1, 2, 1, t)`` is uniform over the ``t`` fed tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from attnlab.data.vocab import BOS, EOS, PAD, UNK

A, B, C, D = 4, 5, 6, 7  # ordinary target tokens
VOCAB = 8


def dist(vocab: int = VOCAB, **probs: float) -> list[float]:
    """A distribution over ``vocab`` ids: named entries (``eos``, ``unk``, ``pad``, ``bos``, ``a``..``d``, or
    ``t<id>``) get their probability; the remaining mass is spread evenly over the unnamed ids."""
    names = {"unk": UNK, "pad": PAD, "bos": BOS, "eos": EOS, "a": A, "b": B, "c": C, "d": D}
    p = [None] * vocab
    for k, v in probs.items():
        p[names[k] if k in names else int(k[1:])] = v
    rest = [i for i in range(vocab) if p[i] is None]
    left = 1.0 - sum(v for v in p if v is not None)
    assert left >= 0 and (rest or abs(left) < 1e-12)
    for i in rest:
        p[i] = left / len(rest)
    return p


@dataclass
class PrefixState:
    fed: Tensor  # (B, t) tokens fed so far, <bos> first
    key: Tensor  # (B,) sentence key
    valid: Tensor  # (B,) source lengths
    src_len: int  # S, the batch's padded source length
    selects: list[int] = field(default_factory=list)  # rows after each select (shared log)

    def select(self, index: Tensor) -> PrefixState:
        self.selects.append(int(index.numel()))
        return PrefixState(
            self.fed.index_select(0, index),
            self.key.index_select(0, index),
            self.valid.index_select(0, index),
            self.src_len,
            self.selects,
        )


class PrefixModel(nn.Module):
    """``table[(key, prefix)] -> probabilities``; ``default(key, prefix) -> probabilities`` otherwise."""

    def __init__(self, table: dict[tuple[int, tuple[int, ...]], list[float]], default, vocab: int = VOCAB):
        super().__init__()
        self.table, self.default, self.vocab = table, default, vocab
        self.step_rows: list[int] = []  # batch size of every step call
        self.training_seen: list[bool] = []
        self.dummy = nn.Linear(1, 1)  # so the module has a parameter, like real models

    def probs(self, key: int, prefix: tuple[int, ...]) -> list[float]:
        return self.table.get((key, prefix)) or self.default(key, prefix)

    def log_prob(self, key: int, prefix: tuple[int, ...], token: int) -> float:
        return math.log(self.probs(key, prefix)[token])

    def encode(self, src: Tensor, src_valid_lens: Tensor) -> Tensor:
        return src

    def init_state(self, enc: Tensor, src_valid_lens: Tensor) -> PrefixState:
        return PrefixState(
            torch.empty((enc.shape[0], 0), dtype=torch.int64),
            enc[:, 0].clone(),
            src_valid_lens.clone(),
            enc.shape[1],
            [],
        )

    def step(self, tokens: Tensor, state: PrefixState, need_weights: bool = False):
        assert tokens.shape == (state.key.shape[0],) and tokens.numel() > 0, "never step an empty batch"
        self.step_rows.append(tokens.numel())
        self.training_seen.append(self.training)
        fed = torch.cat([state.fed, tokens[:, None]], dim=1)
        assert bool((fed[:, 0] == BOS).all())
        rows = []
        for key, seq in zip(state.key.tolist(), fed.tolist()):
            rows.append([math.log(p) if p > 0 else float("-inf") for p in self.probs(key, tuple(seq[1:]))])
        logits = torch.tensor(rows, dtype=torch.float32) + 3.0  # any shift: only log_softmax matters
        attention = {}
        if need_weights:
            n, t = fed.shape
            pos = fed[:, 1:].sum(dim=1) % state.valid
            cross = torch.zeros(n, 1, 1, 1, state.src_len)
            cross[torch.arange(n), 0, 0, 0, pos] = 1.0
            attention = {"cross": cross, "dec_self": torch.full((n, 1, 2, 1, t), 1.0 / t)}
        return _Step(
            logits, PrefixState(fed, state.key, state.valid, state.src_len, state.selects), attention
        )


@dataclass
class _Step:
    logits: Tensor
    state: PrefixState
    attention: dict[str, Tensor]


def sources(keys: list[int], lens: list[int]) -> tuple[Tensor, Tensor]:
    """A padded ``(B, S)`` source batch whose first id is the sentence key, and its valid lengths."""
    s = max(lens)
    src = torch.full((len(keys), s), PAD, dtype=torch.int64)
    for i, (k, n) in enumerate(zip(keys, lens)):
        src[i, :n] = k
        src[i, n - 1] = EOS
        src[i, 0] = k
    return src, torch.tensor(lens)


def hand_model() -> PrefixModel:
    """Key 10: greedy takes a (.45) then c (.35) then <eos> (.9) although b <eos> is likelier overall.
    Key 11: <unk>, <pad> and <bos> are the most probable tokens and must be skipped.
    Key 12: never ends (<eos> has probability .01)."""
    table = {
        (10, ()): dist(a=0.45, b=0.35, unk=0.10),
        (10, (A,)): dist(c=0.35, eos=0.30),
        (10, (A, C)): dist(eos=0.9),
        (10, (B,)): dist(eos=0.9),
        (11, ()): dist(unk=0.6, pad=0.15, bos=0.1, d=0.1),
        (11, (D,)): dist(bos=0.5, eos=0.4),
    }

    def default(key, prefix):
        return dist(a=0.7, eos=0.01) if key == 12 else dist(eos=0.5)

    return PrefixModel(table, default)


def hashed_model(vocab: int = 7, scale: float = 2.0) -> PrefixModel:
    """A model with pseudo-random but fixed next-token distributions for every (key, prefix)."""

    def default(key: int, prefix: tuple[int, ...]) -> list[float]:
        g = torch.Generator().manual_seed(hash((key, *prefix)) % (2**31))
        return torch.softmax(torch.randn(vocab, generator=g, dtype=torch.float64) * scale, 0).tolist()

    return PrefixModel({}, default, vocab=vocab)
