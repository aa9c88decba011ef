"""The statistical baseline of ``attnlab align``: IBM Model 2 (Brown et al. 1993) through NLTK.

Trained in the same run on the gold sentences (plus some Tatoeba pairs), in one direction or, as
statistical aligners are used in practice, in both and symmetrised with ``grow-diag-final-and``
(Koehn et al. 2003; :func:`attnlab.analysis.align.extract.symmetrise`, the same function that
symmetrises attention). Each direction's Viterbi alignment links every target word to its most
probable source position, NULL included (a word aligned to NULL gets no link, Brown et al.'s
position 0) unless ``null=False``.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Sequence
from typing import Any

from attnlab.analysis.align.extract import AlignError, symmetrise
from attnlab.data import corpus, download
from attnlab.data.text import preprocess
from attnlab.i18n import _

Link = tuple[int, int]


def tatoeba_words(
    n: int, data_path: str | os.PathLike[str] | None = None
) -> list[tuple[list[str], list[str]]]:
    """``n`` (English, French) Tatoeba pairs as preprocessed words, spread evenly over the corpus
    (``fra.txt`` is sorted by length, so a stride samples every length). ``n = 0``: none."""
    if n <= 0:
        return []
    pairs = corpus.read_pairs(download.locate_fra_eng(data_path))
    step = max(1, len(pairs) // n)
    return [(preprocess(en).split(), preprocess(fr).split()) for en, fr in pairs[::step][:n]]


def require_nltk():
    """NLTK's ``(AlignedSent, IBMModel2)``; :class:`AlignError` (one line) when the extra is missing."""
    try:
        from nltk.translate import AlignedSent, IBMModel2
    except ImportError:
        raise AlignError(
            _("the IBM Model 2 baseline needs NLTK: pip install -e '.[align]' in the attnlab checkout "
              "(or skip the baseline with --no-ibm)")
        ) from None
    return AlignedSent, IBMModel2


def _viterbi(model, src: Sequence[str], tgt: Sequence[str], null: bool) -> set[Link]:
    """Links ``(source, target)``, 0-based: each target word to its most probable source position
    ``argmax_i t(f_j | e_i) · a(i | j, l, m)`` (NLTK's tables, positions 1-based, 0 = NULL)."""
    t_table, a_table = model.translation_table, model.alignment_table
    n_src, n_tgt = len(src), len(tgt)  # Brown et al.'s l and m
    links = set()
    for j, f in enumerate(tgt, 1):
        best, best_i = ((t_table[f][None] * a_table[0][j][n_src][n_tgt]) if null else -1.0), None
        for i, e in enumerate(src, 1):
            p = t_table[f][e] * a_table[i][j][n_src][n_tgt]
            if p >= best:  # ties go to the later word, as NLTK's own align() does
                best, best_i = p, i
        if best_i is not None:
            links.add((best_i - 1, j - 1))
    return links


def ibm2_links(
    src: Sequence[Sequence[str]],
    tgt: Sequence[Sequence[str]],
    extra: Sequence[tuple[Sequence[str], Sequence[str]]] = (),
    iterations: int = 5,
    null: bool = True,
) -> list[set[tuple[int, int]]]:
    """Train NLTK's IBM Model 2 (``P(tgt | src)``; Model 1 first, as NLTK does) on the pairs ``(src, tgt)``
    plus ``extra`` and return its Viterbi links ``(source, target)`` for the first ``len(src)`` pairs
    (with ``null``, a target word may align to NULL and get no link). Words are lowercased.

    Raises :class:`AlignError` when NLTK (the ``align`` extra) is not installed.
    """
    AlignedSent, IBMModel2 = require_nltk()
    low = [([w.lower() for w in s], [w.lower() for w in t]) for s, t in zip(src, tgt)]
    more = [([w.lower() for w in s], [w.lower() for w in t]) for s, t in extra if s and t]
    bitext = [AlignedSent(t, s) for s, t in low + more]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NLTK warns about zero-probability tables on tiny corpora
        model = IBMModel2(bitext, iterations)
    return [_viterbi(model, s, t, null) for s, t in low]


def ibm_baseline(
    en: Sequence[Sequence[str]],
    fr: Sequence[Sequence[str]],
    extra: Sequence[tuple[list[str], list[str]]] = (),
    en_first: bool = True,
    iterations: int = 5,
    method: str = "grow-diag-final-and",
    null: bool = True,
) -> dict[str, Any]:
    """IBM Model 2 links ``(en, fr)`` per sentence on ``en``/``fr`` plus ``extra`` (English, French) pairs.

    ``method="argmax"``: one model in the run's direction (English→French when ``en_first``); any
    other :data:`~attnlab.analysis.align.extract.METHODS` entry trains both directions and
    symmetrises their links. Returns ``{"links", "method", "null", "tatoeba_pairs", "iterations",
    "nltk", "seconds"}``.
    """
    import nltk

    t0 = time.perf_counter()
    fr_en = [(f, e) for e, f in extra]
    forward = (
        ibm2_links(en, fr, extra, iterations, null)
        if en_first
        else [{(e, f) for f, e in x} for x in ibm2_links(fr, en, fr_en, iterations, null)]
    )
    if method == "argmax":
        links = forward
    else:
        other = (
            [{(e, f) for f, e in x} for x in ibm2_links(fr, en, fr_en, iterations, null)]
            if en_first
            else ibm2_links(en, fr, extra, iterations, null)
        )
        links = [symmetrise(a, b, method) for a, b in zip(forward, other)]
    return {
        "links": links,
        "method": method,
        "null": null,
        "tatoeba_pairs": len(extra),
        "iterations": iterations,
        "nltk": nltk.__version__,
        "seconds": round(time.perf_counter() - t0, 2),
    }
