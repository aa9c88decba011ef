"""`attnlab scaling`: why Transformers scale (the notes' §28.1), measured on this corpus.

Three measurements, for the GRU encoder–decoder with Bahdanau attention and for the Transformer:

1. **A ladder of model sizes at equal compute**: every rung gets the same budget of counted
   training FLOPs, never of minutes (why, and how the steps are planned: docs/explanations/scaling.md).
2. **Training tokens/s against sentence length.** One batch of a fixed number of target tokens at
   several lengths T, forward + backward: the Transformer handles all T positions of a layer in one
   matrix product, the GRU makes S + T = 2T steps one after another (§26), so at equal tokens its
   batches shrink and its steps multiply as T grows.
3. **Decoding cost with and without the KV cache.** Greedy decoding of a fixed number of tokens:
   with the model's own incremental ``step`` (the Transformer appends each new key/value to a
   :class:`~attnlab.attention.kv_cache.KVCache`, the GRU carries its state), and without any cache,
   where every step re-runs the teacher-forced ``forward`` over the source and the whole prefix
   (what decoding would cost if nothing were kept: quadratic in the output length).

FLOPs are counted and times taken as :mod:`attnlab.analysis.measure` says.

Outputs in ``OUT``: ``scaling.json`` (written after every stage, so an interrupted ladder keeps what
it measured), ``scaling.png`` (the four panels) and ``runs/<family>-d<width>/``, ordinary run folders
that ``doctor``, ``evaluate`` and ``attention`` read.
"""

from __future__ import annotations

import dataclasses
import math
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab import config as config_mod
from attnlab import device as device_mod
from attnlab import fast
from attnlab.analysis.measure import (  # noqa: F401 (re-exported: scaling's measurements, shared with compare)
    EXTRA_FLOP_FORMULAS,
    best_time,
    counted_flops,
    forward_backward,
    measure_throughput,
    random_batch,
    typical_time,
)
from attnlab.analysis.report import TextReport
from attnlab.config import DATASETS, Config, ModelConfig
from attnlab.data import corpus
from attnlab.data.batching import collate
from attnlab.data.pairs import CORPORA
from attnlab.data.vocab import BOS
from attnlab.device import pick_device, set_threads
from attnlab.errors import AttnlabError
from attnlab.files import atomic_write_json, writable_folder
from attnlab.i18n import _
from attnlab.models import build_model, traits
from attnlab.runs import read_metrics, read_run
from attnlab.training.loop import train, train_step
from attnlab.training.optim import make_optimizer
from attnlab.training.session import epoch_batches
from attnlab.viz.figure import new_figure, save_figure

SCHEMA = 1
#: a run folder's own cost besides its updates and validations (config, meta, the last curves), in the
#: time estimate; rounded up from a measurement (docs/experiments/scaling.md)
RUN_OVERHEAD_S = 2.0


# ----------------------------------------------------------------------------------- the families

#: the widest rung planned: a Transformer rung of width W has about 56·W² parameters (2 layers, FFN 4·W),
#: so 2048 is ~235 M, ~3.8 GB with its gradients and Adam moments; wider rungs would be refused by
#: memory (the plan builds every rung to count its FLOPs), and at a ladder's budget get a few steps each
MAX_WIDTH = 2048


@dataclass(frozen=True)
class Family:
    """One model family of the ladder: its model kind and how a width becomes a config."""

    name: str  # "gru" or "transformer": the ladder's key and the rung folders' prefix
    kind: str  # the model kind it trains
    label: str  # how figures and tables name it
    lr: float  # the lr of the sizing tiers (training/sizing.py) for this family's small models

    def overrides(self, width: int) -> list[str]:
        """The model settings of a rung of this family at ``width`` (= ``model.num_hiddens``)."""
        if traits(ModelConfig(kind=self.kind)).recurrent:  # one GRU layer, embeddings as wide as the state (W_o tied)
            return [f"model.num_hiddens={width}", f"model.embed_size={width}", "model.num_layers=1"]
        return [f"model.num_hiddens={width}", "model.num_layers=2", "model.num_heads=4",
                f"model.ffn_num_hiddens={4 * width}"]  # Vaswani's FFN ratio, 4 heads at every width


FAMILIES: dict[str, Family] = {
    "gru": Family("gru", "bahdanau", "GRU + Bahdanau", 3e-3),
    "transformer": Family("transformer", "transformer", "Transformer", 2e-3),
}


# ------------------------------------------------------------------------------------- the ladder


