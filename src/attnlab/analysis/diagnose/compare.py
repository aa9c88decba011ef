"""`attnlab compare RUN_A RUN_B …`: trained runs side by side (notes §26: Bahdanau vs Transformer).

For each run: trainable parameters; training speed; translation speed (sentences/s, measured now,
greedy, on one fixed sample of validation sentences evenly spaced over the first run's validation
split, the same text for every run); BLEU overall and by source length; and the translations of the
notes' example sentences.

**One split for every run.** A score is only shown beside scores of the same sentences:
the runs' ``eval-test.json`` reports when all scored the compared checkpoint on the same test sentences
with the same beam; otherwise every run is scored now, greedy, on the same ``--sentences`` validation
sentences (and the table says why the reports were not used).

Runs that split the corpus differently (``data.dataset``, ``data.valid_frac``, ``data.test_frac``) or run
in different directions (``data.direction``) are refused (why: docs/explanations/compare.md).

**One unit per side.** Lengths count the source, speeds the target, in ``Pair.length_unit``: words of the
preprocessed text (``i'm home .`` is 3), or characters for a ``chars`` side; never a run's own tokens.
Training speed is the run's logged target tokens/s times its target units per token (its own tokenizer on
the sample's references, ``<eos>`` counted as a token since training counts it).

**The notes' §26 table, measured** (:func:`notes_table`, the last section of ``format()``): each run's own
answer to the notes' rows, and D2L's claims set beside what these runs measured. **A timing is a mean with its
interval** (:func:`repeat_rate`, ``±TIMING_REL`` or ``TIMING_CAP_S``), **a trend a fitted slope**
(:func:`slope_interval`). How both are read: docs/explanations/compare.md.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from attnlab.analysis.measure import forward_backward, random_batch
from attnlab.analysis.report import TextReport
from attnlab.data.pairs import pair_of, unit_name
from attnlab.errors import AttnlabError
from attnlab.evaluation.bleu import bleu_by_length, corpus_scores
from attnlab.evaluation.evaluate import checkpoint_identity, notes_examples
from attnlab.i18n import N_, _
from attnlab.models import traits
from attnlab.runs import read_metrics, read_run
from attnlab.translator import Translator
from attnlab.viz.figure import new_figure

#: The heading of each set of examples (``notes_examples``'s rows' ``"set"``).
EXAMPLE_SECTIONS = {"notes": N_("## The notes' examples"), "numbers": N_("## The numbers task's examples"),
                    "corpus": N_("## The corpus's examples")}

#: What one unit of a side's length (``Pair.length_unit``) is.
UNIT_RULES = {"words": N_("words (the preprocessed text split on spaces; `i'm home .` is 3 words)"),
              "characters": N_("characters (each character is one, spaces not counted)")}


#: The config keys that decide which split a sentence falls in (corpus.split_by_source hashes each
#: source against these fractions): runs that differ in one of them do not share a test set.
SPLIT_KEYS = ("dataset", "valid_frac", "test_frac")


@dataclass
class RunSummary:
    run: str
    name: str
    kind: str
    parameters: int
    train_words_per_s: float  # target words/s while training (see the module docstring)
    translate_sentences_per_s: float
    bleu: float
    chrf: float
    by_length: list[dict[str, Any]] = field(default_factory=list)  # buckets of source words
    examples: list[dict[str, Any]] = field(default_factory=list)
    words_per_token: float = float("nan")  # the run's target words per tokenizer token (+ <eos>)
    architecture: dict[str, Any] = field(default_factory=dict)  # the §26 rows read off the model (architecture())
    throughput: list[dict[str, Any]] = field(default_factory=list)  # forward + backward positions/s by length
    translate_interval: list[float] = field(default_factory=list)  # [lo, hi, repeats] of translate_sentences_per_s
    longest: dict[str, Any] = field(default_factory=dict)  # BLEU on the test split's longest sentences


@dataclass
class Comparison(TextReport):
    """The runs, and the one set of sentences every score was measured on: ``format()`` is the
    Markdown (``compare.md``), ``figure()`` BLEU by length beside parameters and speeds, ``to_json()``
    ``compare.json``."""

    runs: list[RunSummary]
    scored_on: str  # e.g. "the test split: 3,507 sentences, beam 4 (each run's eval-test.json)"
    why: str = ""  # why each run's eval-test.json was not used, when it was not
    src_unit: str = "words"  # how source lengths are counted (Pair.length_unit("src"))
    tgt_unit: str = "words"  # how training speed is counted (Pair.length_unit("tgt"))

    def _format(self) -> str:
        return _markdown(self)

    def figure(self):
        return _figure(self)

    def to_json(self) -> dict[str, Any]:
        def clean(d: dict[str, Any]) -> dict[str, Any]:
            return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

        return {
            "scored_on": self.scored_on,
            "why": self.why,
            "length_unit": self.src_unit,
            "speed_unit": self.tgt_unit,
            "runs": [clean(asdict(r)) for r in self.runs],
        }


@dataclass
class _Sample:
    """The common validation sample: sources, all references and each source's length in words."""

    sources: list[str]
    references: list[list[str]]
    src_words: list[int]
    ref_texts: list[str]  # the preprocessed first reference of each source (for words per token)


