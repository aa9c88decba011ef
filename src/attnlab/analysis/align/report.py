"""What ``attnlab align`` answers (notes §25): :class:`AlignReport`, the AER of every map against the gold,
as text (:meth:`~AlignReport.format`), as a figure (:meth:`~AlignReport.figure`) and as JSON
(:meth:`~AlignReport.to_json`): the :class:`~attnlab.analysis.report.Report` protocol.

A map is one layer × head, a layer's head average, or the average of all (``layer``/``head`` ``None``
in :class:`HeadScore`), scored at shift 0 (the decoder step that predicts a word) and shift 1 (the step
where the word is the decoder's input, Chen et al. 2020). Beside the heads, when asked for: the
gradient saliency map's links (Ding et al. 2019), a copy adapted to the gold text or with one head
taught to align (Garg et al. 2019), a run of the other direction read with this one, the IBM Model 2
baseline, and the published figures of the gold set's README.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.analysis.align.adapt_to_gold import Adaptation, Teaching
from attnlab.analysis.align.aer import AERCounts, counts_json
from attnlab.analysis.align.extract import Extraction
from attnlab.analysis.align.gold import LANG_NAMES, GoldSet
from attnlab.analysis.align.saliency import SALIENCY_LABEL
from attnlab.analysis.align.symmetrise import BothWays
from attnlab.analysis.report import TextReport
from attnlab.i18n import N_, _, ljust, rjust

__all__ = ["DOMAIN_NOTE", "PUBLISHED", "PUBLISHED_SOURCE", "UNK_WARN", "AlignReport", "HeadScore"]

#: Published AER (%) on this test set, as the gold set's README quotes them (lower is better).
PUBLISHED = (("fast_align en→fr", 16.4), ("Mgiza (IBM-4) en→fr", 8.0))
PUBLISHED_SOURCE = N_("lilt/alignment-scripts results, quoted in the gold set's README.md")
DOMAIN_NOTE = N_(
    "the gold set is Canadian parliamentary debate (Hansards, long formal sentences) while the model "
    "learned from Tatoeba (short everyday sentences): many gold words are unknown to it, so these "
    "figures measure attention under a domain shift"
)
#: Above this share of ``<unk>`` on either side of the gold, :attr:`AlignReport.warnings` says the AER is
#: more about the run's vocabulary than about its attention.
UNK_WARN = 0.5


@dataclass
class HeadScore:
    """AER of one map: ``layer``/``head`` ``None`` = an average (over heads, or over everything)."""

    layer: int | None
    head: int | None
    shift: int
    counts: AERCounts
    members: tuple[tuple[int, int], ...] = ()  # (layer, head) averaged, for the best-k combination

    @property
    def name(self) -> str:
        if self.members:
            return _("best {k} heads averaged ({heads})").format(
                k=len(self.members), heads=", ".join(f"L{li + 1}H{h + 1}" for li, h in self.members))
        if self.layer is None:
            return _("average of all")
        # counted from 1, as every figure and table (the JSON keeps 0-based indices)
        return (_("layer {layer} head average").format(layer=self.layer + 1) if self.head is None
                else _("layer {layer} head {head}").format(layer=self.layer + 1, head=self.head + 1))

    def to_json(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "head": self.head,
            "shift": self.shift,
            **counts_json(self.counts),
            **({"members": [list(m) for m in self.members]} if self.members else {}),
        }


@dataclass
class AlignReport(TextReport):
    """Every map of one run scored against ``gold`` (:func:`attnlab.analysis.align.score.attention_scores`),
    and what :func:`attnlab.analysis.align.against_gold.run` added beside it (``None`` when not asked for)."""

    run: str
    kind: str  # the attention kind read: cross, or self (one-sequence model)
    shape: tuple[int, int]  # (layers, heads)
    tokenizer: str
    gold: GoldSet
    contractions: bool
    scores: list[HeadScore]
    oov: dict[str, dict[str, float]]  # lang -> oov_rates
    ibm: dict[str, Any] | None = None  # ibm_baseline's dict with "counts": AERCounts instead of "links"
    seconds: float = 0.0
    extraction: Extraction = Extraction()
    top_k: HeadScore | None = None  # the best k heads' average (k ≥ 2), when asked for
    picked: HeadScore | None = None  # the trial split's best head, scored here (picked beforehand)
    saliency: AERCounts | None = None  # the gradient saliency map's links (align.saliency), when asked for
    saliency_seconds: float = 0.0
    adaptation: Adaptation | None = None  # the maps are a copy's adapted to the gold text (align.adapt)
    as_trained: list[HeadScore] | None = None  # then: the original's best head and average of all, shift 0
    both: BothWays | None = None  # with a run of the other direction: the two symmetrised (align.both)
    teaching: Teaching | None = None  # one head trained toward the average's links (align.adapt.teach)
    untaught: list[HeadScore] | None = None  # then: that head and the average of all before it was taught

    def best(self, shift: int | None = None, single: bool = True) -> HeadScore:
        """The lowest-AER map (``single``: a real head, not an average), at ``shift`` or either."""
        pool = [
            s
            for s in self.scores
            if (shift is None or s.shift == shift) and (not single or s.head is not None)
        ]
        return min(pool, key=lambda s: (s.counts.aer, s.shift, s.layer or 0, s.head or 0))

    def overall(self, shift: int = 0) -> HeadScore | None:
        """The average of every head at ``shift``: of all layers, or of the one layer's heads (``None``
        for a model with a single map)."""
        pool = [s for s in self.scores if s.shift == shift and s.head is None and not s.members]
        return min(pool, key=lambda s: s.layer is not None, default=None)  # the all-layer average first

    def verdict_score(self, shift: int = 0) -> HeadScore | None:
        """The AER of the map every alignment verdict reads (:func:`attnlab.evaluation.alignment.verdict_map`:
        the last layer's heads averaged; the one head of a one-head layer): against a gold set, the verdict's
        measure is this AER, as on ``i'm home .`` it is the notes' table."""
        L, H = self.shape
        want = (L - 1, None if H > 1 else 0)
        return next((s for s in self.scores if s.shift == shift and not s.members and (s.layer, s.head) == want),
                    None)

    def grid(self, shift: int) -> Tensor:
        """AER ``(L, H + 1)``: each head, then the layer's head average (NaN when H = 1)."""
        L, H = self.shape
        g = torch.full((L, H + 1), float("nan"))
        for s in self.scores:
            if s.shift == shift and s.layer is not None:
                g[s.layer, H if s.head is None else s.head] = s.counts.aer
        return g

    @property
    def warnings(self) -> list[str]:
        """One line per side of the gold of which more than :data:`UNK_WARN` is ``<unk>`` to the run."""
        return [_("{share} of the gold's {lang} words are <unk> to {run}: its AER says more about its "
                  "vocabulary than about its attention (a longer fra-eng run knows more words)").format(
                    share=f"{100 * o['unk']:.0f} %", lang=LANG_NAMES.get(lang, lang), run=self.run)
                for lang, o in self.oov.items() if o.get("unk", 0.0) > UNK_WARN]

    def to_json(self) -> dict[str, Any]:
        """Every score (0-based layers and heads), the best maps, the AER grids of :meth:`grid` (``None``
        for NaN) and whatever was added beside the heads; paths as given (the web route renames them)."""
        gold = self.gold
        out = {
            "run": self.run,
            "attention": self.kind,
            "layers": self.shape[0],
            "heads": self.shape[1],
            "tokenizer": self.tokenizer,
            "gold": str(gold.folder),
            "split": gold.split,
            "sentences": len(gold),
            "sure": sum(map(len, gold.sure)),
            "possible": sum(map(len, gold.possible)),
            "french_contractions_joined": self.contractions,
            "oov": self.oov,
            "domain_note": DOMAIN_NOTE,
            "links": {"method": self.extraction.method, "threshold": self.extraction.threshold,
                      "null": self.extraction.null},
            "scores": [s.to_json() for s in self.scores],
            "best": {str(k): self.best(k).to_json() for k in (0, 1)},
            "best_head": self.best().to_json(),
            "verdict_map": (v.to_json() if (v := self.verdict_score()) is not None else None),
            "grid": {str(shift): _rounded(self.grid(shift)) for shift in (0, 1)},
            **self._extras_json(),
            "published": {"source": PUBLISHED_SOURCE, **{n: v / 100 for n, v in PUBLISHED}},
            "seconds": round(self.seconds, 2),
        }
        if self.ibm is not None:
            out["ibm2"] = {**{k: v for k, v in self.ibm.items() if k != "counts"}, **counts_json(self.ibm["counts"])}
        return out

    def _extras_json(self) -> dict[str, Any]:
        """The JSON of what was added beside the heads, each key only when it was asked for."""
        out: dict[str, Any] = {}
        if self.top_k is not None:
            out["top_k"] = self.top_k.to_json()
        if self.picked is not None:
            out["picked_on_trial"] = self.picked.to_json()
        if self.saliency is not None:
            out["saliency"] = counts_json(self.saliency, seconds=round(self.saliency_seconds, 2))
        if self.adaptation is not None:
            out["adapted"] = {**self.adaptation.to_json(), "as_trained": [s.to_json() for s in self.as_trained or []]}
        if self.both is not None:
            out["both_ways"] = self.both.to_json()
        if self.teaching is not None:
            out["taught"] = {**self.teaching.to_json(), "before": [x.to_json() for x in self.untaught or []]}
        return out

    def _format(self) -> str:
        """The table: AER, precision and recall (%) of every map at shift 0 and 1, the best head, the
        IBM Model 2 baseline and the published figures, with the domain note and OOV rates."""
        return "\n".join([*_header(self), *_table(self), *_chosen(self), *_trained(self), *_both_lines(self),
                          *_ibm_line(self), _published()])

    def figure(self):
        """An :class:`~attnlab.viz.figure.InlineFigure`: AER (%) per layer × head (and each layer's head
        average), shift 0 and 1 side by side."""
        from attnlab.viz.figure import new_figure

        L, H = self.shape
        cols = H + 1 if H > 1 else H
        fig = new_figure((2.2 + 1.1 * cols * 2, 1.6 + 0.7 * L))
        axes = fig.subplots(1, 2, squeeze=False)[0]
        for ax, shift in zip(axes, (0, 1)):
            grid = 100 * self.grid(shift)[:, :cols]  # (L, cols)
            im = ax.imshow(grid.numpy(), cmap="viridis_r", vmin=0, vmax=100, aspect="auto")
            for li in range(L):
                for h in range(cols):
                    v = float(grid[li, h])
                    ax.text(h, li, f"{v:.1f}", ha="center", va="center", fontsize=8,
                            color="white" if v > 50 else "black")
            ax.set_xticks(range(cols), [f"h{h + 1}" for h in range(H)] + (["avg"] if cols > H else []))
            ax.set_yticks(range(L), [_("layer {layer}").format(layer=li + 1) for li in range(L)])
            ax.set_title(_("shift {shift}").format(shift=shift) + (" (Chen et al. 2020)" if shift
                                                                   else _(" (predicting step)")))
        fig.colorbar(im, ax=axes, label=_("AER % (lower is better)"))
        title = _("AER of {kind} attention vs WPT-2003 gold, {run}").format(kind=self.kind, run=Path(self.run).name)
        if self.ibm is not None:
            title += _("; IBM Model 2: {aer:.1f} %").format(aer=100 * self.ibm["counts"].aer)
        fig.suptitle(title + f"; fast_align {PUBLISHED[0][1]} %", fontsize=9)
        return fig


def _rounded(grid: Tensor) -> list[list[float | None]]:
    return [[round(v, 5) if math.isfinite(v) else None for v in row] for row in grid.tolist()]


# ------------------------------------------------------------------------------------------- text


#: "1 layer", "2 layers": one template each, so a language without plurals writes its own
_ONE = {"layer": N_("{k} layer"), "head": N_("{k} head"), "epoch": N_("{k} epoch")}
_MANY = {"layer": N_("{k} layers"), "head": N_("{k} heads"), "epoch": N_("{k} epochs")}


def _n(k: int, noun: str) -> str:
    return _((_ONE if k == 1 else _MANY)[noun]).format(k=k)


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}" if math.isfinite(x) else "    -"


