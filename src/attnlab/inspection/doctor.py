"""`attnlab doctor`: read a run's curves and per-length scores and name the notes' §10 symptoms.

The notes (§10) list four things a learner sees in training curves and what each one means:

=============================================  =============================  ==============================
what the curves show                           diagnosis                      change
=============================================  =============================  ==============================
loss oscillates, jumps up or becomes NaN       learning rate too high         lower ``train.lr``
loss falls, but very slowly                    learning rate too low          raise ``train.lr``
train loss ≪ validation loss (valid rising)    overfitting                    dropout, weight decay, data
long sentences translate badly / cut off       ``num_steps`` too small        raise ``data.num_steps``
=============================================  =============================  ==============================

The doctor measures each one on the run folder's own records — ``metrics.jsonl`` (training loss per
log event, validation loss/BLEU per validation), ``meta.json`` (data statistics, truncated pairs) and,
when present, ``eval-test.json`` (BLEU by source length) — and reports every symptom with the numbers
behind it and a concrete override to try, or "healthy". The thresholds are the constants below; they
are heuristics (documented, not magic): each one is compared with a reference level that has a meaning
— ``ln V``, the loss of a uniform guess over the target vocabulary, or the run's own best value.

Losses are the plain per-token cross-entropy (nats) the training loop logs (label smoothing excluded),
so train and validation losses are comparable.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.data.vocab import load_tokenizer
from attnlab.errors import AttnlabError
from attnlab.runs import read_metrics, read_run

# --- lr too high (oscillating / diverging loss) ---------------------------------------------------
#: A logged training loss above this multiple of ln V (the loss of a uniform guess over the target
#: vocabulary) means the model became confidently wrong: updates overshoot (after the first event,
#: whose window still holds the untrained model's steps).
UNIFORM_FACTOR = 1.5
#: Largest tolerated rise of the training loss above its best value so far (0.2 = +20 %). Each logged
#: loss averages ``log_every`` steps, so ordinary batch noise stays well below this.
RISE_TOLERANCE = 0.20
#: Largest tolerated standard deviation of the relative change between consecutive logged losses,
#: measured on the second half of the run (the steep initial descent is left out).
OSCILLATION_REL_STD = 0.10

# --- lr too low (slow loss) ------------------------------------------------------------------------
#: A run that ends with its training loss above this share of ln V has barely left the uniform guess:
#: a healthy run quickly learns at least the target's word frequencies, whose entropy is well below
#: ln V (about 0.75 ln V on the `numbers` task, 0.7 ln V on Tatoeba French).
SLOW_UNIFORM_SHARE = 0.80
#: ... and is "still falling steadily" when its loss fell by at least this share over the last half of
#: the post-warmup events (a run stuck far above the reference is a different problem).
SLOW_STILL_FALLING = 0.01
#: Validation is skipped for the slow-loss check until the run has this many post-warmup log events.
MIN_EVENTS = 4

# --- overfitting ----------------------------------------------------------------------------------
#: Validation loss this far above its own minimum (0.05 = +5 %) while the training loss kept falling.
OVERFIT_VALID_RISE = 0.05
#: Validation loss more than this multiple of the training loss at the same step (train ≪ valid).
OVERFIT_GAP_RATIO = 1.5
#: ... and at least this many nats apart (a ratio alone exaggerates tiny losses).
OVERFIT_GAP_NATS = 0.5

# --- num_steps too small (long sentences) ---------------------------------------------------------
#: Share of pairs cut to ``num_steps - 1`` tokens above which the cut matters.
TRUNCATED_SHARE = 0.02
#: BLEU of the longest length bucket below this share of the best bucket's BLEU.
LENGTH_BLEU_RATIO = 0.5
#: Buckets with fewer sentences are ignored (BLEU on a handful of sentences is noise).
MIN_BUCKET_SENTENCES = 20
#: Share of the corpus a suggested ``data.num_steps`` should hold uncut.
NUM_STEPS_COVERAGE = 0.99

SYMPTOMS = ("lr_too_high", "lr_too_low", "overfitting", "num_steps_too_small")
TITLES = {
    "lr_too_high": "oscillating / diverging loss (learning rate too high)",
    "lr_too_low": "slow loss (learning rate too low)",
    "overfitting": "train loss ≪ validation loss (overfitting)",
    "num_steps_too_small": "long sentences poor or cut (num_steps too small)",
}


@dataclass
class Finding:
    """One of the notes' §10 symptoms: whether it is seen, the evidence (numbers) and what to change."""

    symptom: str  # one of SYMPTOMS
    title: str
    detected: bool
    evidence: list[str] = field(default_factory=list)
    suggestion: str = ""
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass
class DoctorReport:
    run: str
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)  # what could not be checked, and why

    @property
    def healthy(self) -> bool:
        return not any(f.detected for f in self.findings)

    def finding(self, symptom: str) -> Finding:
        return next(f for f in self.findings if f.symptom == symptom)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "healthy": self.healthy,
            "findings": [asdict(f) for f in self.findings],
            "notes": list(self.notes),
        }