def _train_tokens_per_s(meta: dict[str, Any], records: list[dict[str, Any]]) -> float:
    if isinstance(meta.get("mean_tokens_per_s"), int | float) and meta["mean_tokens_per_s"] > 0:
        return float(meta["mean_tokens_per_s"])
    speeds = [r["tokens_per_s"] for r in records if r.get("event") == "train" and "tokens_per_s" in r]
    return sum(speeds) / len(speeds) if speeds else float("nan")


def check_same_split(runs: list[tuple[str, Any]]) -> None:
    """Raise :class:`AttnlabError` unless every ``(name, config)`` translates in the first one's direction
    and splits the corpus as it does."""
    name0, cfg0 = runs[0]
    for name, cfg in runs[1:]:
        a, b = cfg0.data.direction, cfg.data.direction
        if a != b:
            raise AttnlabError(
                _("{name0} translates {value} and {name} {value2}: their sources and references are in "
                  "different languages, so no BLEU of one sits beside the other's; compare runs of one "
                  "data.direction").format(name0=name0, value=a.replace('-', '→'), name=name, value2=b.replace('-', '→'))
            )
        for key in SPLIT_KEYS:
            a, b = getattr(cfg0.data, key), getattr(cfg.data, key)
            if a != b:
                raise AttnlabError(
                    _("{name0} and {name} split the data differently (data.{key} = {a} vs {b}): a test "
                      "sentence of one may be a training sentence of the other; compare runs trained "
                      "with the same data.dataset, data.valid_frac and data.test_frac").format(name0=name0, name=name, key=key, a=a, b=b)
                )