def _prf(c: AERCounts) -> str:
    return _("AER {aer:.1f} % (precision {p:.1f} %, recall {r:.1f} %)").format(
        aer=100 * c.aer, p=100 * c.precision, r=100 * c.recall)


def _header(r: AlignReport) -> list[str]:
    """What was read against what: the run, the gold, the domain note, the OOV rates, how links are read."""
    g = r.gold
    how = (
        _("each target word → its most-attended source word")
        if r.extraction.method == "argmax"
        else _("target→source and source→target argmax over the same map, symmetrised")
    )
    joined = _("; French contractions re-joined for the model (de le → du, le ordre → l'ordre)") if r.contractions else ""
    return [
        _("alignment of {run} ({kind} attention, {layers} × {heads}, {tokenizer} tokens) against {gold} ({split}: "
          "{n} sentences, {sure:,} sure, {possible:,} sure+possible links)").format(
            run=r.run, kind=r.kind, layers=_n(r.shape[0], "layer"), heads=_n(r.shape[1], "head"),
            tokenizer=r.tokenizer, gold=g.folder, split=g.split, n=len(g), sure=sum(map(len, g.sure)),
            possible=sum(map(len, g.possible))),
        _("note: {note}.").format(note=_(DOMAIN_NOTE)),
        *_adapted_note(r),
        _("OOV (model's words): ")
        + "; ".join(
            _("{lang} {unk:.1f} % <unk>, {missing:.1f} % not one vocabulary entry ({n:,} words)").format(
                lang=lang, unk=100 * o["unk"], missing=100 * o["not_in_vocab"], n=o["words"])
            for lang, o in r.oov.items()
        ),
        _("links ({label}): {how}").format(label=r.extraction.label, how=how)
        + _("; shift 1 reads the step where the word is the decoder's input (Chen et al. 2020)") + joined,
    ]


