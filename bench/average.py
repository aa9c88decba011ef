"""Does averaging the last checkpoints of a budgeted run beat its last one? (issue #14, item 3)

A run trained with ``train.save_every=N train.keep_checkpoints=K`` keeps its last K step folders.
This script averages the weights of the last k of them (uniformly, for each k asked) and scores each
average on the test split of fra-eng, greedy, beside the last checkpoint alone — the same scoring as
bench/quality.py. Nothing is written into the run; the figures are printed.

    python bench/average.py runs/quality/transformer-15min --last 1,2,4,6 --data ../shared/data
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import torch

from attnlab import runs
from attnlab.data import corpus
from attnlab.evaluation.evaluate import evaluate_split, is_right, notes_examples
from attnlab.translator import Translator


def step_folders(run: Path) -> list[Path]:
    """The run's ``step-N`` checkpoint folders, oldest first."""
    found = [p for p in (run / "checkpoints").iterdir() if re.fullmatch(r"step-\d+", p.name)]
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def averaged_state(folders: list[Path], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The uniform average of the folders' weights (each checked against its manifest first)."""
    total: dict[str, torch.Tensor] = {}
    for f in folders:
        runs.load_weights(f, model)
        for k, v in model.state_dict().items():
            total[k] = total.get(k, 0) + v.detach().double()
    return {k: (v / len(folders)).float() for k, v in total.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--last", default="1,2,4", help="comma-separated k: average the last k checkpoints")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    folders = step_folders(args.run)
    tr = Translator.from_run(args.run, which="last")
    data_cfg = dataclasses.replace(tr.cfg.data, max_pairs=0, **({"data_path": args.data} if args.data else {}))
    test = corpus.prepare(data_cfg, tokenizers=(tr.src_tok, tr.tgt_tok)).splits["test"]
    print(f"{args.run}: step folders {[f.name for f in folders]}")
    print("| last k | steps averaged | BLEU greedy | chrF | notes' 4 right |")
    print("|---|---|---|---|---|")
    for k in (int(x) for x in args.last.split(",")):
        chosen = folders[-k:]
        tr.model.load_state_dict(averaged_state(chosen, tr.model))
        tr.model.eval()
        scores = evaluate_split(tr, test, beam_size=1)
        right = sum(is_right(e["source"], e["translation"], e["reference"]) for e in notes_examples(tr, beam_size=1))
        steps = ", ".join(f.name.split("-")[1].lstrip("0") for f in chosen)
        print(f"| {len(chosen)} | {steps} | {scores['bleu']:.1f} | {scores['chrf']:.1f} | {right} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
