"""Quality under a wall-clock budget: train each model on fra-eng for M minutes, then score the test split.

    python bench/quality.py --minutes 15 --models transformer,bahdanau,decoder-only,seq2seq
    python bench/quality.py --minutes 60 --models transformer --tag 60min
    python bench/quality.py --minutes 12 --models transformer --like-peak 64 --baseline
    python bench/quality.py --minutes 12 --models transformer --slow-share 0.38 --baseline

``--like-peak GFLOPS`` measures this machine's fp32 matmul peak and shortens the wall-clock budget by
the ratio, so that "12 minutes like 64 GFLOP/s" spends on a fast machine what 12 minutes buy on a
64 GFLOP/s laptop (model sizing, ``train.size=auto``, keys on peak x minutes and so sees the same
compute). It charges none of the per-update costs a slow machine pays in full (Python, thread wake-ups,
validation, probes), so it is optimistic. ``--slow-share S`` instead runs the whole invocation under
``../shared/tools/slow_machine.sh S`` (a CPU quota of S of the two cores): the probe, the sizing, every
update and the clock then see the slower machine; calibrate S so that the probe printed first reads the
speed you mean (0.38 reads about 64 GFLOP/s on a 175-185 GFLOP/s machine). ``--baseline`` also trains the plain-PyTorch recipe (bench/recipe.py) on the same budget and
test sentences, and both go to the ``## Budget × machine`` table.

Each model trains with its preset (`attnlab.config.PRESETS`, the settings the package ships) plus
any `--set section.key=value`. Test BLEU/chrF are sacreBLEU on detokenised text against all references
of each source (single-reference beside). The table goes to bench/RESULTS.md under `## Quality`
(one row per model and budget, replaced when rerun), with the exact command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnlab import config as C  # noqa: E402
from attnlab.data import corpus  # noqa: E402
from attnlab.evaluation.evaluate import (  # noqa: E402
    evaluate_split,
    is_right,  # noqa: E402
    notes_examples,
    write_report,
)
from attnlab.training.loop import train  # noqa: E402
from attnlab.translator import Translator  # noqa: E402

_INSIDE = "ATTNLAB_BENCH_SLOW_SHARE"  # set once the invocation runs under the quota (no second exec)


def _seed(overrides: list[str]) -> str:
    return next((o.split("=", 1)[1] for o in overrides if o.startswith("train.seed=")), "42")


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_one(kind: str, minutes: float, out: Path, data: str | None, threads: int, overrides: list[str],
            beam: int, eval_only: bool = False, tag: str = "") -> dict:
    cfg = C.apply_overrides(C.preset(kind), [f"train.max_minutes={minutes}", f"train.threads={threads}",
                                             "data.dataset=fra-eng", *([f"data.data_path={data}"] if data else []),
                                             *overrides])
    run = out / f"{kind}-{tag or f'{minutes:g}min'}"
    if eval_only:  # score an existing run again (e.g. after a fix in evaluation), no training
        meta0 = json.loads((run / "meta.json").read_text())
        res = argparse.Namespace(step=meta0["steps"], tokens_per_s=meta0["mean_tokens_per_s"],
                                 best_bleu=meta0["best_valid_bleu"])
        train_s = meta0["elapsed_s"]
    else:
        if run.exists():
            import shutil

            shutil.rmtree(run)
        t0 = time.time()
        # The --set keys stay as given under a size tier, also those equal to the preset's value.
        res = train(cfg, run, progress=False, explicit=frozenset(o.split("=", 1)[0] for o in overrides))
        train_s = time.time() - t0
    tr = Translator.from_run(run, which="last")  # what the schedule was planned to end on
    # Every run is scored on the whole test split, also one trained on the shortest pairs only
    # (data.max_pairs): the split is by a hash of the source, so its test sentences are never trained on.
    # A run folder keeps no data path (it may move), so the corpus is the one this invocation was given.
    prepared = corpus.prepare(dataclasses.replace(tr.cfg.data, max_pairs=0, data_path=data or tr.cfg.data.data_path),
                              tokenizers=(tr.src_tok, tr.tgt_tok))
    greedy = evaluate_split(tr, prepared.splits["test"], beam_size=1)
    beamed = evaluate_split(tr, prepared.splits["test"], beam_size=beam) if beam > 1 else greedy
    examples = notes_examples(tr, beam_size=beam)
    write_report(run, "test", dict(beamed), examples)
    meta = json.loads((run / "meta.json").read_text())
    return {"model": kind, "minutes": minutes, "updates": res.step, "epochs": round(meta.get("tokens_seen", 0) /
            max(1, sum(len(t) + 1 for t in prepared.splits["train"].tgt)), 2),
            "tokens_per_s": res.tokens_per_s, "train_s": train_s, "params": meta.get("model_parameters"),
            "bleu_greedy": greedy["bleu"], "bleu": beamed["bleu"], "chrf": beamed["chrf"],
            "bleu_single": beamed["bleu_single"], "beam": beam, "signature": beamed["bleu_signature"],
            "by_length": beamed["by_length"], "examples": examples,
            "valid_bleu_best": res.best_bleu, "run": str(run), "size": tr.cfg.train.size,
            "examples_right": sum(is_right(e["source"], e["translation"], e["reference"]) for e in examples)}


def write_results(rows: list[dict], cmd: str) -> None:
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    section = "## Quality"
    head = (f"{section}\n\nTest split of fra-eng: each of its 3,507 English sources once, scored against all its "
            "French translations (single-reference: the first one), sacreBLEU on "
            "detokenised lowercase text. Each model trained under a wall-clock budget on this machine; "
            "rows are replaced when rerun.\n\n"
            "| model | budget | params | updates | epochs | target tok/s | BLEU greedy | BLEU beam | chrF | "
            "BLEU 1-ref | date, commit, machine | command |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    old_rows: dict[tuple[str, str], str] = {}
    notes: list[str] = []  # the hand-written paragraphs under the table are kept
    m = re.search(rf"{section}\n(.*?)(?=\n## |\Z)", text, flags=re.S)
    if m:
        lines = m.group(1).split("<!-- quality details -->")[0].splitlines()
        last_row = max((i for i, line in enumerate(lines) if line.startswith("|")), default=len(lines))
        for line in lines[: last_row + 1]:  # main table rows only
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| ") and len(cells) >= 3 and cells[0] not in ("model", "---"):
                old_rows[(cells[0], cells[1])] = line
        notes = lines[last_row + 1 :]
    machine = f"{platform.machine()}, {os.cpu_count()} cores"
    for r in rows:
        old_rows[(r["model"], f"{r['minutes']:g} min")] = (
            f"| {r['model']} | {r['minutes']:g} min | {r['params']:,} | {r['updates']:,} | {r['epochs']} | "
            f"{r['tokens_per_s']:,.0f} | {r['bleu_greedy']:.1f} | {r['bleu']:.1f} (beam {r['beam']}) | "
            f"{r['chrf']:.1f} | {r['bleu_single']:.1f} | {time.strftime('%Y-%m-%d')}, {r['commit']}, {machine} | "
            f"`{cmd}` |")
    body = head + "\n".join(old_rows.values()) + "\n" + "".join(f"{line}\n" for line in notes).rstrip("\n") + "\n"
    extra = []
    for r in rows:
        extra.append(f"\n### {r['model']}, {r['minutes']:g} min\n\nsignature: `{r['signature']}`\n\n"
                     "| source length | sentences | BLEU |\n|---|---|---|\n"
                     + "\n".join(f"| {b['bucket']} | {b['sentences']} | {b['bleu']:.1f} |" for b in r["by_length"])
                     + "\n\n| notes' example | translation | D2L BLEU |\n|---|---|---|\n"
                     + "\n".join(f"| {e['source']} | {e['translation']} | {e['d2l_bleu']:.3f} |" for e in r["examples"])
                     + "\n")
    details_key = "<!-- quality details -->"
    new_section = body + f"\n{details_key}\n" + "".join(extra)
    if m:
        old_details = m.group(1).split(details_key, 1)[1] if details_key in m.group(1) else ""
        kept = [blk for blk in re.split(r"(?=\n### )", old_details) if blk.strip() and not any(
            blk.strip().startswith(f"### {r['model']}, {r['minutes']:g} min") for r in rows)]
        new_section = body + f"\n{details_key}\n" + "".join(kept) + "".join(extra)
        text = text[:m.start()] + new_section + text[m.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + new_section
    path.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="transformer,bahdanau,decoder-only,seq2seq")
    p.add_argument("--minutes", type=float, default=15.0)
    p.add_argument("--data", default=os.environ.get("ATTNLAB_DATA_DIR"))
    p.add_argument("--out", default="runs/quality")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads for every trial (default 0: as attnlab chooses, the CPUs a quota allows)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--set", action="append", default=[], dest="overrides", metavar="section.key=value")
    p.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    p.add_argument("--eval-only", action="store_true", help="score existing runs again without training")
    p.add_argument("--like-peak", type=float, default=0.0, metavar="GFLOPS",
                   help="simulate a machine of this fp32 matmul peak: the budget shrinks by peak ratio")
    p.add_argument("--slow-share", type=float, default=0.0, metavar="S",
                   help="run everything under slow_machine.sh S (a CPU quota): a slow machine that charges "
                        "every per-update cost, unlike --like-peak")
    p.add_argument("--slow-tool", default=str(ROOT.parent / "shared" / "tools" / "slow_machine.sh"),
                   help="the quota script --slow-share runs under")
    p.add_argument("--baseline", action="store_true", help="also train the plain recipe (bench/recipe.py)")
    args = p.parse_args()
    if args.slow_share and args.like_peak:
        p.error("--slow-share and --like-peak are two ways to be slow: give one")
    if args.slow_share and os.environ.get(_INSIDE) != str(args.slow_share):
        if not os.access(args.slow_tool, os.X_OK):
            p.error(f"--slow-tool {args.slow_tool} is not an executable script")
        env = {**os.environ, _INSIDE: str(args.slow_share)}
        os.execvpe(args.slow_tool, [args.slow_tool, str(args.slow_share), sys.executable, *sys.argv], env)
    started_at = commit()  # the code that trains (the tree may move on while a long run goes)
    import torch

    from attnlab import device

    if args.threads <= 0:
        args.threads = device.cpu_threads()  # what train.threads=0 chooses: no more threads than the quota's CPUs
    torch.set_num_threads(args.threads)
    peak = device.measure_peak_gflops(seconds=1.0)
    minutes = args.minutes * (args.like_peak / peak if args.like_peak else 1.0)
    if args.slow_share:
        machine = f"quota {args.slow_share:g} (probe {peak:.0f}), seed {_seed(args.overrides)}"
        tag = f"{args.minutes:g}min-quota{args.slow_share:g}-s{_seed(args.overrides)}"
    else:
        machine = f"like {args.like_peak:g}" if args.like_peak else f"native {peak:.0f}"
        tag = f"{args.minutes:g}min-like{args.like_peak:g}" if args.like_peak else ""
    print(f"machine peak {peak:.0f} GFLOP/s on {args.threads} threads; budget {args.minutes:g} min "
          f"({machine if args.slow_share else machine + ' GFLOP/s'}) = {minutes:.2f} min here", flush=True)
    rows = []
    for kind in args.models.split(","):
        row = run_one(kind.strip(), minutes, Path(args.out), args.data, args.threads, args.overrides, args.beam,
                      eval_only=args.eval_only, tag=tag)
        row.update(commit=started_at, budget=args.minutes, machine=machine, peak=peak)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("by_length",)}, ensure_ascii=False), flush=True)
    baseline = None
    if args.baseline:
        sys.path.insert(0, str(ROOT / "bench"))
        import recipe

        baseline = recipe.run(minutes, args.data, args.threads)
        baseline.update(budget=args.minutes, machine=machine, peak=peak)
        print(json.dumps(baseline), flush=True)
    if not args.no_write:
        cmd = "python bench/quality.py " + " ".join(a for a in sys.argv[1:] if a != "--eval-only")
        if not args.like_peak and not args.slow_share:
            write_results(rows, cmd)
        write_budget_table(rows, baseline, cmd)
    return 0


def write_budget_table(rows: list[dict], baseline: dict | None, cmd: str) -> None:
    """One row per (model, budget, machine) in `## Budget × machine`, ours beside the plain recipe."""
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text()
    section = "## Budget × machine"
    head = (f"{section}\n\nTest split of fra-eng (3,507 sources, all references, sacreBLEU, greedy). `like N`: the "
            "budget shrunk by this machine's measured peak / N (bench/quality.py --like-peak); `native P`: this "
            "machine, measured peak P GFLOP/s on the threads it trains with. The plain recipe is bench/recipe.py, trained on the "
            "same budget in the same invocation.\n\n"
            "| model | budget | machine (GFLOP/s) | minutes here | size | updates | tok/s | BLEU greedy | chrF | "
            "notes' 4 right | plain recipe BLEU / chrF / updates | ours ÷ recipe | date, commit | command |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    m = re.search(rf"{section}\n(.*?)(?=\n## |\Z)", text, flags=re.S)
    old: dict[tuple[str, str, str], str] = {}
    notes = ""
    if m:
        body = m.group(1)
        table = body.split("<!-- budget notes -->", 1)[0]  # the notes below hold tables of their own
        for line in table.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if line.startswith("| ") and len(cells) > 3 and cells[0] not in ("model", "---"):
                old[(cells[0], cells[1], cells[2])] = line
        notes = body.split("<!-- budget notes -->", 1)[1] if "<!-- budget notes -->" in body else ""
    for r in rows:
        base = (f"{baseline['bleu_greedy']:.1f} / {baseline['chrf']:.1f} / {baseline['updates']:,}" if baseline else "")
        ratio = ("" if not baseline else "– (the recipe learned nothing)" if baseline["bleu_greedy"] < 1
                 else f"{r['bleu_greedy'] / baseline['bleu_greedy']:.2f}×")
        old[(r["model"], f"{r['budget']:g} min", r["machine"])] = (
            f"| {r['model']} | {r['budget']:g} min | {r['machine']} | {r['minutes']:.2f} | {r['size']} | "
            f"{r['updates']:,} | {r['tokens_per_s']:,.0f} | {r['bleu_greedy']:.1f} | {r['chrf']:.1f} | "
            f"{r['examples_right']} | {base} | {ratio} | {time.strftime('%Y-%m-%d')}, {r['commit']} | `{cmd}` |")
    new = head + "\n".join(old[k] for k in sorted(old)) + "\n\n<!-- budget notes -->" + notes.rstrip("\n") + "\n"
    text = text[:m.start()] + new + text[m.end():] if m else text.rstrip("\n") + "\n\n" + new
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