@dataclass(frozen=True)
class Ladder:
    """What `attnlab scaling` measures; :data:`DEFAULT` and :data:`QUICK` are the two shipped ones."""

    widths: dict[str, tuple[int, ...]]  # family name -> model widths (num_hiddens), one rung each
    budget_flops: float  # counted training FLOPs per rung (forward + backward), the same for every rung
    lengths: tuple[int, ...] = (8, 16, 32, 64)  # sentence lengths of the tokens/s measurement
    decode_steps: tuple[int, ...] = (8, 16, 32, 64)  # generated tokens of the decoding measurement
    bench_tokens: int = 2048  # target tokens per batch of the tokens/s measurement
    decode_batch: int = 16  # sentences decoded together
    decode_src_len: int = 12  # their source length (tokens, <eos> included)
    reps: int = 3  # timed repetitions (the best is kept)
    probe_batches: int = 4  # training batches whose FLOPs are counted and whose steps are timed
    eval_max_pairs: int = 1000  # validation pairs scored at each validation
    max_pairs: int = 20_000  # fra-eng: the shortest pairs (the file is sorted by length; sizing.py's tiny tier)
    numbers_size: int = 20_000  # numbers: pairs generated
    batch_tokens: int = 512  # training batches, the same for every rung
    seed: int = 42

    def __post_init__(self) -> None:
        unknown = set(self.widths) - set(FAMILIES)
        if unknown:
            raise AttnlabError(_("unknown families {sorted}; choose from {choices}").format(sorted=sorted(unknown), choices=', '.join(FAMILIES)))
        for name, widths in self.widths.items():
            for w in widths:
                if w < 8 or w % 4:
                    raise AttnlabError(_("width {w} for {name} must be a multiple of 4 and >= 8 (the "
                                         "Transformer splits it between 4 heads)").format(w=w, name=name))
                if w > MAX_WIDTH:
                    raise AttnlabError(_("width {w} for {name} is wider than the ladder plans "
                                         "({MAX_WIDTH}: a rung's weights grow as width squared); give "
                                         "--widths up to {MAX_WIDTH}, e.g. --widths 64,128,256").format(w=w, name=name, MAX_WIDTH=MAX_WIDTH))
        if not self.budget_flops > 0:
            raise AttnlabError(_("the budget per rung ({budget_flops:g} FLOPs) must be > 0").format(budget_flops=self.budget_flops))
        if min(self.lengths, default=2) < 2 or min(self.decode_steps, default=1) < 1:
            raise AttnlabError(_("benchmark lengths must be >= 2 and decoding steps >= 1"))


#: three widths per family at 2e12 counted FLOPs per rung: sized for a laptop's CPU (how long it took:
#: docs/experiments/scaling.md; the ladder measured and what it says about §28.1: docs/architectures.md)
DEFAULT = Ladder({"gru": (64, 128, 256), "transformer": (64, 128, 256)}, budget_flops=2e12)
#: a small ladder for the notes tour's §28.1: two widths per family at a fortieth of the default budget, on
#: the 5,000 shortest pairs, with short benchmarks (what it took against its estimate: docs/experiments/scaling.md)
QUICK = Ladder({"gru": (32, 64), "transformer": (32, 64)}, budget_flops=5e10, lengths=(8, 16, 32),
               decode_steps=(8, 16), bench_tokens=1024, reps=2, probe_batches=3, eval_max_pairs=200,
               max_pairs=5000, numbers_size=4000)


@dataclass(frozen=True)
class Where:
    """Where a ladder runs: the corpus, the device and the torch threads (0 = PyTorch's default)."""

    dataset: str = DATASETS[0]
    data_path: str | None = None
    device: str = "auto"
    threads: int = 0


def rung_name(family: str, width: int) -> str:
    return f"{family}-d{width}"


def rung_config(ladder: Ladder, family: Family, width: int, where: Where, steps: int = 1) -> Config:
    """The training config of one rung: the family's preset, its width, the ladder's shared data and
    batches (identical for every rung, so the losses compare), trained for ``steps`` updates."""
    data = [f"data.dataset={where.dataset}", "data.tokenizer=word", "data.min_freq=3",
            f"data.batch_tokens={ladder.batch_tokens}"]
    data += ([f"data.numbers_size={ladder.numbers_size}"] if CORPORA[where.dataset].generated
             else [f"data.max_pairs={ladder.max_pairs}"])
    if where.data_path:
        data.append(f"data.data_path={where.data_path}")
    train = ["train.size=base", "train.max_minutes=0", f"train.max_steps={steps}", "train.max_epochs=0",
             f"train.lr={family.lr}", "train.eval_frac=0.25", "train.eval_max_sentences=0",
             f"train.eval_max_pairs={ladder.eval_max_pairs}", "train.probe_sentences=", "train.save_every=0",
             "train.log_every=10", "train.keep_checkpoints=0", f"train.seed={ladder.seed}", f"train.device={where.device}",
             f"train.threads={where.threads}"]
    # No dropout: a few thousand updates on a small model underfit, they do not overfit (sizing.py's tiers).
    model = [*family.overrides(width), "model.dropout=0", "model.attention_dropout=0"]
    return config_mod.apply_overrides(config_mod.preset(family.kind), data + model + train)


