"""``attnlab align``: does cross-attention show the word alignment? Measured against gold (notes §25).

:func:`run` is the one entry point: it scores every map of a run against the gold set
(:func:`~attnlab.analysis.align.score.attention_scores`) and, when asked, adds beside them

- the links read from gradients instead of attention: the saliency map of
  :mod:`attnlab.analysis.align.saliency` (Ding et al. 2019);
- a statistical aligner trained in the same run on the same sentences: NLTK's IBM Model 2
  (:mod:`attnlab.analysis.align.ibm`, the ``align`` extra), both directions symmetrised with
  grow-diag-final-and by default;
- the maps of a copy first trained on the gold sentences' text (:func:`attnlab.analysis.align.adapt_to_gold.adapt`,
  the data IBM Model 2 gets), or with one head taught toward the model's own average
  (:func:`teach_head`, Garg et al. 2019);
- a run of the other direction, each map of one symmetrised with each of the other (:func:`both_ways`).

It returns an :class:`~attnlab.analysis.align.report.AlignReport`, which the CLI, the web route and a
notebook read through ``format(lang)``, ``figure()`` and ``to_json()``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from attnlab.analysis.align.adapt_to_gold import ADAPT_LR, TEACH_WEIGHT, Adaptation, Teaching, adapt, teach
from attnlab.analysis.align.extract import (
    AlignError,
    Extraction,
    Side,
    directional_links,
    head_keys,
    piece_labels,
    stack_heads,
    symmetrise,
    word_matrix,
)
from attnlab.analysis.align.gold import GoldSet, gold_for_heads, gold_sides, has_split, read_gold
from attnlab.analysis.align.ibm import ibm_baseline, require_nltk, tatoeba_words
from attnlab.analysis.align.report import AlignReport, HeadScore
from attnlab.analysis.align.score import (
    aligned_kind,
    annotate_heads,
    attention_scores,
    cross_maps,
    picked_on_trial,
    saliency_scores,
    score_links,
)
from attnlab.analysis.align.symmetrise import (
    BothWays,
    OneWay,
    check_directions,
    one_way,
    pick_on_trial,
    score_pairs,
)
from attnlab.data.pairs import GOLD_LANGS
from attnlab.i18n import _
from attnlab.models import traits
from attnlab.translator import Translator

__all__ = [
    "both_ways",
    "read_one_way",
    "run",
    "teach_head",
    "teaching_labels",
    # what `attnlab heads` reads from here; their homes are align.gold and align.score
    "annotate_heads",
    "attention_scores",
    "gold_for_heads",
    "read_gold",
]


def run(
    tr: Translator,
    gold: GoldSet,
    *,
    contract: bool = True,
    ex: Extraction = Extraction(),
    top_k: int = 0,
    saliency: bool = False,
    ibm: bool = True,
    ibm_pairs: int = 0,
    ibm_iterations: int = 5,
    ibm_method: str = "grow-diag-final-and",
    ibm_null: bool = True,
    data_path: str | os.PathLike[str] | None = None,
    adapt_epochs: int = 0,
    adapt_lr: float = ADAPT_LR,
    teach_epochs: int = 0,
    teach_weight: float = TEACH_WEIGHT,
    reverse: Translator | None = None,
    seed: int = 0,
) -> AlignReport:
    """Every map of ``tr`` scored against ``gold`` at shift 0 and 1, links read as ``ex`` says
    (``contract``: the gold's French contractions re-joined; ``top_k ≥ 2``: also the average of the
    ``top_k`` best heads), with the head picked on the gold folder's trial split when it has one. Beside it:

    - ``saliency``: the gradient saliency map's links, read as the heads' (:func:`saliency_scores`);
    - ``ibm``: the IBM Model 2 baseline trained in the same run on the gold sentences plus ``ibm_pairs``
      Tatoeba pairs (found through ``data_path`` or the run's config), ``ibm_iterations`` EM iterations,
      both directions symmetrised by ``ibm_method`` (``argmax``: the run's direction only), NULL allowed
      with ``ibm_null``;
    - ``adapt_epochs ≥ 1``: every map is read from a copy of the model first trained that many epochs
      (lr ``adapt_lr``) on the gold pairs' text (the run is not changed), and ``as_trained`` keeps the
      original's best head and average of all;
    - ``teach_epochs ≥ 1``: then one head (the one picked on the trial split, else the best) of a copy is
      trained that many epochs toward the links of the model's own average of all heads, with weight
      ``teach_weight`` (:func:`teach_head`; no gold links), and the copy is read;
    - ``reverse``: a run of the other direction (French → English for an English → French ``tr``); every
      map of the one is symmetrised with every map of the other by ``ibm_method``, as IBM Model 2's two
      directions are (:func:`both_ways`; adapted and taught as ``tr`` is).

    ``seed`` fixes the adapting and teaching batches' order and dropout (one repeat is one other seed).
    Raises :class:`AlignError` (one line) before any long work for a run the gold cannot measure, a reverse
    run of the same direction, or a missing NLTK or corpus."""
    extra = _check_first(tr, gold, contract, reverse, ibm, ibm_method, ibm_pairs, data_path)
    adaptation = as_trained = None
    if adapt_epochs:
        tr, reverse, adaptation, as_trained = _adapted(tr, reverse, gold, contract, ex, adapt_epochs, adapt_lr, seed)
    teaching = untaught = taught_pair = None
    if teach_epochs:
        tr, teaching, untaught = teach_head(tr, gold, teach_epochs, teach_weight, contract, ex, adapt_lr, seed)
        if reverse is not None:  # the other direction's run gets its own taught head
            reverse, other, _ = teach_head(reverse, gold, teach_epochs, teach_weight, contract, ex, adapt_lr, seed)
            taught_pair = [(t.layer, t.head) for t in (teaching, other)]
            if getattr(tr.src_tok, "lang", GOLD_LANGS[0]) == GOLD_LANGS[1]:  # RUN read French → English: it is the reverse
                taught_pair.reverse()
    report = attention_scores(tr, gold, contract, ex=ex, top_k=top_k)
    report.adaptation, report.as_trained = adaptation, as_trained
    report.teaching, report.untaught = teaching, untaught
    report.picked = picked_on_trial(tr, report, contract, ex)
    if reverse is not None:
        report.both = both_ways(tr, reverse, gold, ibm_method, contract, ex)
        if taught_pair is not None:  # the pair of taught heads: chosen (on the trial split) before teaching
            report.both.taught = report.both.pair(*taught_pair)
    if saliency:
        t0 = time.perf_counter()
        report.saliency = saliency_scores(tr, gold, contract, ex)
        report.saliency_seconds = time.perf_counter() - t0
    if ibm:
        en_first = getattr(tr.src_tok, "lang", GOLD_LANGS[0]) != GOLD_LANGS[1]
        base = ibm_baseline(gold.en, gold.fr, extra, en_first, ibm_iterations, ibm_method, ibm_null)
        base["counts"] = score_links(base.pop("links"), gold)
        report.ibm = base
    return report


def _check_first(tr: Translator, gold: GoldSet, contract: bool, reverse: Translator | None, ibm: bool,
                 ibm_method: str, ibm_pairs: int, data_path: str | os.PathLike[str] | None
                 ) -> list[tuple[list[str], list[str]]]:
    """What fails fails before the model work, in one line: a reverse run of the wrong direction or no
    method to join two, a run the gold cannot measure, a missing NLTK or corpus. Returns the Tatoeba
    pairs IBM Model 2 trains on beside the gold (none without ``ibm``)."""
    if reverse is not None:
        check_directions(tr, reverse)
        if ibm_method == "argmax":
            raise AlignError(_("a reverse run is symmetrised with the other: give it a method that joins two "
                               "directions (--ibm-links grow-diag-final-and, grow-diag, intersect or union)"))
    for t in (tr,) if reverse is None else (tr, reverse):
        gold_sides(t, gold, contract)
    if not ibm:
        return []
    require_nltk()
    return tatoeba_words(ibm_pairs, _corpus_path(tr, data_path))


def _adapted(tr: Translator, reverse: Translator | None, gold: GoldSet, contract: bool, ex: Extraction,
             epochs: int, lr: float, seed: int
             ) -> tuple[Translator, Translator | None, Adaptation, list[HeadScore]]:
    """Copies of ``tr`` (and ``reverse``) trained ``epochs`` epochs on the gold pairs' text, what was done
    to ``tr``'s, and ``tr``'s best head and average of all at shift 0 before it."""
    before = attention_scores(tr, gold, contract, ex=ex)
    as_trained = [before.best(0)] + [s for s in (before.overall(0),) if s is not None]
    tr, adaptation = adapt(tr, gold_sides(tr, gold, contract)[0], epochs, lr, seed=seed)
    if reverse is not None:
        reverse, _ = adapt(reverse, gold_sides(reverse, gold, contract)[0], epochs, lr, seed=seed)
    return tr, reverse, adaptation, as_trained


def _corpus_path(tr: Translator, data_path: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """``data_path``, else None: then ``$ATTNLAB_DATA_DIR`` and the cache (a run from an older attnlab
    that recorded a ``data.data_path``: that path last, while it exists), see :func:`attnlab.data.corpus.for_run`."""
    from attnlab.data.corpus import for_run

    return for_run(tr.cfg.data, data_path).data_path


# ------------------------------------------------------------------------------ one head taught


def teaching_labels(tr: Translator, pairs: Sequence[tuple[Side, Side]], ex: Extraction) -> list[Tensor]:
    """Per pair, the links of ``tr``'s average of all heads (shift 0, read as ``ex`` says) as piece-level
    0/1 matrices (:func:`~attnlab.analysis.align.extract.piece_labels`): what :func:`teach_head` teaches."""
    labels: list[Tensor] = [None] * len(pairs)  # type: ignore[list-item]
    for i, maps in cross_maps(tr, pairs):
        src, tgt = pairs[i]
        words = word_matrix(stack_heads(maps)[-1:], src, tgt, 0)  # (1, Gt, Gs + 1): the average of all
        ((t2s, s2t),) = directional_links(words, src, tgt, ex)
        labels[i] = piece_labels(symmetrise(t2s, s2t, ex.method), src, tgt)
    return labels


def teach_head(tr: Translator, gold: GoldSet, epochs: int, weight: float = TEACH_WEIGHT, contract: bool = True,
               ex: Extraction = Extraction(), lr: float = ADAPT_LR,
               seed: int = 0) -> tuple[Translator, Teaching, list[HeadScore]]:
    """Garg et al. (2019), unsupervised: one cross-attention head of a copy of ``tr`` trained ``epochs`` epochs
    on the gold pairs' text toward the links of ``tr``'s own average of all heads (no gold links). The head
    is the one picked on the trial split (else the best on ``gold``). Returns the copy, what was done,
    and that head's and the average's scores before (shift 0)."""
    if aligned_kind(tr.model.config) != "cross":
        raise AlignError(_("model.kind={kind} has no cross-attention head to teach; drop --teach").format(
            kind=tr.model.config.kind))
    before = attention_scores(tr, gold, contract, ex=ex)
    chosen = picked_on_trial(tr, before, contract, ex) or before.best()
    head = next(s for s in before.scores if (s.layer, s.head, s.shift) == (chosen.layer, chosen.head, 0))
    pairs, _sides = gold_sides(tr, gold, contract)
    labels = teaching_labels(tr, pairs, ex)
    taught, done = teach(tr, pairs, labels, head.layer or 0, head.head or 0, epochs, weight, lr, seed=seed)
    return taught, done, [head] + [s for s in (before.overall(0),) if s is not None]


# ------------------------------------------------------------------------------ both directions


def read_one_way(tr: Translator, gold: GoldSet, contract: bool = True, shift: int = 0,
                 ex: Extraction = Extraction()) -> OneWay:
    """Every map's one-way (target → source argmax) links of ``gold``, read from ``tr``
    (:func:`attnlab.analysis.align.symmetrise.one_way`)."""
    t = traits(tr.model.config)
    keys = head_keys(t.attention.get(aligned_kind(tr.model.config), 1), t.heads)
    pairs, en_first = gold_sides(tr, gold, contract)
    name = str(tr.run_dir) if tr.run_dir is not None else "(in memory)"
    return one_way(name, keys, cross_maps(tr, pairs), pairs, en_first, shift, ex)


def both_ways(forward: Translator, reverse: Translator, gold: GoldSet, method: str, contract: bool = True,
              ex: Extraction = Extraction()) -> BothWays:
    """An English → French and a French → English run (either order) read over ``gold``: every map of
    one symmetrised by ``method`` with every map of the other (:mod:`attnlab.analysis.align.symmetrise`),
    and the pair of single heads best on the trial split (when the folder has one)."""
    t0 = time.perf_counter()
    forward, reverse = check_directions(forward, reverse)
    fwd, rev = (read_one_way(t, gold, contract, ex=ex) for t in (forward, reverse))
    report = BothWays(fwd, rev, method, score_pairs(fwd, rev, gold, method))
    if gold.split != "trial" and has_split(Path(gold.folder), "trial"):
        trial = read_gold(gold.folder, "trial")
        report.picked = pick_on_trial(*(read_one_way(t, trial, contract, ex=ex) for t in (forward, reverse)),
                                      trial, method, report.pairs)
    report.seconds = time.perf_counter() - t0
    return report
