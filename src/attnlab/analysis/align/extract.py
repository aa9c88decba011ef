"""Attention maps → word links (notes §25): the link extraction behind ``attnlab align``.

A map is read at word level (:func:`word_matrix`): target word t's row gives its attention to each
source word and, in a last column, to the source ``<eos>`` (the key a Transformer parks attention
on when no source word is wanted; read here as NULL, Och & Ney 2003). Links then come from
(:class:`Extraction`):

* ``argmax`` — each target word to its most-attended source word (target→source, the usual reading);
* ``intersect`` / ``union`` / ``grow-diag`` / ``grow-diag-final-and`` — the same matrix read both
  ways, target→source argmax (per row) and source→target argmax (per column), symmetrised as
  statistical aligners do (Och & Ney 2003; Koehn et al. 2003, the heuristic of Moses and fast_align's
  ``atools``): :func:`symmetrise` is one function for attention and for IBM Model 2;
* ``threshold`` drops a link whose attention share is below it, ``null`` drops a target word whose
  ``<eos>`` share beats its best source word (the word is aligned to nothing).

Dimension key: N maps, Q queries (decoder inputs ``<bos> y1 …``), K keys (source pieces then
``<eos>``), Tt/Ss target/source pieces, Gt/Gs target/source word groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from attnlab.errors import AttnlabError

Link = tuple[int, int]

#: Link extraction methods, the one-way reading first, then the symmetrised ones.
METHODS = ("argmax", "intersect", "union", "grow-diag", "grow-diag-final-and")
_DIAG = tuple((a, b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0))


class AlignError(AttnlabError):
    """The gold folder, its files or the run cannot be used for alignment."""


@dataclass
class Side:
    """One sentence side as the model reads it: ``ids`` (no ``<eos>``), the word group owning each
    id (``owner``), and each group's gold word indices (``groups``; a group may own no id)."""

    ids: list[int]
    owner: list[int]
    groups: list[list[int]]
    words: list[str] = field(default_factory=list)  # the model's words, one per group


@dataclass(frozen=True)
class Extraction:
    """How links are read from a word-level map. ``threshold`` ∈ [0, 1) is an attention share."""

    method: str = "argmax"
    threshold: float = 0.0
    null: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"link method {self.method!r} is not one of {', '.join(METHODS)}")
        if not 0.0 <= self.threshold < 1.0:
            raise ValueError(f"link threshold {self.threshold} must be in [0, 1)")

    @property
    def label(self) -> str:
        """Short name for tables: ``grow-diag-final-and, ≥0.2, NULL``."""
        parts = [self.method]
        if self.threshold:
            parts.append(f"≥{self.threshold:g}")
        if self.null:
            parts.append("NULL")
        return ", ".join(parts)


# ------------------------------------------------------------------------------------ maps → words


def head_keys(layers: int, heads: int) -> list[tuple[int | None, int | None]]:
    """Labels of the maps :func:`stack_heads` returns: ``(layer, head)``, then ``(layer, None)`` for each
    layer's head average (when H > 1), then ``(None, None)`` for the average of all (when L > 1)."""
    keys: list[tuple[int | None, int | None]] = [(li, h) for li in range(layers) for h in range(heads)]
    if heads > 1:
        keys += [(li, None) for li in range(layers)]
    if layers > 1:
        keys.append((None, None))
    return keys


def stack_heads(maps: Tensor) -> Tensor:
    """``(L, H, Q, K)`` → ``(N, Q, K)`` in :func:`head_keys` order."""
    L, H, Q, K = maps.shape
    parts = [maps.reshape(L * H, Q, K)]  # (L·H, Q, K)
    if H > 1:
        parts.append(maps.mean(1))  # (L, Q, K)
    if L > 1:
        parts.append(maps.mean((0, 1))[None])  # (1, Q, K)
    return torch.cat(parts)