def _adapted_note(r: AlignReport) -> list[str]:
    """The header line of a report read from an adapted copy (none otherwise)."""
    a = r.adaptation
    if a is None:
        return []
    return [
        f"adapted: every map below is a copy's, trained {_n(a.epochs, 'epoch')} ({a.updates:,} updates, "
        f"lr {a.lr:g}, seed {a.seed}, {a.seconds:.0f} s) on these {len(r.gold)} sentence pairs' text, no links: the data IBM "
        f"Model 2 gets. Its loss per piece went {a.nll_first:.2f} → {a.nll_last:.2f}; the run is unchanged."
    ]


def _table(r: AlignReport) -> list[str]:
    """One row per map: AER, precision and recall (%) at shift 0 and at shift 1."""
    lines = ["", ljust(_("map"), 22) + rjust(_("shift 0: AER  P     R"), 24) + rjust(_("shift 1: AER  P     R"), 26)]
    by = {(s.layer, s.head, s.shift): s.counts for s in r.scores}
    for s in [x for x in r.scores if x.shift == 0]:
        c0, c1 = by[s.layer, s.head, 0], by[s.layer, s.head, 1]
        lines.append(
            ljust(s.name, 22)
            + "".join(f"{'':>7}{_pct(c.aer)} {_pct(c.precision)} {_pct(c.recall)}" for c in (c0, c1))
        )
    return lines


