"""Where training runs' wall clock went, part by part, from each run's ``meta.json`` (``wall_s``).

    python bench/wallclock.py RUN [RUN …]          # a markdown table: one column per run
    python bench/wallclock.py --per-update RUN …   # milliseconds per update instead of seconds

The parts are those of ``attnlab/training/wall.py``: ``setup`` (before the budget's clock starts), then
what the budget's seconds were spent on — batches, the ranks' agreement, the updates themselves,
logging, validation (loss, BLEU, probes, curves), checkpoints, and ``other`` (the loop). The share
column is of the budget's seconds (setup excluded), so ``update`` is the share that trained the model.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnlab.training.wall import PARTS  # noqa: E402


def load(run: Path) -> dict:
    meta = json.loads((run / "meta.json").read_text())
    if not meta.get("wall_s"):
        raise SystemExit(f"error: {run}/meta.json has no wall_s (a run trained before runs recorded it, or "
                         "one still training); train it again")
    return meta


def table(runs: list[Path], per_update: bool) -> str:
    metas = [load(r) for r in runs]
    names = [n for n in (*PARTS, "other") if any(n in m["wall_s"] for m in metas)]
    unit = "ms per update" if per_update else "s (share of the budget's seconds)"
    head = "| part | " + " | ".join(f"{r.name} ({m['steps']:,} updates)" for r, m in zip(runs, metas)) + " |"
    lines = [f"Wall clock by part, {unit}.", "", head, "|---|" + "---|" * len(runs)]
    for name in names:
        cells = []
        for m in metas:
            sec = m["wall_s"].get(name, 0.0)
            budget = sum(v for k, v in m["wall_s"].items() if k != "setup")
            if per_update:
                cells.append(f"{1000 * sec / max(m['steps'], 1):.1f}")
            else:
                cells.append(f"{sec:.1f}" + ("" if name == "setup" else f" ({sec / max(budget, 1e-9):.1%})"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--per-update", action="store_true", help="milliseconds per update instead of seconds")
    args = p.parse_args(argv)
    print(table(args.runs, args.per_update))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
