"""`attnlab doctor`: read a run's curves and per-length scores and name the notes' §10 symptoms.

The notes (§10) list what a learner sees in training curves and what it means; the doctor adds two
symptoms every short run shows (still improving; attention not formed):

=============================================  ==============================  ===================================
what the curves show                           diagnosis                       change
=============================================  ==============================  ===================================
loss oscillates, climbs back up or diverges    learning rate too high          lower ``train.lr``
loss falls, but slowly and steadily            learning rate too low           raise ``train.lr``
still improving when the run stopped           undertrained                    train longer / the budget schedule
valid loss rises while the train loss falls    overfitting                     dropout, weight decay, data
many pairs cut / long sentences cut and poor   ``num_steps`` too small         raise ``data.num_steps``
``i'm home .`` not aligned as the notes' table  attention not formed            train longer / check the model
=============================================  ==============================  ===================================

Each rule compares the curve with the run's first logged loss ``L0``; each check prints its numbers and threshold
and answers ✗, ✓, "not enough evidence: need N, have M" or "does not apply" (§1's table off English ↔ French);
a run is healthy only when no symptom is seen *and* there was enough to see one. Why: docs/explanations/doctor.md.

Inputs: ``metrics.jsonl``, ``meta.json``, ``eval-test.json`` and ``probes.jsonl`` ("attention formed" is the
one verdict of :mod:`attnlab.evaluation.alignment`, at the ``best`` checkpoint's step). The thresholds are the
constants below; losses are the plain per-token cross-entropy in nats (label smoothing excluded).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.analysis.report import TextReport
from attnlab.data.pairs import Pair, pair_of, unit_name
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import AttnlabError
from attnlab.evaluation.alignment import AlignmentCheck, check_probe, example_sentence
from attnlab.i18n import N_, _
from attnlab.runs import read_metrics

# --- evidence -------------------------------------------------------------------------------------
#: Fewer updates, logged losses or validations than these cannot show a curve's shape.
MIN_STEPS = 100
MIN_EVENTS = 8
MIN_VALIDATIONS = 2
#: Validation BLEU below this: the model does not translate yet, so "healthy" cannot be told.
MIN_BLEU = 5.0

# --- lr too high ----------------------------------------------------------------------------------
#: The loss climbing back above its best so far by more than this share of L0 (each logged loss
#: averages ``log_every`` updates, so batch noise stays well below it).
RISE_SHARE = 0.15
#: Std of the change between consecutive logged losses over the second half, as a share of L0.
OSCILLATION_SHARE = 0.05
#: "Confidently wrong": a loss above both L0 and this multiple of ln V, after the first event.
UNIFORM_FACTOR = 1.5

# --- lr too low -----------------------------------------------------------------------------------
#: A healthy lr takes the loss down by more than this share of L0 within ``SLOW_AFTER_STEPS`` updates
#: (well below what the presets do on fra-eng: docs/experiments/doctor.md).
SLOW_FALL_SHARE = 0.30
SLOW_AFTER_STEPS = 200
#: A fall smaller than this share of L0 is not a "slow fall" but no learning at all.
STUCK_FALL_SHARE = 0.02

# --- undertrained ---------------------------------------------------------------------------------
#: Still improving: the last validation lowered the validation loss by at least this share, or raised
#: BLEU by at least ``STILL_IMPROVING_BLEU`` points; without validations, the mean training loss of the
#: last quarter of events is this share below the quarter before.
STILL_IMPROVING = 0.02
STILL_IMPROVING_BLEU = 1.0
#: "Still falling" for the slow-lr rule: any fall above noise (a slow run's last step is small).
STILL_FALLING = 0.005

# --- overfitting ----------------------------------------------------------------------------------
#: Validation loss this far above its own minimum (0.03 = +3 %) at the last validation...
OVERFIT_VALID_RISE = 0.03
#: ... while the training loss kept falling (the mean of the logged losses near each validation).
NEAR_EVENTS = 3

# --- num_steps too small --------------------------------------------------------------------------
#: Share of training pairs cut to ``num_steps - 1`` tokens above which the cut matters.
TRUNCATED_SHARE = 0.02
#: BLEU of the longest length bucket below this share of the best bucket's BLEU...
LENGTH_BLEU_RATIO = 0.5
#: ... counts against num_steps only when cut pairs are at least this share of that bucket.
LONG_CUT_SHARE = 0.2
#: Buckets with fewer sentences are ignored (BLEU on a handful of sentences is noise).
MIN_BUCKET_SENTENCES = 20
#: Share of the corpus a suggested ``data.num_steps`` should hold uncut.
NUM_STEPS_COVERAGE = 0.99

# --- attention not formed -------------------------------------------------------------------------
# No bar of its own: the verdict of evaluation/alignment.py (each judged row of `i'm home .` looks at the
# notes' table's word) on the probe recorded at the best checkpoint's step, so that the doctor, `explain`,
# `attention`, the demo and the web page never disagree about one run.

SYMPTOMS = (
    "lr_too_high",
    "lr_too_low",
    "undertrained",
    "overfitting",
    "num_steps_too_small",
    "attention_not_formed",
)
#: Shown in the current language: ``_(TITLES[symptom])`` (:mod:`attnlab.i18n`).
TITLES = {
    "lr_too_high": N_("oscillating, rising or diverging loss (learning rate too high)"),
    "lr_too_low": N_("slow, steady fall (learning rate too low)"),
    "undertrained": N_("still improving at the end (undertrained)"),
    "overfitting": N_("validation loss rising while the training loss falls (overfitting)"),
    "num_steps_too_small": N_("many sentences cut (num_steps too small)"),
    "attention_not_formed": N_("attention not formed (the notes' example does not align as the table of §1 says)"),
}
SHORT = {
    "lr_too_high": N_("lr too high"),
    "lr_too_low": N_("lr too low"),
    "undertrained": N_("undertrained"),
    "overfitting": N_("overfitting"),
    "num_steps_too_small": N_("num_steps too small"),
    "attention_not_formed": N_("attention not formed"),
}


@dataclass
class Finding:
    """One symptom: whether it is seen, the evidence (numbers) and what to change."""

    symptom: str  # one of SYMPTOMS
    title: str
    detected: bool
    evidence: list[str] = field(default_factory=list)
    suggestion: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)
    checked: bool = True  # False: not enough evidence to call it absent (need, have say what lacks)
    need: str = ""  # the evidence a ✓ needs ("8 logged training losses")
    have: str = ""  # what the run has of it ("6")
    caused_by: str = ""  # seen, but a consequence of that symptom (not counted in the verdict)
    applies: bool = True  # False: the check is not for this run (the notes' en–fr table on another pair); see why
    why: str = ""  # why it does not apply


@dataclass
class DoctorReport(TextReport):
    """The doctor's answer: ``format(lang)`` the text (symptoms, evidence, what to try, verdict; the
    evidence is worded in the language :func:`run` ran in), ``short_verdict()`` a few words for a table
    cell, ``to_json()`` every finding; nothing to draw (``figure()`` is None)."""

    run: str
    findings: list[Finding]
    missing: list[str] = field(default_factory=list)  # evidence missing to call the run healthy
    notes: list[str] = field(default_factory=list)  # what could not be checked, and context

    @property
    def detected(self) -> list[Finding]:
        return [f for f in self.findings if f.detected and not f.caused_by]

    @property
    def healthy(self) -> bool:
        """No symptom seen, and enough evidence to have seen one."""
        return not self.detected and not self.missing

    def finding(self, symptom: str) -> Finding:
        return next(f for f in self.findings if f.symptom == symptom)

    def verdict(self) -> str:
        """One line: the symptoms seen, "healthy", or what evidence is missing."""
        seen = self.detected
        if seen:
            if [f.symptom for f in seen] == ["undertrained"]:
                if self.missing:  # too early to clear the settings
                    return _("undertrained; too early to judge the settings ({missing})").format(
                        missing="; ".join(self.missing))
                return _("undertrained: no wrong setting seen; train longer, or use the budget schedule")
            return ", ".join(_(SHORT[f.symptom]) for f in seen)
        if self.missing:
            return _("not enough evidence to call it healthy ({missing})").format(missing="; ".join(self.missing))
        return _("healthy")

    def short_verdict(self) -> str:
        """A few words for a table cell (the sweep's): the symptoms seen with their first change, or
        "healthy", or "too little evidence"."""
        seen = self.detected
        if seen:
            return "; ".join(f"{_(SHORT[f.symptom])} → {f.suggestion.split(' (')[0]}" for f in seen)
        return _("healthy") if self.healthy else _("no symptom, too little evidence")

    def _format(self) -> str:
        return _text(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "healthy": self.healthy,
            "verdict": self.verdict(),
            "findings": [asdict(f) for f in self.findings],
            "missing_evidence": list(self.missing),
            "notes": list(self.notes),
        }


def _new_finding(symptom: str) -> Finding:
    """A ``symptom`` not seen (yet), titled in the current language."""
    return Finding(symptom, _(TITLES[symptom]), False)


def _not_enough(f: Finding, need: str, have: str | int) -> Finding:
    """``f`` cannot be called absent: it needs ``need`` and the run has ``have``."""
    f.checked, f.need, f.have = False, need, str(have)
    return f


def _need_events(n: int) -> str:
    return _("{count} logged training losses").format(count=n)


# ----------------------------------------------------------------------------------------------
# the curves (pure functions of the records, so synthetic curves test them)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _losses(train: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """``(step, loss)`` of the finite logged training losses, in step order."""
    return [(int(r["step"]), float(r["loss"])) for r in train if _finite(r.get("loss"))]


def _valids(valid: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in valid if _finite(r.get("valid_loss"))]


def start_loss(pts: list[tuple[int, float]], vocab_size: int) -> float:
    """L0, where the run started: the first logged loss, or ``ln V`` when that is lower (the first
    event averages ``log_every`` updates, which at a working lr already learnt a lot; an untrained
    model does not beat a uniform guess)."""
    return max(pts[0][1], math.log(vocab_size)) if vocab_size > 1 else pts[0][1]


def _end_loss(pts: list[tuple[int, float]]) -> float:
    """The loss at the end of the run: the mean of the last 3 logged losses (one is one window's noise)."""
    return _mean([x for _, x in pts[-3:]])


def _max_rise(pts: list[tuple[int, float]]) -> tuple[float, int | None, float]:
    """The largest climb of the loss above its best so far: ``(nats, at step, best before it)``."""
    best, rise, at, base = pts[0][1], 0.0, None, pts[0][1]
    for step, x in pts[1:]:
        if x - best > rise:
            rise, at, base = x - best, step, best
        best = min(best, x)
    return rise, at, base


def check_lr_too_high(train: list[dict[str, Any]], vocab_size: int, lr: float | None) -> Finding:
    """Non-finite losses; the loss climbing back above its best by more than ``RISE_SHARE · L0``; a
    loss worse than both the start and ``UNIFORM_FACTOR · ln V``; or consecutive losses jumping by more
    than ``OSCILLATION_SHARE · L0`` (std, second half of the run)."""
    f = _new_finding("lr_too_high")
    bad = [r["step"] for r in train if not _finite(r.get("loss"))]
    f.numbers["nonfinite_events"] = len(bad)
    if bad:
        f.detected = True
        f.evidence.append(_("{count} logged training loss(es) are not finite (first at step {step})").format(
            count=len(bad), step=bad[0]))
    pts = _losses(train)
    if len(pts) < 2:
        if not bad:
            _not_enough(f, _need_events(MIN_EVENTS), len(pts))
        return _too_high_suggestion(f, lr, exploded=bool(bad))
    l0 = start_loss(pts, vocab_size)
    rise, at, base = _max_rise(pts)
    step, peak = max(pts[1:], key=lambda p: p[1])
    half = [x for _, x in pts[len(pts) // 2 :]]
    jumps = _std([b - a for a, b in zip(half, half[1:])]) if len(half) >= 3 else 0.0
    f.numbers.update(
        start_loss=l0, max_rise=rise, max_rise_share=rise / l0, peak_loss=peak, oscillation_share=jumps / l0
    )
    if rise > RISE_SHARE * l0:
        f.detected = True
        f.evidence.append(
            _("the training loss rose from its best so far, {base}, to {top} (step {step}): +{rise} nats, "
              "{share:.0%} of the start L0 = {l0} (tolerance {tolerance:.0%})").format(
                base=_fmt(base), top=_fmt(base + rise), step=at, rise=_fmt(rise), share=rise / l0, l0=_fmt(l0),
                tolerance=RISE_SHARE)
        )
    if vocab_size > 1 and peak > max(l0, UNIFORM_FACTOR * math.log(vocab_size)):
        f.detected = True
        f.evidence.append(
            _("it reached {peak} at step {step}: above the start ({l0}) and above {factor} × ln V = {limit} "
              "(a uniform guess over {vocab} words scores {uniform}): confidently wrong").format(
                peak=_fmt(peak), step=step, l0=_fmt(l0), factor=UNIFORM_FACTOR,
                limit=_fmt(UNIFORM_FACTOR * math.log(vocab_size)), vocab=vocab_size,
                uniform=_fmt(math.log(vocab_size)))
        )
    if jumps > OSCILLATION_SHARE * l0:
        f.detected = True
        f.evidence.append(
            _("over the second half, consecutive logged losses jump by ±{jumps} nats (std), {share:.0%} of L0 "
              "(threshold {threshold:.0%}): it oscillates").format(
                jumps=_fmt(jumps), share=jumps / l0, threshold=OSCILLATION_SHARE)
        )
    if not f.detected:
        limit = max(l0, UNIFORM_FACTOR * math.log(vocab_size)) if vocab_size > 1 else l0
        f.evidence.append(
            _("largest climb above the best so far {rise} nats = {share:.0%} of L0 = {l0} (symptom above "
              "{tolerance:.0%}); highest loss {peak} (symptom above {limit}); second-half jumps ±{jumps} = "
              "{jshare:.0%} of L0 (symptom above {threshold:.0%})").format(
                rise=_fmt(rise), share=rise / l0, l0=_fmt(l0), tolerance=RISE_SHARE, peak=_fmt(peak),
                limit=_fmt(limit), jumps=_fmt(jumps), jshare=jumps / l0, threshold=OSCILLATION_SHARE))
        if len(pts) < MIN_EVENTS:  # too few points to show a climb or an oscillation: no ✓
            _not_enough(f, _need_events(MIN_EVENTS), len(pts))
    return _too_high_suggestion(f, lr, exploded=bool(bad) or peak > l0)


def _too_high_suggestion(f: Finding, lr: float | None, exploded: bool) -> Finding:
    if f.detected:
        factor = 10 if exploded else 3  # worse than the untrained model: a big step down, not a nudge
        f.suggestion = (
            (f"train.lr={_fmt(lr / factor)}" if lr else _("lower train.lr {factor}×").format(factor=factor))
            + _(" (÷{factor}; keep train.clip_grad_norm=1.0, or raise train.warmup_steps)").format(factor=factor)
        )
    return f


def _still_improving(
    train: list[dict[str, Any]], valid: list[dict[str, Any]], share: float = STILL_IMPROVING
) -> tuple[bool | None, str]:
    """Whether the run was still improving when it stopped (a fall of at least ``share``, or
    ``STILL_IMPROVING_BLEU`` points), and the evidence; ``None``: cannot tell."""
    vals = _valids(valid)
    if len(vals) >= 2:
        prev, last = vals[-2], vals[-1]
        gain = (
            (prev["valid_loss"] - last["valid_loss"]) / prev["valid_loss"] if prev["valid_loss"] > 0 else 0.0
        )
        b0, b1 = prev.get("valid_bleu"), last.get("valid_bleu")
        bleu_gain = b1 - b0 if _finite(b0) and _finite(b1) else math.nan
        text = _("at the last validation (step {step}) the validation loss went {before} → {after} "
                 "({change:+.1%})").format(step=last["step"], before=_fmt(prev["valid_loss"]),
                                           after=_fmt(last["valid_loss"]), change=-gain) + (
            _(" and BLEU {before:.1f} → {after:.1f}").format(before=b0, after=b1) if math.isfinite(bleu_gain) else ""
        )
        improving = gain >= share or (math.isfinite(bleu_gain) and bleu_gain >= STILL_IMPROVING_BLEU)
        return improving, text
    pts = _losses(train)
    if len(pts) < MIN_EVENTS:
        return None, ""
    q = len(pts) // 4
    before, last = _mean([x for _, x in pts[-2 * q : -q]]), _mean([x for _, x in pts[-q:]])
    gain = (before - last) / before if before > 0 else 0.0
    text = _("the mean training loss of the last quarter of events fell {before:.3g} → {after:.3g} "
             "({change:+.1%})").format(before=before, after=last, change=-gain)
    return gain >= share, text


def check_lr_too_low(
    train: list[dict[str, Any]], valid: list[dict[str, Any]], lr: float | None, vocab_size: int = 0
) -> Finding:
    """After ``SLOW_AFTER_STEPS`` updates the loss fell by less than ``SLOW_FALL_SHARE`` of L0 (but did
    fall), without rising, and it was still falling at the end: the steps are too small."""
    f = _new_finding("lr_too_low")
    pts = _losses(train)
    if len(pts) < MIN_EVENTS:
        return _not_enough(f, _need_events(MIN_EVENTS), len(pts))
    if pts[-1][0] < SLOW_AFTER_STEPS:
        return _not_enough(f, _("{steps} updates").format(steps=SLOW_AFTER_STEPS), pts[-1][0])
    l0, end = start_loss(pts, vocab_size), _end_loss(pts)
    share = (l0 - end) / l0 if l0 > 0 else 0.0
    rise = _max_rise(pts)[0]
    improving, text = _still_improving(train, valid, STILL_FALLING)
    f.numbers.update(start_loss=l0, end_loss=end, fall_share=share, steps=pts[-1][0])
    if STUCK_FALL_SHARE <= share < SLOW_FALL_SHARE and rise <= RISE_SHARE * l0 and improving:
        f.detected = True
        f.evidence.append(
            _("in {steps} updates the training loss fell only {share:.0%} of the start (L0 = {l0} → {end}); "
              "a working lr takes it down by more than {needed:.0%} within {within} updates").format(
                steps=pts[-1][0], share=share, l0=_fmt(l0), end=_fmt(end), needed=SLOW_FALL_SHARE,
                within=SLOW_AFTER_STEPS)
        )
        f.evidence.append(_("and it fell steadily, never climbing back: {evidence}").format(evidence=text))
        # The lr is searched on a log scale: a decade up, then the doctor again.
        f.suggestion = (f"train.lr={_fmt(lr * 10)}" if lr else _("raise train.lr 10×")) + _(
            " (×10: the steps are too small, not the model)"
        )
    else:
        f.evidence.append(
            _("in {steps} updates the training loss fell {share:.0%} of the start (L0 = {l0} → {end}); the symptom "
              "is a fall between {stuck:.0%} and {needed:.0%}, never climbing back, still falling at the end "
              "({evidence})").format(steps=pts[-1][0], share=share, l0=_fmt(l0), end=_fmt(end), stuck=STUCK_FALL_SHARE,
                                    needed=SLOW_FALL_SHARE, evidence=text or "-"))
    return f


def _budget_suggestion(budget: dict[str, Any] | None) -> str:
    """The "train longer" advice in terms of the run's own budget (a budgeted run re-plans its schedule)."""
    b = budget or {}
    if _finite(b.get("max_minutes")) and b["max_minutes"] > 0:
        return _("train longer: --max-minutes {minutes} (the budget schedule re-plans the warm-up and the "
                 "decay to 0 on the longer horizon)").format(minutes=_fmt(2 * b["max_minutes"]))
    if b.get("max_steps"):
        return _("train longer: train.max_steps={steps}").format(steps=2 * int(b["max_steps"]))
    return _(
        "train longer, or use the budget schedule: --max-minutes N with train.schedule=auto plans the "
        "warm-up and decays the lr to 0 exactly when the budget ends"
    )


def check_undertrained(
    train: list[dict[str, Any]], valid: list[dict[str, Any]], budget: dict[str, Any] | None = None
) -> Finding:
    """Still improving when the run stopped: more training would pay (see :func:`_still_improving`)."""
    f = _new_finding("undertrained")
    improving, text = _still_improving(train, valid)
    if improving is None:
        return _not_enough(f, _("{count} validations or {events}").format(count=MIN_VALIDATIONS,
                                                                           events=_need_events(MIN_EVENTS)),
                           _("{count} and {events}").format(count=len(_valids(valid)), events=len(_losses(train))))
    f.numbers["still_improving"] = improving
    f.evidence.append(text + _(" (threshold {share:.0%} or +{bleu:g} BLEU)").format(
        share=STILL_IMPROVING, bleu=STILL_IMPROVING_BLEU))
    if improving:
        f.detected = True
        f.suggestion = _budget_suggestion(budget)
    return f


def _train_loss_near(pts: list[tuple[int, float]], step: int) -> float | None:
    before = [x for s, x in pts if s <= step][-NEAR_EVENTS:]
    return _mean(before) if before else None


def check_overfitting(train: list[dict[str, Any]], valid: list[dict[str, Any]]) -> Finding:
    """The validation loss ends more than ``OVERFIT_VALID_RISE`` above its minimum while the training
    loss (mean of the logged losses just before each validation) kept falling."""
    f = _new_finding("overfitting")
    vals = _valids(valid)
    if len(vals) < MIN_VALIDATIONS:
        return _not_enough(f, _("{count} validations").format(count=MIN_VALIDATIONS), len(vals))
    pts = _losses(train)
    best = min(vals, key=lambda r: r["valid_loss"])
    last = vals[-1]
    rise = last["valid_loss"] / best["valid_loss"] - 1 if best["valid_loss"] > 0 else 0.0
    tr_best, tr_last = _train_loss_near(pts, best["step"]), _train_loss_near(pts, last["step"])
    f.numbers.update(
        valid_loss_min=best["valid_loss"],
        valid_loss_min_step=best["step"],
        valid_loss_last=last["valid_loss"],
        valid_rise=rise,
        train_loss_last=tr_last,
    )
    if last["step"] > best["step"] and rise > OVERFIT_VALID_RISE and None not in (tr_best, tr_last):
        if tr_last < tr_best:
            f.detected = True
            f.evidence.append(
                _("the validation loss rose from {best} (step {best_step}) to {last} (step {last_step}), "
                  "+{rise:.0%}, while the training loss fell from {train_best} to {train_last}: the model learns "
                  "the training pairs, not French (gap now {gap} nats)").format(
                    best=_fmt(best["valid_loss"]), best_step=best["step"], last=_fmt(last["valid_loss"]),
                    last_step=last["step"], rise=rise, train_best=_fmt(tr_best), train_last=_fmt(tr_last),
                    gap=_fmt(last["valid_loss"] - tr_last))
            )
            f.suggestion = _(
                "raise model.dropout (e.g. 0.3), train.weight_decay or the data (data.max_pairs=0); "
                "use the `best` checkpoint (step {step}), not `last`"
            ).format(step=best["step"])
    if not f.detected:
        f.evidence.append(
            _("the validation loss ends at {last} (step {last_step}), {rise:+.0%} against its minimum {best} (step "
              "{best_step}); the symptom is above +{threshold:.0%} while the training loss falls ({train_best} → "
              "{train_last})").format(last=_fmt(last["valid_loss"]), last_step=last["step"], rise=rise,
                                      best=_fmt(best["valid_loss"]), best_step=best["step"],
                                      threshold=OVERFIT_VALID_RISE,
                                      train_best=_fmt(tr_best) if tr_best is not None else "-",
                                      train_last=_fmt(tr_last) if tr_last is not None else "-"))
    return f


def suggest_num_steps(histogram: list[int], coverage: float = NUM_STEPS_COVERAGE) -> int | None:
    """Smallest ``num_steps`` (tokens + ``<eos>``) that keeps ``coverage`` of the sentences uncut."""
    total = sum(histogram)
    if not total:
        return None
    seen = 0
    for length, count in enumerate(histogram):
        seen += count
        if seen >= coverage * total:
            return length + 1
    return len(histogram)


def _suggested_num_steps(data_stats: dict[str, Any]) -> int | None:
    hist = data_stats.get("length_histogram") or {}
    suggested = (
        max((suggest_num_steps(h) or 0) for h in (hist.get("src") or [], hist.get("tgt") or [])) or None
    )
    num_steps = data_stats.get("num_steps")
    return max(suggested, num_steps + 1) if suggested and num_steps else suggested


def _long_bucket(eval_report: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(longest bucket, best bucket)`` of the eval report's BLEU by length, when both are large enough
    and the longest scores below ``LENGTH_BLEU_RATIO`` of the best."""
    rows = [
        r for r in (eval_report or {}).get("by_length", []) if r.get("sentences", 0) >= MIN_BUCKET_SENTENCES
    ]
    if len(rows) < 2:
        return None
    top, longest = max(rows, key=lambda r: r["bleu"]), rows[-1]
    if longest is top or top["bleu"] <= 0 or longest["bleu"] / top["bleu"] >= LENGTH_BLEU_RATIO:
        return None
    return longest, top


def check_num_steps(data_stats: dict[str, Any], eval_report: dict[str, Any] | None) -> Finding:
    """A material share of the training pairs cut (``TRUNCATED_SHARE``), or poor long-sentence BLEU
    where the cut pairs are a material share (``LONG_CUT_SHARE``) of that length bucket. Long sentences
    scoring lower *without* being cut is a note, not this symptom: a longer num_steps cannot help them."""
    f = _new_finding("num_steps_too_small")
    num_steps = data_stats.get("num_steps")
    splits = data_stats.get("splits") or {}
    train = splits.get("train") or {}
    pairs, cut = train.get("pairs", 0), train.get("truncated", 0)
    f.numbers.update(num_steps=num_steps, truncated_pairs=cut, train_pairs=pairs)
    if not pairs:
        _not_enough(f, _("the training pairs' lengths (meta.json)"), _("none"))
    if pairs:
        share = cut / pairs
        f.numbers["truncated_share"] = share
        if share > TRUNCATED_SHARE:
            f.detected = True
            f.evidence.append(
                _("{cut:,} of {pairs:,} training pairs ({share:.1%}) were cut to num_steps - 1 = {kept} tokens "
                  "(threshold {threshold:.0%}): the model never sees their ends").format(
                    cut=cut, pairs=pairs, share=share, kept=num_steps - 1, threshold=TRUNCATED_SHARE)
            )
        else:
            f.evidence.append(
                _("{cut:,} of {pairs:,} training pairs ({share:.1%}) were cut to num_steps - 1 = {kept} tokens "
                  "(symptom above {threshold:.0%})").format(cut=cut, pairs=pairs, share=share, kept=num_steps - 1,
                                                             threshold=TRUNCATED_SHARE))
    poor = _long_bucket(eval_report)
    if poor is not None:
        longest, top = poor
        split = (eval_report or {}).get("split", "test")
        eval_cut = (splits.get(split) or {}).get("truncated", 0)
        cut_share = eval_cut / longest["sentences"]
        f.numbers.update(
            longest_bucket=longest["bucket"],
            longest_bleu=longest["bleu"],
            best_bucket=top["bucket"],
            best_bleu=top["bleu"],
            long_cut_share=cut_share,
        )
        # evaluate writes the unit its buckets count (the pair's source unit); a report without one was in words
        text = _("BLEU falls with source length: {bleu:.1f} on {bucket} {unit} ({sentences} sentences) vs "
                 "{top_bleu:.1f} on {top_bucket}").format(
            bleu=longest["bleu"], bucket=longest["bucket"], sentences=longest["sentences"], top_bleu=top["bleu"],
            top_bucket=top["bucket"], unit=unit_name((eval_report or {}).get("length_unit", "words")))
        if cut_share >= LONG_CUT_SHARE:
            f.detected = True
            f.evidence.append(
                _("{evidence}, and {cut} {split} pairs were cut ({share:.0%} of that bucket)").format(
                    evidence=text, cut=eval_cut, split=split, share=cut_share)
            )
        else:
            f.numbers["long_sentences_note"] = _(
                "{evidence}; but only {cut} {split} pairs were cut ({share:.0%} of that bucket): long sentences "
                "are harder, not truncated (train longer or add capacity; num_steps is not it)"
            ).format(evidence=text, cut=eval_cut, split=split, share=cut_share)
    if f.detected:
        suggested = _suggested_num_steps(data_stats)
        f.suggestion = (
            _("data.num_steps={num_steps} (keeps {coverage:.0%} of sentences uncut)").format(
                num_steps=suggested, coverage=NUM_STEPS_COVERAGE)
            if suggested
            else _("raise data.num_steps")
        )
    return f


def _example_probe(probes: dict[str, Any] | None, pair: Pair | None) -> dict[str, Any] | None:
    """The probe sentence the verdict reads (the notes' example in the run's direction), or None (also for a
    pair the notes' table is not for)."""
    from attnlab.data.text import preprocess

    example = example_sentence(pair)
    if example is None:
        return None
    want = preprocess(example)
    for s in (probes or {}).get("sentences", []):
        if s.get("steps") and preprocess(str(s.get("sentence", ""))) == want:
            return s
    return None


def _at_step(steps: list[dict[str, Any]], step: int | None) -> dict[str, Any]:
    """The record of ``step`` (the best checkpoint's), else the last one recorded."""
    return next((r for r in steps if step is not None and r.get("step") == step), steps[-1])


def check_attention(probes: dict[str, Any] | None, pair: Pair | None = None, best_step: int | None = None
                    ) -> Finding:
    """Attention formed: the alignment verdict (:func:`attnlab.evaluation.alignment.check_probe`) on the
    probe of the notes' example at ``best_step`` (the checkpoint ``explain``, ``attention`` and the web page
    load by default; else the last record). Not checked when the run recorded no such probe or its
    translation holds none of the table's words."""
    f = _new_finding("attention_not_formed")
    probe = _example_probe(probes, pair)
    rec = _at_step(probe["steps"], best_step) if probe is not None else None
    check: AlignmentCheck | None = check_probe(rec, pair, probe["sentence"]) if rec is not None else None
    if check is None or not check.table:
        example = example_sentence(pair)
        if example is None:  # the notes' table is for their English ↔ French corpus, not this run's
            f.checked, f.applies = False, False
            f.why = _("the notes' example is English→French; this run is {pair}, so that check does not "
                      "apply").format(pair=pair.title() if pair is not None else "-")
            return f
        return _not_enough(f, _("a probe of “{sentence}” with a cross-attention map (train.probe_sentences)").format(
            sentence=example), _("none"))
    if check.formed is None:  # the translation lacks a row of the table: nothing to hold it against
        f.evidence.append(_("at step {step}, “{sentence}” → “{translation}”: {verdict}").format(
            step=rec["step"], sentence=probe["sentence"], translation=rec.get("translation", ""),
            verdict=check.summary()))
        return _not_enough(f, _("the rows {missing} in the translation").format(missing="/".join(check.missing)),
                           f"“{rec.get('translation', '')}”")
    f.numbers.update(step=rec["step"], sentence=probe["sentence"], alignment=check.to_json())
    line = _("at step {step}, “{sentence}” → “{translation}”: {verdict}").format(
        step=rec["step"], sentence=probe["sentence"], translation=rec.get("translation", ""), verdict=check.summary())
    f.evidence.append(line)
    if not check.formed:
        f.detected = True
        first = check_probe(probe["steps"][0], pair, probe["sentence"])
        if first is not None and first.formed is not None and probe["steps"][0]["step"] != rec["step"]:
            f.evidence.append(_("at step {step}: {verdict}").format(step=probe["steps"][0]["step"],
                                                                    verdict=first.summary()))
        f.suggestion = _(
            "train longer (alignment forms after the word frequencies are learnt); see how it formed, "
            "`attnlab attention RUN --timeline`, and what each output depends on beside what it looks at, "
            "`attnlab explain RUN \"i'm home .\"`"
        )
    return f


def missing_evidence(train: list[dict[str, Any]], valid: list[dict[str, Any]]) -> list[str]:
    """What a run lacks before it can be called healthy (empty: enough evidence)."""
    out = []
    pts = _losses(train)
    last_step = max([int(r["step"]) for r in train + valid if "step" in r], default=0)
    if last_step < MIN_STEPS:
        out.append(_("only {steps} updates (need {need}): train longer").format(steps=last_step, need=MIN_STEPS))
    if len(pts) < MIN_EVENTS:
        out.append(_("only {count} logged training losses (need {need}): lower train.log_every").format(
            count=len(pts), need=MIN_EVENTS))
    vals = _valids(valid)
    if len(vals) < MIN_VALIDATIONS:
        out.append(
            _("only {count} validation(s) (need {need}): set train.eval_frac or train.eval_every").format(
                count=len(vals), need=MIN_VALIDATIONS)
        )
    bleus = [r["valid_bleu"] for r in valid if _finite(r.get("valid_bleu"))]
    if not bleus:
        out.append(_("no validation BLEU"))
    elif max(bleus) < MIN_BLEU:
        out.append(
            _("validation BLEU {bleu:.1f} is too low to call (below {need:g}: it does not translate yet)").format(
                bleu=max(bleus), need=MIN_BLEU)
        )
    return out


def diagnose_curves(
    train: list[dict[str, Any]],
    valid: list[dict[str, Any]],
    vocab_size: int,
    data_stats: dict[str, Any] | None = None,
    eval_report: dict[str, Any] | None = None,
    lr: float | None = None,
    run: str = "",
    probes: dict[str, Any] | None = None,
    budget: dict[str, Any] | None = None,
    pair: Pair | None = None,
    best_step: int | None = None,
) -> DoctorReport:
    """Run every check on curves given as ``metrics.jsonl`` records.

    Args:
        train: ``{"step", "loss"}`` records in step order (``event == "train"``).
        valid: ``{"step", "valid_loss", "valid_bleu"?}`` records (``event == "valid"``).
        vocab_size: target vocabulary size V (``ln V`` is the uniform-guess loss; 0 = unknown).
        data_stats: ``meta.json``'s ``data_stats`` (``corpus.prepare``'s statistics).
        eval_report: ``eval-test.json`` (``by_length`` rows, ``split``), if any.
        lr: the run's ``train.lr`` (the suggestions scale it).
        probes: :func:`attnlab.runs.probes.read_probes` of the run, if any.
        budget: ``max_minutes``/``max_steps`` of the run (the "train longer" suggestion uses them).
        pair: the run's pair (:func:`attnlab.data.pairs.pair_of`; which probe is the notes' example, which way the
            table reads, or that it is not for this pair); None: the notes' own English → French.
        best_step: the step of the run's ``best`` checkpoint: the probe recorded then is the one judged.
    """
    high = check_lr_too_high(train, vocab_size, lr)
    low = check_lr_too_low(train, valid, lr, vocab_size)
    attention = check_attention(probes, pair, best_step)
    report = DoctorReport(
        run,
        [
            high,
            low,
            check_undertrained(train, valid, budget),
            check_overfitting(train, valid),
            check_num_steps(data_stats or {}, eval_report),
            attention,
        ],
        missing=missing_evidence(train, valid),
    )
    # A wrong lr explains a slow, unfinished run whose attention has not formed: fix the lr first.
    cause = "lr_too_high" if high.detected else "lr_too_low" if low.detected else ""
    if cause:
        for f in report.findings:
            if (
                f.detected
                and f.symptom in ("lr_too_low", "undertrained", "attention_not_formed")
                and f.symptom != cause
            ):
                f.caused_by = cause
    note = report.finding("num_steps_too_small").numbers.get("long_sentences_note")
    if note:
        report.notes.append(note)
    if eval_report is None:
        report.notes.append(_("no eval-test.json: BLEU by length not checked (run `attnlab evaluate RUN`)"))
    attention = report.finding("attention_not_formed")
    if not attention.checked and attention.applies:
        report.notes.append(_("no probe of the notes' example with a verdict (probes.jsonl): attention formation "
                              "not checked"))
    return report


# ----------------------------------------------------------------------------------------------
# the run folder


def _read_eval(run_dir: Path) -> dict[str, Any] | None:
    for name in ("eval-test.json", "eval-valid.json"):
        path = run_dir / name
        if path.is_file():
            try:
                report = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(report, dict):
                report.setdefault("split", name[len("eval-") : -len(".json")])
                return report
    return None


def _read_config(run_dir: Path):
    """The run's config (the one file the doctor cannot do without), with one clear line on a problem."""
    from attnlab import config as config_mod

    if not run_dir.is_dir():
        raise AttnlabError(
            _("run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run").format(run_dir=run_dir)
        )
    if not (run_dir / "config.toml").is_file():
        raise AttnlabError(_("{run_dir} has no config.toml: it is not the folder of an `attnlab train` "
                             "run").format(run_dir=run_dir))
    try:
        return config_mod.load_toml(run_dir / "config.toml")
    except config_mod.ConfigError as e:
        raise AttnlabError(_("{run_dir} is not a usable run folder: {e}").format(run_dir=run_dir, e=e)) from None


def _vocab_size(run_dir: Path, stats: dict[str, Any]) -> int:
    """V from meta's data statistics, else from the target tokenizer; 0 when neither can be read."""
    vocab = int((stats.get("vocab") or {}).get("tgt") or 0)
    if vocab:
        return vocab
    try:
        toks = json.loads((run_dir / "tokenizers.json").read_text(encoding="utf-8"))
        return len(load_tokenizer(toks["tgt"]))
    except Exception:  # noqa: BLE001 - an unreadable tokenizer only costs the ln V reference
        return 0


def run(run_dir: str | Path) -> DoctorReport:
    """Diagnose a run folder from ``config.toml``, ``metrics.jsonl`` and, when present, ``meta.json``,
    ``eval-test.json`` and ``probes.jsonl`` (no weights, no tokenizers needed). Raises
    :class:`AttnlabError` when it cannot be read (no folder, no config, no records)."""
    from attnlab.runs.probes import read_probes

    run_dir = Path(run_dir)
    cfg = _read_config(run_dir)
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("event") == "train" and "step" in r]
    valid = [r for r in records if r.get("event") == "valid" and "step" in r]
    if not train and not valid:
        raise AttnlabError(
            _("{path} holds no training or validation records; train the run (with train.log_every > "
              "0) before asking the doctor").format(path=run_dir / "metrics.jsonl")
        )
    try:
        meta = json.loads((run_dir / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    stats = (meta.get("data_stats") if isinstance(meta, dict) else None) or {}
    tc = cfg.train
    return diagnose_curves(
        train,
        valid,
        _vocab_size(run_dir, stats),
        stats,
        _read_eval(run_dir),
        lr=tc.lr,
        run=str(run_dir),
        probes=read_probes(run_dir, max_bytes=8 << 20),  # the newest records are the ones read
        budget={"max_minutes": tc.max_minutes, "max_steps": tc.max_steps},
        pair=pair_of(cfg.data),
        best_step=_best_step(run_dir),
    )


def _best_step(run_dir: Path) -> int | None:
    """The step of the checkpoint ``best`` resolves to (what the other commands load), None when unknown."""
    from attnlab.errors import CheckpointError
    from attnlab.runs.checkpoint import resolve_checkpoint, step_of

    try:
        return step_of(resolve_checkpoint(run_dir, "best").name)
    except CheckpointError:
        return None


def _text(report: DoctorReport) -> str:
    """The report as text: each symptom seen (evidence, what to try), those checked and not seen, the
    evidence missing to call the run healthy, notes, and a one-line verdict."""
    lines = [_("doctor: {run}").format(run=report.run)]
    for f in report.findings:
        title = _(TITLES[f.symptom])  # in the language asked, not the one the report was made in
        if f.detected and f.caused_by:
            lines.append("  ~ " + _("{title}: seen, but a consequence of the {cause} (fix that first)").format(
                title=title, cause=_(SHORT[f.caused_by])))
            lines += [f"      - {e}" for e in f.evidence]
        elif f.detected:
            lines.append(f"  ✗ {title}")
            lines += [f"      - {e}" for e in f.evidence]
            lines.append("      → " + _("try: {suggestion}").format(suggestion=f.suggestion))
        elif not f.applies:
            lines.append("  – " + _("{title}: {why}").format(title=title, why=f.why))
        elif f.checked:
            lines.append("  ✓ " + _("no sign of {title}").format(title=title))
            lines += [f"      {e}" for e in f.evidence]
        else:
            lines.append("  ? " + _("{title}: not enough evidence: need {need}, have {have}").format(
                title=title, need=f.need, have=f.have))
            lines += [f"      {e}" for e in f.evidence]
    lines += ["  " + _("missing evidence: {what}").format(what=m) for m in report.missing]
    lines += ["  " + _("note: {note}").format(note=n) for n in report.notes]
    lines.append(_("verdict: {verdict}").format(verdict=report.verdict()))
    return "\n".join(lines)