def _chosen(r: AlignReport) -> list[str]:
    """The best head, the best-k average, the head picked on the trial split and the saliency map."""
    b = r.best()
    lines = ["", _("best head: {name}, shift {shift}: {score}").format(name=b.name, shift=b.shift, score=_prf(b.counts))]
    if r.top_k is not None:
        lines.append(_("{name}, shift {shift}: {score}").format(name=r.top_k.name, shift=r.top_k.shift,
                                                                 score=_prf(r.top_k.counts)))
    lines.append(
        _("(the best head and the best-k set are chosen on these same gold sentences: an upper bound for "
          "a head picked beforehand)")
    )
    if r.picked is not None:
        lines.append(_("picked beforehand on the trial split: {name}, shift {shift}: {score}").format(
            name=r.picked.name, shift=r.picked.shift, score=_prf(r.picked.counts)))
    if r.saliency is not None:
        lines.append(_("{label}, shift 0: {score}; no head chosen, {seconds:.1f} s").format(
            label=_(SALIENCY_LABEL), score=_prf(r.saliency), seconds=r.saliency_seconds))
    v = r.verdict_score()
    if v is not None:  # the one map explain, doctor, the demo and the web page judge, chosen by nothing
        lines.append(_("the map every alignment verdict reads ({name}, shift 0): {scores}").format(
            name=v.name, scores=_prf(v.counts)))
    return lines


