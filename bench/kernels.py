"""The kernels of attnlab/fast/ alone, each against the plain PyTorch code it stands in for, in one process.

    python bench/kernels.py            # ~1 minute on 1 thread; prints `kernel NAME RATIO` lines

Each pair runs alternately (A, B, B, A, ...) and the ratio is the median over rounds of
``time(PyTorch) / time(attnlab)``, so load from other processes hits both sides alike. The PyTorch
side is the op attnlab's plain code calls (``train.kernels = "plain"``, and the default off the CPU);
the attnlab side is what it runs on the CPU by default (see ``attnlab.fast``).

- ``loss``: ``nn.Linear`` + ``F.cross_entropy(label_smoothing=0.1)`` forward and backward over 1,100
  rows and the fra-eng word vocabulary (17,390) against ``attnlab.fast.linear_cross_entropy``
  (W_o and the loss in chunks, see ``attnlab.fast.cross_entropy``);
- ``dropout_ffn`` / ``dropout_model``: ``nn.Dropout(0.1)`` against ``attnlab.fast.Dropout`` on a
  Transformer's FFN activations ``(1100, 1024)`` and residual stream ``(1100, 256)``, forward and backward;
- ``topk4`` / ``top1``: ``Tensor.topk(4)`` and ``Tensor.max(dim)`` against
  ``attnlab.fast.top_k_rows`` over beam/greedy decoding's ``(256, 8000)`` log-probabilities.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from attnlab.fast import Dropout, linear_cross_entropy, top_k_rows


def race(ours, reference, rounds: int) -> tuple[float, float, float]:
    """``(median ratio reference/ours, best ours s, best reference s)`` over alternating rounds."""
    ours(), reference()  # warm-up (allocations, lazy init)
    ratios, t_ours, t_ref = [], [], []
    for r in range(rounds):
        pair = []
        for fn in (ours, reference) if r % 2 == 0 else (reference, ours):
            t0 = time.perf_counter()
            fn()
            pair.append((fn, time.perf_counter() - t0))
        a = next(t for fn, t in pair if fn is ours)
        b = next(t for fn, t in pair if fn is reference)
        ratios.append(b / a)
        t_ours.append(a)
        t_ref.append(b)
    return statistics.median(ratios), min(t_ours), min(t_ref)


def loss_pair(rows: int = 1100, dim: int = 256, vocab: int = 17390):
    torch.manual_seed(0)
    out = nn.Linear(dim, vocab)
    hidden = torch.randn(rows, dim, requires_grad=True)
    labels = torch.randint(0, vocab, (rows,))

    def clear():
        hidden.grad = out.weight.grad = out.bias.grad = None

    def ours():
        linear_cross_entropy(hidden, out, labels, 0.1)[0].backward()
        clear()

    def reference():
        F.cross_entropy(out(hidden), labels, label_smoothing=0.1, reduction="sum").backward()
        clear()

    return ours, reference


def dropout_pair(shape: tuple[int, int]):
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    ours_m, ref_m = Dropout(0.1).train(), nn.Dropout(0.1).train()

    def run(m):
        def f():
            m(x).backward(grad)
            x.grad = None

        return f

    return run(ours_m), run(ref_m)


def topk_pair(k: int):
    x = torch.randn(256, 8000).log_softmax(-1)
    if k == 1:
        return (lambda: top_k_rows(x, 1)), (lambda: x.max(dim=-1))
    return (lambda: top_k_rows(x, k)), (lambda: x.topk(k, dim=-1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    cases = {
        "loss": (loss_pair(), "W_o + label-smoothed CE, 1100 x 256 -> 17390, fwd+bwd"),
        "dropout_ffn": (dropout_pair((1100, 1024)), "dropout 0.1, (1100, 1024), fwd+bwd"),
        "dropout_model": (dropout_pair((1100, 256)), "dropout 0.1, (1100, 256), fwd+bwd"),
        "topk4": (topk_pair(4), "top-4 per row of (256, 8000)"),
        "top1": (topk_pair(1), "top-1 (value and index) per row of (256, 8000)"),
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rounds} rounds per pair")
    for name, ((ours, reference), what) in cases.items():
        rounds = max(4, args.rounds // 3) if name == "loss" else args.rounds
        ratio, best_ours, best_ref = race(ours, reference, rounds)
        print(f"{what}: attnlab {best_ours * 1e3:.2f} ms, PyTorch {best_ref * 1e3:.2f} ms (best of {rounds})")
        print(f"kernel {name} {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
