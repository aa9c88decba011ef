"""`attnlab compare RUN_A RUN_B …`: trained runs side by side (notes §26: Bahdanau vs Transformer).

For each run: trainable parameters; training speed (target tokens/s, from ``meta.json`` or the
logged training events); translation speed (sentences/s, measured now, greedy, on one fixed sample
of validation sentences — the same text for every run, taken from the first run's data); BLEU
overall and by source length (from ``eval-test.json`` when the run has one, else computed now on a
validation sample, said so in the table); and the translations of the notes' example sentences.

The §26 claim to look at: attention models keep their BLEU on long sentences, where a fixed context
vector (``seq2seq``) fails; the Transformer trains faster per token (it is parallel over positions)
but not necessarily translates faster (decoding is sequential for every model).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from attnlab.data import corpus
from attnlab.data.text import detokenize
from attnlab.errors import AttnlabError
from attnlab.evaluation.evaluate import evaluate_split, notes_examples
from attnlab.inspection.plots import new_figure, save_figure
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.runs import read_metrics, read_run
from attnlab.translator import Translator


@dataclass
class RunSummary:
    run: str
    name: str
    kind: str
    parameters: int
    train_tokens_per_s: float
    translate_sentences_per_s: float
    bleu: float
    chrf: float
    bleu_source: str  # "eval-test.json" or "valid sample (N sentences)"
    by_length: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)


def _train_speed(meta: dict[str, Any], records: list[dict[str, Any]]) -> float:
    if isinstance(meta.get("mean_tokens_per_s"), int | float) and meta["mean_tokens_per_s"] > 0:
        return float(meta["mean_tokens_per_s"])
    speeds = [r["tokens_per_s"] for r in records if r.get("event") == "train" and "tokens_per_s" in r]
    return sum(speeds) / len(speeds) if speeds else float("nan")


def _fixed_sample(tr, n: int) -> list[str]:
    """``n`` distinct validation sources (text), the same for every run compared."""
    prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    out: list[str] = []
    for name in ("valid", "test"):
        split = prepared.splits.get(name)
        if split is None:
            continue
        out += [detokenize(split.src_text[i].split(), "en") for i in split.unique_sources()]
    if not out:
        raise AttnlabError(f"{tr.run_dir}: the validation and test splits are empty; nothing to compare on")
    return out[:n]


def measure_translation_speed(tr, sentences: list[str], repeats: int = 1) -> float:
    """Greedy sentences/s on ``sentences``, timed after one untimed warm-up pass over the same sample
    (the first pass in a process pays for thread pools and allocator growth)."""
    tr.translate(sentences)
    t0 = time.perf_counter()
    for _ in range(repeats):
        tr.translate(sentences)
    return repeats * len(sentences) / max(time.perf_counter() - t0, 1e-9)


def summarise_run(
    run_dir: str | Path,
    sample: list[str] | None,
    bleu_sentences: int = 200,
    which: str = "best",
    device: str = "cpu",
) -> tuple[RunSummary, list[str]]:
    """Everything the comparison shows for one run; returns it and the speed sample used."""
    run_dir = Path(run_dir)
    files = read_run(run_dir)
    tr = Translator.from_run(run_dir, which=which, device=device)
    if sample is None:
        sample = _fixed_sample(tr, bleu_sentences)
    params = sum(p.numel() for p in tr.model.parameters() if p.requires_grad)  # tied weights once
    speed = measure_translation_speed(tr, sample)
    report = None
    path = run_dir / "eval-test.json"
    if path.is_file():
        try:
            report = json.loads(path.read_text(encoding="utf-8"))
            source = f"eval-test.json ({report.get('sentences', '?')} test sentences)"
        except (OSError, ValueError):
            report = None
    if report is None or "bleu" not in report:
        prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
        split = prepared.splits["valid"] if prepared.splits["valid"].src else prepared.splits["test"]
        report = evaluate_split(tr, split, beam_size=1, max_sentences=bleu_sentences)
        source = f"valid sample ({report['sentences']} sentences, greedy)"
    summary = RunSummary(
        str(run_dir),
        run_dir.name,
        files.config.model.kind,
        params,
        _train_speed(files.meta, read_metrics(run_dir)),
        speed,
        float(report["bleu"]),
        float(report.get("chrf", float("nan"))),
        source,
        list(report.get("by_length", [])),
        notes_examples(tr),
    )
    return summary, sample


def compare_runs(
    runs: list[str | Path], bleu_sentences: int = 200, which: str = "best", device: str = "cpu"
) -> list[RunSummary]:
    """Summaries of ``runs`` in order; the translation-speed sample comes from the first run's data."""
    if len(runs) < 2:
        raise AttnlabError("give at least two run folders to compare, e.g. `attnlab compare runs/a runs/b`")
    out, sample = [], None
    for run in runs:
        summary, sample = summarise_run(run, sample, bleu_sentences, which, device)
        out.append(summary)
    return out