# ----------------------------------------------------------------------------------------------
# the checks (pure functions of the curves, so synthetic curves test them)


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def _post_warmup(train: list[dict[str, Any]], warmup_steps: int) -> list[dict[str, Any]]:
    """Events after the warm-up (while the lr still rises the loss says little about the lr)."""
    after = [r for r in train if r["step"] > warmup_steps]
    return after if len(after) >= MIN_EVENTS else train


def check_lr_too_high(train: list[dict[str, Any]], vocab_size: int, lr: float | None) -> Finding:
    """Non-finite losses, a loss above ``UNIFORM_FACTOR · ln V``, a rise above the best loss so far, or
    a large relative spread of consecutive changes (second half of the run)."""
    f = Finding("lr_too_high", TITLES["lr_too_high"], False)
    losses = [r.get("loss") for r in train]
    bad = [r["step"] for r, x in zip(train, losses) if not _finite(x)]
    if bad:
        f.detected = True
        f.evidence.append(f"{len(bad)} logged training loss(es) are not finite (first at step {bad[0]})")
    finite = [(r["step"], float(x)) for r, x in zip(train, losses) if _finite(x)]
    f.numbers["nonfinite_events"] = len(bad)
    if vocab_size > 1 and len(finite) > 1:
        ln_v = math.log(vocab_size)
        step, peak = max(finite[1:], key=lambda sx: sx[1])
        f.numbers.update(peak_loss=peak, peak_step=step, uniform_loss=ln_v)
        if peak > UNIFORM_FACTOR * ln_v:
            f.detected = True
            f.evidence.append(
                f"training loss reached {_fmt(peak)} at step {step}, above {UNIFORM_FACTOR} × ln V = "
                f"{_fmt(UNIFORM_FACTOR * ln_v)} (a uniform guess over {vocab_size} words scores "
                f"{_fmt(ln_v)}): the model became confidently wrong"
            )
    if len(finite) > 1:
        best, rise, rise_step = finite[0][1], 0.0, None
        for step, x in finite[1:]:
            r = x / best - 1 if best > 0 else 0.0
            if r > rise:
                rise, rise_step = r, step
            best = min(best, x)
        f.numbers["max_rise"] = rise
        if rise > RISE_TOLERANCE:
            f.detected = True
            f.evidence.append(
                f"training loss rose {rise:.0%} above its best value so far (at step {rise_step}; "
                f"tolerance {RISE_TOLERANCE:.0%})"
            )
    half = [x for _, x in finite[len(finite) // 2 :]]
    if len(half) >= 3:
        rel = [(b - a) / a for a, b in zip(half, half[1:]) if a > 0]
        spread = _std(rel)
        ups = sum(r > 0 for r in rel) / max(len(rel), 1)
        f.numbers.update(rel_change_std=spread, share_rising=ups)
        if spread > OSCILLATION_REL_STD:
            f.detected = True
            f.evidence.append(
                f"consecutive logged losses in the second half change by ±{spread:.1%} (std of the "
                f"relative change; threshold {OSCILLATION_REL_STD:.0%}), {ups:.0%} of them upward"
            )
    if f.detected:
        f.suggestion = (
            f"train.lr={_fmt(lr / 3)}" if lr else "lower train.lr 3×"
        ) + " (and/or raise train.warmup_steps, keep train.clip_grad_norm=1.0)"
    return f


def check_lr_too_low(
    train: list[dict[str, Any]], vocab_size: int, lr: float | None, warmup_steps: int
) -> Finding:
    """The run ends still near the uniform guess (``> SLOW_UNIFORM_SHARE · ln V``) while its loss keeps
    falling steadily: the steps are too small, not the model."""
    f = Finding("lr_too_low", TITLES["lr_too_low"], False)
    events = [r for r in _post_warmup(train, warmup_steps) if _finite(r.get("loss"))]
    if len(events) < MIN_EVENTS or vocab_size <= 1:
        return f
    ln_v = math.log(vocab_size)
    half = events[len(events) // 2 :]
    first, last = events[0], events[-1]
    span = max(last["step"] - first["step"], 1)
    rate = (first["loss"] - last["loss"]) / first["loss"] * 100 / span  # relative decrease per 100 steps
    late = (half[0]["loss"] - last["loss"]) / half[0]["loss"]
    share = last["loss"] / ln_v
    f.numbers.update(
        final_loss=last["loss"],
        uniform_loss=ln_v,
        share_of_uniform=share,
        rel_decrease_per_100_steps=rate,
        late_rel_decrease=late,
    )
    if share > SLOW_UNIFORM_SHARE and late >= SLOW_STILL_FALLING:
        f.detected = True
        f.evidence.append(
            f"after {last['step']} steps the training loss is {_fmt(last['loss'])} = {share:.2f} × ln V "
            f"(uniform guess {_fmt(ln_v)}; a healthy run is below {SLOW_UNIFORM_SHARE} × ln V by now)"
        )
        f.evidence.append(
            f"yet it is still falling steadily: {late:.1%} over the last half, "
            f"{rate:.1%} per 100 steps overall"
        )
        factor = 10 if share > 1.0 else 3
        f.suggestion = (
            f"train.lr={_fmt(lr * factor)}" if lr else f"raise train.lr {factor}×"
        ) + " (or train longer: the curve has not flattened)"
    return f


def _train_loss_at(train: list[dict[str, Any]], step: int) -> float | None:
    before = [r for r in train if r["step"] <= step and _finite(r.get("loss"))]
    return float(before[-1]["loss"]) if before else None


def check_overfitting(train: list[dict[str, Any]], valid: list[dict[str, Any]]) -> Finding:
    """Validation loss rising above its minimum while training loss falls, or a large train/valid gap."""
    f = Finding("overfitting", TITLES["overfitting"], False)
    vals = [r for r in valid if _finite(r.get("valid_loss"))]
    if not vals:
        return f
    best = min(vals, key=lambda r: r["valid_loss"])
    last = vals[-1]
    rise = last["valid_loss"] / best["valid_loss"] - 1 if best["valid_loss"] > 0 else 0.0
    tr_best, tr_last = _train_loss_at(train, best["step"]), _train_loss_at(train, last["step"])
    f.numbers.update(
        valid_loss_min=best["valid_loss"],
        valid_loss_min_step=best["step"],
        valid_loss_last=last["valid_loss"],
        valid_rise=rise,
        train_loss_last=tr_last,
    )
    if (
        last["step"] > best["step"]
        and rise > OVERFIT_VALID_RISE
        and tr_best is not None
        and tr_last is not None
        and tr_last < tr_best
    ):
        f.detected = True
        f.evidence.append(
            f"validation loss rose from {_fmt(best['valid_loss'])} (step {best['step']}) to "
            f"{_fmt(last['valid_loss'])} (step {last['step']}), +{rise:.0%}, while the training loss "
            f"fell from {_fmt(tr_best)} to {_fmt(tr_last)}"
        )
    if tr_last is not None and tr_last > 0:
        ratio = last["valid_loss"] / tr_last
        f.numbers["gap_ratio"] = ratio
        if ratio > OVERFIT_GAP_RATIO and last["valid_loss"] - tr_last > OVERFIT_GAP_NATS:
            f.detected = True
            f.evidence.append(
                f"at step {last['step']} the validation loss {_fmt(last['valid_loss'])} is "
                f"{ratio:.1f} × the training loss {_fmt(tr_last)}"
            )
    if f.detected:
        f.suggestion = (
            "raise model.dropout (e.g. 0.3), train.weight_decay or the data (data.max_pairs=0); "
            f"use the `best` checkpoint (step {best['step']}), not `last`"
        )
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


def check_num_steps(data_stats: dict[str, Any], eval_report: dict[str, Any] | None) -> Finding:
    """Many truncated pairs (meta's data statistics) or BLEU falling with source length (eval report)."""
    f = Finding("num_steps_too_small", TITLES["num_steps_too_small"], False)
    num_steps = data_stats.get("num_steps")
    split = (data_stats.get("splits") or {}).get("train") or {}
    pairs, cut = split.get("pairs", 0), split.get("truncated", 0)
    hist = data_stats.get("length_histogram") or {}
    suggested = (
        max((suggest_num_steps(h) or 0) for h in (hist.get("src") or [], hist.get("tgt") or [])) or None
    )
    if suggested is not None and num_steps:
        suggested = max(suggested, num_steps + 1)
    f.numbers.update(num_steps=num_steps, truncated_pairs=cut, train_pairs=pairs)
    if pairs:
        share = cut / pairs
        f.numbers["truncated_share"] = share
        if share > TRUNCATED_SHARE:
            f.detected = True
            f.evidence.append(
                f"{cut} of {pairs} training pairs ({share:.1%}) were cut to num_steps - 1 = "
                f"{num_steps - 1} tokens (threshold {TRUNCATED_SHARE:.0%}): the model never sees their ends"
            )
    rows = [
        r for r in (eval_report or {}).get("by_length", []) if r.get("sentences", 0) >= MIN_BUCKET_SENTENCES
    ]
    if len(rows) >= 2:
        top = max(rows, key=lambda r: r["bleu"])
        longest = rows[-1]
        ratio = longest["bleu"] / top["bleu"] if top["bleu"] > 0 else 1.0
        f.numbers.update(
            longest_bucket=longest["bucket"],
            longest_bleu=longest["bleu"],
            best_bucket=top["bucket"],
            best_bleu=top["bleu"],
            length_bleu_ratio=ratio,
        )
        if longest is not top and ratio < LENGTH_BLEU_RATIO:
            f.detected = True
            reaches = num_steps is not None and longest["hi"] >= num_steps - 1
            f.evidence.append(
                f"BLEU falls with source length: {longest['bleu']:.1f} on {longest['bucket']} tokens "
                f"({longest['sentences']} sentences) vs {top['bleu']:.1f} on {top['bucket']} "
                f"(ratio {ratio:.2f} < {LENGTH_BLEU_RATIO})"
                + (f"; that bucket reaches num_steps - 1 = {num_steps - 1}" if reaches else "")
            )
    if f.detected:
        f.suggestion = (
            f"data.num_steps={suggested} (keeps {NUM_STEPS_COVERAGE:.0%} of sentences uncut)"
            if suggested
            else "raise data.num_steps"
        )
        if not cut:
            f.suggestion += (
                "; nothing was cut, so also try an attention model with more capacity "
                "(model.num_layers, model.num_hiddens)"
            )
    return f


def diagnose_curves(
    train: list[dict[str, Any]],
    valid: list[dict[str, Any]],
    vocab_size: int,
    data_stats: dict[str, Any] | None = None,
    eval_report: dict[str, Any] | None = None,
    lr: float | None = None,
    warmup_steps: int = 0,
    run: str = "",
) -> DoctorReport:
    """Run every check on curves given as ``metrics.jsonl`` records.

    Args:
        train: ``{"step", "loss"}`` records in step order (``event == "train"``).
        valid: ``{"step", "valid_loss", "valid_bleu"?}`` records (``event == "valid"``).
        vocab_size: target vocabulary size V (``ln V`` is the uniform-guess loss).
        data_stats: ``meta.json``'s ``data_stats`` (``corpus.prepare``'s statistics).
        eval_report: ``eval-test.json`` (``by_length`` rows), if any.
        lr, warmup_steps: the run's ``train.lr`` and ``train.warmup_steps`` (for suggestions and to skip warm-up).
    """
    report = DoctorReport(
        run,
        [
            check_lr_too_high(train, vocab_size, lr),
            check_lr_too_low(train, vocab_size, lr, warmup_steps),
            check_overfitting(train, valid),
            check_num_steps(data_stats or {}, eval_report),
        ],
    )
    if report.finding("lr_too_high").detected:
        # A diverging run is slow for the wrong reason; raising the lr would make it worse.
        report.finding("lr_too_low").detected = False
        report.finding("lr_too_low").evidence.clear()
        report.finding("lr_too_low").suggestion = ""
    if len(train) < MIN_EVENTS:
        report.notes.append(
            f"only {len(train)} training log events: too few to judge the loss curve "
            "(lower train.log_every or train longer)"
        )
    if len([v for v in valid if _finite(v.get("valid_loss"))]) < 2:
        report.notes.append(
            "fewer than 2 validations: overfitting is judged on the gap only "
            "(set train.eval_every to validate during training)"
        )
    if eval_report is None:
        report.notes.append("no eval-test.json: BLEU by length not checked (run `attnlab evaluate RUN`)")
    return report


# ----------------------------------------------------------------------------------------------
# the run folder


def diagnose(run_dir: str | Path) -> DoctorReport:
    """Diagnose a run folder. Raises :class:`AttnlabError` when it cannot be read (no metrics, no config)."""
    run_dir = Path(run_dir)
    files = read_run(run_dir)  # CheckpointError (an AttnlabError) on a missing/corrupt folder
    records = read_metrics(run_dir)
    train = [r for r in records if r.get("event") == "train" and "step" in r]
    valid = [r for r in records if r.get("event") == "valid" and "step" in r]
    if not train and not valid:
        raise AttnlabError(
            f"{run_dir / 'metrics.jsonl'} holds no training or validation records; "
            "train the run (with train.log_every > 0) before asking the doctor"
        )
    stats = files.meta.get("data_stats") or {}
    vocab = int((stats.get("vocab") or {}).get("tgt") or 0)
    if not vocab:
        try:
            vocab = len(load_tokenizer(files.tokenizers["tgt"]))
        except Exception:  # noqa: BLE001 - an unreadable tokenizer only costs the ln V reference
            vocab = 0
    eval_report = None
    for name in ("eval-test.json", "eval-valid.json"):
        path = run_dir / name
        if path.is_file():
            try:
                eval_report = json.loads(path.read_text(encoding="utf-8"))
                break
            except (OSError, ValueError):
                continue
    return diagnose_curves(
        train,
        valid,
        vocab,
        stats,
        eval_report,
        lr=files.config.train.lr,
        warmup_steps=files.config.train.warmup_steps,
        run=str(run_dir),
    )


def format_report(report: DoctorReport) -> str:
    lines = [f"doctor: {report.run}"]
    for f in report.findings:
        if f.detected:
            lines.append(f"  ✗ {f.title}")
            lines += [f"      - {e}" for e in f.evidence]
            lines.append(f"      → try: {f.suggestion}")
        else:
            lines.append(f"  ✓ no sign of {f.title}")
    lines += [f"  note: {n}" for n in report.notes]
    lines.append(
        "verdict: healthy"
        if report.healthy
        else "verdict: " + ", ".join(f.symptom for f in report.findings if f.detected)
    )
    return "\n".join(lines)
