"""Translation scores: the notes' BLEU formula (D2L's, §22) and sacreBLEU's BLEU and chrF with signatures.

Two different things are called BLEU here:

- :func:`d2l_bleu` is D2L's sentence-level formula, used by the notes to score one translation of one
  sentence against one label: a brevity penalty times the matched n-gram precisions, longer n-grams
  weighted more (``p_n ** (1 / 2**n)``). It is for teaching and for the notes' examples.
- :func:`corpus_scores` is what a paper would report: sacreBLEU's corpus BLEU and chrF on detokenised
  text, with the signature that makes the figure reproducible from the run folder alone, computed against
  **all** the references of each source sentence (Tatoeba often gives one English sentence several
  French translations) and, beside it, against the first reference only. BLEU's tokenizer follows the
  target language (:func:`bleu_tokenize`: ``13a``, sacreBLEU's default; ``zh`` for Chinese; ``char`` for
  the other languages written without spaces, where no segmenter is assumed); the signature names it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from attnlab.config import UNSEGMENTED

__all__ = ["CHARACTER_BUCKETS", "DEFAULT_BUCKETS", "bleu_by_length", "bleu_from_stats", "bleu_tokenize",
           "corpus_scores", "d2l_bleu", "length_buckets", "reference_streams", "sentence_stats"]

DEFAULT_BUCKETS: tuple[tuple[int, int], ...] = ((1, 4), (5, 8), (9, 12), (13, 16), (17, 10**9))
#: The same buckets for a source counted in characters (Chinese, Japanese: the chars rule), each 1.5 times as
#: wide: a sentence written without spaces holds more characters than its translation has words, so word-sized
#: buckets would put most sentences among the "long" ones.
CHARACTER_BUCKETS: tuple[tuple[int, int], ...] = ((1, 6), (7, 12), (13, 18), (19, 24), (25, 10**9))


def length_buckets(unit: str) -> tuple[tuple[int, int], ...]:
    """The BLEU-by-length buckets for lengths counted in ``unit`` (``words`` or ``characters``, what
    :meth:`attnlab.data.pairs.Pair.length_unit` says of a side)."""
    return CHARACTER_BUCKETS if unit == "characters" else DEFAULT_BUCKETS


def bleu_tokenize(lang: str | None) -> str:
    """sacreBLEU's tokenizer for a target in ``lang``: ``zh`` for Chinese (sacreBLEU's own), ``char`` for the
    other scripts written without spaces (``ja-mecab`` would need MeCab), ``13a`` (the default) otherwise."""
    if lang == "zh":
        return "zh"
    return "char" if lang in UNSEGMENTED else "13a"


def d2l_bleu(pred_tokens: Sequence[str], label_tokens: Sequence[str], k: int = 2) -> float:
    """D2L's BLEU of one prediction against one label, in ``[0, 1]``:

    ``exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n ** (1 / 2**n)``, where ``p_n`` is the
    share of the prediction's n-grams found in the label (each label n-gram matched at most as often as
    it occurs there). The first factor punishes predictions shorter than the label, which would
    otherwise get high precisions by saying little.

    D2L's code divides by zero when the prediction is empty or shorter than ``n`` tokens; here such a
    prediction has no n-grams of that order to match, so its precision — and the score — is 0
    (as unsmoothed BLEU has it).

    Raises:
        ValueError: if ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"k={k} must be >= 1 (the longest n-gram order)")
    len_pred, len_label = len(pred_tokens), len(label_tokens)
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1.0 - len_label / len_pred))
    for n in range(1, k + 1):
        if len_pred < n:
            return 0.0
        label_subs = Counter(tuple(label_tokens[i : i + n]) for i in range(len_label - n + 1))
        num_matches = 0
        for i in range(len_pred - n + 1):
            gram = tuple(pred_tokens[i : i + n])
            if label_subs[gram] > 0:
                num_matches += 1
                label_subs[gram] -= 1
        score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
    return score


