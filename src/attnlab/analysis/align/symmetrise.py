"""Both directions (notes §25): links read from an English → French *and* a French → English run,
symmetrised across the two as IBM Model 2's two directions are.

A statistical aligner is never read one way only: IBM Model 2 is trained English → French and French
→ English, and each direction's links (every target word to its best source word) are symmetrised
(``grow-diag-final-and``, Koehn et al. 2003). A translation model reads one way: each of its target
words attends over the source. So the fair comparison takes two runs, one per direction
(``data.direction=fr-en`` trains the second), reads each map's one-way argmax in each, and puts
them through the same :func:`~attnlab.analysis.align.extract.symmetrise` with the same method as
the IBM baseline: a head of one run beside a head of the other, as Model 2 beside Model 2.

Every pair (map of the forward run, map of the reverse run) is scored; the pair of single heads
reported as "picked" is chosen on the gold folder's trial split, never on the sentences it is scored
on. Links live in gold word indices ``(English word, French word)``, so the two runs' word groups
(their subword pieces, French contractions) need not agree.

Dimension key: N maps (:func:`~attnlab.analysis.align.extract.head_keys` order), Gt/Gs target/source words.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from attnlab.analysis.align.aer import AERCounts, Link, counts_json
from attnlab.analysis.align.extract import (
    AlignError,
    Extraction,
    Side,
    directional_links,
    stack_heads,
    symmetrise,
    word_matrix,
)
from attnlab.data.pairs import GOLD_LANGS
from attnlab.i18n import _

Keys = list[tuple[int | None, int | None]]


@dataclass
class OneWay:
    """One run's one-way links over a gold set: ``links[i][n]`` = map ``n``'s links of sentence ``i``
    (each target word to its most-attended source word, :class:`Extraction` ``threshold`` and ``null``
    applied), in gold indices ``(en, fr)``; ``keys[n]`` names map ``n``."""

    run: str
    direction: str  # "en→fr" or "fr→en"
    keys: Keys
    links: list[list[set[Link]]]


def map_name(key: tuple[int | None, int | None]) -> str:
    """``L1H2``, ``L1 avg`` (a layer's head average) or ``avg`` (every head of every layer)."""
    layer, head = key
    if layer is None:
        return "avg"
    return f"L{layer + 1}" + (" avg" if head is None else f"H{head + 1}")


def one_way(
    run: str,
    keys: Keys,
    maps: Iterable[tuple[int, Tensor]],
    pairs: Sequence[tuple[Side, Side]],
    en_first: bool,
    shift: int = 0,
    ex: Extraction = Extraction(),
) -> OneWay:
    """Each map's target → source argmax links of every pair, from ``maps`` = ``(index, (L, H, Q, K))``
    as :func:`attnlab.analysis.align.score.cross_maps` yields them for ``pairs`` (the model's ``(source,
    target)`` sides; ``en_first``: the source is English)."""
    out: list[list[set[Link]]] = [[] for _ in pairs]
    for i, m in maps:
        src, tgt = pairs[i]
        words = word_matrix(stack_heads(m), src, tgt, shift)  # (N, Gt, Gs + 1)
        for t2s, _s2t in directional_links(words, src, tgt, Extraction("argmax", ex.threshold, ex.null)):
            gold = {(a, b) for s, g in t2s for a in src.groups[s] for b in tgt.groups[g]}  # (source, target)
            out[i].append(gold if en_first else {(b, a) for a, b in gold})
    return OneWay(run, "en→fr" if en_first else "fr→en", keys, out)


@dataclass
class PairScore:
    """AER counts of map ``forward`` of the English → French run symmetrised with map ``reverse`` of
    the French → English run (indices into their :attr:`OneWay.keys`)."""

    forward: int
    reverse: int
    counts: AERCounts


@dataclass
class BothWays:
    """Every (forward map, reverse map) pair scored, and the single-head pair picked on the trial split."""

    forward: OneWay
    reverse: OneWay
    method: str
    pairs: list[PairScore]
    picked: PairScore | None = None
    taught: PairScore | None = None  # the two heads taught (align --teach), one per run
    seconds: float = 0.0

    def pair(self, forward: tuple[int, int], reverse: tuple[int, int]) -> PairScore:
        """The pair of head ``forward`` = ``(layer, head)`` of the English → French run and head ``reverse``
        of the French → English run."""
        a, b = self.forward.keys.index(forward), self.reverse.keys.index(reverse)
        return next(p for p in self.pairs if (p.forward, p.reverse) == (a, b))

    def name(self, p: PairScore) -> str:
        return f"{map_name(self.forward.keys[p.forward])} × {map_name(self.reverse.keys[p.reverse])}"

    def heads_only(self) -> list[PairScore]:
        """The pairs of two single heads (no average on either side)."""
        fk, rk = self.forward.keys, self.reverse.keys
        return [p for p in self.pairs if fk[p.forward][1] is not None and rk[p.reverse][1] is not None]

    def best(self) -> PairScore:
        """The pair of single heads with the lowest AER on these sentences (an upper bound for one
        chosen beforehand, :attr:`picked`)."""
        return min(self.heads_only(), key=lambda p: (p.counts.aer, p.forward, p.reverse))

    def averages(self) -> PairScore:
        """The last map of each run (the average of all its heads) symmetrised."""
        return next(p for p in self.pairs if (p.forward, p.reverse) == (len(self.forward.keys) - 1,
                                                                         len(self.reverse.keys) - 1))

    def to_json(self) -> dict[str, Any]:
        def one(p: PairScore) -> dict[str, Any]:
            f, r = self.forward.keys[p.forward], self.reverse.keys[p.reverse]
            return {"forward": {"layer": f[0], "head": f[1]}, "reverse": {"layer": r[0], "head": r[1]},
                    **counts_json(p.counts)}

        return {
            "reverse_run": self.reverse.run,
            "method": self.method,
            "average_of_all": one(self.averages()),
            "best_head_pair": one(self.best()),
            **({"picked_on_trial": one(self.picked)} if self.picked is not None else {}),
            **({"taught": one(self.taught)} if self.taught is not None else {}),
            "pairs": [one(p) for p in self.pairs],
            "seconds": round(self.seconds, 2),
        }


def score_pairs(forward: OneWay, reverse: OneWay, gold, method: str) -> list[PairScore]:
    """AER of every (forward map, reverse map) pair: the two one-way link sets of each sentence
    symmetrised by ``method`` (:func:`symmetrise`), scored against ``gold``."""
    if len(forward.links) != len(gold) or len(reverse.links) != len(gold):
        raise ValueError("both runs must be read over the same gold sentences")
    out = []
    for a in range(len(forward.keys)):
        for b in range(len(reverse.keys)):
            c = AERCounts()
            for i in range(len(gold)):
                c.add(symmetrise(forward.links[i][a], reverse.links[i][b], method), gold.sure[i], gold.possible[i])
            out.append(PairScore(a, b, c))
    return out


def check_directions(forward_tr, reverse_tr) -> tuple[Any, Any]:
    """``(en→fr translator, fr→en translator)`` from two runs in either order; :class:`AlignError`
    (one line) when they read the same way."""
    langs = [(getattr(t.src_tok, "lang", GOLD_LANGS[0]), getattr(t.tgt_tok, "lang", GOLD_LANGS[1])) for t in (forward_tr, reverse_tr)]
    if langs[0] == langs[1] or set(langs) != {GOLD_LANGS, GOLD_LANGS[::-1]}:
        raise AlignError(
            _("--reverse needs a run of the other direction: both read {src}→{tgt}; "
              "train one with `attnlab train ... data.direction={direction}`").format(
                src=langs[0][0], tgt=langs[0][1], direction="-".join(langs[0][::-1]))
        )
    return (forward_tr, reverse_tr) if langs[0] == GOLD_LANGS else (reverse_tr, forward_tr)


def pick_on_trial(fwd_trial: OneWay, rev_trial: OneWay, trial, method: str,
                  scored: Sequence[PairScore]) -> PairScore:
    """The pair of single heads best on the ``trial`` split, with its score from ``scored`` (the test
    sentences)."""
    fk, rk = fwd_trial.keys, rev_trial.keys
    on_trial = [p for p in score_pairs(fwd_trial, rev_trial, trial, method)
                if fk[p.forward][1] is not None and rk[p.reverse][1] is not None]
    b = min(on_trial, key=lambda p: (p.counts.aer, p.forward, p.reverse))
    return next(p for p in scored if (p.forward, p.reverse) == (b.forward, b.reverse))
