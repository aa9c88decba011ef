"""Attention → scored maps (notes §25): every head of a run against the gold word alignments.

For each gold pair the reference translation is force-decoded (teacher forcing, notes §3) through
the model by :func:`attnlab.translator.teacher_forced` (:func:`cross_maps`), and the cross-attention of
every layer × head (and each layer's head average, the average of all, or Bahdanau's one additive map)
becomes word links: each target word is linked to the source word it attends to most (argmax), read
either at the decoder step that *predicts* the word (shift 0) or at the next step, where the word is the
decoder's *input* (shift 1, Chen et al. 2020, "Accurate word alignment induction from neural machine
translation"). Subword pieces are mapped back to the gold's words: a target word's attention is the mean
over its pieces' queries, a source word's share the sum over its pieces' keys; the source ``<eos>`` key
is never a link. How a map becomes links beyond this argmax (both directions of one map symmetrised, a
threshold, ``<eos>`` as NULL) lives in :mod:`attnlab.analysis.align.extract`.

Alignment Error Rate (Och & Ney 2003, :mod:`attnlab.analysis.align.aer`), summed over the corpus.
A head chosen on the sentences it is scored on is an upper bound; :func:`picked_on_trial` chooses it
on the gold folder's ``trial`` split instead.

Dimension key: N maps (heads and averages), L layers, H heads, Q queries (decoder inputs),
K keys (source tokens), Gt/Gs target/source words.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from torch import Tensor

from attnlab.analysis.align.aer import AERCounts, Link
from attnlab.analysis.align.extract import (
    AlignError,
    Extraction,
    Side,
    extract_links,
    head_keys,
    stack_heads,
    word_matrix,
)
from attnlab.analysis.align.gold import GoldSet, gold_sides, has_split, read_gold, sides_oov
from attnlab.analysis.align.report import AlignReport, HeadScore
from attnlab.analysis.align.saliency import saliency_maps
from attnlab.data.batching import collate
from attnlab.i18n import _
from attnlab.models import traits
from attnlab.translator import Translator, teacher_forced

__all__ = [
    "aligned_kind",
    "annotate_heads",
    "attention_scores",
    "best_alignment_heads",
    "cross_maps",
    "picked_on_trial",
    "saliency_scores",
    "score_links",
]


def aligned_kind(model_cfg: Any) -> str:
    """The attention kind alignment reads from a model of ``model_cfg``: ``cross`` (an encoder–decoder
    model), or ``self`` (a one-sequence decoder-only model: its target queries over the source keys).

    Raises :class:`AlignError` (one line) for a model with no attention from target to source words
    (the fixed-context seq2seq, the encoder-only masked LM).
    """
    t = traits(model_cfg)
    if "cross" in t.attention:
        return "cross"
    if t.one_sequence and "self" in t.attention:
        return "self"
    raise AlignError(
        _("model.kind={kind} has no attention from target to source words; "
          "align a run with attention (bahdanau, transformer, decoder-only)").format(kind=model_cfg.kind)
    )


def cross_maps(
    tr: Translator, pairs: Sequence[tuple[Side, Side]], batch_size: int = 16
) -> Iterator[tuple[int, Tensor]]:
    """Force-decode each ``(source, target)`` pair; yields ``(index, maps (L, H, n+1, m+1))``: the
    cross-attention of its ``n + 1`` decoder inputs over its ``m`` source pieces and ``<eos>``.

    Encoder–decoder models give their ``cross`` maps; a one-sequence (decoder-only) model's ``self``
    maps are cut to the target queries over the source keys. Raises :class:`AlignError` otherwise.
    """
    aligned_kind(tr.model.config)  # a model with no target → source attention fails here, in one line
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][0].ids), len(pairs[i][1].ids)))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        batch = collate([pairs[i][0].ids for i in idx], [pairs[i][1].ids for i in idx], idx)
        att = teacher_forced(tr.model, batch, tr.device, compute_logits=False).attention
        if "cross" in att:
            maps = att["cross"]  # (B, L, H, T, S)
        else:
            S = batch.src.shape[1]
            maps = att["self"][:, :, :, S:, :S]  # (B, L, H, T, S): target queries over source keys
        for b, i in enumerate(idx):
            ns, nt = len(pairs[i][0].ids), len(pairs[i][1].ids)
            yield i, maps[b, :, :, : nt + 1, : ns + 1].float().cpu()  # (L, H, n+1, m+1)


def score_links(pred: Sequence[set[Link]], gold: GoldSet) -> AERCounts:
    """AER counts of one predicted link set per gold sentence."""
    if len(pred) != len(gold):
        raise ValueError(f"{len(pred)} predicted link sets for {len(gold)} gold sentences")
    counts = AERCounts()
    for p, s, q in zip(pred, gold.sure, gold.possible):
        counts.add(set(p), s, q)
    return counts


def _score_maps(
    words: Sequence[Tensor],
    pairs: Sequence[tuple[Side, Side]],
    gold: GoldSet,
    en_first: bool,
    ex: Extraction,
) -> list[AERCounts]:
    """AER counts per map of ``words[i] (N, Gt, Gs + 1)``, sentence ``i`` by sentence."""
    counts: list[AERCounts] = []
    for i, w in enumerate(words):
        links = extract_links(w, *pairs[i], ex)
        counts = counts or [AERCounts() for _ in links]
        for c, x in zip(counts, links):
            c.add(x if en_first else {(j, s) for s, j in x}, gold.sure[i], gold.possible[i])
    return counts


def attention_scores(
    tr: Translator,
    gold: GoldSet,
    contract: bool = True,
    batch_size: int = 16,
    ex: Extraction = Extraction(),
    top_k: int = 0,
) -> AlignReport:
    """Force-decode every gold pair and score every map at shift 0 and 1 with links read as ``ex``
    says (no IBM baseline). ``top_k ≥ 2``: also the average of the ``top_k`` best real heads (chosen
    by their AER on this same gold set, at the best head's shift)."""
    t0 = time.perf_counter()
    kind = aligned_kind(tr.model.config)  # a model with no attention to read: its own line first
    pairs, en_first = gold_sides(tr, gold, contract)
    t = traits(tr.model.config)
    shape = (t.attention.get(kind, 1), t.heads)
    keys = head_keys(*shape)
    words: dict[int, list[Tensor]] = {0: [None] * len(pairs), 1: [None] * len(pairs)}  # type: ignore[list-item]
    for i, maps in cross_maps(tr, pairs, batch_size):
        stacked = stack_heads(maps)  # (N, n+1, m+1)
        for shift in (0, 1):
            words[shift][i] = word_matrix(stacked, *pairs[i], shift)  # (N, Gt, Gs + 1)
    scores = [
        HeadScore(*keys[k], shift, c)
        for shift in (0, 1)
        for k, c in enumerate(_score_maps(words[shift], pairs, gold, en_first, ex))
    ]
    scores.sort(key=lambda s: (s.shift, s.layer is None, s.layer or 0, s.head is None, s.head or 0))
    run = str(tr.run_dir) if tr.run_dir is not None else "(in memory)"
    tok_kind = getattr(tr.src_tok, "kind", "word")
    report = AlignReport(run, kind, shape, tok_kind, gold, contract, scores, sides_oov(tr, pairs, en_first),
                         extraction=ex)
    if top_k >= 2 and shape[0] * shape[1] >= 2:
        report.top_k = _top_k_score(report, words, pairs, en_first, top_k, keys)
    report.seconds = time.perf_counter() - t0
    return report


def _top_k_score(
    report: AlignReport,
    words: dict[int, list[Tensor]],
    pairs: Sequence[tuple[Side, Side]],
    en_first: bool,
    k: int,
    keys: list[tuple[int | None, int | None]],
) -> HeadScore:
    """Score the mean word matrix of the ``k`` best real heads at the best head's shift."""
    shift = report.best().shift
    members = [s for s in report.scores if s.shift == shift and s.head is not None]
    members = sorted(members, key=lambda s: (s.counts.aer, s.layer or 0, s.head or 0))[:k]
    rows = [keys.index((m.layer, m.head)) for m in members]
    mean = [w[rows].mean(0, keepdim=True) for w in words[shift]]  # (1, Gt, Gs + 1) each
    (c,) = _score_maps(mean, pairs, report.gold, en_first, report.extraction)
    return HeadScore(None, None, shift, c, tuple((m.layer, m.head) for m in members))  # type: ignore[misc]


def saliency_scores(
    tr: Translator, gold: GoldSet, contract: bool = True, ex: Extraction = Extraction()
) -> AERCounts:
    """AER of the gradient saliency map (:mod:`attnlab.analysis.align.saliency`) of every gold pair,
    its links read as ``ex`` says (shift 0: a row is already the gradient of the word it predicts)."""
    aligned_kind(tr.model.config)  # the same models as the heads: one line for one with no attention
    pairs, en_first = gold_sides(tr, gold, contract)
    words = [word_matrix(m, *pairs[i], 0) for i, m in saliency_maps(tr, pairs)]  # (1, Gt, Gs + 1) each
    (counts,) = _score_maps(words, pairs, gold, en_first, ex)
    return counts


def picked_on_trial(tr: Translator, report: AlignReport, contract: bool = True,
                    ex: Extraction = Extraction()) -> HeadScore | None:
    """The real head (and shift) with the lowest AER on the gold folder's ``trial`` split, as ``report``
    scores it: a head chosen without looking at the sentences it is scored on. ``None`` when ``report``
    is of the trial split itself, or the folder has no trial split (a malformed one is an error)."""
    folder = Path(report.gold.folder)
    if report.gold.split == "trial" or not has_split(folder, "trial"):
        return None
    b = attention_scores(tr, read_gold(folder, "trial"), contract, ex=ex).best()
    return next(s for s in report.scores if (s.layer, s.head, s.shift) == (b.layer, b.head, b.shift))


def best_alignment_heads(report: AlignReport, top: int = 3) -> list[HeadScore]:
    """The ``top`` real heads (not averages) with the lowest AER, each at its better shift, best first.

    For ``attnlab heads`` to name alignment heads: ``best_alignment_heads(attention_scores(tr,
    read_gold(gold_dir(path))))``; a head's ``name`` and ``counts.aer`` say which and how well.
    """
    best: dict[tuple[int | None, int | None], HeadScore] = {}
    for s in report.scores:
        if s.head is None:
            continue
        key = (s.layer, s.head)
        if key not in best or s.counts.aer < best[key].counts.aer:
            best[key] = s
    return sorted(best.values(), key=lambda s: (s.counts.aer, s.layer or 0, s.head or 0))[:top]


def annotate_heads(heads_report, report: AlignReport) -> list[HeadScore]:
    """Write each head's AER at its better shift into ``heads_report`` (a
    :class:`~attnlab.analysis.heads.HeadsReport`): ``values["align_aer"]`` and ``values["align_shift"]``
    of the heads of the attention kind ``report`` read. Returns :func:`best_alignment_heads` (all heads)."""
    best = best_alignment_heads(report, top=report.shape[0] * report.shape[1])
    by = {(b.layer, b.head): b for b in best}
    for h in heads_report.heads:
        b = by.get((h.layer, h.head)) if h.kind == report.kind else None
        if b is not None:
            h.values["align_aer"] = b.counts.aer
            h.values["align_shift"] = float(b.shift)
    return best
