"""What each output looks at, and what it depends on (notes §1, §25, §27.5): the alignment verdict beside
integrated gradients.

``explain`` and the demo print this under the attention map. Two rows per output token:

- **looks at**: the source token its attention row weights most, in the one map every verdict reads
  (:func:`attnlab.evaluation.alignment.verdict_map`: the last layer's heads averaged; Bahdanau's one map);
  then the verdict of :func:`~attnlab.evaluation.alignment.check_result` on it (the notes' table of §1, for
  ``i'm home .``);
- **depends on**: the source token with the largest share of the output's integrated-gradients attribution,
  the row ``attnlab attribute`` computes (:func:`attnlab.analysis.attribution.run`), with few interpolation
  points so that it stays cheap (its completeness gap is printed).

The two can disagree, and in a GRU model that is the point of §1: the decoder's hidden state is initialised
from the encoder's last state and carries a summary of the sentence from step to step, so an output can
depend on a word that its attention does not look at; with a fixed context available through the recurrent
state, the attention need not move.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnlab.analysis.report import TextReport
from attnlab.data.pairs import Pair, pair_of
from attnlab.evaluation.alignment import AlignmentCheck, check_result, example_sentence, verdict_map
from attnlab.i18n import _, ljust, width
from attnlab.maps import display_tokens
from attnlab.models import traits

if TYPE_CHECKING:  # only for annotations: the translator and the attribution are passed in
    from attnlab.analysis.attribution import Attribution
    from attnlab.maps import AttentionResult
    from attnlab.translator import Translator

__all__ = ["IG_STEPS", "DependsReport", "run"]

#: Integrated gradients' points for this view: enough for the argmax of a row on a small model (the report
#: prints the completeness gap it leaves), few enough for the demo; ``attnlab attribute`` defaults to more.
IG_STEPS = 16


@dataclass
class DependsReport(TextReport):
    """The map's argmax per output token, the verdict on it, and the integrated-gradients row beside it.

    ``check`` is None for a model without a map from target to source; ``attribution`` None when it could
    not be computed (``missing`` says why: Captum not installed)."""

    result: AttentionResult
    check: AlignmentCheck | None
    attribution: Attribution | None
    recurrent: bool
    missing: str = ""
    pair: Pair | None = None  # the run's pair (its record); None: the notes' own English → French

    def rows(self) -> list[tuple[str, str | None, float | None, str | None, float | None]]:
        """Per output token: ``(token, looks at, its weight, depends on, its share)`` (None: not known)."""
        res = self.result
        kind = "cross" if "cross" in res.attention else "self" if "self" in res.attention else None
        outs, srcs = display_tokens(res.tgt_tokens), display_tokens(res.src_tokens)
        w = None
        if kind is not None and outs:
            full = verdict_map(res.attention[kind])  # (T or S+T, keys)
            w = full[-len(outs):, : len(srcs)] if kind == "self" else full[: len(outs), : len(srcs)]
        a = self.attribution
        shares = a.shares if a is not None and len(a.rows) == len(outs) else None  # (T, S)
        cols = display_tokens(a.cols) if a is not None else []
        out = []
        for t, tok in enumerate(outs):
            look = (srcs[int(w[t].argmax())], float(w[t].max())) if w is not None and t < w.shape[0] else (None, None)
            dep = ((cols[int(shares[t].argmax())], float(shares[t].max())) if shares is not None and cols
                   else (None, None))
            out.append((tok, *look, *dep))
        return out

    def _format(self) -> str:
        lines = ["  " + _("what each output looks at (attention, the map every verdict reads: last layer, heads "
                          "averaged) and what it depends on (integrated gradients, as `attnlab attribute`):")]
        rows = self.rows()
        a = self.attribution
        heads = (_("output"), _("looks at (attention)"),
                 _("depends on (integrated gradients, {steps} steps)").format(steps=a.steps) if a is not None
                 else _("depends on"))
        cells = [(tok, f"{look} {w:.2f}" if look is not None else "—",
                  f"{dep} {share:.0%}" if dep is not None else "—") for tok, look, w, dep, share in rows]
        w0 = max(width(heads[0]), *(width(c[0]) for c in cells)) if cells else width(heads[0])
        w1 = max(width(heads[1]), *(width(c[1]) for c in cells)) if cells else width(heads[1])
        lines.append("    " + ljust(heads[0], w0) + "  " + ljust(heads[1], w1) + "  " + heads[2])
        lines += ["    " + ljust(c[0], w0) + "  " + ljust(c[1], w1) + "  " + c[2] for c in cells]
        gap = a.completeness_gap if a is not None else None
        if gap is not None and gap <= 0.01:
            lines.append("    " + _("completeness: the attributions of each row add up to f(x) − f(0) within "
                                    "{gap:.1%}").format(gap=gap))
        elif gap is not None:  # few points: a coarse row (an untrained model's f(x) ≈ f(0) makes any gap large)
            lines.append("    " + _("completeness: a row's attributions miss f(x) − f(0) by more than 1 %; "
                                    "`attnlab attribute --steps 64` gives finer rows"))
        if self.missing:
            lines.append("    " + self.missing)
        if self.check is not None and (self.check.table or self.check.other_pair):  # can't judge is said too
            lines.append("  " + self.check.summary())
        elif self.check is not None:
            lines.append("  " + _("no verdict on this sentence: the notes' table of §1 is for {example!r}; "
                                  "`attnlab align` scores any sentence against gold word alignments (AER)").format(
                example=example_sentence(self.pair)))
        if self.recurrent:
            lines.append("  " + _("why attention can sit still (§1): information also travels through the recurrent "
                                  "state — the decoder's hidden state starts from the encoder's summary and carries it "
                                  "from step to step, so an output can depend on a word its attention does not look "
                                  "at; with a fixed context, the attention need not move."))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "alignment": self.check.to_json() if self.check is not None else None,
            "rows": [{"output": tok, "looks_at": look, "weight": None if w is None else round(w, 4),
                      "depends_on": dep, "share": None if s is None else round(s, 4)}
                     for tok, look, w, dep, s in self.rows()],
            "ig_steps": self.attribution.steps if self.attribution is not None else None,
            "completeness_gap": self.attribution.completeness_gap if self.attribution is not None else None,
        }


def run(tr: Translator, sentence: str, ig_steps: int = IG_STEPS, result: AttentionResult | None = None
        ) -> DependsReport:
    """The verdict and the integrated-gradients row of ``sentence`` on ``tr`` (greedy, as every verdict reads
    it). ``result``: ``tr.attention(sentence)`` when the caller has it already. Captum missing (the
    ``explain`` extra) leaves the attribution out and says so; any other failure of the attribution is raised."""
    from attnlab.analysis.attribution import AttributionError
    from attnlab.analysis.attribution import run as attribute

    result = result if result is not None else tr.attention(sentence)
    pair = pair_of(tr.cfg.data)
    check = check_result(result, pair)
    t = traits(tr.cfg.model)
    attribution, missing = None, ""
    if t.task == "translate" and result.tgt_tokens:
        try:
            attribution = attribute(tr, sentence, "ig", steps=ig_steps)
        except AttributionError as e:
            if "Captum" not in str(e):
                raise
            missing = _("integrated gradients need Captum: pip install 'attnlab[explain]'")
    return DependsReport(result, check, attribution, t.recurrent, missing, pair)
