"""`attnlab train`: a plain, visible training loop (no callback framework; the notes' §3, §10, §21).

Read :func:`train_step`, then :func:`fit`, then :func:`train`:

- one step = teacher forcing (decoder input ``<bos> y…``, labels ``y… <eos>``) → cross-entropy over
  the non-pad target tokens (``losses.py``; label smoothing optional) → backward → gradient clipping
  → an Adam(W) step at the lr the budget plan gives this step (``budget.py``);
- an epoch = every length-bucketed batch once; validation (loss, greedy BLEU on a sample, the
  attention of the probe sentences: ``validation.py``) and checkpoints come at the planned steps (every
  ``train.save_every``, and ``train.average_last`` over the lr's decay, for ``attnlab average``);
- Ctrl-C / SIGTERM finish the current step, save ``last`` atomically and return; ``--resume`` then
  continues exactly where it stopped (same batches, same RNG, same optimizer state and plan).

Everything else a real run needs — the run folder, the settled config, restoring, validating,
saving and the agreements between processes under torchrun — is in ``session.py``. Under torchrun
the same loop runs on every rank (DDP, see ``distributed.py`` for how batches are shared and the loss
normalised); only rank 0 validates and writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab.config import Config, TrainConfig
from attnlab.data.batching import Batch
from attnlab.device import autocast, pick_device
from attnlab.i18n import _
from attnlab.progress import INTERVAL_S, Progress
from attnlab.training import distributed as D
from attnlab.training.losses import LossOutput, sequence_loss
from attnlab.training.run_record import finish_meta
from attnlab.training.session import (
    NonFiniteLossError,
    Session,
    SkippedUpdates,
    StopFlag,
    TrainLog,
    UpdateClock,
    all_finite,
    open_run_folder,
)
from attnlab.training.validation import record_probes

__all__ = ["NonFiniteLossError", "TrainResult", "train", "train_step"]

#: the training loop's clock (tests replace it with a simulated one)
clock = time.monotonic


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
    signal: int | None = None  # the signal this process received when stopped_by == "signal" (None on a rank
    # that stopped because another rank received one)
    threads: str = ""  # how the thread count adapted, in one line (empty when train.threads fixed it)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, batch: Batch, scale: float, lr: float,
               tc: TrainConfig, device: torch.device,
               objective: Callable[[nn.Module, Batch], tuple[LossOutput, torch.Tensor]] | None = None,
               ) -> tuple[LossOutput, torch.Tensor, bool]:
    """One update (the notes' §3 and §21): teacher-forced forward pass, cross-entropy over the non-pad
    target tokens, backward, gradient clipping, an Adam step at this step's lr.

    ``scale`` turns the summed loss into the mean over the global batch's target tokens (times the
    number of processes, since DDP averages gradients; 0 for a rank without a real pair). Returns the
    loss output, the scaled loss and whether the weights were updated: not when the loss or the
    gradient norm is not finite (on any rank), and then the gradients are left for the caller to read.
    ``objective`` (for ``attnlab align --teach``): ``(model, batch) → (loss output, extra loss)`` in place
    of the plain loss; the extra term is added after the scaling.
    """
    with autocast(device, tc.amp):
        if objective is None:
            out, extra = sequence_loss(model, batch, tc.label_smoothing), None  # decoder input <bos> y…, labels y… <eos>
        else:
            out, extra = objective(model, batch)
    loss = out.loss_sum * scale if extra is None else out.loss_sum * scale + extra
    optimizer.zero_grad(set_to_none=True)
    finite = all_finite(bool(torch.isfinite(loss)))
    if finite:
        loss.backward()
        if tc.clip_grad_norm:
            finite = bool(torch.isfinite(nn.utils.clip_grad_norm_(model.parameters(), tc.clip_grad_norm)))
    if finite:
        set_lr(optimizer, lr)
        optimizer.step()
    return out, loss, finite


def fit(s: Session, stop: StopFlag, bar: Progress | None) -> str:
    """The epochs: every global batch is one :func:`train_step`; validation and checkpoints come at the
    steps the budget plan chose. Returns why training stopped. ``bar``: where progress goes (rank 0)."""
    tc, p = s.cfg.train, s.progress
    timer, log, skipped = UpdateClock(s), TrainLog(s, bar), SkippedUpdates(s)
    while not (tc.max_epochs and p.epoch >= tc.max_epochs):
        with s.timed("batch"):
            batches = s.epoch_batches()[p.pos:]
        for global_batch in batches:
            if tc.max_steps and p.step >= tc.max_steps:
                return "max_steps"
            time_up = timer.start_update()
            batch, real = s.my_share(global_batch)
            with s.timed("agree"):
                votes = s.agree_step(batch, real, time_up, stop.signal is not None)
            if votes.stop:
                return votes.stop
            scale = (D.world_size() if real else 0.0) / votes.tokens
            t0 = s.threads.begin() if s.threads else 0.0
            with s.timed("update"):
                out, loss, updated = train_step(s.train_model, s.optimizer, batch, scale,
                                                tc.lr * s.budget.factor(p.step), tc, s.device)
            if s.threads:  # the thread count fastest now, per padded token: what the kernels run over
                s.threads.end(t0, batch.src.numel() + batch.tgt_in.numel())
            if not updated:
                skipped.skip(loss)  # raises after train.max_nonfinite in a row
                p.pos += 1
                continue
            skipped.reset()
            p.step += 1
            timer.end_update()
            p.pos += 1
            with s.timed("log"):
                log.add(out, votes, real)
            for_average = s.budget.after_update(p.step)
            if for_average:  # counted before the save, so a resume from this checkpoint does not save it again
                s.budget.average_saved(p.step)
            if s.budget.due_validation(p.step):
                _say_valid(bar, p.step, s.validate())
            elif for_average or (tc.save_every and p.step % tc.save_every == 0):
                s.save()
        s.next_epoch()
    return "max_epochs"


def train(cfg: Config, out_dir: str | Path, resume: bool = False, progress: bool = True,
          prepared=None, argv: list[str] | None = None, explicit: frozenset[str] | None = None,
          log_format: str = "auto", log_interval_s: float = INTERVAL_S, watch: bool = True) -> TrainResult:
    """Train ``cfg`` into ``out_dir`` (a new run, or the continuation of one with ``resume``).

    ``progress``: report on stderr (rank 0), as ``log_format`` says (:mod:`attnlab.progress`: a bar on a
    terminal, else a plain line every ``log_interval_s`` seconds, or JSON lines).

    ``watch``: redraw ``curves.png`` after each validation, so the run can be watched while it trains
    (:class:`~attnlab.training.run_record.CurvesPainter`); False draws it once, at the end: the demo's
    runs end before anyone opens the file, and in a short budget on a slow machine a mid-run draw, which
    loads matplotlib, is the largest cost besides the updates (bench/RESULTS.md, "Where a slow machine's
    seconds go").

    ``explicit``: the dotted keys the caller set (``model.num_hiddens``, …), which a size tier
    (``train.size``) must leave as they are; None = the keys where ``cfg`` differs from its preset,
    which cannot tell a key set to its preset value from one left unset.

    Launched by torchrun (its ``RANK``/``WORLD_SIZE``/… variables are set) it joins the process
    group first (gloo on CPU, nccl on GPU, timeout ``$ATTNLAB_DIST_TIMEOUT``) and leaves it at the end.
    """
    device = pick_device(cfg.train.device)
    device, own_group = D.setup(device)
    lock = None
    try:
        lock = open_run_folder(cfg, Path(out_dir), resume)  # one writer per run folder (training/run_lock.py)
        t_open = time.perf_counter()  # the wall record's clock (training/wall.py), not the loop's
        s = Session.open(cfg, Path(out_dir), resume, prepared, argv, device, clock, explicit)
        s.wall.add("setup", time.perf_counter() - t_open)
        s.curves.enabled = watch
        bar = _progress(s, log_format, log_interval_s) if progress and D.is_main() else None
        s.model.train()
        set_lr(s.optimizer, s.cfg.train.lr * s.budget.factor(s.progress.step))
        if bar is not None:
            bar.message(s.budget.describe())
        s.t_start = clock()
        s.wall.start()
        if s.progress.step == 0 and not s.resumed and D.is_main():
            with s.timed("probes"):
                record_probes(s.model, s.prepared, s.cfg, device, s.out_dir, 0)  # attention before any training
        with StopFlag() as stop:
            try:
                stopped_by = fit(s, stop, bar)
            finally:
                if bar is not None:
                    bar.close()
            said = s.last_valid.get("step")
            s.finish(stopped_by)  # the final validation and checkpoint
        result = _result(s, stopped_by)
        if bar is not None and bar.fmt == "json":  # a program reading the log learns the end, and why
            if s.last_valid.get("step") != said:
                _say_valid(bar, s.progress.step, s.last_valid)
            bar.event("end", f"stopped by {stopped_by} at step {result.step}", stopped_by=stopped_by,
                      step=result.step, epoch=result.epoch, tokens_per_s=result.tokens_per_s,
                      best=result.best_bleu)
        result.signal = stop.signal
        return result
    finally:
        if lock is not None:
            lock.release()
        if own_group:
            D.teardown()


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def _progress(s: Session, log_format: str, interval_s: float) -> Progress:
    """The run's progress on stderr. Its total is what does not move: the steps of a step or epoch
    budget, the seconds of a time budget (whose horizon in updates is re-projected as it goes)."""
    b = s.budget
    return Progress(_("train {kind}").format(kind=s.cfg.model.kind), log_format, unit="step",
                    total=b.fixed_horizon, initial=s.progress.step, budget_s=b.budget_s, interval_s=interval_s,
                    clock=clock)


def _say_valid(bar: Progress | None, step: int, rec: dict[str, Any]) -> None:
    if bar is not None and "valid_bleu" in rec:
        bar.event("valid", _("step {step}: valid loss {loss:.3f}  BLEU {bleu:.1f}").format(
            step=step, loss=rec["valid_loss"], bleu=rec["valid_bleu"]),
                  step=step, valid_loss=rec["valid_loss"], valid_bleu=rec["valid_bleu"])


def thread_record(s: Session) -> dict[str, Any]:
    """What meta.json says of the thread count: each change the tuner made, or the fixed count."""
    if s.threads:
        return s.threads.to_json()
    return {"mode": "fixed", "threads": torch.get_num_threads()}


def _result(s: Session, stopped_by: str) -> TrainResult:
    p = s.progress
    elapsed = s.elapsed()
    result = TrainResult(s.out_dir, p.step, p.epoch, stopped_by, p.best_bleu, s.last_valid,
                         p.tokens_seen / max(elapsed, 1e-9), p.examples_seen)
    if D.is_main():
        finish_meta(s.out_dir, {"steps": p.step, "epochs_done": p.epoch, "stopped_by": stopped_by,
                                "elapsed_s": elapsed, "wall_s": s.wall.report(),
                                "tokens_seen": p.tokens_seen,
                                "mean_tokens_per_s": result.tokens_per_s, "best_valid_bleu": p.best_bleu,
                                "last_valid": s.last_valid, "thread_tuning": thread_record(s)})
    if s.threads:
        result.threads = s.threads.describe()
    return result