def steps_for_budget(budget_flops: float, flops_per_step: float) -> int:
    """Updates that spend ``budget_flops`` at ``flops_per_step`` each (rounded, at least 1)."""
    if not flops_per_step > 0:
        raise AttnlabError(_("a training step must cost FLOPs; counted {flops_per_step!r}").format(flops_per_step=flops_per_step))
    return max(1, round(budget_flops / flops_per_step))


# ------------------------------------------------------------------------------------ FLOP counting


def fresh_model(cfg: Config, src_vocab: int, tgt_vocab: int, device: torch.device) -> nn.Module:
    """A newly initialised model of ``cfg`` with the kernels the trainer would use (seeded: the
    measurements do not depend on the weights, but the same command gives the same model)."""
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model, src_vocab, tgt_vocab).to(device)
    fast.apply(model, cfg.train.kernels, device)
    return model


def param_counts(model: nn.Module) -> tuple[int, int]:
    """``(all trainable parameters, those outside the embedding tables)``; a tied W_o counts once."""
    total = sum(p.numel() for p in model.parameters())
    tables = {id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)}
    return total, total - sum(tables.values())


# ---------------------------------------------------------------------------------- planning a rung


@dataclass
class Rung:
    """One model of the ladder: its plan (FLOPs → steps, the time estimate), then what training gave."""

    family: str
    width: int
    kind: str
    params: int  # trainable parameters (a tied W_o once)
    non_embedding_params: int  # without the embedding tables (Kaplan et al.'s N)
    flops_per_token: float  # counted training FLOPs (forward + backward) per target token
    tokens_per_step: float  # mean target tokens of a training batch (the epoch's batches)
    flops_per_step: float
    steps: int  # the budget in updates: train.max_steps
    budget_flops: float
    sec_per_step: float  # timed on the probe batches, update included
    est_seconds: float  # training + validations, estimated before training
    run: str = ""
    stopped_by: str = ""  # why its training stopped: "max_steps" (the plan), or "signal" (Ctrl-C)
    seconds: float = math.nan  # what training took
    tokens_seen: int = 0
    realised_flops: float = math.nan  # flops_per_token × the target tokens training consumed
    tokens_per_s: float = math.nan
    valid: list[dict[str, float]] = field(default_factory=list)  # step, flops, valid_loss at each validation
    final_valid_loss: float = math.nan

    @property
    def name(self) -> str:
        return rung_name(self.family, self.width)


