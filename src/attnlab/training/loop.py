"""`attnlab train`: a plain, visible training loop (STYLE.md habit 5; the notes' §3, §10, §21).

One step = teacher forcing (decoder input ``<bos> y…``, labels ``y… <eos>``) → cross-entropy over
non-pad target tokens (label smoothing optional) → backward → gradient clipping → Adam(W) step →
warmup schedule. Validation (loss over the whole split, greedy BLEU on a sample, attention of the
probe sentences) runs every ``eval_every`` steps; checkpoints every ``save_every`` steps and at the end.
Ctrl-C / SIGTERM finish the current step, save ``last`` atomically and return; ``--resume`` then
continues exactly where it stopped (same batches, same RNG, same optimizer state).

Under torchrun the same loop runs on every rank (DDP, see ``distributed.py`` for how batches are
shared and the loss normalised); only rank 0 validates and writes. ``--resume`` with another
number of processes continues the epoch on the pairs not yet seen and reseeds the per-rank RNG
deterministically; after an elastic restart (``TORCHELASTIC_RESTART_COUNT > 0``) the workers
resume from ``last`` by themselves.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab import __version__, runs
from attnlab import config as config_mod
from attnlab.config import Config
from attnlab.data import corpus
from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.data.vocab import load_tokenizer
from attnlab.device import autocast, pick_device, set_threads
from attnlab.errors import AttnlabError
from attnlab.io import atomic_write_json, atomic_write_text
from attnlab.models import build_model
from attnlab.training import distributed as D
from attnlab.training import sizing
from attnlab.training.budget import WARM_UPDATES, BudgetPlan
from attnlab.training.losses import sequence_loss
from attnlab.training.optim import make_optimizer  # noqa: F401  (bench/throughput.py imports it from here)
from attnlab.training.resume import check_resume_overrides, set_aside_dead_records

#: the training loop's clock (tests replace it with a simulated one)
clock = time.monotonic

NUMBERS_PROBES = ("twenty-one", "three hundred and five", "one thousand two hundred and thirty-four")


class NonFiniteLossError(AttnlabError):
    """Several consecutive steps produced a non-finite loss; the run stopped."""


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    epoch: int
    stopped_by: str  # "max_steps", "max_minutes", "max_epochs", "signal"
    best_bleu: float
    last_valid: dict[str, Any] = field(default_factory=dict)
    tokens_per_s: float = 0.0
    examples_seen: int = 0  # training pairs consumed over all ranks since step 0 (weight-0 fillers excluded)


def versions() -> dict[str, str]:
    import numpy
    import sacrebleu
    import safetensors

    return {"attnlab": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "sacrebleu": sacrebleu.__version__, "safetensors": safetensors.__version__,
            "platform": platform.platform()}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


class _StopFlag:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps (a step is never torn)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):  # noqa: ARG002
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means "now"
        self.signal = signum

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


def _batches_of(split, sampler: TokenBatchSampler, epoch: int):
    for idx in sampler.epoch(epoch):
        yield collate([split.src[i] for i in idx], [split.tgt[i] for i in idx], idx)


def validation_loss(model: nn.Module, split, cfg: Config, device: torch.device) -> dict[str, float]:
    """Plain (unsmoothed) cross-entropy per token and perplexity over the whole split."""
    if not split.src:
        return {"valid_loss": float("nan"), "valid_ppl": float("nan"), "valid_acc": float("nan")}
    n = cfg.train.eval_max_pairs or len(split.src)  # a fixed subset keeps validation cheap under a budget
    split = dataclasses.replace(split, src=split.src[:n], tgt=split.tgt[:n])
    sampler = TokenBatchSampler([len(s) for s in split.src], [len(t) for t in split.tgt],
                                cfg.data.batch_tokens * 2, cfg.data.max_batch_size, shuffle=False, seed=0)
    was_training = model.training
    model.eval()
    nll, ntok, correct = 0.0, 0, 0
    with torch.inference_mode(), autocast(device, cfg.train.amp):
        for batch in _batches_of(split, sampler, 0):
            out = sequence_loss(model, batch.to(device), 0.0)
            nll += float(out.nll_sum)
            ntok += out.num_tokens
            correct += out.num_correct
    model.train(was_training)
    loss = nll / max(ntok, 1)
    return {"valid_loss": loss, "valid_ppl": math.exp(min(loss, 50)), "valid_acc": correct / max(ntok, 1)}


def validation_bleu(model: nn.Module, prepared, cfg: Config, device: torch.device) -> dict[str, Any]:
    from attnlab.data.text import detokenize
    from attnlab.evaluation.bleu import corpus_scores
    from attnlab.translator import decode_many

    split = prepared.splits["valid"]
    rows = split.unique_sources()[: cfg.train.eval_max_sentences]  # each source once, all its references
    if not rows:
        return {}
    hyps = decode_many(model, [split.src[i] for i in rows], cfg.decode, device, beam_size=1)
    texts = [prepared.tgt_tok.decode(h[0].tokens) for h in hyps]
    refs = [[detokenize(r.split(), "fr") for r in split.references[i]] for i in rows]  # as `attnlab evaluate`
    scores = corpus_scores(texts, refs)
    return {"valid_bleu": scores["bleu"], "valid_chrf": scores["chrf"]}


def record_probes(model: nn.Module, prepared, cfg: Config, device: torch.device, run_dir: Path, step: int) -> None:
    """Attention of the probe sentences at this step (inspection: `attnlab attention --timeline`)."""
    from attnlab.translator import decode_many

    sentences = [s for s in cfg.train.probe_sentences if s.strip()]
    if cfg.data.dataset == "numbers" and tuple(cfg.train.probe_sentences) == config_mod.TrainConfig().probe_sentences:
        sentences = list(NUMBERS_PROBES)  # the notes' English examples are all <unk> on the numbers task
    if not sentences:
        return
    src = [prepared.src_tok.encode(s)[: cfg.data.num_steps - 1] for s in sentences]
    # One sentence at a time: a batch would pad the keys (in the middle of the decoder-only sequence).
    hyps = [decode_many(model, [ids], cfg.decode, device, beam_size=1, need_weights=True)[0] for ids in src]
    records = []
    for s, ids, h in zip(sentences, src, hyps):
        hyp = h[0]
        att = {}
        for kind, w in (hyp.attention or {}).items():
            att[kind] = torch.round(w.float().mean(dim=1), decimals=4).tolist()  # (layers, T_out, keys): heads averaged
        records.append({
            "step": step, "sentence": s,
            "src_tokens": [prepared.src_tok.id_to_token(i) for i in ids] + ["<eos>"],
            "tgt_tokens": [prepared.tgt_tok.id_to_token(i) for i in hyp.tokens] + (["<eos>"] if hyp.finished else []),
            "translation": prepared.tgt_tok.decode(hyp.tokens), "attention": att,
        })
    runs.append_jsonl(run_dir / "probes.jsonl", records)  # a full disk warns; the run still saves


def _rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def prepare_run_dir(cfg: Config, out_dir: Path, resume: bool, restarted: bool = False) -> None:
    """Check that ``out_dir`` suits a new run (or holds one to resume); ``restarted``: torchrun restarted
    this job before its first checkpoint, so the folder's files are this job's own and start over."""
    if restarted and not resume:
        for name in (runs.METRICS, "probes.jsonl"):
            (out_dir / name).unlink(missing_ok=True)
        return
    if resume:
        if not (out_dir / "checkpoints" / "LAST").is_file():
            raise AttnlabError(f"--resume: {out_dir} holds no checkpoint to resume from; drop --resume to start a new run")
        return
    if (out_dir / "checkpoints").exists() and any((out_dir / "checkpoints").iterdir()):
        raise AttnlabError(f"{out_dir} already holds a run; add --resume to continue it or choose another --out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for moved in set_aside_dead_records(out_dir, (runs.METRICS, "probes.jsonl")):  # a run that died before saving
        print(f"note: {out_dir} held records of a run with no checkpoint; moved them to {moved.name}", file=sys.stderr)


def _drop_records_after(path: Path, step: int) -> None:
    """Forget log lines of steps after ``step`` (work lost with a killed process, redone on resume)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            if json.loads(line).get("step", 0) > step:
                continue
        except (ValueError, AttributeError):
            continue  # a torn last line
        kept.append(line)
    atomic_write_text(path, "".join(x + "\n" for x in kept))