def reference_streams(refs: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """Transpose per-sentence reference lists into sacreBLEU's reference streams.

    ``refs[i]`` holds every reference of sentence ``i``; stream ``j`` holds the ``j``-th reference of
    every sentence, ``None`` where a sentence has fewer than ``j + 1``. sacreBLEU skips ``None``
    (a variable number of references; its signature then says ``nrefs:var``). An empty string would
    instead count as a real, empty reference, whose length 0 can become the "closest reference
    length" of a short hypothesis and cancel its brevity penalty.
    """
    width = max((len(r) for r in refs), default=0)
    return [[r[j] if j < len(r) else None for r in refs] for j in range(width)]


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(
            f"{len(hyps)} hypotheses but {len(refs)} reference lists; give one list per hypothesis"
        )
    if not hyps:
        raise ValueError("no hypotheses to score")
    for i, r in enumerate(refs):
        if isinstance(r, str):
            raise ValueError(
                f"refs[{i}] is a string; each entry must be the list of references of a sentence"
            )
        if len(r) == 0:
            raise ValueError(f"sentence {i} has no reference; every sentence needs at least one")


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]], tokenize: str = "13a") -> dict[str, Any]:
    """sacreBLEU corpus BLEU and chrF of detokenised hypotheses, against all references and against the first.

    Args:
        hyps: one detokenised hypothesis per sentence.
        refs: ``refs[i]`` lists every detokenised reference of sentence ``i`` (at least one).
        tokenize: sacreBLEU's BLEU tokenizer (:func:`bleu_tokenize` of the target language).

    Returns:
        A JSON-ready dict: ``bleu``, ``chrf`` (0–100, all references) and their ``bleu_signature``,
        ``chrf_signature``; ``bleu_single``, ``chrf_single`` and signatures (first reference only);
        ``bleu_precisions`` (1- to 4-gram, %), ``bleu_bp``, ``hyp_len``, ``ref_len`` (all references);
        ``bleu_verbose`` (sacreBLEU's one-line detail); ``references_per_sentence`` (mean) and
        ``max_references``.

    Raises:
        ValueError: on no hypotheses, a length mismatch, or a sentence without a reference.
    """
    _check(hyps, refs)
    hyps = list(hyps)
    streams = reference_streams(refs)
    single = [[r[0] for r in refs]]
    bleu, chrf = BLEU(tokenize=tokenize), CHRF()
    b = bleu.corpus_score(hyps, streams)
    c = chrf.corpus_score(hyps, streams)
    bleu1, chrf1 = BLEU(tokenize=tokenize), CHRF()
    b1 = bleu1.corpus_score(hyps, single)
    c1 = chrf1.corpus_score(hyps, single)
    return {
        "bleu": float(b.score),
        "chrf": float(c.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "bleu_single": float(b1.score),
        "chrf_single": float(c1.score),
        "bleu_single_signature": str(bleu1.get_signature()),
        "chrf_single_signature": str(chrf1.get_signature()),
        "bleu_precisions": [float(p) for p in b.precisions],
        "bleu_bp": float(b.bp),
        "hyp_len": int(b.sys_len),
        "ref_len": int(b.ref_len),
        "bleu_verbose": b.format(width=2, score_only=False),
        "references_per_sentence": sum(len(r) for r in refs) / len(refs),
        "max_references": len(streams),
    }


def bleu_by_length(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    src_lens: Sequence[int],
    buckets: Sequence[tuple[int, int]] = DEFAULT_BUCKETS,
    tokenize: str = "13a",
) -> list[dict[str, Any]]:
    """Multi-reference BLEU and chrF per source-length bucket (the notes' §10 and §26 questions: do long
    sentences suffer, and does attention help them?).

    Args:
        hyps, refs: as for :func:`corpus_scores`.
        src_lens: the source length of each sentence, in tokens (the caller's unit, e.g. without ``<eos>``).
        buckets: inclusive ``(lo, hi)`` length ranges; a last ``hi`` of ``10**9`` or more reads "lo+".
        tokenize: sacreBLEU's BLEU tokenizer, as for :func:`corpus_scores`.

    Returns:
        One row per non-empty bucket, in bucket order: ``bucket`` (label such as ``"5-8"`` or ``"17+"``),
        ``lo``, ``hi``, ``sentences``, ``bleu``, ``chrf``. Sentences whose length falls in no bucket are
        left out; empty buckets give no row (a score of nothing would read as a real 0).

    Raises:
        ValueError: as :func:`corpus_scores`, or if ``src_lens`` has the wrong length or a bucket has
            ``lo > hi``.
    """
    _check(hyps, refs)
    if len(src_lens) != len(hyps):
        raise ValueError(f"{len(src_lens)} source lengths for {len(hyps)} hypotheses")
    rows = []
    for lo, hi in buckets:
        if lo > hi:
            raise ValueError(f"bucket ({lo}, {hi}) has lo > hi")
        idx = [i for i, n in enumerate(src_lens) if lo <= n <= hi]
        if not idx:
            continue
        sub_hyps, streams = [hyps[i] for i in idx], reference_streams([refs[i] for i in idx])
        rows.append(
            {
                "bucket": f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}",
                "lo": lo,
                "hi": hi,
                "sentences": len(idx),
                "bleu": float(BLEU(tokenize=tokenize).corpus_score(sub_hyps, streams).score),
                "chrf": float(CHRF().corpus_score(sub_hyps, streams).score),
            }
        )
    return rows


def sentence_stats(hyps: Sequence[str], refs: Sequence[Sequence[str]], tokenize: str = "13a") -> list[list[int]]:
    """BLEU's sufficient statistics of each hypothesis against all its references, one row per sentence:
    ``[hyp length, closest reference length, matches of 1…4-grams, totals of 1…4-grams]`` (``2 + 2n``), the
    fields of sacreBLEU's public :class:`~sacrebleu.metrics.bleu.BLEUScore` for that one sentence. Rows of
    any resample of the sentences, summed, give its corpus BLEU through :func:`bleu_from_stats` without
    decoding again (what a paired bootstrap needs, as sacreBLEU's own does).

    Raises:
        ValueError: as :func:`corpus_scores`.
    """
    _check(hyps, refs)
    metric = BLEU(tokenize=tokenize)
    rows = []
    for hyp, own in zip(hyps, refs):
        s = metric.corpus_score([hyp], [[r] for r in own])
        rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
    return rows


def bleu_from_stats(stats: Sequence[float], tokenize: str = "13a") -> float:
    """sacreBLEU's corpus BLEU (its defaults: ``exp`` smoothing, n-grams up to 4) from summed rows of
    :func:`sentence_stats`, through sacreBLEU's public ``BLEU.compute_bleu``: equal to
    ``corpus_scores(...)["bleu"]`` on the same sentences."""
    metric = BLEU(tokenize=tokenize)
    n = metric.max_ngram_order
    st = [int(x) for x in stats]
    return float(BLEU.compute_bleu(st[2: 2 + n], st[2 + n: 2 + 2 * n], st[0], st[1],
                                   smooth_method=metric.smooth_method, smooth_value=metric.smooth_value,
                                   effective_order=metric.effective_order, max_ngram_order=n).score)
