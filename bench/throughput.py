"""Throughput of attnlab against reference implementations, measured in one run (issue 7).

    python bench/throughput.py --quick            # < 1 minute, prints `ratio NAME VALUE` lines
    python bench/throughput.py                    # full run; writes the table to bench/RESULTS.md
    python bench/throughput.py --data PATH --device cuda --run RUN_DIR

What is measured (the references are in ``bench/_reference.py``):

- ``transformer_train``: non-pad target tokens per second of one training step (forward, loss,
  backward, gradient clipping, AdamW, schedule) — attnlab's model, ``sequence_loss`` and
  ``make_optimizer`` exactly as ``attnlab train`` runs them (``train.kernels``, default ``auto``:
  the kernels of ``attnlab.fast`` on the CPU; ``--kernels plain`` races attnlab's plain code),
  against a careful plain ``nn.Transformer`` loop. Both get the *same* length-bucketed token
  batches (``TokenBatchSampler``).
- ``bahdanau_train``: the same for the Bahdanau model against D2L §10.4's code written plainly.
- ``greedy_decode`` / ``beam_decode``: sentences per second on test sentences, attnlab
  (``translator.decode_many``: batched, KV cache, finished rows dropped) against the same model
  decoded one sentence at a time without the cache. The hypotheses are compared: ``agree`` is the
  share of sentences where both return the same tokens (it should be ~100 %).

Ours and the reference alternate batch by batch (sentence chunk by chunk for decoding) in this one
process, and the order within each pair alternates too, so machine noise — other processes on the
same cores — hits both alike and cancels in the ratio; absolute numbers are only indicative.

MFU (model FLOPs utilisation) = achieved useful FLOP/s ÷ the matmul peak measured in this run
(fp32 on the CPU, bf16 on CUDA where training runs under bf16 autocast). Useful FLOPs per step =
``6 × P × N``: ``P`` = the parameters of every ``nn.Linear`` of attnlab's model (attention
projections, FFNs and the output layer W_o — the embedding lookups do no matmul), ``N`` = non-pad
target tokens; 2 FLOPs per multiply-add forward, twice that backward (Kaplan et al. 2020). It ignores
the attention score matmuls (small at these lengths) and, for the reference, the wasted work on pad
positions — exactly the convention of the issue's peer figures.

Peak memory: each of the four training loops runs again alone in a fresh subprocess over the
largest batches; on the CPU we report the peak resident set (``VmHWM``, reset through
``/proc/self/clear_refs`` once the model and optimizer are built) minus the resident set at that
point — what the steps add: activations, gradients, optimizer state (Linux only; ``ru_maxrss`` is
useless here, it survives fork + exec and reports the parent's peak) — on CUDA
``torch.cuda.max_memory_allocated`` minus the allocation before the steps.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # for _reference when run as a script

from _reference import (  # noqa: E402
    D2LBahdanau,
    ReferenceTransformer,
    beam_uncached,
    d2l_masked_ce,
    greedy_uncached,
    reference_transformer_loss,
)

from attnlab import config as C  # noqa: E402
from attnlab import device as D  # noqa: E402
from attnlab import fast  # noqa: E402
from attnlab.data import corpus, download  # noqa: E402
from attnlab.data.batching import Batch, TokenBatchSampler, collate  # noqa: E402
from attnlab.decoding import length_cap  # noqa: E402
from attnlab.decoding.hypothesis import max_lengths  # noqa: E402
from attnlab.device import autocast, pick_device  # noqa: E402
from attnlab.errors import AttnlabError  # noqa: E402
from attnlab.models import build_model  # noqa: E402
from attnlab.training.losses import sequence_loss  # noqa: E402
from attnlab.training.optim import make_optimizer  # noqa: E402
from attnlab.training.schedules import make_scheduler  # noqa: E402
from attnlab.translator import decode_many  # noqa: E402

BATCH_TOKENS = 1100  # the "~1,100-token batches": batch_size * max(S, T) <= 1100 (--batch-tokens)


# ----------------------------------------------------------------------------------------------
# Timing helpers


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def linear_params(model: nn.Module) -> int:
    """``P`` of the FLOP formula: weights and biases of every nn.Linear (a tied W_o counts once, as a matmul)."""
    return sum(p.numel() for m in model.modules() if isinstance(m, nn.Linear) for p in m.parameters())


# ----------------------------------------------------------------------------------------------
# Data


@dataclass
class Setup:
    cfg: C.Config
    prepared: corpus.Prepared
    device: torch.device
    dataset: str


def load_data(args) -> Setup:
    """fra-eng with word vocabularies (min_freq 2) when the corpus is found, else the `numbers` task."""
    cfg = C.preset("transformer")
    if args.data:
        path: Path | None = download.locate_fra_eng(args.data)  # a wrong --data is an error, not a fallback
    else:
        # $ATTNLAB_DATA_DIR, then the shared copy next to the repository, then the cache; never a download.
        offline = os.environ.get("ATTNLAB_OFFLINE")
        os.environ["ATTNLAB_OFFLINE"] = "1"
        try:
            path = download.locate_fra_eng(None if os.environ.get("ATTNLAB_DATA_DIR") else _default_zip())
        except AttnlabError:
            path = None
        finally:
            if offline is None:
                del os.environ["ATTNLAB_OFFLINE"]
            else:
                os.environ["ATTNLAB_OFFLINE"] = offline
    if path is not None:
        data = C.DataConfig(
            dataset="fra-eng", data_path=str(path), min_freq=2, batch_tokens=args.batch_tokens
        )
        dataset = "fra-eng"
    else:
        print(
            "note: fra-eng corpus not found (use --data or ATTNLAB_DATA_DIR); using the numbers task",
            file=sys.stderr,
        )
        data = C.DataConfig(dataset="numbers", numbers_size=20000, batch_tokens=args.batch_tokens)
        dataset = "numbers"
    train = dataclasses.replace(cfg.train, kernels=args.kernels)
    cfg = C.Config(data=data, model=cfg.model, train=train, decode=cfg.decode)
    prepared = corpus.prepare(cfg.data)
    return Setup(cfg, prepared, pick_device(args.device), dataset)


def _default_zip() -> Path | None:
    p = HERE.parent.parent / "shared" / "data" / "fra-eng.zip"
    return p if p.is_file() else None


def train_batches(setup: Setup, n: int, seed: int = 0) -> list[Batch]:
    split = setup.prepared.splits["train"]
    sampler = TokenBatchSampler(
        [len(s) for s in split.src],
        [len(t) for t in split.tgt],
        setup.cfg.data.batch_tokens,
        setup.cfg.data.max_batch_size,
        shuffle=True,
        seed=seed,
    )
    idx = sampler.epoch(0)[:n]
    return [collate([split.src[i] for i in b], [split.tgt[i] for i in b], b).to(setup.device) for b in idx]


def padding_share(batches: list[Batch]) -> float:
    real = sum(b.num_tgt_tokens for b in batches)
    return 1 - real / sum(b.tgt_out.numel() for b in batches)


# ----------------------------------------------------------------------------------------------
# Training steps: ours exactly as training/loop.py runs them, and the references


def model_config(kind: str, kernels: str = "auto") -> C.Config:
    cfg = C.preset(kind)
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, kernels=kernels))


def ours_trainer(cfg: C.Config, n_src: int, n_tgt: int, device: torch.device):
    torch.manual_seed(0)
    model = build_model(cfg.model, n_src, n_tgt).to(device).train()
    fast.apply(model, cfg.train.kernels, device)  # as the trainer does
    opt = make_optimizer(model, cfg.train)
    sched = make_scheduler(opt, cfg.train)
    tc = cfg.train

    def step(batch: Batch) -> None:
        with autocast(device, tc.amp):
            out = sequence_loss(model, batch, tc.label_smoothing)
        loss = out.loss_sum / batch.num_tgt_tokens
        opt.zero_grad(set_to_none=True)
        if bool(torch.isfinite(loss)):  # the loop's non-finite guard (one host sync, as in the loop)
            loss.backward()
            if tc.clip_grad_norm:
                nn.utils.clip_grad_norm_(model.parameters(), tc.clip_grad_norm)
            opt.step()
            sched.step()
        float(out.nll_sum)  # the loop logs it

    return model, step


def reference_trainer(kind: str, cfg: C.Config, n_src: int, n_tgt: int, device: torch.device):
    torch.manual_seed(0)
    m = cfg.model
    if kind == "transformer":
        model = ReferenceTransformer(
            n_src,
            n_tgt,
            m.num_hiddens,
            m.num_heads,
            m.num_layers,
            m.ffn_num_hiddens,
            m.dropout,
            m.norm_first,
            m.tie_embeddings,
        )

        def loss_of(batch):
            return reference_transformer_loss(model, batch, cfg.train.label_smoothing)
    else:
        model = D2LBahdanau(
            n_src, n_tgt, m.embed_size, m.num_hiddens, m.num_layers, m.dropout, m.tie_embeddings
        )

        def loss_of(batch):
            return d2l_masked_ce(model, batch)

    model = model.to(device).train()
    opt = make_optimizer(model, cfg.train)  # the same optimizer (AdamW, same groups and betas)
    sched = make_scheduler(opt, cfg.train)

    def step(batch: Batch) -> None:
        with autocast(device, cfg.train.amp):
            loss = loss_of(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.clip_grad_norm:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.train.clip_grad_norm)
        opt.step()
        sched.step()
        float(loss.detach())

    return model, step


def race_training(kind: str, setup: Setup, batches: list[Batch], warmup: int, peak: float) -> dict:
    cfg = model_config(kind, setup.cfg.train.kernels)
    n_src, n_tgt = len(setup.prepared.src_tok), len(setup.prepared.tgt_tok)
    ours_model, ours = ours_trainer(cfg, n_src, n_tgt, setup.device)
    _, ref = reference_trainer(kind, cfg, n_src, n_tgt, setup.device)
    t_ours = t_ref = 0.0
    tokens = 0
    per_batch = []  # reference time / our time on the same batch, back to back
    for i, batch in enumerate(batches):
        if i % 2 == 0:  # alternate who goes first
            a, b = timed(partial(ours, batch), setup.device), timed(partial(ref, batch), setup.device)
        else:
            b, a = timed(partial(ref, batch), setup.device), timed(partial(ours, batch), setup.device)
        if i >= warmup:
            t_ours, t_ref, tokens = t_ours + a, t_ref + b, tokens + batch.num_tgt_tokens
            per_batch.append(b / a)
    flops_per_token = 6 * linear_params(ours_model)
    tps_ours, tps_ref = tokens / t_ours, tokens / t_ref
    # The ratio is the median over batches of (reference time / our time) on the same batch: a burst
    # of load from another process hits one pair, not the result (totals give the absolute tok/s).
    return {
        "ours_tok_s": tps_ours,
        "ref_tok_s": tps_ref,
        "ratio": statistics.median(per_batch),
        "mfu_ours": tps_ours * flops_per_token / peak,
        "mfu_ref": tps_ref * flops_per_token / peak,
        "flops_per_token": flops_per_token,
        "steps": len(batches) - warmup,
        "tokens": tokens,
        "model": ours_model,
    }


# ----------------------------------------------------------------------------------------------
# Decoding


def race_decoding(
    model: nn.Module,
    src_ids: list[list[int]],
    dcfg: C.DecodeConfig,
    device: torch.device,
    beam: int,
    chunk: int,
) -> dict:
    model.eval()
    cap = length_cap(model)
    t_ours = t_ref = 0.0
    agree = 0
    for c, start in enumerate(range(0, len(src_ids), chunk)):
        part = src_ids[start : start + chunk]
        limits = max_lengths(
            torch.tensor([len(s) + 1 for s in part]), dcfg.max_len_a, dcfg.max_len_b, cap
        ).tolist()
        got: dict[str, list[list[int]]] = {}

        def run_ours(part=part, got=got):
            got["ours"] = [h[0].tokens for h in decode_many(model, part, dcfg, device, beam_size=beam)]

        def run_ref(part=part, limits=limits, got=got):
            if beam == 1:
                got["ref"] = [greedy_uncached(model, s, n, device) for s, n in zip(part, limits)]
            else:
                got["ref"] = [
                    beam_uncached(model, s, beam, n, dcfg.length_penalty, device)
                    for s, n in zip(part, limits)
                ]

        if c % 2 == 0:
            t_ours += timed(run_ours, device)
            t_ref += timed(run_ref, device)
        else:
            t_ref += timed(run_ref, device)
            t_ours += timed(run_ours, device)
        agree += sum(a == b for a, b in zip(got["ours"], got["ref"]))
    n = len(src_ids)
    return {
        "ours_sent_s": n / t_ours,
        "ref_sent_s": n / t_ref,
        "ratio": t_ref / t_ours,
        "agree": agree / n,
        "sentences": n,
    }


# ----------------------------------------------------------------------------------------------
# Peak memory, one loop per fresh subprocess


def _rss_bytes(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak since the last reset) of this process, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise OSError(f"{field} not in /proc/self/status")


def _memory_child(kind: str, which: str, path: str) -> None:
    blob = torch.load(path, weights_only=False)
    device = torch.device(blob["device"])
    cfg = model_config(kind, blob["kernels"])
    if which == "ours":
        _, step = ours_trainer(cfg, blob["n_src"], blob["n_tgt"], device)
    else:
        _, step = reference_trainer(kind, cfg, blob["n_src"], blob["n_tgt"], device)
    batches = [b.to(device) for b in blob["batches"]]
    if device.type == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        # Not ru_maxrss: Linux keeps it across fork + exec, so a child would inherit the parent's peak
        # (the whole corpus). VmHWM belongs to this process image and "5" in clear_refs resets it to
        # the current RSS, so the peak below is what the training steps add over the built model.
        Path("/proc/self/clear_refs").write_text("5")
        base = _rss_bytes("VmRSS")
    for b in batches:
        step(b)
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _rss_bytes("VmHWM") - base
    print(f"peak_bytes {peak}")


def peak_memory(kind: str, setup: Setup, batches: list[Batch]) -> dict[str, float]:
    """MiB each loop adds at its peak (see the module docstring), over the 3 widest batches."""
    widest = sorted(batches, key=lambda b: b.tgt_out.numel() + b.src.numel(), reverse=True)[:3]
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "batches.pt")
        torch.save(
            {
                "batches": [b.to("cpu") for b in widest],
                "n_src": len(setup.prepared.src_tok),
                "n_tgt": len(setup.prepared.tgt_tok),
                "device": str(setup.device),
                "kernels": setup.cfg.train.kernels,
            },
            path,
        )
        for which in ("ours", "ref"):
            res = subprocess.run(
                [sys.executable, __file__, "--_memory", kind, which, path],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": str(HERE)},
            )
            line = [x for x in res.stdout.splitlines() if x.startswith("peak_bytes ")]
            out[which] = int(line[-1].split()[1]) / 2**20 if line else float("nan")
            if not line:
                print(f"warning: memory probe {kind}/{which} failed:\n{res.stderr[-2000:]}", file=sys.stderr)
    return out


# ----------------------------------------------------------------------------------------------
# Report


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    )


NOTES_MARKER = "<!-- throughput notes: kept when the table above is rewritten -->"


def write_results(section: str, path: Path) -> None:
    """Replace (or add) the ``## Throughput`` section of ``path``, leaving other sections alone.

    Hand-written notes in the section after :data:`NOTES_MARKER` (history, profiles) are kept."""
    text = path.read_text(encoding="utf-8") if path.is_file() else "# attnlab benchmark results\n"
    lines = text.splitlines()
    start = next((i for i, x in enumerate(lines) if x.strip() == "## Throughput"), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n\n" + NOTES_MARKER + "\n"
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        marker = next((i for i in range(start, end) if lines[i].strip() == NOTES_MARKER), None)
        notes = lines[marker:end] if marker is not None else [NOTES_MARKER, ""]
        new = "\n".join(lines[:start] + section.rstrip("\n").splitlines() + [""] + notes + lines[end:])
    path.write_text(new.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a run under a minute: fewer steps and sentences")
    p.add_argument("--data", help="fra-eng zip/folder (else $ATTNLAB_DATA_DIR; falls back to `numbers`)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument(
        "--threads",
        type=int,
        default=-1,
        help="torch intra-op threads; 0: PyTorch's default; default: the cores other processes leave free",
    )
    p.add_argument(
        "--run", help="decode with this trained transformer run (else the model the benchmark trained)"
    )
    p.add_argument("--results", default=str(HERE / "RESULTS.md"), help="where the full run writes its table")
    p.add_argument("--no-write", action="store_true", help="do not write the results file")
    p.add_argument(
        "--batch-tokens", type=int, default=BATCH_TOKENS, help="token budget per batch (default 1100)"
    )
    p.add_argument("--sentences", type=int, default=1000, help="test sentences decoded in the full run")
    p.add_argument("--train-only", action="store_true", help="skip the decoding races")
    p.add_argument("--kernels", choices=C.KERNELS, default="auto",
                   help="attnlab's train.kernels: auto (default: attnlab.fast on the CPU), fast, or plain")
    p.add_argument("--_memory", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads < 0:
        # Measured here: with the 2 cores shared by other processes (load average ~3.5), 2 intra-op
        # threads ran 5-10x slower than 1 (each op waits for its thread on the busy core), and the
        # ratios swung between 0.5 and 2.9 run to run; 1 thread gave the same ratio +-0.05 twice.
        free = int((os.cpu_count() or 1) - os.getloadavg()[0])
        args.threads = max(1, min(torch.get_num_threads(), free))
    if args.threads:
        torch.set_num_threads(args.threads)
    if args._memory:
        _memory_child(*args._memory)
        return 0

    t_start = time.perf_counter()
    load = os.getloadavg()
    setup = load_data(args)
    device = setup.device
    quick = args.quick
    n_tr, n_bah, n_dec, warm = (4, 3, 40, 1) if quick else (40, 24, args.sentences, 2)
    peak_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = D.measure_peak_gflops(1.0 if quick else 3.0, device=device, dtype=peak_dtype) * 1e9  # FLOP/s
    print(
        f"data {setup.dataset}: vocab src {len(setup.prepared.src_tok)} tgt {len(setup.prepared.tgt_tok)}; "
        f"device {device}; {machine()}"
    )
    print(f"matmul peak ({str(peak_dtype).replace('torch.', '')}): {peak / 1e9:.1f} GFLOP/s")

    batches = train_batches(setup, max(n_tr, n_bah) + warm)
    print(f"batches: budget {args.batch_tokens} tokens, target padding {padding_share(batches):.1%}")
    tr = race_training("transformer", setup, batches[: n_tr + warm], warm, peak)
    print(
        f"transformer train: ours {tr['ours_tok_s']:,.0f} tok/s (MFU {tr['mfu_ours']:.1%}), "
        f"reference {tr['ref_tok_s']:,.0f} tok/s (MFU {tr['mfu_ref']:.1%}); "
        f"{tr['flops_per_token'] / 1e6:.1f} MFLOP/token"
    )
    bah = race_training("bahdanau", setup, batches[: n_bah + warm], warm, peak)
    print(f"bahdanau train: ours {bah['ours_tok_s']:,.0f} tok/s, reference {bah['ref_tok_s']:,.0f} tok/s")

    if args.train_only:
        for name, res in (("transformer_train", tr), ("bahdanau_train", bah)):
            print(f"ratio {name} {res['ratio']:.2f}")
        return 0
    model, src_ids = tr["model"], None
    dcfg = C.DecodeConfig()
    test = setup.prepared.splits["test"]
    if args.run:
        from attnlab.translator import Translator

        tr_run = Translator.from_run(args.run, "best", device=str(device))
        # The run's own decoding settings, with the current default batching (runs saved before it was
        # automatic carry batch_size=64).
        model, dcfg = tr_run.model, dataclasses.replace(tr_run.cfg.decode, batch_size=C.DecodeConfig().batch_size)
        fast.apply(model, args.kernels, device)
        src_ids = [tr_run.src_tok.encode(s)[: setup.cfg.data.num_steps - 1] for s in test.src_text[:n_dec]]
    else:
        src_ids = test.src[:n_dec]
    chunk = n_dec if quick else max(n_dec // 5, 1)  # 5 alternations ours/reference
    greedy = race_decoding(model, src_ids, dcfg, device, 1, chunk)
    print(
        f"greedy decode: ours {greedy['ours_sent_s']:,.1f} sent/s, reference {greedy['ref_sent_s']:,.1f} sent/s, "
        f"same output {greedy['agree']:.1%}"
    )
    n_beam = n_dec // 2 if quick else n_dec
    beam = race_decoding(model, src_ids[:n_beam], dcfg, device, 4, chunk)
    print(
        f"beam-4 decode: ours {beam['ours_sent_s']:,.1f} sent/s, reference {beam['ref_sent_s']:,.1f} sent/s, "
        f"same output {beam['agree']:.1%}"
    )

    mem: dict[str, dict[str, float]] = {}
    if not quick:
        for kind in ("transformer", "bahdanau"):
            mem[kind] = peak_memory(kind, setup, batches[:n_tr])
            print(
                f"{kind} peak training memory: ours {mem[kind]['ours']:.0f} MiB, "
                f"reference {mem[kind]['ref']:.0f} MiB"
            )

    for name, res in (
        ("transformer_train", tr),
        ("bahdanau_train", bah),
        ("greedy_decode", greedy),
        ("beam_decode", beam),
    ):
        print(f"ratio {name} {res['ratio']:.2f}")
    print(
        f"total {time.perf_counter() - t_start:.0f} s; load average before {load[0]:.2f}, "
        f"after {os.getloadavg()[0]:.2f}"
    )

    if not quick and not args.no_write:
        section = results_section(setup, peak, peak_dtype, tr, bah, greedy, beam, mem, load, batches, args)
        write_results(section, Path(args.results))
        print(f"wrote {args.results}")
    return 0


def results_section(setup, peak, peak_dtype, tr, bah, greedy, beam, mem, load, batches, args) -> str:
    def m(kind, which):
        v = mem.get(kind, {}).get(which)
        return "–" if v is None else f"{v:.0f} MiB"

    dt = str(peak_dtype).replace("torch.", "")
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    rows = [
        "## Throughput",
        "",
        f"Measured {now} on {machine()}, device `{setup.device}`, commit `{git_commit()}`; "
        f"load average {load[0]:.2f} before the run, {os.getloadavg()[0]:.2f} after (other processes share "
        "the cores: ratios are measured in one process, alternating ours and the reference batch by batch, "
        "and are robust to that; absolute numbers are not).",
        "",
        f"Command: `python bench/throughput.py{''.join(' ' + a for a in sys.argv[1:])}`. Data: {setup.dataset} "
        f"(vocab {len(setup.prepared.src_tok)} → {len(setup.prepared.tgt_tok)} words, min-freq 2), "
        f"length-bucketed batches of ≤ {setup.cfg.data.batch_tokens} tokens (target padding {padding_share(batches):.1%}) "
        "fed to both sides. Matmul peak "
        f"({dt}, measured in the run): {peak / 1e9:.1f} GFLOP/s. MFU counts 6 × P FLOPs per non-pad "
        f"target token, P = {tr['flops_per_token'] // 6:,} nn.Linear parameters (output layer included).",
        "",
        "| benchmark | attnlab | reference | ratio | MFU attnlab / reference | peak memory attnlab / reference |",
        "|---|---|---|---|---|---|",
        f"| Transformer training (2+2, d256) vs bucketed `nn.Transformer` | {tr['ours_tok_s']:,.0f} tok/s | "
        f"{tr['ref_tok_s']:,.0f} tok/s | **{tr['ratio']:.2f}×** | {tr['mfu_ours']:.1%} / {tr['mfu_ref']:.1%} | "
        f"{m('transformer', 'ours')} / {m('transformer', 'ref')} |",
        f"| Bahdanau training (emb 256, 2-layer GRU 256) vs D2L-style loop | {bah['ours_tok_s']:,.0f} tok/s | "
        f"{bah['ref_tok_s']:,.0f} tok/s | **{bah['ratio']:.2f}×** | {bah['mfu_ours']:.1%} / {bah['mfu_ref']:.1%} | "
        f"{m('bahdanau', 'ours')} / {m('bahdanau', 'ref')} |",
        f"| Greedy decoding, {greedy['sentences']} test sentences, batched + KV cache vs one at a time uncached | "
        f"{greedy['ours_sent_s']:,.1f} sent/s | {greedy['ref_sent_s']:,.1f} sent/s | **{greedy['ratio']:.1f}×** | "
        f"same output {greedy['agree']:.1%} | |",
        f"| Beam-4 decoding, {beam['sentences']} test sentences | {beam['ours_sent_s']:,.1f} sent/s | "
        f"{beam['ref_sent_s']:,.1f} sent/s | **{beam['ratio']:.1f}×** | same output {beam['agree']:.1%} | |",
        "",
        f"Training: {tr['steps']} timed steps per side for the Transformer, {bah['steps']} for Bahdanau (after "
        "warm-up steps). Peak memory: each loop alone in a fresh subprocess over the 3 widest batches, "
        "peak RSS (VmHWM reset after model/optimizer construction) minus the RSS then (CUDA: max_memory_allocated).",
        "",
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