def _trained(r: AlignReport) -> list[str]:
    """The original's figures beside an adapted copy's, and what teaching one head did."""
    lines = []
    if r.as_trained:
        lines.append(
            "as trained (before adapting), shift 0: " + "; ".join(f"{s.name} {_prf(s.counts)}" for s in r.as_trained)
        )
    if r.teaching is not None:
        t = r.teaching
        lines.append(
            f"taught: {t.name} trained {_n(t.epochs, 'epoch')} ({t.updates:,} updates, weight {t.weight:g}, seed {t.seed}, {t.seconds:.0f} s) "
            f"toward the links of the model's own average of all heads ({r.extraction.label}; Garg et al. 2019, "
            f"unsupervised: no gold links); its cross-entropy to them went {t.align_first:.2f} → {t.align_last:.2f}. "
            "Before: " + "; ".join(f"{s.name} {_prf(s.counts)}" for s in r.untaught or [])
        )
    return lines


def _both_lines(r: AlignReport) -> list[str]:
    """The report's lines for two runs read both ways (none without a reverse run)."""
    b = r.both
    if b is None:
        return []
    best, avg = b.best(), b.averages()
    lines = [
        f"both directions ({b.forward.direction} {b.forward.run} with {b.reverse.direction} {b.reverse.run}): each "
        f"map's one-way argmax, shift 0, the two runs' symmetrised by {b.method} as IBM Model 2's two directions "
        f"are ({b.seconds:.0f} s):",
        f"  average of all × average of all: {_prf(avg.counts)}",
        f"  best pair of single heads, {b.name(best)}: {_prf(best.counts)} (chosen on these sentences)",
    ]
    if b.picked is not None:
        lines.append(f"  pair picked beforehand on the trial split, {b.name(b.picked)}: {_prf(b.picked.counts)}")
    if b.taught is not None:
        lines.append(f"  the two taught heads, {b.name(b.taught)} (each picked on the trial split before teaching): "
                     f"{_prf(b.taught.counts)}")
    return lines


def _ibm_line(r: AlignReport) -> list[str]:
    """The IBM Model 2 baseline's line (none when it was skipped)."""
    i = r.ibm
    if i is None:
        return []
    how = ("one direction" if i["method"] == "argmax" else f"both directions, {i['method']}") + (
        ", NULL allowed" if i["null"] else ", no NULL"
    )
    return [
        f"IBM Model 2 (NLTK {i['nltk']}, {i['iterations']} EM iterations after Model 1, {how}; "
        f"trained here on the {len(r.gold)} gold pairs + {i['tatoeba_pairs']:,} Tatoeba pairs in "
        f"{i['seconds']:.1f} s): {_prf(i['counts'])}"
    ]


def _published() -> str:
    return _("published on this test set: {results} ({source})").format(
        results=", ".join(f"{n} {v:.1f} %" for n, v in PUBLISHED), source=_(PUBLISHED_SOURCE))