def common_sample(tr: Translator, n: int, data: str | Path | None = None) -> _Sample:
    """``n`` distinct validation sources of ``tr``'s data (then test ones if the split is smaller; the corpus
    found at ``data``, see :meth:`Translator.prepare_corpus`),
    evenly spaced over the split: the corpus is ordered by length, so its first ``n`` would all be
    short and BLEU by length would have nothing to say about long sentences."""
    prepared = tr.prepare_corpus(data)
    rows = []
    for name in ("valid", "test"):
        split = prepared.splits.get(name)
        if split is not None and len(rows) < n:
            rows += [(split, i) for i in split.unique_sources()]
    if not rows:
        raise AttnlabError(_("{run_dir}: the validation and test splits are empty; nothing to compare "
                             "on").format(run_dir=tr.run_dir))
    if len(rows) > n:
        rows = [rows[k * len(rows) // n] for k in range(n)]
    return _sample_of(tr, rows)


def _sample_of(tr: Translator, rows: list[tuple[Any, int]]) -> _Sample:
    """The sources, references and lengths of ``(split, index)`` rows, each side detokenized by its own rules."""
    out = _Sample([], [], [], [])
    for split, i in rows:
        out.sources.append(tr.src_tok.detokenize(split.src_text[i].split()))  # each side by its own rules
        out.references.append([tr.tgt_tok.detokenize(r.split()) for r in split.references[i]])
        out.src_words.append(len(split.src_text[i].split()))
        out.ref_texts.append(split.tgt_text[i])
    return out


def words_per_token(tr: Translator, texts: list[str]) -> float:
    """Target words per training token of ``tr``'s tokenizer on preprocessed ``texts``: a sentence
    of ``w`` words costs ``len(encode) + 1`` tokens (its ``<eos>``) in the training count."""
    words = sum(len(t.split()) for t in texts)
    tokens = sum(len(ids) + 1 for ids in tr.tgt_tok.encode_batch(texts, preprocessed=True))
    return words / tokens if tokens else float("nan")


#: A timing is repeated until the 95 % interval of its mean is within ± this share of it ...
TIMING_REL = 0.10
#: ... or this many seconds of repeats have passed (per timed quantity), with at least ``TIMING_MIN_REPS``.
TIMING_CAP_S = 5.0
TIMING_MIN_REPS = 3
TIMING_MAX_REPS = 200

#: Student's t, 97.5 % quantile, for 1 … 30 degrees of freedom (beyond: the Cornish-Fisher expansion,
#: Abramowitz & Stegun 26.7.5, within 1e-4 there).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom (a 95 % two-sided interval)."""
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Timing:
    """A rate measured ``n`` times: the mean of the log-rates (a rate's noise is multiplicative), its
    standard error, and the rate with its 95 % interval (``rate``, ``lo``, ``hi``)."""

    log_mean: float
    log_se: float
    n: int

    @property
    def half(self) -> float:
        """Half the 95 % interval of the log-rate (0.0953 = ±10 %)."""
        return t975(self.n - 1) * self.log_se if self.n > 1 else math.inf

    @property
    def rate(self) -> float:
        return math.exp(self.log_mean)

    @property
    def lo(self) -> float:
        return math.exp(self.log_mean - self.half) if math.isfinite(self.half) else 0.0

    @property
    def hi(self) -> float:
        return math.exp(self.log_mean + self.half) if math.isfinite(self.half) else math.inf


def timing_of(rates: list[float]) -> Timing:
    """The :class:`Timing` of measured ``rates`` (each > 0)."""
    logs = [math.log(r) for r in rates]
    se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else math.inf
    return Timing(statistics.fmean(logs), se, len(logs))


def repeat_rate(once: Callable[[], float], cap_s: float = TIMING_CAP_S, rel: float = TIMING_REL,
                clock: Callable[[], float] = time.perf_counter) -> Timing:
    """Call ``once`` (one measurement, a rate > 0) until the 95 % interval of the mean is within ``±rel`` of it,
    or ``cap_s`` seconds of ``clock`` have passed, at least ``TIMING_MIN_REPS`` and at most ``TIMING_MAX_REPS``
    times; the first call is a warm-up and is not counted (it pays for thread pools and allocator growth)."""
    once()
    rates: list[float] = []
    start = clock()
    while len(rates) < TIMING_MAX_REPS:
        rates.append(once())
        if len(rates) >= TIMING_MIN_REPS:
            t = timing_of(rates)
            if t.half <= math.log1p(rel) or clock() - start >= cap_s:
                return t
    return timing_of(rates)


def slope_interval(x: list[float], y: list[float], se: list[float]) -> tuple[float, float, float]:
    """The slope of ``y`` against ``x`` by weighted least squares (weights ``1 / se²``) and its 95 % interval,
    ``(slope, lo, hi)``. The interval comes from the points' own errors, widened by the Birge ratio
    ``sqrt(χ² / (k - 2))`` when the points scatter about the line more than their errors say; NaNs for fewer
    than two points or no spread in ``x``."""
    k = len(x)
    if k < 2 or len(set(x)) < 2:
        return math.nan, math.nan, math.nan
    w = [1 / max(e, 1e-12) ** 2 for e in se]
    sw = sum(w)
    xm, ym = sum(wi * xi for wi, xi in zip(w, x)) / sw, sum(wi * yi for wi, yi in zip(w, y)) / sw
    sxx = sum(wi * (xi - xm) ** 2 for wi, xi in zip(w, x))
    b = sum(wi * (xi - xm) * (yi - ym) for wi, xi, yi in zip(w, x, y)) / sxx
    var = 1 / sxx
    if k > 2:
        chi2 = sum(wi * (yi - ym - b * (xi - xm)) ** 2 for wi, xi, yi in zip(w, x, y))
        var *= max(1.0, chi2 / (k - 2))
    half = _Z975 * math.sqrt(var)
    return b, b - half, b + half


def measure_translation_speed(tr, sentences: list[str], cap_s: float = TIMING_CAP_S,
                              clock: Callable[[], float] = time.perf_counter) -> tuple[Timing, list[str]]:
    """Greedy sentences/s on ``sentences`` (:func:`repeat_rate`) and the translations."""
    hyps: list[str] = []

    def once() -> float:
        nonlocal hyps
        t0 = clock()
        hyps = tr.translate(sentences, beam_size=1)
        return len(sentences) / max(clock() - t0, 1e-9)

    return repeat_rate(once, cap_s, clock=clock), hyps


def usable_eval_report(run_dir: Path, tr: Translator) -> tuple[dict[str, Any] | None, str]:
    """``eval-test.json`` and its sources when they describe the checkpoint ``tr`` loaded, else
    ``(None, why not)``. The report's ``sources`` key is filled from ``src-test.txt``."""
    path = run_dir / "eval-test.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        sources = (run_dir / "src-test.txt").read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        return None, _("{run} has no {file}").format(run=run_dir.name, file=Path(e.filename).name)
    except (OSError, ValueError) as e:
        return None, _("{run}'s eval-test.json is unreadable ({error})").format(run=run_dir.name, error=e)
    if not isinstance(report, dict) or "bleu" not in report or "by_length" not in report:
        return None, _("{run}'s eval-test.json has no BLEU").format(run=run_dir.name)
    scored = (report.get("checkpoint") or {}).get("weights_sha256")
    loaded = (checkpoint_identity(tr.checkpoint) or {}).get("weights_sha256")
    if scored != loaded or scored is None:
        return None, _("{run}'s eval-test.json scored other weights than the checkpoint compared").format(
            run=run_dir.name)
    report["sources"] = sources
    return report, ""


def _same_reports(reports: list[dict[str, Any]], names: list[str]) -> str:
    """Why these reports cannot sit side by side ("" when they can: same sources, same beam)."""
    first = reports[0]
    for name, rep in zip(names[1:], reports[1:]):
        if rep["sources"] != first["sources"]:
            return _("{a} and {b} scored different test sentences").format(a=names[0], b=name)
        if rep.get("beam_size") != first.get("beam_size"):
            return _("{a} (beam {beam_a}) and {b} (beam {beam_b}) decoded differently").format(
                a=names[0], beam_a=first.get("beam_size"), b=name, beam_b=rep.get("beam_size"))
    return ""


def _scoring(run_dirs: list[Path], trs: list[Translator]) -> tuple[list[dict[str, Any]] | None, str]:
    """Every run's usable eval report when they all match, else ``(None, why)``."""
    found = [usable_eval_report(d, tr) for d, tr in zip(run_dirs, trs)]
    why = next((w for _, w in found if w), "")
    if why:
        return None, why
    reports = [r for r, _ in found]
    why = _same_reports(reports, [d.name for d in run_dirs])
    return (None, why) if why else (reports, "")


#: Sentence lengths (source = target positions) of the §26 parallelism measurement, and the positions per
#: batch: scaling's measurement, made small enough to run beside a comparison on a laptop.
THROUGHPUT_LENGTHS = (8, 16, 32)
THROUGHPUT_POSITIONS = 1024


def architecture(tr: Translator) -> dict[str, Any]:
    """The notes' §26 rows for one model, read off its config and traits: ``recurrent``, ``heads``,
    ``attention`` kinds, ``positional`` (the encoding, or None for a recurrent model), ``width``, ``layers``."""
    t, m = traits(tr.cfg.model), tr.cfg.model
    return {"recurrent": t.recurrent, "heads": t.heads if t.attention_modules else (1 if t.attention else 0),
            "attention": list(t.attention), "positional": None if t.recurrent else m.positional,
            "width": m.num_hiddens, "layers": m.num_layers, "ffn": None if t.recurrent else m.ffn_num_hiddens,
            "batch": tr.cfg.data.batch_tokens}


def time_forward_backward(model, batch, device, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one forward + backward of ``batch`` (``scaling``'s measurement), the device synchronised."""
    t0 = clock()
    forward_backward(model, batch, 0.0)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return clock() - t0


def throughput(tr: Translator, cap_s: float = TIMING_CAP_S,
               clock: Callable[[], float] = time.perf_counter) -> list[dict[str, Any]]:
    """Forward + backward positions/s of ``tr``'s model at :data:`THROUGHPUT_LENGTHS` (random sentences of that
    length, no padding, about :data:`THROUGHPUT_POSITIONS` target positions per batch), each a
    :func:`repeat_rate` timing: ``positions_per_s`` (its mean), ``lo``, ``hi``, ``repeats``, ``log_mean``,
    ``log_se``. The model is put back in eval mode and its gradients dropped."""
    model, generator, rows = tr.model, torch.Generator().manual_seed(0), []
    model.train()
    for n in THROUGHPUT_LENGTHS:
        batch = random_batch(max(1, THROUGHPUT_POSITIONS // n), n, n, len(tr.src_tok), len(tr.tgt_tok),
                             generator).to(tr.device)
        t = repeat_rate(lambda b=batch: b.num_tgt_tokens / max(time_forward_backward(model, b, tr.device, clock),
                                                               1e-9), cap_s, clock=clock)
        rows.append({"length": n, "positions_per_s": t.rate, "lo": t.lo, "hi": t.hi, "repeats": t.n,
                     "log_mean": t.log_mean, "log_se": t.log_se})
    model.zero_grad(set_to_none=True)
    model.eval()
    return rows


#: Long-range is judged on this many of the test split's longest sources (fewer when the split is smaller).
LONGEST_SENTENCES = 50


def longest_sample(tr: Translator, n: int = LONGEST_SENTENCES, data: str | Path | None = None) -> _Sample:
    """The ``n`` longest distinct sources (in words) of ``tr``'s test split (the validation split when there is
    no test split), with their references: the sentences a long-range claim is about, the same for every run."""
    prepared = tr.prepare_corpus(data)
    split = prepared.splits.get("test") or prepared.splits.get("valid")
    if split is None:
        return _Sample([], [], [], [])
    ids = sorted(split.unique_sources(), key=lambda i: (-len(split.src_text[i].split()), i))[:n]
    return _sample_of(tr, [(split, i) for i in ids])


def _long_range(tr: Translator, sample: _Sample) -> dict[str, Any]:
    """BLEU (greedy) on ``sample``, :func:`longest_sample`'s, with its length range in words."""
    if not sample.sources:
        return {}
    hyps = tr.translate(sample.sources, beam_size=1)
    return {"bleu": float(corpus_scores(hyps, sample.references)["bleu"]), "sentences": len(sample.sources),
            "words": f"{min(sample.src_words)}–{max(sample.src_words)}"}


def summarise_run(
    run_dir: Path, tr: Translator, sample: _Sample, report: dict[str, Any] | None, longest: _Sample | None = None,
    cap_s: float = TIMING_CAP_S, clock: Callable[[], float] = time.perf_counter,
) -> RunSummary:
    """Everything the comparison shows for one run: ``report`` (its eval-test.json) gives the scores
    when not None, else they are measured now on ``sample`` (greedy); ``longest``: the long-range sample
    (:func:`longest_sample`); ``cap_s``, ``clock``: each timing's cap and clock (:func:`repeat_rate`)."""
    files = read_run(run_dir)
    params = sum(p.numel() for p in tr.model.parameters() if p.requires_grad)  # tied weights once
    speed, hyps = measure_translation_speed(tr, sample.sources, cap_s, clock)
    if report is None:
        report = {**corpus_scores(hyps, sample.references)}
        report["by_length"] = bleu_by_length(hyps, sample.references, sample.src_words)
    wpt = words_per_token(tr, sample.ref_texts)
    return RunSummary(
        str(run_dir),
        run_dir.name,
        files.config.model.kind,
        params,
        _train_tokens_per_s(files.meta, read_metrics(run_dir)) * wpt,
        speed.rate,
        float(report["bleu"]),
        float(report.get("chrf", float("nan"))),
        list(report.get("by_length", [])),
        notes_examples(tr),
        wpt,
        architecture(tr),
        throughput(tr, cap_s, clock) if traits(tr.cfg.model).task == "translate" else [],
        [speed.lo, speed.hi, speed.n],
        _long_range(tr, longest) if longest is not None else {},
    )


def run(
    runs: list[str | Path],
    bleu_sentences: int = 200,
    which: str = "best",
    device: str = "cpu",
    progress: bool = False,
    data: str | Path | None = None,
    cap_s: float = TIMING_CAP_S,
    clock: Callable[[], float] = time.perf_counter,
) -> Comparison:
    """Summaries of ``runs`` in order, every score on the same sentences (see the module docstring).

    ``progress``: progress on stderr, one tick per run (:mod:`attnlab.progress`); ``data``: where the corpus is
    (``--data``); ``cap_s``, ``clock``: each timing's cap in seconds and the clock that times it. Raises :class:`AttnlabError` for fewer than
    two runs, ``bleu_sentences < 1``, an unreadable run, or runs that split the corpus differently.
    """
    from attnlab.progress import Progress

    if len(runs) < 2:
        raise AttnlabError(_("give at least two run folders to compare, e.g. `attnlab compare runs/a "
                             "runs/b`"))
    if bleu_sentences < 1:
        raise AttnlabError(_("--sentences {bleu_sentences} must be at least 1").format(bleu_sentences=bleu_sentences))
    if not (math.isfinite(cap_s) and cap_s > 0):
        raise AttnlabError(_("--timing-cap {cap} must be a number of seconds above 0 (e.g. 5)").format(cap=cap_s))
    run_dirs = [Path(r) for r in runs]
    trs = [Translator.from_run(d, which=which, device=device) for d in run_dirs]
    check_same_split([(d.name, tr.cfg) for d, tr in zip(run_dirs, trs)])
    reports, why = _scoring(run_dirs, trs)
    sample = common_sample(trs[0], bleu_sentences, data)  # the speed sample, and the BLEU one without reports
    longest = longest_sample(trs[0], data=data)
    if reports is not None:
        first = reports[0]
        scored_on = _("the test split: {n:,} sentences, beam {beam} (each run's eval-test.json)").format(
            n=first.get("sentences", len(first["sources"])), beam=first.get("beam_size", "?"))
    else:
        scored_on = _("the same {n:,} validation sentences, greedy, scored now (evenly spaced over {run}'s "
                      "validation split)").format(n=len(sample.sources), run=run_dirs[0].name)
    out = []
    bar = Progress(_("compare"), unit="run", total=len(runs)) if progress else None
    try:
        for i, (d, tr) in enumerate(zip(run_dirs, trs)):
            out.append(summarise_run(d, tr, sample, reports[i] if reports is not None else None, longest,
                                     cap_s, clock))
            if bar is not None:
                bar.update(1, run=d.name)
        if bar is not None:
            bar.close(summary=True)
    finally:
        if bar is not None:
            bar.close()
    pair = pair_of(trs[0].cfg.data)
    return Comparison(out, scored_on, why, pair.length_unit("src"), pair.length_unit("tgt"))


def _num(x: float, fmt: str) -> str:
    return "-" if not math.isfinite(x) else format(x, fmt)


def _rate(x: float, interval: list[float] | tuple[float, ...], fmt: str) -> str:
    """A timed rate with its 95 % interval and repeats: ``12,000 (11,500–12,600, ×7)``."""
    if len(interval) < 3 or not all(math.isfinite(v) for v in interval[:2]):
        return _num(x, fmt)
    return f"{_num(x, fmt)} ({_num(interval[0], fmt)}–{_num(interval[1], fmt)}, ×{int(interval[2])})"


def _buckets(runs: list[RunSummary]) -> list[str]:
    out: list[str] = []
    for r in runs:
        for row in r.by_length:
            if row["bucket"] not in out:
                out.append(row["bucket"])
    return out


def _markdown(comparison: Comparison) -> str:
    """The comparison as markdown: one scoring line, the summary table, BLEU by length, the examples."""
    runs = comparison.runs
    names = [r.name for r in runs]
    lines = [
        _("# Comparison: {runs}").format(runs=" vs ".join(names)),
        "",
        _("Every BLEU and chrF below is scored on {scored_on}").format(scored_on=comparison.scored_on)
        + (_("; the eval-test.json reports were not used: {why}.").format(why=comparison.why) if comparison.why
           else "."),
        _("Source lengths count {src}; training speeds count target {tgt}.").format(
            src=_(UNIT_RULES[comparison.src_unit]), tgt=_(UNIT_RULES[comparison.tgt_unit])),
        "",
        _("| run | model | parameters | train {unit}/s | {unit} per token | translate sentences/s | BLEU | chrF |"
          ).format(unit=unit_name(comparison.tgt_unit)),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.name} | {r.kind} | {r.parameters:,} | {_num(r.train_words_per_s, ',.0f')} | "
            f"{_num(r.words_per_token, '.2f')} | {_rate(r.translate_sentences_per_s, r.translate_interval, ',.1f')} | "
            f"{r.bleu:.2f} | {_num(r.chrf, '.2f')} |"
        )
    buckets = _buckets(runs)
    if buckets:
        lines += [
            "",
            _("## BLEU by source length ({unit}); n = sentences").format(unit=unit_name(comparison.src_unit)),
            "",
            "| " + _("length") + " | " + " | ".join(names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for b in buckets:
            cells = []
            for r in runs:
                row = next((x for x in r.by_length if x["bucket"] == b), None)
                cells.append(f"{row['bleu']:.2f} (n={row['sentences']})" if row else "-")
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
    if runs and runs[0].examples:
        lines += [
            "",
            _(EXAMPLE_SECTIONS[runs[0].examples[0].get("set", "notes")]),
            "",
            "| " + _("source") + " | " + _("reference") + " | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for i, ex in enumerate(runs[0].examples):
            cells = [r.examples[i]["translation"] if i < len(r.examples) else "-" for r in runs]
            lines.append(f"| {ex['source']} | {ex['reference']} | " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", notes_table(comparison)])


def _rows_of(r: RunSummary) -> dict[str, str]:
    """One run's answers to the notes' §26 rows, from its :func:`architecture`."""
    a = r.architecture
    if not a:
        return {}
    if a["recurrent"]:
        return {
            "encoder": _("GRU (recurrent), {layers} layer(s) × {width}").format(layers=a["layers"], width=a["width"]),
            "decoder": _("GRU + Bahdanau attention") if a["attention"] else _("GRU, one fixed context (no attention)"),
            "attention": _("additive, one head") if a["attention"] else _("none"),
            "positions": _("the recurrence's order (no encoding)"),
            "sequential": _("O(n): one step per position"),
            "path": _("O(n): through every step between"),
        }
    return {
        "encoder": _("multi-head self-attention, {layers} layer(s) × {width}").format(layers=a["layers"],
                                                                                      width=a["width"]),
        "decoder": _("masked self-attention + encoder-decoder attention") if "cross" in a["attention"]
        else _("masked (causal) self-attention"),
        "attention": _("scaled dot product, {heads} heads").format(heads=a["heads"]),
        "positions": _("{kind} positional encoding").format(
            kind=_({"sinusoidal": N_("sinusoidal"), "learned": N_("learned")}.get(a["positional"], a["positional"]))),
        "sequential": _("O(1): every position in one product"),
        "path": _("O(1): any position attends to any other"),
    }


def _longest(r: RunSummary) -> tuple[str, float, int] | None:
    """``(length range in words, BLEU, sentences)`` on the test split's longest sentences (:func:`longest_sample`)."""
    x = r.longest
    return (str(x["words"]), float(x["bleu"]), int(x["sentences"])) if x else None


def notes_table(comparison: Comparison) -> str:
    """The notes' §26 table (Bahdanau vs Transformer) with each row answered by the runs compared and the
    parallelism and long-range rows measured; where a measurement contradicts the notes, says so and why."""
    runs = [r for r in comparison.runs if r.architecture]
    if not runs:
        return ""
    names = [r.name for r in runs]
    rows = [_rows_of(r) for r in runs]
    label = {
        "encoder": _("encoder"), "decoder": _("decoder"), "attention": _("attention type"),
        "positions": _("position information"), "sequential": _("sequential operations (D2L)"),
        "path": _("maximum path length (D2L)"), "train": _("parallelism, measured: training {unit}/s").format(
            unit=unit_name(comparison.tgt_unit)),
        "long": _("long-range, measured: BLEU on the test split's longest sentences"),
    }
    lines = [
        _("## The notes' §26 table, on these runs"),
        "",
        _("The notes compare Bahdanau's model and the Transformer row by row; each row here is read off the runs' "
          "own models, and D2L's comparison (sequential operations, maximum path length; n = sentence length) is "
          "set beside what was measured."),
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for key in ("encoder", "decoder", "attention", "positions", "sequential", "path"):
        lines.append(f"| {label[key]} | " + " | ".join(x.get(key, "-") for x in rows) + " |")
    lines.append(f"| {label['train']} | " + " | ".join(_num(r.train_words_per_s, ',.0f') for r in runs) + " |")
    longest = [_longest(r) for r in runs]
    lines.append(f"| {label['long']} | " + " | ".join(
        _("{bleu:.2f} ({n} sentences of {bucket} {unit})").format(bleu=x[1], n=x[2], bucket=x[0],
                                                                   unit=unit_name(comparison.src_unit)) if x else "-"
        for x in longest) + " |")
    lengths = [x["length"] for x in runs[0].throughput]
    for i, n in enumerate(lengths):
        cells = [_rate(r.throughput[i]["positions_per_s"], [r.throughput[i].get("lo", math.nan),
                                                            r.throughput[i].get("hi", math.nan),
                                                            r.throughput[i].get("repeats", 0)], ",.0f")
                 if i < len(r.throughput) else "-" for r in runs]
        lines.append("| " + _("forward + backward positions/s, n = {n}").format(n=n) + " | " + " | ".join(cells) + " |")
    lines += ["", *_verdicts(runs, longest, unit_name(comparison.src_unit), unit_name(comparison.tgt_unit))]
    return "\n".join(lines)


def _verdicts(runs: list[RunSummary], longest: list[tuple[str, float] | None], src_unit: str,
              tgt_unit: str) -> list[str]:
    """What the measured rows say about the notes' two claims, for the first recurrent and the first
    attention-only run; honest where the runs contradict the notes. ``src_unit``, ``tgt_unit``: the units'
    names (:func:`unit_name`) of lengths and speeds."""
    rec = next((i for i, r in enumerate(runs) if r.architecture["recurrent"]), None)
    att = next((i for i, r in enumerate(runs) if not r.architecture["recurrent"]), None)
    if rec is None or att is None:
        return [_("(The notes' claims compare a recurrent run with a Transformer; these runs are all of one kind.)")]
    R, A = runs[rec], runs[att]
    out = []
    trend_rows = length_trend(A.throughput, R.throughput)
    ratios = [row["ratio"] for row in trend_rows]
    trend = ", ".join(f"n = {row['length']}: {row['ratio']:.2f}× ({row['lo']:.2f}–{row['hi']:.2f})"
                      for row in trend_rows)
    if math.isfinite(A.train_words_per_s) and math.isfinite(R.train_words_per_s) \
            and A.train_words_per_s < R.train_words_per_s:
        out.append(_("- Parallelism: contradicted by these runs' training speed: {gru} trained {g:,.0f} {unit}/s, "
                     "{tf} {t:,.0f}.").format(gru=R.name, g=R.train_words_per_s, tf=A.name, t=A.train_words_per_s,
                                              unit=tgt_unit))
        if ratios and min(ratios) > 1:
            out.append(_(
                "  Yet on batches of {P:,} positions (the rows above) the Transformer's forward + backward is {lo:.1f}–"
                "{hi:.1f}× faster. The runs trained on batches of {bg:,} and {bt:,} positions, where the time goes to "
                "launching many small operations more than to arithmetic, and a Transformer layer launches more of "
                "them (four projections, the attention, LayerNorms, an FFN) than a GRU step does; training also "
                "pays for the optimizer and the data. Doing every position at once pays when the batches are large "
                "enough to keep the cores busy.").format(P=THROUGHPUT_POSITIONS, lo=min(ratios), hi=max(ratios),
                                                          bg=R.architecture.get("batch"),
                                                          bt=A.architecture.get("batch")))
        else:
            out.append(_(
                "  Why: the sentences are short, so the GRU's sequential steps are few, and each is a small matrix "
                "product that a few CPU cores finish quickly, while each Transformer layer does more work per word "
                "(four projections, the attention itself, an FFN {ffn} wide). Doing every position at once pays "
                "when there are many positions and hardware that runs them side by side.").format(
                ffn=A.architecture.get("ffn")))
    else:
        out.append(_("- Parallelism: agrees. {tf} trained {t:,.0f} {unit}/s, {gru} {g:,.0f}.").format(
            tf=A.name, t=A.train_words_per_s, gru=R.name, g=R.train_words_per_s, unit=tgt_unit))
    if len(trend_rows) > 1:
        b, lo, hi = slope_interval([math.log(row["length"]) for row in trend_rows],
                                   [math.log(row["ratio"]) for row in trend_rows], [row["log_se"] for row in trend_rows])
        fit = _("slope of log(ratio) against log(n) {b:+.2f}, 95 per cent interval {lo:+.2f} to {hi:+.2f}").format(
            b=b, lo=lo, hi=hi)
        head = _("  Against sentence length ({tf} / {gru}, forward + backward positions/s, each the mean of repeated "
                 "timings with its 95 per cent interval; `attnlab scaling` measures the same on its ladder): {trend}; "
                 "{fit}").format(tf=A.name, gru=R.name, trend=trend, fit=fit)
        if lo > 0:
            tail = _("the Transformer gains as n grows, as O(1) against O(n) sequential operations predicts.")
        elif hi < 0:
            tail = _("the Transformer loses ground as n grows at these sizes on this machine, so the O(1) against "
                     "O(n) of sequential operations does not show here.")
        else:
            tail = _("can't tell whether the Transformer gains as n grows: the interval contains 0 (time it on "
                     "an idle machine, or with a longer cap, --timing-cap).")
        out.append(f"{head}: {tail}")
    la, lr = longest[att], longest[rec]
    if la and lr:
        if la[1] >= lr[1]:
            out.append(_("- Long-range: agrees. On the test split's {n} longest sentences ({bucket} {unit}) {tf} "
                         "scores {a:.2f} BLEU, {gru} {r:.2f}: a path of O(1) steps between any two positions against "
                         "O(n).").format(n=la[2], bucket=la[0], tf=A.name, a=la[1], gru=R.name, r=lr[1], unit=src_unit))
        else:
            out.append(_("- Long-range: contradicted on these runs. On the test split's {n} longest sentences ({bucket} "
                         "{unit}) {tf} scores {a:.2f} BLEU, {gru} {r:.2f}. A short path only helps a model that has "
                         "learned to use it: a small or briefly trained Transformer, or few long sentences in its "
                         "data, can outweigh it.").format(n=la[2], bucket=la[0], tf=A.name, a=la[1], gru=R.name,
                                                          r=lr[1], unit=src_unit))
    return out


def length_trend(a_rows: list[dict[str, Any]], r_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ratio of two models' :func:`throughput` rows at each length: ``ratio`` (of the mean rates), its 95 %
    interval ``lo``–``hi`` and ``log_se``, the standard error of log(ratio) (the two timings' errors combined;
    t with the smaller run's repeats - 1 degrees of freedom)."""
    out = []
    for a, r in zip(a_rows, r_rows):
        if a.get("log_mean") is None or r.get("log_mean") is None:
            la, lr, se, df = math.log(a["positions_per_s"]), math.log(r["positions_per_s"]), 0.0, 0
        else:
            la, lr = a["log_mean"], r["log_mean"]
            se, df = math.hypot(a["log_se"], r["log_se"]), min(a["repeats"], r["repeats"]) - 1
        half = t975(df) * se if se > 0 else 0.0
        out.append({"length": a["length"], "ratio": math.exp(la - lr), "lo": math.exp(la - lr - half),
                    "hi": math.exp(la - lr + half), "log_se": se})
    return out


def _figure(comparison: Comparison):
    """BLEU by source length per run (notes §26), with parameters and speeds as bars beside it."""
    runs = comparison.runs
    fig = new_figure((12, 4.4))
    ax_len, ax_par, ax_speed = fig.subplots(1, 3, width_ratios=[2.2, 1, 1.3])
    buckets = _buckets(runs)
    for r in runs:
        xs = [buckets.index(row["bucket"]) for row in r.by_length]
        ax_len.plot(xs, [row["bleu"] for row in r.by_length], "o-", label=f"{r.name} ({r.kind})")
    ax_len.set_xticks(range(len(buckets)), buckets)
    ax_len.set(title=_("BLEU by source length"), xlabel=_("source length ({unit})").format(unit=unit_name(comparison.src_unit)), ylabel="BLEU")
    ax_len.grid(alpha=0.3)
    if runs and any(r.by_length for r in runs):
        ax_len.legend(fontsize=7)
    names = [r.name for r in runs]
    xs = list(range(len(runs)))
    ax_par.bar(xs, [r.parameters for r in runs], color="tab:gray")
    ax_par.set_xticks(xs, names, rotation=20, fontsize=7)
    ax_par.set(title=_("trainable parameters"))
    width = 0.4
    ax_speed.bar(
        [x - width / 2 for x in xs],
        [r.train_words_per_s if math.isfinite(r.train_words_per_s) else 0 for r in runs],
        width,
        label=_("train {unit}/s").format(unit=unit_name(comparison.tgt_unit)),
        color="tab:blue",
    )
    ax2 = ax_speed.twinx()
    ax2.bar(
        [x + width / 2 for x in xs],
        [r.translate_sentences_per_s for r in runs],
        width,
        label=_("translate sentences/s"),
        color="tab:orange",
    )
    ax_speed.set_xticks(xs, names, rotation=20, fontsize=7)
    ax_speed.set_ylabel(_("train target {unit}/s").format(unit=unit_name(comparison.tgt_unit)), color="tab:blue")
    ax2.set_ylabel(_("translation sentences/s (greedy)"), color="tab:orange")
    ax_speed.set_title(_("speed"))
    fig.suptitle(
        _("compare: {runs}\nBLEU on {scored_on}").format(
            runs=" vs ".join(f"{r.name} ({r.kind})" for r in runs), scored_on=comparison.scored_on),
        fontsize=9,
    )
    return fig