def _owner_matrix(owner: Sequence[int], groups: int) -> Tensor:
    m = torch.zeros(len(owner), groups)
    if owner:
        m[torch.arange(len(owner)), torch.tensor(owner)] = 1.0
    return m  # (pieces, groups)


def word_matrix(maps: Tensor, src: Side, tgt: Side, shift: int = 0) -> Tensor:
    """Word-level attention ``(N, Gt, Gs + 1)`` from piece-level maps ``(N, Q, K)``; the last column is
    the ``<eos>`` key's share (NULL). Queries are decoder inputs ``<bos> y1 … yn`` (``Q ≥ n + shift``),
    keys the source pieces then ``<eos>`` (``K = m + 1``).

    Target piece k is read at query ``k + shift``: 0 = the step that predicts it, 1 = the step where
    it is the decoder's input (Chen et al. 2020). A word's row is the mean over its pieces, a source
    word's column the sum over its pieces, so each row still sums to what its queries did (1).
    Raises ``ValueError`` when there are too few queries or keys.
    """
    nt, ns = len(tgt.ids), len(src.ids)
    if maps.shape[1] < nt + shift:
        raise ValueError(f"{maps.shape[1]} queries cannot serve {nt} target pieces at shift {shift}")
    if maps.shape[2] < ns + 1:
        raise ValueError(f"{maps.shape[2]} keys cannot hold {ns} source pieces and <eos>")
    rows = maps[:, shift : shift + nt, : ns + 1].float()  # (N, Tt, Ss + 1)
    mt = _owner_matrix(tgt.owner, len(tgt.groups))  # (Tt, Gt)
    ms = torch.zeros(ns + 1, len(src.groups) + 1)  # (Ss + 1, Gs + 1): pieces → words, <eos> → NULL
    ms[:ns, : len(src.groups)] = _owner_matrix(src.owner, len(src.groups))
    ms[ns, -1] = 1.0
    words = torch.einsum("tg,ntk,ks->ngs", mt, rows, ms)  # (N, Gt, Gs + 1)
    return words / mt.sum(0).clamp_min(1.0)[None, :, None]


def word_attention(maps: Tensor, src: Side, tgt: Side, shift: int = 0) -> Tensor:
    """:func:`word_matrix` without its NULL column: ``(N, Gt, Gs)``."""
    return word_matrix(maps, src, tgt, shift)[:, :, :-1]


# ------------------------------------------------------------------------------------ words → links


def symmetrise(forward: Iterable[Link], backward: Iterable[Link], method: str) -> set[Link]:
    """Combine two one-way alignments of the same pair (links ``(a, b)`` in one orientation).

    ``argmax`` keeps ``forward``; ``intersect``/``union`` are the set operations; ``grow-diag`` starts
    from the intersection and adds union links next to (also diagonally) a chosen one whose ``a`` or
    ``b`` is still unaligned, until none is added; ``-final-and`` then adds union links whose ``a``
    and ``b`` are both unaligned (Koehn et al. 2003). Always intersection ⊆ result ⊆ union.
    """
    fwd, bwd = set(forward), set(backward)
    if method == "argmax":
        return fwd
    inter, union = fwd & bwd, fwd | bwd
    if method in ("intersect", "union"):
        return inter if method == "intersect" else union
    if method not in METHODS:
        raise ValueError(f"link method {method!r} is not one of {', '.join(METHODS)}")
    out = set(inter)
    a_done, b_done = {a for a, _ in out}, {b for _, b in out}
    grew = True
    while grew:
        grew = False
        for a, b in sorted(out):
            for da, db in _DIAG:
                c = (a + da, b + db)
                if c in union and c not in out and (c[0] not in a_done or c[1] not in b_done):
                    out.add(c)
                    a_done.add(c[0])
                    b_done.add(c[1])
                    grew = True
    if method == "grow-diag-final-and":
        for c in sorted(fwd) + sorted(bwd):
            if c not in out and c[0] not in a_done and c[1] not in b_done:
                out.add(c)
                a_done.add(c[0])
                b_done.add(c[1])
    return out


