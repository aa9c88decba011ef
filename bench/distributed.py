"""Data-parallel throughput: target tokens/s of the same training with 1 and 2 processes (torchrun, DDP).

Each process keeps the same per-process batch (``data.batch_tokens``), so 2 processes train on a
global batch twice as large (weak scaling, how DDP is used). On a 2-core CPU expect little gain —
the processes share the cores (``torch.set_num_threads(cores // 2)`` each) and gloo all-reduces
every step; the point there is correctness. On GPUs each process owns a device.

    python bench/distributed.py [--steps 120] [--device auto]

Prints one line for bench/RESULTS.md (and the raw numbers above it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """\
[data]
dataset = "numbers"
numbers_size = 4000
num_steps = 24
batch_tokens = {batch_tokens}
[model]
kind = "transformer"
num_hiddens = 128
num_layers = 2
num_heads = 4
ffn_num_hiddens = 512
dropout = 0.1
[train]
max_steps = {steps}
log_every = {log_every}
eval_every = 0
save_every = 0
eval_max_sentences = 16
warmup_steps = 20
device = "{device}"
"""


def run(nproc: int, steps: int, batch_tokens: int, device: str, root: Path) -> dict:
    cfg = root / "bench.toml"
    log_every = max(steps // 6, 1)
    cfg.write_text(CONFIG.format(batch_tokens=batch_tokens, steps=steps, log_every=log_every, device=device))
    out = root / f"run-{nproc}"
    cmd = [
        sys.executable,
        "-m",
        "attnlab",
        "train",
        "--model",
        "transformer",
        "--config",
        str(cfg),
        "--out",
        str(out),
        "--quiet",
    ]
    if nproc > 1:
        cmd.append(f"--nproc={nproc}")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env={**os.environ, "ATTNLAB_OFFLINE": "1"}, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r.get("event") == "train"][1:]  # the first window includes warm-up
    span = train[-1]["elapsed_s"] - train[0]["elapsed_s"]
    tokens = train[-1]["tokens_seen"] - train[0]["tokens_seen"]
    meta = json.loads((out / "meta.json").read_text())
    return {
        "nproc": nproc,
        "tokens_per_s": tokens / span,
        "steps_per_s": (train[-1]["step"] - train[0]["step"]) / span,
        "wall_s": wall,
        "threads": meta["threads"],
        "device": meta["device"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--batch-tokens", type=int, default=1024, help="per process")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        res = [run(n, args.steps, args.batch_tokens, args.device, Path(tmp)) for n in (1, 2)]
    for r in res:
        print(json.dumps(r))
    one, two = res
    print(
        f"| distributed (DDP, torchrun) | {one['tokens_per_s']:,.0f} tok/s on 1 process, "
        f"{two['tokens_per_s']:,.0f} tok/s on 2 (x{two['tokens_per_s'] / one['tokens_per_s']:.2f}) | "
        f"transformer d=128 L=2, numbers, batch_tokens={args.batch_tokens}/process, {args.steps} steps, "
        f"{one['device']}, {cores} cores, gloo, threads/process {one['threads']} vs {two['threads']}, "
        f"load average {os.getloadavg()[0]:.1f} (other jobs share the cores: figures are noisy) |"
    )


if __name__ == "__main__":
    main()