def _num(x: float, fmt: str) -> str:
    return "-" if not math.isfinite(x) else format(x, fmt)


def format_markdown(runs: list[RunSummary]) -> str:
    names = [r.name for r in runs]
    lines = [
        "# Comparison: " + " vs ".join(names),
        "",
        "| run | model | parameters | train tokens/s | translate sentences/s | BLEU | chrF | scored on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r.name} | {r.kind} | {r.parameters:,} | {_num(r.train_tokens_per_s, ',.0f')} | "
            f"{_num(r.translate_sentences_per_s, ',.1f')} | {r.bleu:.2f} | {_num(r.chrf, '.2f')} | "
            f"{r.bleu_source} |"
        )
    buckets: list[str] = []
    for r in runs:
        for row in r.by_length:
            if row["bucket"] not in buckets:
                buckets.append(row["bucket"])
    if buckets:
        lines += [
            "",
            "## BLEU by source length (tokens); n = sentences",
            "",
            "| length | " + " | ".join(names) + " |",
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
            "## The notes' examples",
            "",
            "| source | reference | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for i, ex in enumerate(runs[0].examples):
            cells = [r.examples[i]["translation"] if i < len(r.examples) else "-" for r in runs]
            lines.append(f"| {ex['source']} | {ex['reference']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def draw_comparison(runs: list[RunSummary], out_dir: str | Path, stem: str = "compare") -> list[Path]:
    """BLEU by source length per run (notes §26), with parameters and speeds as bars beside it."""
    fig = new_figure((12, 4.2))
    ax_len, ax_par, ax_speed = fig.subplots(1, 3, width_ratios=[2.2, 1, 1.3])
    buckets: list[str] = []
    for r in runs:
        for row in r.by_length:
            if row["bucket"] not in buckets:
                buckets.append(row["bucket"])
    for r in runs:
        xs = [buckets.index(row["bucket"]) for row in r.by_length]
        ax_len.plot(xs, [row["bleu"] for row in r.by_length], "o-", label=f"{r.name} ({r.kind})")
    ax_len.set_xticks(range(len(buckets)), buckets)
    ax_len.set(title="BLEU by source length", xlabel="source length (tokens)", ylabel="BLEU")
    ax_len.grid(alpha=0.3)
    if runs and any(r.by_length for r in runs):
        ax_len.legend(fontsize=7)
    names = [r.name for r in runs]
    xs = list(range(len(runs)))
    ax_par.bar(xs, [r.parameters for r in runs], color="tab:gray")
    ax_par.set_xticks(xs, names, rotation=20, fontsize=7)
    ax_par.set(title="trainable parameters")
    width = 0.4
    ax_speed.bar(
        [x - width / 2 for x in xs],
        [r.train_tokens_per_s if math.isfinite(r.train_tokens_per_s) else 0 for r in runs],
        width,
        label="train tokens/s",
        color="tab:blue",
    )
    ax2 = ax_speed.twinx()
    ax2.bar(
        [x + width / 2 for x in xs],
        [r.translate_sentences_per_s for r in runs],
        width,
        label="translate sentences/s",
        color="tab:orange",
    )
    ax_speed.set_xticks(xs, names, rotation=20, fontsize=7)
    ax_speed.set_ylabel("train target tokens/s", color="tab:blue")
    ax2.set_ylabel("translation sentences/s (greedy)", color="tab:orange")
    ax_speed.set_title("speed")
    fig.suptitle("compare: " + " vs ".join(f"{r.name} ({r.kind})" for r in runs))
    return save_figure(fig, Path(out_dir) / stem)


def write_comparison(runs: list[RunSummary], out_dir: str | Path) -> list[Path]:
    """``compare.md``, ``compare.json`` and the figure; returns the written paths."""
    out_dir = Path(out_dir)
    md = out_dir / "compare.md"
    atomic_write_text(md, format_markdown(runs) + "\n")
    js = out_dir / "compare.json"
    atomic_write_json(
        js,
        {
            "runs": [
                {
                    k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                    for k, v in asdict(r).items()
                }
                for r in runs
            ]
        },
    )
    return [md, js, *draw_comparison(runs, out_dir)]