def directional_links(words: Tensor, src: Side, tgt: Side, ex: Extraction) -> list[tuple[set, set]]:
    """Per map of ``words (N, Gt, Gs + 1)``: the target→source and the source→target argmax links as
    ``(source group, target group)`` sets, after ``ex.threshold`` and ``ex.null``. Groups without
    pieces take no part."""
    has_s = torch.zeros(len(src.groups), dtype=torch.bool)
    has_s[sorted(set(src.owner))] = True
    has_t = torch.zeros(len(tgt.groups), dtype=torch.bool)
    has_t[sorted(set(tgt.owner))] = True
    out: list[tuple[set, set]] = [(set(), set()) for _ in range(words.shape[0])]
    if not (bool(has_s.any()) and bool(has_t.any())):
        return out
    W = words[:, :, :-1].masked_fill(~has_s[None, None, :], -1.0)  # (N, Gt, Gs)
    W = W.masked_fill(~has_t[None, :, None], -1.0)
    row, row_s = W.max(-1)  # (N, Gt): each target word's best source word
    col, col_t = W.max(-2)  # (N, Gs): each source word's best target word
    keep_t = has_t[None] & (row >= ex.threshold)  # (N, Gt)
    if ex.null:
        keep_t &= words[:, :, -1] <= row  # NULL wins: the word attends to <eos> more than to any word
    keep_s = has_s[None] & (col >= ex.threshold)  # (N, Gs)
    for n in range(words.shape[0]):
        t2s = {(int(row_s[n, t]), t) for t in torch.nonzero(keep_t[n]).flatten().tolist()}
        s2t = {(s, int(col_t[n, s])) for s in torch.nonzero(keep_s[n]).flatten().tolist()}
        out[n] = (t2s, s2t)
    return out


def extract_links(words: Tensor, src: Side, tgt: Side, ex: Extraction = Extraction()) -> list[set[Link]]:
    """Per map of ``words (N, Gt, Gs + 1)`` (:func:`word_matrix`): the links ``(source, target)`` in gold
    word indices (a joined word links all its gold words), read as ``ex`` says."""
    out = []
    for t2s, s2t in directional_links(words, src, tgt, ex):
        groups = symmetrise(t2s, s2t, ex.method)
        out.append({(i, j) for s, t in groups for i in src.groups[s] for j in tgt.groups[t]})
    return out


def argmax_links(words: Tensor, src: Side, tgt: Side) -> list[set[Link]]:
    """Per map of ``words (N, Gt, Gs)`` (no NULL column, :func:`word_attention`): each target word linked
    to its most-attended source word, in gold indices ``(source, target)``."""
    null = torch.zeros(*words.shape[:2], 1)  # (N, Gt, 1): an unused NULL column
    return extract_links(torch.cat([words, null], -1), src, tgt, Extraction())


def piece_labels(links: Iterable[Link], src: Side, tgt: Side) -> Tensor:
    """Word-group links ``(source group, target group)`` as a ``(n + 1, m + 1)`` 0/1 matrix over the decoder
    inputs and source keys (:func:`word_matrix`'s layout at shift 0): query ``k`` predicts target piece ``k``,
    so its row marks every piece of the source groups linked to that piece's group. The last row and
    column (the final step, the source ``<eos>``) stay 0. For teaching a head (``align_adapt.teach``)."""
    nt, ns = len(tgt.ids), len(src.ids)
    out = torch.zeros(nt + 1, ns + 1)
    t_pieces: dict[int, list[int]] = {}
    s_pieces: dict[int, list[int]] = {}
    for k, g in enumerate(tgt.owner):
        t_pieces.setdefault(g, []).append(k)
    for j, g in enumerate(src.owner):
        s_pieces.setdefault(g, []).append(j)
    for s, t in links:
        for k in t_pieces.get(t, []):
            out[k, s_pieces.get(s, [])] = 1.0
    return out
