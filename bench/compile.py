"""Does ``torch.compile`` make attnlab's training step faster on the CPU? Eager against compiled, in one run.

    python bench/compile.py                       # the Transformer preset, 30 timed batches
    python bench/compile.py --model bahdanau --kernels plain --batches 20

Both trainers are the loop's own step (``sequence_loss`` → backward → clipping → AdamW, as
``bench/throughput.py``'s ``ours_trainer``), built from the same seed, on the same length-bucketed token
batches; one of them has its model wrapped in ``torch.compile`` (inductor, ``dynamic=True``: every batch has
its own shape, and a static compile would recompile for each). The loss head (``attnlab.fast``'s fused W_o +
cross-entropy, or ``nn.Linear`` + ``F.cross_entropy`` with ``--kernels plain``) stays outside the compiled
graph, as it is outside the model. They alternate batch by batch, the order within each pair alternating
too, and the ratio is the median over batches of eager time ÷ compiled time on the same batch; the first
``--warmup`` batches (where inductor compiles) are timed apart. Inductor needs a C++ compiler; without one
this says so and stops.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

import throughput as T  # noqa: E402

from attnlab import fast  # noqa: E402
from attnlab.models import build_model  # noqa: E402


def compiled_trainer(cfg, n_src: int, n_tgt: int, device: torch.device):
    """``ours_trainer`` with the model's forward compiled (the same seed, so the same initial weights)."""
    model, step = T.ours_trainer(cfg, n_src, n_tgt, device)
    torch.manual_seed(0)
    ref = build_model(cfg.model, n_src, n_tgt).to(device)
    fast.apply(ref, cfg.train.kernels, device)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), ref.state_dict().values()))
    model.forward = torch.compile(model.forward, dynamic=True)
    return model, step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="transformer", choices=("transformer", "bahdanau"))
    p.add_argument("--batches", type=int, default=30, help="timed batches (after the warm-up)")
    p.add_argument("--warmup", type=int, default=6, help="batches run first, untimed in the ratio (compiles)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-tokens", type=int, default=T.BATCH_TOKENS)
    p.add_argument("--kernels", default="auto", choices=("auto", "fast", "plain"))
    p.add_argument("--data", help="fra-eng zip/folder (else $ATTNLAB_DATA_DIR)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if shutil.which("c++") is None and shutil.which("g++") is None:
        print("no C++ compiler on PATH: torch.compile's inductor cannot build its CPU kernels here")
        return 2
    torch.set_num_threads(args.threads)
    setup = T.load_data(args)
    cfg = T.model_config(args.model, args.kernels)
    n_src, n_tgt = len(setup.prepared.src_tok), len(setup.prepared.tgt_tok)
    batches = T.train_batches(setup, args.batches + args.warmup)
    _, eager = T.ours_trainer(cfg, n_src, n_tgt, setup.device)
    _, comp = compiled_trainer(cfg, n_src, n_tgt, setup.device)
    t0 = time.perf_counter()
    warm_eager = sum(T.timed(partial(eager, b), setup.device) for b in batches[:args.warmup])
    warm_comp = sum(T.timed(partial(comp, b), setup.device) for b in batches[:args.warmup])
    ratios, te, tc, tokens = [], 0.0, 0.0, 0
    for i, b in enumerate(batches[args.warmup:]):
        if i % 2 == 0:
            a, c = T.timed(partial(eager, b), setup.device), T.timed(partial(comp, b), setup.device)
        else:
            c, a = T.timed(partial(comp, b), setup.device), T.timed(partial(eager, b), setup.device)
        ratios.append(a / c)
        te, tc, tokens = te + a, tc + c, tokens + b.num_tgt_tokens
    print(f"{args.model} ({args.kernels} kernels, {args.threads} thread(s), {args.batch_tokens}-token batches, "
          f"torch {torch.__version__}; {T.machine()})")
    print(f"warm-up ({args.warmup} batches): eager {warm_eager:.1f} s, compiled {warm_comp:.1f} s (compiling)")
    print(f"timed ({args.batches} batches): eager {tokens / te:,.0f} tok/s, compiled {tokens / tc:,.0f} tok/s")
    print(f"ratio compiled_over_eager {statistics.median(ratios):.2f} (median of eager/compiled per batch; "
          f"{time.perf_counter() - t0:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