def _sample(batches: list[list[int]], n: int) -> list[list[int]]:
    """``n`` batches spread evenly over the epoch's list (long and short ones alike)."""
    n = max(1, min(n, len(batches)))
    return [batches[(i * len(batches)) // n] for i in range(n)]


def plan_rung(ladder: Ladder, family: Family, width: int, where: Where, prepared, device: torch.device,
              thread_counts: tuple[int, ...] = ()) -> Rung:
    """Count one rung's training FLOPs on a sample of its batches, turn the ladder's budget into a
    step count, and time the probe batches' updates to estimate how long training will take.

    ``thread_counts``: time the updates at each of these torch thread counts and keep the fastest, leaving
    it set (what training's thread tuner settles on under the load of the moment: attnlab/threads.py)."""
    cfg = rung_config(ladder, family, width, where)
    split = prepared.splits["train"]
    batches = epoch_batches(cfg, split, 0, None, 1)
    mean_tokens = sum(len(split.tgt[i]) + 1 for b in batches for i in b) / len(batches)  # labels y… <eos>
    probe = [collate([split.src[i] for i in b], [split.tgt[i] for i in b], b).to(device)
             for b in _sample(batches, ladder.probe_batches)]
    model = fresh_model(cfg, len(prepared.src_tok), len(prepared.tgt_tok), device)
    model.train()
    ls = cfg.train.label_smoothing
    flops = sum(counted_flops(lambda b=b: forward_backward(model, b, ls)) for b in probe)
    probe_tokens = sum(b.num_tgt_tokens for b in probe)
    fpt = flops / probe_tokens
    steps = steps_for_budget(ladder.budget_flops, fpt * mean_tokens)
    optimizer = make_optimizer(model, cfg.train)

    def updates() -> None:
        for b in probe:
            train_step(model, optimizer, b, 1.0 / b.num_tgt_tokens, cfg.train.lr * 0.1, cfg.train, device)

    # the median of three timings, not the best: the estimate is of a whole training under this machine's load
    timed = {}
    for n in thread_counts or (torch.get_num_threads(),):
        set_threads(n)
        timed[n] = typical_time(updates, 3, device)
    fastest = min(timed, key=timed.get)
    set_threads(fastest)
    sec_per_token = timed[fastest] / probe_tokens
    valid = prepared.splits["valid"].tgt[: ladder.eval_max_pairs]
    # forward only (about a third of an update), at 25/50/75/100 % of the horizon, plus saving a checkpoint
    valid_s = sum(len(t) + 1 for t in valid) * sec_per_token / 3 + 0.5
    n_valid = min(steps, math.ceil(1 / cfg.train.eval_frac))
    total, non_emb = param_counts(model)
    return Rung(family.name, width, family.kind, total, non_emb, fpt, mean_tokens, fpt * mean_tokens, steps,
                ladder.budget_flops, sec_per_token * mean_tokens,
                RUN_OVERHEAD_S + steps * sec_per_token * mean_tokens + n_valid * valid_s)


def train_rung(rung: Rung, ladder: Ladder, where: Where, prepared, out_dir: Path, progress: bool) -> None:
    """Train ``rung`` for its planned steps into ``out_dir/runs/<name>`` and record its curve."""
    cfg = rung_config(ladder, FAMILIES[rung.family], rung.width, where, rung.steps)
    run_dir = out_dir / "runs" / rung.name
    t0 = time.monotonic()
    result = train(cfg, run_dir, progress=progress, prepared=prepared,
                   argv=["attnlab", "scaling", rung.name, f"train.max_steps={rung.steps}"])
    rung.seconds = time.monotonic() - t0
    rung.run, rung.stopped_by = str(run_dir), result.stopped_by
    rung.tokens_per_s = result.tokens_per_s
    rung.tokens_seen = int(read_run(run_dir).meta.get("tokens_seen", 0))  # over every update made
    rung.realised_flops = rung.flops_per_token * rung.tokens_seen
    valid = [r for r in read_metrics(run_dir) if r.get("event") == "valid" and "valid_loss" in r]
    rung.valid = [{"step": r["step"], "flops": r["step"] * rung.flops_per_step, "valid_loss": r["valid_loss"]}
                  for r in valid]
    if rung.valid:
        rung.final_valid_loss = rung.valid[-1]["valid_loss"]


# ----------------------------------------------------------------------- tokens/s against length


# ----------------------------------------------------------------- decoding with and without cache


@torch.inference_mode()
def decode_fixed(model: nn.Module, src: torch.Tensor, src_valid_lens: torch.Tensor, steps: int,
                 cache: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of exactly ``steps`` tokens per row (``<eos>`` does not stop it: the cost of a
    given output length is what is measured). Returns ``(tokens (B, steps), last logits (B, V))``.

    ``cache=True``: the model's incremental ``step`` (the Transformer's KV cache, the GRU's state);
    ``cache=False``: each step runs the teacher-forced ``forward`` over the source and the whole prefix
    again and reads its last position; both give the same tokens (tests/analysis/experiments/test_scaling.py)."""
    B = src.shape[0]
    tokens = torch.full((B, 1), BOS, dtype=torch.int64, device=src.device)  # (B, 1): <bos>
    state = model.init_state(model.encode(src, src_valid_lens), src_valid_lens) if cache else None
    logits = torch.empty(0)
    for _step in range(steps):
        if state is not None:
            out = model.step(tokens[:, -1], state)
            logits, state = out.logits, out.state  # (B, V)
        else:
            hidden = model(src, src_valid_lens, tokens, compute_logits=False).hidden  # (B, t, D)
            logits = model.output(hidden[:, -1])  # (B, V): only the last position predicts
        tokens = torch.cat([tokens, logits.argmax(dim=-1, keepdim=True)], dim=1)  # (B, t + 1)
    return tokens[:, 1:], logits


def measure_decoding(model: nn.Module, steps_list: tuple[int, ...], batch_size: int, src_len: int, reps: int,
                     device: torch.device, src_vocab: int, tgt_vocab: int) -> list[dict[str, Any]]:
    """Time and counted FLOPs of :func:`decode_fixed` with and without the cache at each output length."""
    was_training = model.training
    model.eval()
    batch = random_batch(batch_size, src_len, 2, src_vocab, tgt_vocab, torch.Generator().manual_seed(1)).to(device)
    rows = []
    try:
        for steps in steps_list:
            row: dict[str, Any] = {"steps": steps, "batch_size": batch_size, "src_len": src_len}
            for name, cache in (("cache", True), ("no_cache", False)):
                def run(steps=steps, cache=cache):
                    return decode_fixed(model, batch.src, batch.src_valid_lens, steps, cache)
                flops = counted_flops(run)
                seconds = best_time(run, reps, device)
                row[name] = {"seconds": seconds, "ms_per_token": 1e3 * seconds / steps,
                             "flops_per_token": flops / (steps * batch_size)}
            row["speedup"] = row["no_cache"]["seconds"] / row["cache"]["seconds"]
            rows.append(row)
    finally:
        model.train(was_training)
    return rows


def bench_estimate_s(rung: Rung, ladder: Ladder) -> float:
    """A rough time for both benchmarks of one family, from its rung's measured seconds per token."""
    per_token = rung.sec_per_step / rung.tokens_per_step
    passes = ladder.reps + 2  # the warm-up and the FLOP count besides the timed ones
    throughput = len(ladder.lengths) * passes * ladder.bench_tokens * per_token * 1.5  # GRU: slower at long T
    B, S = ladder.decode_batch, ladder.decode_src_len
    cached = sum(B * n for n in ladder.decode_steps)  # one position a step
    uncached = sum(B * (n * S + n * (n + 1) / 2) for n in ladder.decode_steps)  # source + prefix every step
    # forward only, a third of an update; small decoding batches run far below the training rate (×10)
    decoding = passes * (cached * 10 + uncached) * per_token / 3
    return throughput + decoding


# ------------------------------------------------------------------------------------ the whole run


def check_out_dir(out_dir: Path) -> None:
    """Refuse a folder that already holds a ladder (its rungs' run folders would be mixed)."""
    if (out_dir / "scaling.json").exists() or (out_dir / "runs").exists():
        raise AttnlabError(_("{out_dir} already holds a scaling ladder (scaling.json or runs/); choose "
                             "another --out or remove it").format(out_dir=out_dir))


@dataclass
class ScalingReport(TextReport):
    """What the ladder planned and measured: ``format()`` the three tables (or the plan, with
    ``plan_only``), ``figure()`` the six panels (None for a plan: nothing measured yet), ``to_json()``
    ``scaling.json`` (rungs as dicts, non-finite numbers as null)."""

    dataset: str
    device: str
    machine: dict[str, Any]  # machine_facts: versions, processor, threads, device, matmul peak
    ladder: dict[str, Any]  # the Ladder as a dict
    rungs: list[Rung]
    estimate_s: float  # the whole command's estimated seconds (training and benchmarks)
    estimate_train_s: float
    estimate_bench_s: float
    throughput: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # family -> rows by length
    decoding: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # family -> rows by tokens decoded
    bench_width: dict[str, int] = field(default_factory=dict)  # family -> the width both benchmarks ran
    elapsed_s: float | None = None  # the whole command, planning included
    plan_s: float | None = None  # planning: the corpus, the FLOP counts and the timed steps the estimate rests on
    plan_only: bool = False
    schema: int = SCHEMA

    def to_json(self) -> dict[str, Any]:
        return _clean({"schema": self.schema, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}})

    def _format(self) -> str:
        return _plan_text(self.to_json()) if self.plan_only else _text(self.to_json())

    def figure(self):
        return None if self.plan_only else _draw(self.to_json())


def plan_ladder(ladder: Ladder, where: Where, log: Callable[[str], None] | None = None) -> tuple[ScalingReport, Any]:
    """Prepare the corpus once and plan every rung (:func:`plan_rung`); returns the report so far
    (nothing trained or measured) and the prepared corpus."""
    say = log or (lambda _m: None)
    dev = pick_device(where.device)
    if where.threads > 0:
        set_threads(where.threads)  # the probes and benchmarks too, not only training (train.threads)
    first = next((f, w) for f, ws in ladder.widths.items() for w in ws)
    data_cfg = rung_config(ladder, FAMILIES[first[0]], first[1], where).data
    say(_("preparing {dataset} ({tokenizer} vocabulary, batches of {tokens} tokens) ...").format(
        dataset=where.dataset, tokenizer=data_cfg.tokenizer, tokens=data_cfg.batch_tokens))
    prepared = corpus.prepare(data_cfg)
    # threads=0 on the CPU: the first rung's steps are timed at every count up to the default and the
    # fastest is kept for the rest of the plan, so that the estimate is made at the count training will use
    counts = tuple(range(1, torch.get_num_threads() + 1)) if where.threads <= 0 and dev.type == "cpu" else ()
    rungs = []
    for name, widths in ladder.widths.items():
        for width in widths:
            rung = plan_rung(ladder, FAMILIES[name], width, where, prepared, dev, () if rungs else counts)
            say(_("  {name}: {params:,} parameters, {gflop:.3f} GFLOP/step → {steps:,} steps for {budget:.3g} FLOPs, "
                  "about {minutes:.1f} min").format(name=rung.name, params=rung.params, gflop=rung.flops_per_step / 1e9,
                                                     steps=rung.steps, budget=ladder.budget_flops,
                                                     minutes=rung.est_seconds / 60))
            rungs.append(rung)
    largest = {name: max((r for r in rungs if r.family == name), key=lambda r: r.width) for name in ladder.widths}
    bench_s = sum(bench_estimate_s(r, ladder) for r in largest.values())
    train_s = sum(r.est_seconds for r in rungs)
    report = ScalingReport(where.dataset, str(dev), machine_facts(dev), dataclasses.asdict(ladder), rungs,
                           train_s + bench_s, train_s, bench_s)
    return report, prepared


def machine_facts(device: torch.device) -> dict[str, Any]:
    """What the figures were measured on, with its matmul peak (the one probe, :mod:`attnlab.device`:
    bf16 on CUDA, as training runs there; fp32 on the CPU) to read the counted GFLOP/s against."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"torch": torch.__version__, "python": platform.python_version(), "processor": platform.processor()
            or platform.machine(), "threads": torch.get_num_threads(), "device": str(device),
            "peak_gflops": device_mod.measure_peak_gflops(0.5, device=device, dtype=dtype),
            "peak_dtype": str(dtype).removeprefix("torch.")}


def run(ladder: Ladder, out_dir: str | Path, where: Where = Where(), log: Callable[[str], None] | None = None,
        progress: bool = False, plan_only: bool = False) -> ScalingReport:
    """Plan the ladder, say its estimated time, train every rung, run both benchmarks, and write
    ``scaling.json`` and ``scaling.png`` (the report's ``to_json()`` and ``figure()``) into ``out_dir``
    (see the module docstring).

    ``plan_only``: stop after the plan and write nothing. Raises :class:`AttnlabError` if ``out_dir``
    already holds a ladder."""
    out_dir = Path(out_dir)
    say = log or (lambda _m: None)
    check_out_dir(out_dir)
    if not plan_only:  # a folder that cannot be written fails now, not after the plan's probes
        writable_folder(out_dir, "--runs-dir")
    t0 = time.monotonic()
    report, prepared = plan_ladder(ladder, where, log)
    report.plan_s = time.monotonic() - t0
    say(estimate_line(report.to_json()))
    if plan_only:
        report.plan_only = True
        return report
    for rung in report.rungs:
        say(_("training {name} for {steps:,} steps ...").format(name=rung.name, steps=rung.steps))
        train_rung(rung, ladder, where, prepared, out_dir, progress)
        say(_("  valid loss {loss:.3f} after {minutes:.1f} min (estimated {estimate:.1f})").format(
            loss=rung.final_valid_loss, minutes=rung.seconds / 60, estimate=rung.est_seconds / 60))
        write_report(report, out_dir, t0)
        if rung.stopped_by == "signal":  # Ctrl-C stops the ladder, not only this rung (what it measured is saved)
            raise KeyboardInterrupt
    run_benchmarks(report, ladder, where, prepared, say)
    write_report(report, out_dir, t0)
    save_figure(report.figure(), out_dir / "scaling", ("png",))
    say(actual_line(report.to_json()))
    return report


def estimate_line(report: dict[str, Any]) -> str:
    """What the ladder is expected to take after its plan, said before it trains: the estimate rests on the
    steps this process has just timed, so it is made under the load the training will meet."""
    return _("estimated {total:.0f} s ({minutes:.1f} min: training {train:.0f} s, benchmarks {bench:.0f} s) on "
             "{threads} threads, from the steps this process timed; planning took {plan:.0f} s").format(
        total=report["estimate_s"], minutes=report["estimate_s"] / 60, train=report["estimate_train_s"],
        bench=report["estimate_bench_s"], threads=report["machine"]["threads"], plan=report["plan_s"] or 0)


def actual_line(report: dict[str, Any]) -> str:
    """What the ladder took after its plan beside :func:`estimate_line`'s figure, and their ratio."""
    after = report["elapsed_s"] - (report["plan_s"] or 0)
    return _("took {actual:.0f} s after planning, estimated {estimate:.0f} s: {ratio:.2f}× the estimate "
             "(the whole command {total:.0f} s, {minutes:.1f} min)").format(
        actual=after, estimate=report["estimate_s"], ratio=after / report["estimate_s"],
        total=report["elapsed_s"], minutes=report["elapsed_s"] / 60)


def run_benchmarks(report: ScalingReport, ladder: Ladder, where: Where, prepared, say) -> None:
    """Tokens/s against length and decoding with/without cache, on each family's widest model."""
    device = torch.device(report.device)
    vocab = (len(prepared.src_tok), len(prepared.tgt_tok))
    for name in ladder.widths:
        widest = max((r for r in report.rungs if r.family == name), key=lambda r: r.width)
        cfg = rung_config(ladder, FAMILIES[name], widest.width, where)
        model = fresh_model(cfg, *vocab, device)
        say(f"tokens/s against length and decoding cost: {widest.name} ...")
        report.throughput[name] = measure_throughput(model, ladder.lengths, ladder.bench_tokens, ladder.reps,
                                                     cfg.train.label_smoothing, device, *vocab)
        report.decoding[name] = measure_decoding(model, ladder.decode_steps, ladder.decode_batch,
                                                 ladder.decode_src_len, ladder.reps, device, *vocab)
        report.bench_width[name] = widest.width


def _clean(x: Any) -> Any:
    """``x`` with its rungs as dicts and non-finite numbers as null (strict JSON)."""
    if isinstance(x, Rung):
        return _clean({**dataclasses.asdict(x), "name": x.name})
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def write_report(report: ScalingReport, out_dir: Path, t0: float) -> None:
    report.elapsed_s = time.monotonic() - t0
    atomic_write_json(out_dir / "scaling.json", report.to_json())


# ------------------------------------------------------------------------------- figure and table

_COLOURS = {"gru": "Blues", "transformer": "Reds"}


def _draw(report: dict[str, Any]):
    """Six panels. Top: validation loss against training FLOPs, final loss against parameters, the
    counted GFLOP/s a training pass reaches at each sentence length. Bottom: training tokens/s against
    length, decoding time and counted FLOPs per generated token with and without the cache."""
    import matplotlib  # heavy: only when a figure is drawn (viz.figure.new_figure imports it the same way)

    fig = new_figure((16, 9))
    axes = fig.subplots(2, 3)
    (ax_f, ax_p, ax_g), (ax_t, ax_d, ax_c) = axes
    budget = report["ladder"]["budget_flops"]
    ax_f.set(xscale="log", title=_("validation loss against training FLOPs ({budget:.2g} per rung)").format(budget=budget),
             xlabel=_("counted training FLOPs"), ylabel=_("validation cross-entropy per token"))
    ax_p.set(xscale="log", title=_("final validation loss against size (equal FLOPs)"),
             xlabel=_("trainable parameters"), ylabel=_("validation cross-entropy per token"))
    ax_g.set(xscale="log", title=_("counted GFLOP/s of a training pass"), xlabel=_("sentence length T (source = target)"),
             ylabel=_("GFLOP/s, forward + backward"))
    ax_t.set(xscale="log", yscale="log", title=_("training tokens/s against length (fixed tokens per batch)"),
             xlabel=_("sentence length T (source = target)"), ylabel=_("target tokens/s, forward + backward"))
    ax_d.set(xscale="log", yscale="log", title=_("greedy decoding: time per step"),
             xlabel=_("tokens generated"), ylabel=_("ms per step (whole batch)"))
    ax_c.set(xscale="log", yscale="log", title=_("greedy decoding: counted FLOPs per generated token"),
             xlabel=_("tokens generated"), ylabel=_("FLOPs per token (encoder included)"))
    rungs = report["rungs"]
    for name in FAMILIES:  # after the scales: setting a log scale resets the tick formatters
        mine = sorted((r for r in rungs if r["family"] == name), key=lambda r: r["width"])
        if mine:
            _draw_family(axes, report, name, mine, matplotlib.colormaps[_COLOURS[name]])
    for ax in axes.flat:
        ax.grid(alpha=0.3, which="both")
        if ax.has_data():
            ax.legend(fontsize=7)
    m = report["machine"]
    fig.suptitle(_("why Transformers scale (§28.1): {dataset}, {device}, {threads} threads").format(
        dataset=report["dataset"], device=m["device"], threads=m["threads"]) + _peak_text(m))
    return fig


def _draw_family(axes, report: dict[str, Any], name: str, mine: list[dict[str, Any]], cmap) -> None:
    """One family's lines on every panel of :func:`_draw` (its rungs sorted by width)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    (ax_f, ax_p, ax_g), (ax_t, ax_d, ax_c) = axes
    label, colour = FAMILIES[name].label, cmap(0.8)
    for i, r in enumerate(mine):
        shade = cmap(0.45 + 0.5 * i / max(len(mine) - 1, 1))
        ax_f.plot([v["flops"] for v in r["valid"]], [v["valid_loss"] for v in r["valid"]], "o-", ms=3,
                  color=shade, label=f"{label} d={r['width']}")
    done = [r for r in mine if r["final_valid_loss"] is not None]
    ax_p.plot([r["params"] for r in done], [r["final_valid_loss"] for r in done], "o-", color=colour, label=label)
    for r in done:
        ax_p.annotate(f"d={r['width']}", (r["params"], r["final_valid_loss"]), fontsize=7,
                      textcoords="offset points", xytext=(4, 4))
    width = report.get("bench_width", {}).get(name, "")
    rows = report["throughput"].get(name, [])
    lengths = [x["length"] for x in rows]
    ax_t.plot(lengths, [x["tokens_per_s"] for x in rows], "o-", color=colour, label=f"{label} d={width}")
    ax_g.plot(lengths, [x["gflops_per_s"] for x in rows], "o-", color=colour, label=f"{label} d={width}")
    dec = report["decoding"].get(name, [])
    for mode, style, what in (("cache", "-", _("cache")), ("no_cache", "--", _("no cache (prefix re-run)"))):
        steps = [x["steps"] for x in dec]
        ax_d.plot(steps, [x[mode]["ms_per_token"] for x in dec], "o" + style, color=colour, label=f"{label}, {what}")
        ax_c.plot(steps, [x[mode]["flops_per_token"] for x in dec], "o" + style, color=colour, label=f"{label}, {what}")
    for ax, ticks in ((ax_g, lengths), (ax_t, lengths), (ax_d, [x["steps"] for x in dec]),
                      (ax_c, [x["steps"] for x in dec])):
        if ticks:  # lengths as plain numbers, not 8×10⁰
            ax.set_xticks(ticks)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())


def _peak_text(machine: dict[str, Any]) -> str:
    peak = machine.get("peak_gflops")
    return f", matmul peak {peak:,.0f} GFLOP/s ({machine.get('peak_dtype', 'float32')})" if peak else ""


def _plan_text(report: dict[str, Any]) -> str:
    """The plan: each rung's steps and counted GFLOP per step, and the estimated time."""
    lines = [_("planned {n} rungs, estimated {minutes:.1f} min; nothing trained (--plan-only)").format(
        n=len(report["rungs"]), minutes=report["estimate_s"] / 60)]
    lines += [_("  {name}: {steps:,} steps of {gflop:.3f} GFLOP").format(
        name=r["name"], steps=r["steps"], gflop=r["flops_per_step"] / 1e9) for r in report["rungs"]]
    return "\n".join(lines)


def _text(report: dict[str, Any]) -> str:
    """The ladder, the tokens/s and the decoding measurements as three text tables."""
    lines = [f"scaling ladder on {report['dataset']}: {report['ladder']['budget_flops']:.3g} counted training FLOPs "
             f"per rung{_peak_text(report['machine'])}", "",
             f"{'rung':<18}{'params':>11}{'GFLOP/step':>12}{'steps':>8}{'FLOPs done':>12}{'valid loss':>12}"
             f"{'min':>7}{'est.':>7}"]
    for r in report["rungs"]:
        loss = r["final_valid_loss"]
        secs = r["seconds"]
        lines.append(f"{r['name']:<18}{r['params']:>11,}{r['flops_per_step'] / 1e9:>12.3f}{r['steps']:>8,}"
                     f"{(r['realised_flops'] or 0):>12.3g}{(f'{loss:.3f}' if loss is not None else '-'):>12}"
                     f"{(f'{secs / 60:.1f}' if secs is not None else '-'):>7}{r['est_seconds'] / 60:>7.1f}")
    for name, rows in report["throughput"].items():
        lines += ["", f"training tokens/s against length, {FAMILIES[name].label} d={report['bench_width'][name]}:",
                  "  T      batch  tokens/s   FLOPs/token  GFLOP/s"]
        lines += [f"  {x['length']:<6} {x['batch_size']:<6} {x['tokens_per_s']:>8,.0f}   {x['flops_per_token']:>11.3g}"
                  f"  {x['gflops_per_s']:>7.2f}" for x in rows]
    for name, rows in report["decoding"].items():
        lines += ["", f"greedy decoding, {FAMILIES[name].label} d={report['bench_width'][name]} "
                  f"({rows[0]['batch_size'] if rows else 0} sentences):",
                  "  tokens  cache ms/step  no cache ms/step  speed-up  FLOPs/token cache  no cache"]
        lines += [f"  {x['steps']:<7} {x['cache']['ms_per_token']:>13.2f}  {x['no_cache']['ms_per_token']:>16.2f}"
                  f"  {x['speedup']:>7.1f}×  {x['cache']['flops_per_token']:>17.3g}  {x['no_cache']['flops_per_token']:>8.3g}"
                  for x in rows]
    if report.get("elapsed_s"):
        lines += ["", actual_line(report)]
    return "\n".join(lines)