def _rank_seed(seed: int, step: int, rank: int) -> int:
    """Deterministic per-rank seed for a resume whose world size differs from the checkpoint's."""
    return (seed * 1_000_003 + step * 7_919 + rank * 104_729) % (2**63)


def train(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
          prepared=None, argv: list[str] | None = None) -> TrainResult:
    """Train ``cfg`` into ``out_dir`` (a new run, or the continuation of one with ``resume``).

    Launched by torchrun (its ``RANK``/``WORLD_SIZE``/… variables are set) it joins the process
    group first (gloo on CPU, nccl on GPU, timeout ``$ATTNLAB_DIST_TIMEOUT``) and leaves it at the end.
    """
    device = pick_device(cfg.train.device)
    device, own_group = D.setup(device)
    try:
        return _train(cfg, Path(out_dir), resume, progress, prepared, argv, device)
    finally:
        if own_group:
            D.teardown()


def _train(cfg: Config, out_dir: Path, resume: bool, progress: bool, prepared, argv, device) -> TrainResult:
    main = D.is_main()
    # Agents count restarts per machine: agree on "restarted" (any rank restarted) so that every rank
    # takes the same branch (and joins the same collectives) below.
    restarted = D.is_distributed() and D.sum_floats(D.restart_count() > 0)[0] > 0
    if restarted and not resume:
        # An elastic restart reruns the same command line: continue from `last` if there is one.
        resume = bool(D.broadcast_object((out_dir / "checkpoints" / "LAST").is_file() if main else None))
    if main:
        prepare_run_dir(cfg, out_dir, resume, restarted=restarted)
    D.barrier()
    if cfg.train.threads > 0:
        set_threads(cfg.train.threads)
    elif D.is_distributed():
        torch.set_num_threads(D.threads_per_process())  # ranks on one machine share its cores
    saved_run = runs.read_run(out_dir) if resume else None
    if saved_run is not None and cfg.train.size == "auto":
        # The command line again (an elastic restart, a library call): keep the size the run was built
        # with, not a new probe's choice.
        sized = config_mod.apply_overrides(cfg, [f"train.size={saved_run.config.train.size}"])
        cfg = sizing.resolve(sized)[0]
    elif cfg.train.size != "base" and saved_run is None:  # auto, or a tier by name
        cfg = _resolve_size(cfg, prepared, main)
    tc = cfg.train
    seed_everything(tc.seed)

    saved_toks = None
    if saved_run is not None:
        check_resume_overrides(saved_run.config, cfg, out_dir)  # before anything in out_dir is written
        saved_toks = saved_run.tokenizers
    if prepared is None:
        toks = None
        if saved_toks is not None:
            toks = (load_tokenizer(saved_toks["src"]), load_tokenizer(saved_toks["tgt"]))
        prepared = corpus.prepare(cfg.data, tokenizers=toks)
    src_tok, tgt_tok = prepared.src_tok, prepared.tgt_tok
    train_split = prepared.splits["train"]
    if not train_split.src:
        raise AttnlabError("the training split is empty; raise data.max_pairs or check the corpus")

    model = build_model(cfg.model, len(src_tok), len(tgt_tok)).to(device)
    optimizer = make_optimizer(model, tc)
    train_model: nn.Module = model
    if D.is_distributed():
        train_model = D.wrap_ddp(model, device)

    world, my_rank = D.world_size(), D.rank()
    src_lens, tgt_lens = [len(s) for s in train_split.src], [len(t) for t in train_split.tgt]
    n_train = len(src_lens)
    if n_train < world:
        raise AttnlabError(f"the training split has {n_train} pairs, fewer than the {world} processes; "
                           "use fewer processes or more data")

    def plan(e: int, exclude=None, for_world: int = world) -> list[list[int]]:
        """The global batches of epoch ``e`` (see distributed.py); this rank takes its share of each."""
        try:
            return D.epoch_batches(src_lens, tgt_lens, cfg.data.batch_tokens, cfg.data.max_batch_size,
                                   tc.seed, e, for_world, exclude)
        except ValueError as err:
            raise AttnlabError(str(err)) from None

    budget = BudgetPlan.make(tc, len(plan(0)) if tc.max_epochs else 0)
    if my_rank:
        torch.manual_seed(_rank_seed(tc.seed, 0, my_rank))  # dropout differs per rank; init came from rank 0
        random.seed(_rank_seed(tc.seed, 0, my_rank))
    step, epoch, pos, best_bleu, tokens_seen, examples_seen = 0, 0, 0, -1.0, 0, 0
    exclude = None  # pairs of the current epoch consumed before a resume with another world size
    elapsed_before = 0.0
    if resume:
        path = runs.resolve_checkpoint(out_dir, "last")
        runs.load_weights(path, model)
        st = runs.load_state(path)
        try:
            optimizer.load_state_dict(st["optimizer"])
        except (ValueError, KeyError) as e:  # torch's refusal of parameter groups that do not fit this model
            raise runs.CheckpointError(f"{path / runs.STATE}: its optimizer state does not fit this model ({e}); "
                                       "resume with the run's own config.toml or start a new run with another --out") from None
        budget.load_state_dict(st.get("budget", {}))
        step, epoch, pos = st["step"], st["epoch"], st["batch_in_epoch"]
        best_bleu, tokens_seen = st["best_bleu"], st["tokens_seen"]
        examples_seen = st.get("examples_seen", 0)
        elapsed_before = st.get("elapsed_s", 0.0)
        saved_world = st.get("world_size", 1)
        exclude = st.get("epoch_exclude")
        exclude = None if exclude is None else exclude.numpy().astype(bool)
        rngs = st["rng"]
        if saved_world != world:
            # Another number of processes: the epoch's batch list changes (the global budget is
            # batch_tokens * world), so mark what was consumed and cut the rest of the epoch afresh.
            exclude = D.consumed_mask(n_train, plan(epoch, exclude, saved_world), pos, exclude)
            pos = 0
            # Per-rank RNG streams cannot be mapped onto a different set of ranks: reseed, deterministically.
            torch.manual_seed(_rank_seed(tc.seed, step, my_rank))
            random.seed(_rank_seed(tc.seed, step, my_rank))
        else:
            _set_rng_state(rngs[my_rank] if isinstance(rngs, list) else rngs)
        if main:
            for name in (runs.METRICS, "probes.jsonl"):
                _drop_records_after(out_dir / name, step)
            runs.append_metrics(out_dir, {"event": "resume", "step": step, "epoch": epoch, "world_size": world,
                                          "saved_world_size": saved_world, "restart": D.restart_count()})

    if main:
        atomic_write_text(out_dir / runs.CONFIG, config_mod.dumps_toml(cfg))
        atomic_write_json(out_dir / runs.TOKENIZERS, {"src": src_tok.to_json(), "tgt": tgt_tok.to_json()})
        meta = {"seed": tc.seed, "versions": versions(), "device": str(device), "threads": torch.get_num_threads(),
                "world_size": D.world_size(), "argv": argv or sys.argv, "data_stats": prepared.stats,
                "model_parameters": sum(p.numel() for p in model.parameters()),
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write_json(out_dir / runs.META, meta)

    def state_dict() -> dict[str, Any]:
        rng = _rng_state()
        if D.is_distributed():
            gathered: list[Any] = [None] * D.world_size()
            torch.distributed.all_gather_object(gathered, rng)
            rng = gathered
        # Data position: `batch_in_epoch` counts global batches of the plan made for `world_size`
        # processes minus `epoch_exclude` (pairs consumed before a resume with another world size).
        return {"optimizer": optimizer.state_dict(), "budget": budget.state_dict(), "step": step,
                "epoch": epoch, "batch_in_epoch": pos, "best_bleu": best_bleu, "tokens_seen": tokens_seen,
                "examples_seen": examples_seen, "world_size": world,
                "epoch_exclude": None if exclude is None else torch.from_numpy(exclude.astype(np.uint8)),
                "elapsed_s": elapsed_before + (clock() - t_start), "rng": rng}

    overhead_s = 0.0  # validation and saving: spent from the budget, but not an update's time

    def save(is_best: bool = False) -> None:
        nonlocal overhead_s
        t0 = clock()
        st = state_dict()  # collective when distributed: every rank calls it
        if main:
            runs.save_checkpoint(out_dir, step, model, st, keep=tc.keep_checkpoints, best=is_best)
        D.barrier()
        overhead_s += clock() - t0

    def validate() -> dict[str, Any]:
        nonlocal best_bleu, overhead_s
        t0 = clock()
        rec: dict[str, Any] = {"event": "valid", "step": step, "epoch": epoch}
        # Once over the whole split, on rank 0 (the same figures as one process); the other ranks
        # wait in the broadcast below — within $ATTNLAB_DIST_TIMEOUT.
        if main:
            rec.update(validation_loss(model, prepared.splits["valid"], cfg, device))
            rec.update(validation_bleu(model, prepared, cfg, device))
            record_probes(model, prepared, cfg, device, out_dir, step)
        is_best = main and rec.get("valid_bleu", -1.0) > best_bleu
        if is_best:
            best_bleu = rec["valid_bleu"]
        if main:
            runs.append_metrics(out_dir, rec)
        rec, is_best, best_bleu = D.broadcast_object((rec, is_best, best_bleu))
        overhead_s += clock() - t0
        save(is_best=is_best)
        budget.validated(step, clock() - t0)
        return rec

    bar = None
    if progress and main:
        from tqdm.auto import tqdm

        bar = tqdm(total=budget.horizon, initial=step, desc=f"train {cfg.model.kind}", unit="step",
                   dynamic_ncols=True, file=sys.stderr)

    model.train()
    set_lr(optimizer, tc.lr * budget.factor(step))
    if main and progress:
        print(budget.describe(), file=sys.stderr)
    t_start = clock()
    timed_s, timed_updates = 0.0, 0  # update time after the first WARM_UPDATES (the plan's rate)
    t_log, tok_log, loss_log, ntok_log = clock(), 0, 0.0, 0
    last_valid: dict[str, Any] = {}
    stopped_by = ""
    nonfinite = 0
    first_bad: str | None = None
    if step == 0 and not resume and main:
        record_probes(model, prepared, cfg, device, out_dir, 0)  # attention before any training

    with _StopFlag() as stop:
        while not stopped_by:
            if tc.max_epochs and epoch >= tc.max_epochs:
                stopped_by = "max_epochs"
                break
            batches = plan(epoch, exclude)
            while pos < len(batches):
                if tc.max_steps and step >= tc.max_steps:
                    stopped_by = "max_steps"
                    break
                t_update = clock()
                elapsed = elapsed_before + t_update - t_start
                if timed_updates:
                    budget.observe(step, elapsed, timed_s / timed_updates)
                time_up = budget.out_of_time(elapsed)
                idx, real = D.shard(batches[pos], my_rank, world)
                batch = collate([train_split.src[i] for i in idx], [train_split.tgt[i] for i in idx], idx)
                batch = batch.to(device, non_blocking=True)
                # One all-reduce: the global token and pair counts (the loss normaliser: not a mean of
                # per-rank means over unequal counts) and the stop votes, so every rank stops at the
                # same step (clocks and signals differ between processes).
                g_tok, g_pairs, g_time, g_sig, g_horizon = D.sum_floats(
                    batch.num_tgt_tokens if real else 0, len(idx) if real else 0, time_up, stop.signal is not None,
                    (budget.horizon or 0) if main else 0)
                if world > 1 and budget.budget_s > 0:
                    budget.horizon = int(g_horizon) or None  # rank 0's plan: every rank the same lr
                if g_time or g_sig:
                    stopped_by = "max_minutes" if g_time else "signal"
                    break
                with autocast(device, tc.amp):
                    out = sequence_loss(train_model, batch, tc.label_smoothing)
                # DDP averages gradients over ranks, hence `* world`; a rank without a real pair adds 0.
                loss = out.loss_sum * ((world if real else 0.0) / g_tok)
                optimizer.zero_grad(set_to_none=True)
                finite = bool(torch.isfinite(loss))
                if world > 1:  # skip on every rank or on none: a lone skipper would stall DDP's all-reduce
                    finite = D.sum_floats(not finite)[0] == 0
                if finite:
                    loss.backward()
                    if tc.clip_grad_norm:
                        gnorm = nn.utils.clip_grad_norm_(model.parameters(), tc.clip_grad_norm)
                        finite = bool(torch.isfinite(gnorm))
                if not finite:
                    # Skip the update: weights stay as they were (the notes' §10: a diverging loss
                    # means lr too high). Several in a row stop the run with the first culprit named.
                    nonfinite += 1
                    if first_bad is None:
                        first_bad = _first_nonfinite(model, loss)
                    print(f"warning: step {step}: non-finite loss/gradient ({first_bad}); update skipped",
                          file=sys.stderr)
                    optimizer.zero_grad(set_to_none=True)
                    if nonfinite >= max(tc.max_nonfinite, 1):
                        save()
                        raise NonFiniteLossError(
                            f"{nonfinite} consecutive non-finite steps (first: {first_bad}); the run stopped at "
                            f"step {step}. Lower train.lr (now {tc.lr}) or raise train.warmup_steps")
                    pos += 1
                    continue
                nonfinite, first_bad = 0, None
                set_lr(optimizer, tc.lr * budget.factor(step))
                optimizer.step()
                step += 1
                if step > WARM_UPDATES:
                    timed_s += clock() - t_update
                    timed_updates += 1
                pos += 1
                tokens_seen += int(g_tok)
                examples_seen += int(g_pairs)
                tok_log += int(g_tok)
                if real:
                    loss_log += float(out.nll_sum)
                    ntok_log += out.num_tokens
                if bar is not None:
                    if bar.total != budget.horizon:
                        bar.total = budget.horizon
                    bar.update(1)
                if tc.log_every and step % tc.log_every == 0:
                    now = clock()
                    tps = tok_log / max(now - t_log, 1e-9)
                    if world > 1:  # the logged loss is over every rank's tokens
                        loss_log, ntok_log = D.sum_floats(loss_log, ntok_log)
                    rec = {"event": "train", "step": step, "epoch": epoch, "loss": loss_log / max(ntok_log, 1),
                           "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": tps, "tokens_seen": tokens_seen,
                           "elapsed_s": elapsed_before + now - t_start, "horizon": budget.horizon}
                    if main:
                        runs.append_metrics(out_dir, rec)
                    if bar is not None:
                        bar.set_postfix(loss=f"{rec['loss']:.3f}", lr=f"{rec['lr']:.2e}", tok_s=f"{tps:,.0f}")
                    t_log, tok_log, loss_log, ntok_log = now, 0, 0.0, 0
                if budget.due_validation(step):
                    last_valid = validate()
                    if bar is not None and "valid_bleu" in last_valid:
                        bar.write(f"step {step}: valid loss {last_valid['valid_loss']:.3f}  "
                                  f"BLEU {last_valid['valid_bleu']:.1f}")
                elif tc.save_every and step % tc.save_every == 0:
                    save()
            else:
                epoch += 1
                pos = 0
                exclude = None
                continue
            break

        if bar is not None:
            bar.close()
        # Final validation + checkpoint (skipped if this exact step was just validated).
        if not last_valid or last_valid.get("step") != step:
            if stopped_by == "signal":
                save()
            else:
                last_valid = validate()
        else:
            save()

    elapsed = elapsed_before + clock() - t_start
    result = TrainResult(out_dir, step, epoch, stopped_by, best_bleu, last_valid,
                         tokens_seen / max(elapsed, 1e-9), examples_seen)
    if main:
        meta_path = out_dir / runs.META
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            meta = {}
        meta.update({"finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "steps": step, "epochs_done": epoch,
                     "stopped_by": stopped_by, "elapsed_s": elapsed, "tokens_seen": tokens_seen,
                     "mean_tokens_per_s": result.tokens_per_s, "best_valid_bleu": best_bleu,
                     "last_valid": last_valid})
        atomic_write_json(meta_path, meta)
        try:
            from attnlab.inspection.plots import plot_curves

            plot_curves(out_dir)
        except ImportError:
            pass
    return result


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _resolve_size(cfg: Config, prepared, main: bool) -> Config:
    """``train.size=auto`` settled on rank 0 (one probe, one choice) and shared with every rank."""
    why = ""
    if main:
        cfg, why = sizing.resolve(cfg)
    cfg = D.broadcast_object(cfg)
    if why and main:
        print(why, file=sys.stderr)
    if prepared is not None and prepared.stats.get("tokenizer") not in (None, cfg.data.tokenizer):
        raise AttnlabError("train(): data prepared before train.size=auto was resolved; call "
                           "attnlab.training.sizing.resolve(cfg) first and prepare its cfg.data")
    return cfg


def _first_nonfinite(model: nn.Module, loss: torch.Tensor) -> str:
    for name, p in model.named_parameters():
        if not torch.isfinite(p).all():
            return f"parameter {name}"
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return f"gradient of {name}"
    return "loss" if not torch.isfinite(loss) else "gradient norm"
