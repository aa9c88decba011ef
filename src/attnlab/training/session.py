"""Everything a training run holds besides the five lines the notes teach (those are in ``loop.py``).

A :class:`Session` is set up by :meth:`Session.open` — the run folder checked, the config settled
(``train.size`` settled here and nowhere else, a resumed run's config checked), the data prepared, the model and
optimizer built, and, with ``--resume``, the weights, optimizer, budget plan, data position and RNG
restored from ``last``. The loop then asks it for the epoch's batches, for the per-step agreement of the
processes, to validate and to save.

Under torchrun every rank holds its own Session; the agreements keep them in step:

- :func:`agree_on_restart`: whether any rank was restarted by the agent, and whether ``last`` exists;
- :meth:`Session.agree_step`: one all-reduce per update — the global token and pair counts (the loss
  normaliser), the stop votes (clocks and signals differ between processes) and rank 0's horizon (so
  every rank uses the same lr);
- :func:`all_finite`: an update is skipped on every rank or on none;
- validation runs on rank 0 and its record is broadcast; a checkpoint gathers every rank's RNG.
"""

from __future__ import annotations

import dataclasses
import random
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab import fast, runs
from attnlab.config import OWN_CORPUS, Config
from attnlab.data import corpus, pairs
from attnlab.data.batching import Batch, collate
from attnlab.data.vocab import load_tokenizer
from attnlab.device import cpu_threads, idle_sampler, set_threads
from attnlab.errors import AttnlabError, CorpusError
from attnlab.i18n import _
from attnlab.interrupts import Interrupted
from attnlab.models import build_model
from attnlab.threads import ThreadTuner
from attnlab.training import distributed as D
from attnlab.training import sizing
from attnlab.training import tensorboard as tb
from attnlab.training.budget import WARM_UPDATES, BudgetPlan
from attnlab.training.optim import make_optimizer
from attnlab.training.resume import check_resume_overrides
from attnlab.training.run_lock import RunLock, RunLockedError, lock_run_folder
from attnlab.training.run_record import (
    CurvesPainter,
    check_run_dir,
    drop_records_after,
    prepare_run_dir,
    write_run_files,
)
from attnlab.training.validation import record_probes, selection_score, validation_bleu, validation_loss
from attnlab.training.wall import WallClock


@dataclass
class Progress:
    """Where the run is; saved in every checkpoint's ``state.pt``. ``pos`` counts the global batches of
    this epoch done, in the plan made for the run's number of processes minus ``exclude`` (the pairs
    consumed before a resume with another number of processes)."""

    step: int = 0
    epoch: int = 0
    pos: int = 0
    best_bleu: float = -1.0
    tokens_seen: int = 0
    examples_seen: int = 0  # training pairs consumed over all ranks (weight-0 fillers excluded)
    exclude: np.ndarray | None = None
    elapsed_before: float = 0.0  # seconds spent before the last resume


@dataclass
class StepVotes:
    """What the processes agreed on before an update."""

    tokens: float  # non-pad target tokens of the global batch
    pairs: float
    stop: str  # "" (go on), "max_minutes" or "signal"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def rank_seed(seed: int, step: int, rank: int) -> int:
    """Deterministic per-rank seed (dropout differs per rank; a resume with another world size)."""
    return (seed * 1_000_003 + step * 7_919 + rank * 104_729) % (2**63)


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def agree_on_restart(out_dir: Path, resume: bool) -> tuple[bool, bool]:
    """``(restarted, resume)`` agreed by every rank. Agents count restarts per machine, so "restarted"
    means any rank was; an elastic restart reruns the same command line, so it continues from ``last``
    when there is one."""
    restarted = D.is_distributed() and D.sum_floats(D.restart_count() > 0)[0] > 0
    if restarted and not resume:
        resume = bool(D.broadcast_object(runs.has_checkpoint(out_dir) if D.is_main() else None))
    return restarted, resume


def lock_for_training(out_dir: Path) -> RunLock | None:
    """Rank 0 locks the run folder (:mod:`attnlab.training.run_lock`); when another process holds it,
    every rank raises the same one-line :class:`RunLockedError`, so none waits for the others."""
    lock, refusal = None, None
    if D.is_main():
        try:
            lock = lock_run_folder(out_dir)
        except RunLockedError as e:
            refusal = str(e)
    refusal = D.broadcast_object(refusal)
    if refusal:
        raise RunLockedError(refusal)
    return lock


def open_run_folder(cfg: Config, out_dir: Path, resume: bool = False) -> RunLock | None:
    """What comes before the run folder is touched: a missing extra and a folder that cannot take the run
    (``run_record.check_run_dir``) are refused on every rank before anything is written (the lock's file
    included), then the folder is locked (:func:`lock_for_training`)."""
    tb.require(cfg.train.tensorboard)
    if not (D.is_distributed() and D.restart_count() > 0):  # a torchrun restart finds its own job's files
        check_run_dir(out_dir, resume)
    return lock_for_training(out_dir)


def all_finite(finite: bool) -> bool:
    """True when the loss and gradient were finite on every rank: a lone skipper would stall DDP."""
    if D.world_size() > 1:
        return D.sum_floats(not finite)[0] == 0
    return finite


def settle_config(cfg: Config, out_dir: Path, resume: bool, prepared,
                  explicit: frozenset[str] | None = None) -> tuple[Config, runs.RunFiles | None]:
    """Threads and ``train.size`` (:func:`settle_size`), the pair (``data.direction`` as the corpus's record
    resolves it, so config.toml names it: ``en-zh``, never another pair's default) and a resumed run's checks,
    before anything in ``out_dir`` is written."""
    cfg = dataclasses.replace(cfg, data=pairs.resolved(cfg.data))  # a direction that does not fit stops here
    saved = runs.read_run(out_dir) if resume else None
    cfg = settle_size(cfg, prepared, explicit, saved_size=saved.config.train.size if saved is not None else None)
    seed_everything(cfg.train.seed)
    if saved is not None:
        # An older run's config.toml may say the old default, en-fr, of any pair: compare pairs, not spellings.
        check_resume_overrides(dataclasses.replace(saved.config, data=pairs.resolved(saved.config.data)), cfg, out_dir)
    return cfg, saved


def thread_tuner(cfg: Config, device: torch.device) -> ThreadTuner | None:
    """``train.threads=0`` on the CPU: a tuner between 1 and this process's CPUs (its share of them under
    torchrun), starting on the count in use (the demo starts a loaded machine on fewer) or on the cores the
    load leaves free, if fewer; a count the user set stays fixed, and a GPU's work does not wait on CPU
    threads."""
    if cfg.train.threads > 0 or device.type != "cpu":
        return None
    most = D.threads_per_process() if D.is_distributed() else cpu_threads()
    return ThreadTuner(most, start=min(torch.get_num_threads(), most), sense=idle_sampler)


def use_threads(cfg: Config) -> None:
    """The torch threads the run trains on: ``train.threads``, else every CPU this process may use (its share of
    them under torchrun, where ranks on one machine share its cores)."""
    if D.is_distributed() and cfg.train.threads <= 0:
        torch.set_num_threads(D.threads_per_process())
    else:
        set_threads(cfg.train.threads)


def settle_size(cfg: Config, prepared=None, explicit: frozenset[str] | None = None,
                saved_size: str | None = None) -> Config:
    """The one place ``train.size`` is settled (``attnlab train``, the notebook's ``train``, ``attnlab config
    --resolve``); the front ends pass ``auto`` through. The run's threads are set first, as the probe measures
    them. ``auto`` is resolved on rank 0 (one probe, one choice) and shared with every rank; a tier by name is
    applied; a resumed run (``saved_size``, what its config.toml says) keeps the size it was built with, not
    a new probe's choice. ``explicit`` as in :func:`attnlab.training.loop.train`."""
    use_threads(cfg)
    if saved_size is not None:
        if cfg.train.size != "auto":
            return cfg  # the saved config, already sized (resume's checks compare it)
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, size=saved_size))
        return sizing.resolve(cfg, explicit)[0]
    if cfg.train.size == "base":
        return cfg
    why = ""
    if D.is_main():
        cfg, why = sizing.resolve(cfg, explicit)
    cfg = D.broadcast_object(cfg)
    if why and D.is_main():
        print(why, file=sys.stderr)
    if prepared is not None and prepared.stats.get("tokenizer") not in (None, cfg.data.tokenizer):
        raise AttnlabError(_("train(): data prepared before train.size=auto was resolved; call "
                             "attnlab.training.sizing.resolve(cfg) first and prepare its cfg.data"))
    return cfg


def load_data(cfg: Config, saved: runs.RunFiles | None, prepared, out_dir: Path | None = None):
    """The prepared corpus: given, or built with a resumed run's own tokenizers; a resumed run's must be
    the corpus it recorded (:func:`attnlab.data.corpus.require_same_corpus`)."""
    if prepared is None:
        toks = None
        data = cfg.data
        if saved is not None:
            toks = (load_tokenizer(saved.tokenizers["src"]), load_tokenizer(saved.tokenizers["tgt"]))
            if data.dataset == OWN_CORPUS and not data.data_path:  # resumed without --data: where it was?
                data = dataclasses.replace(data, data_path=_recorded_corpus_path(saved, out_dir))
        prepared = corpus.prepare(data, tokenizers=toks)
    if saved is not None:
        corpus.require_same_corpus(prepared, runs.recorded_corpus(saved.meta), out_dir or "the run")
    if not prepared.splits["train"].src:
        raise AttnlabError(_("the training split is empty; raise data.max_pairs or check the corpus"))
    return prepared


def _recorded_corpus_path(saved: runs.RunFiles, out_dir: Path | None) -> str:
    """The corpus of your own a resumed run recorded (name and sha256), found in the current folder or
    ``$ATTNLAB_DATA_DIR`` (:func:`attnlab.data.corpus.locate_recorded`); else a one-line error naming it."""
    recorded = runs.recorded_corpus(saved.meta) or {}
    found = corpus.locate_recorded(recorded)
    if found is None:
        raise CorpusError(
            _("--resume: {run} was trained on {file} (sha256 {sha}…), a corpus of your own, which is not in the "
              "current folder or $ATTNLAB_DATA_DIR; pass --data with its path").format(
                run=out_dir or "the run", file=recorded.get("file", "?"), sha=str(recorded.get("sha256", "?"))[:12]))
    return found


def epoch_batches(cfg: Config, split, epoch: int, exclude, world: int) -> list[list[int]]:
    """The global batches of epoch ``epoch`` for ``world`` processes (see distributed.py)."""
    try:
        return D.epoch_batches([len(s) for s in split.src], [len(t) for t in split.tgt], cfg.data.batch_tokens,
                               cfg.data.max_batch_size, cfg.train.seed, epoch, world, exclude)
    except ValueError as err:
        raise AttnlabError(str(err)) from None


@dataclass
class Session:
    cfg: Config
    out_dir: Path
    device: torch.device
    prepared: Any
    model: nn.Module
    train_model: nn.Module  # the model, or its DDP wrapper: what the forward pass runs through
    optimizer: torch.optim.Optimizer
    budget: BudgetPlan
    clock: Callable[[], float]
    progress: Progress = field(default_factory=Progress)
    resumed: bool = False
    t_start: float = 0.0
    last_valid: dict[str, Any] = field(default_factory=dict)
    board: tb.Board = field(default_factory=tb.Board)  # TensorBoard on rank 0 with train.tensorboard
    curves: CurvesPainter = field(default_factory=CurvesPainter)
    wall: WallClock = field(default_factory=WallClock)  # where this invocation's seconds go (training/wall.py)
    threads: ThreadTuner | None = None  # train.threads=0 on the CPU: the count adapts to the load (threads.py)

    @classmethod
    def open(cls, cfg: Config, out_dir: Path, resume: bool, prepared, argv, device, clock,
             explicit: frozenset[str] | None = None) -> Session:
        """Set the run up on this rank (see the module docstring), in a folder :func:`open_run_folder`
        opened; ``clock`` is the loop's."""
        restarted, resume = agree_on_restart(out_dir, resume)
        if D.is_main():
            prepare_run_dir(cfg, out_dir, resume, restarted=restarted)
        D.barrier()
        cfg, saved = settle_config(cfg, out_dir, resume, prepared, explicit)
        prepared = load_data(cfg, saved, prepared, out_dir)
        if saved is not None:  # the checkpoint resumed from, verified before a model is built from config.toml
            last = runs.resolve_checkpoint(out_dir, "last")
            runs.verify_checkpoint(last)
            runs.check_weights_fit(last / runs.WEIGHTS, cfg.model, len(prepared.src_tok), len(prepared.tgt_tok))
        model = build_model(cfg.model, len(prepared.src_tok), len(prepared.tgt_tok)).to(device)
        fast.apply(model, cfg.train.kernels, device)  # the measured CPU kernels, or the notes' plain code
        optimizer = make_optimizer(model, cfg.train)
        train_model = D.wrap_ddp(model, device) if D.is_distributed() else model
        n_train, world = len(prepared.splits["train"].src), D.world_size()
        if n_train < world:
            raise AttnlabError(_("the training split has {n_train} pairs, fewer than the {world} "
                                 "processes; use fewer processes or more data").format(n_train=n_train, world=world))
        per_epoch = len(epoch_batches(cfg, prepared.splits["train"], 0, None, world)) if cfg.train.max_epochs else 0
        s = cls(cfg, out_dir, device, prepared, model, train_model, optimizer, BudgetPlan.make(cfg.train, per_epoch), clock)
        if D.rank():
            torch.manual_seed(rank_seed(cfg.train.seed, 0, D.rank()))  # dropout differs per rank; init came from rank 0
            random.seed(rank_seed(cfg.train.seed, 0, D.rank()))
        if resume:
            s.restore()
            s.resumed = True
        if D.is_main():
            write_run_files(out_dir, cfg, prepared, model, device, world, argv)
        s.board = tb.open_board(cfg.train.tensorboard, out_dir, s.progress.step if resume else None, D.is_main())
        s.threads = thread_tuner(cfg, device)
        return s

    # ------------------------------------------------------------------------------------ data

    def epoch_batches(self, epoch: int | None = None, exclude=None, for_world: int | None = None) -> list[list[int]]:
        """The global batches of an epoch (this one by default); each rank takes its share of each."""
        if epoch is None:
            epoch, exclude = self.progress.epoch, self.progress.exclude
        return epoch_batches(self.cfg, self.prepared.splits["train"], epoch, exclude, for_world or D.world_size())

    def my_share(self, global_batch: list[int]) -> tuple[Batch, bool]:
        """This rank's part of a global batch, on the device; ``real``: False for a weight-0 filler."""
        split = self.prepared.splits["train"]
        idx, real = D.shard(global_batch, D.rank(), D.world_size())
        with self.timed("batch"):
            batch = collate([split.src[i] for i in idx], [split.tgt[i] for i in idx], idx)
            return batch.to(self.device, non_blocking=True), real

    def next_epoch(self) -> None:
        self.progress.epoch += 1
        self.progress.pos = 0
        self.progress.exclude = None

    # ------------------------------------------------------------------------------- agreement

    def agree_step(self, batch: Batch, real: bool, time_up: bool, signalled: bool) -> StepVotes:
        """One all-reduce before the update (see the module docstring)."""
        main = D.is_main()
        g_tok, g_pairs, g_time, g_sig, g_horizon = D.sum_floats(
            batch.num_tgt_tokens if real else 0, len(batch.src) if real else 0, time_up, signalled,
            (self.budget.horizon or 0) if main else 0)
        if D.world_size() > 1 and self.budget.budget_s > 0:
            self.budget.horizon = int(g_horizon) or None  # rank 0's plan: every rank the same lr
        return StepVotes(g_tok, g_pairs, "max_minutes" if g_time else "signal" if g_sig else "")

    # ------------------------------------------------------------------ checkpoints, validation

    def elapsed(self) -> float:
        """Seconds of training, resumed runs included."""
        return self.progress.elapsed_before + self.clock() - self.t_start

    def state_dict(self) -> dict[str, Any]:
        """What ``--resume`` needs besides the weights (collective when distributed: every rank calls it)."""
        rng: Any = rng_state()
        if D.is_distributed():
            gathered: list[Any] = [None] * D.world_size()
            torch.distributed.all_gather_object(gathered, rng)
            rng = gathered
        p = self.progress
        return {"optimizer": self.optimizer.state_dict(), "budget": self.budget.state_dict(), "step": p.step,
                "epoch": p.epoch, "batch_in_epoch": p.pos, "best_bleu": p.best_bleu, "tokens_seen": p.tokens_seen,
                "examples_seen": p.examples_seen, "world_size": D.world_size(),
                "epoch_exclude": None if p.exclude is None else torch.from_numpy(p.exclude.astype(np.uint8)),
                "elapsed_s": self.elapsed(), "rng": rng}

    def save(self, is_best: bool = False) -> None:
        with self.timed("checkpoint"):
            st = self.state_dict()
            if D.is_main():
                runs.save_checkpoint(self.out_dir, self.progress.step, self.model, st,
                                     keep=self.cfg.train.keep_checkpoints, best=is_best,
                                     decay_start=self.budget.decay_start,
                                     keep_decay=self.cfg.train.average_last > 0)
            D.barrier()

    def timed(self, part: str):
        """A ``with`` block whose seconds count towards ``part`` of :attr:`wall` (see training/wall.py)."""
        return self.wall.part(part)

    def validate(self) -> dict[str, Any]:
        """Loss, BLEU and probes on rank 0 (the same figures as one process; the other ranks wait in the
        broadcast, within $ATTNLAB_DIST_TIMEOUT), then a checkpoint; its time is the budget's."""
        t0 = self.clock()
        p, main = self.progress, D.is_main()
        rec: dict[str, Any] = {"event": "valid", "step": p.step, "epoch": p.epoch}
        if main:
            with self.timed("valid_loss"):
                rec.update(validation_loss(self.model, self.prepared.splits["valid"], self.cfg, self.device))
            with self.timed("valid_bleu"):
                rec.update(validation_bleu(self.model, self.prepared, self.cfg, self.device))
            with self.timed("probes"):
                record_probes(self.model, self.prepared, self.cfg, self.device, self.out_dir, p.step)
        is_best = main and selection_score(rec) > p.best_bleu  # BLEU, or a fill model's masked-token accuracy
        if is_best:
            p.best_bleu = selection_score(rec)
        if main:
            runs.append_metrics(self.out_dir, rec)
            with self.timed("curves"):
                self.curves.after_validation(self.out_dir)  # inside the validation's time: the budget sees it
            self.board.valid(rec, self.out_dir)
        rec, is_best, p.best_bleu = D.broadcast_object((rec, is_best, p.best_bleu))
        self.save(is_best=is_best)
        self.budget.validated(p.step, self.clock() - t0)
        self.last_valid = rec
        return rec

    def finish(self, stopped_by: str) -> None:
        """The final validation and checkpoint (only a checkpoint if this step was just validated, or
        after a signal: the user asked to stop now)."""
        if self.last_valid.get("step") == self.progress.step and self.last_valid:
            self.save()
        elif stopped_by == "signal":
            self.save()
        else:
            self.validate()
        self.board.close()

    # ------------------------------------------------------------------------------------ resume

    def restore(self) -> None:
        """Weights, optimizer, budget plan, data position and RNG from the run's ``last`` checkpoint."""
        path = runs.resolve_checkpoint(self.out_dir, "last")
        runs.load_weights(path, self.model)
        st = runs.load_state(path)
        try:
            self.optimizer.load_state_dict(st["optimizer"])
        except (ValueError, KeyError) as e:  # torch's refusal of parameter groups that do not fit this model
            raise runs.CheckpointError(_("{path}: its optimizer state does not fit this model ({error}); resume with the "
                                         "run's own config.toml or start a new run with another --out").format(
                path=path / runs.STATE, error=e)) from None
        change = self.budget.load_state_dict(st.get("budget", {}), st["step"])
        if change and D.is_main():
            print(change, file=sys.stderr)  # a resume that moves the schedule says so (the plan is not silent)
        exclude = st.get("epoch_exclude")
        self.progress = p = Progress(st["step"], st["epoch"], st["batch_in_epoch"], st["best_bleu"], st["tokens_seen"],
                                     st.get("examples_seen", 0),
                                     None if exclude is None else exclude.numpy().astype(bool),
                                     st.get("elapsed_s", 0.0))
        saved_world, world, rank, seed = st.get("world_size", 1), D.world_size(), D.rank(), self.cfg.train.seed
        if saved_world != world:
            # Another number of processes: the epoch's batch list changes (the global budget is
            # batch_tokens * world), so mark what was consumed and cut the rest of the epoch afresh.
            n_train = len(self.prepared.splits["train"].src)
            p.exclude = D.consumed_mask(n_train, self.epoch_batches(p.epoch, p.exclude, saved_world), p.pos, p.exclude)
            p.pos = 0
            # Per-rank RNG streams cannot be mapped onto a different set of ranks: reseed, deterministically.
            torch.manual_seed(rank_seed(seed, p.step, rank))
            random.seed(rank_seed(seed, p.step, rank))
        else:
            rngs = st["rng"]
            set_rng_state(rngs[rank] if isinstance(rngs, list) else rngs)
        if D.is_main():
            drop_records_after(self.out_dir, p.step)
            runs.append_metrics(self.out_dir, {"event": "resume", "step": p.step, "epoch": p.epoch, "world_size": world,
                                               "saved_world_size": saved_world, "restart": D.restart_count()})


# ---------------------------------------------------------------------------------- bookkeeping


class StopFlag:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps (a step is never torn); ``signal``
    is the first one received. A second Ctrl-C means "now": it raises :class:`attnlab.interrupts.Interrupted`.
    The caller of ``train`` decides what a stop means beyond the run (attnlab.interrupts)."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):  # noqa: ARG002
        if self.signal is not None and signum == signal.SIGINT:
            raise Interrupted(signum)  # a second Ctrl-C means "now"
        self.signal = self.signal or signum

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class UpdateClock:
    """Times the updates for the budget plan (the first ``WARM_UPDATES`` are slow and left out;
    validation and saving happen outside an update's time) and says when the budget is spent."""

    def __init__(self, s: Session) -> None:
        self.s, self.timed_s, self.timed_updates, self.t_update = s, 0.0, 0, 0.0

    def start_update(self) -> bool:
        """Called before an update: re-projects the horizon; True when the time is up."""
        s = self.s
        self.t_update = s.clock()
        elapsed = s.progress.elapsed_before + self.t_update - s.t_start
        if self.timed_updates:
            s.budget.observe(s.progress.step, elapsed, self.timed_s / self.timed_updates)
        return s.budget.out_of_time(elapsed)

    def end_update(self) -> None:
        if self.s.progress.step > WARM_UPDATES:
            self.timed_s += self.s.clock() - self.t_update
            self.timed_updates += 1


class TrainLog:
    """The ``train`` records of metrics.jsonl every ``log_every`` updates: loss per target token over
    every rank's tokens since the last record, lr, target tokens/s, and the progress report's figures
    (``bar``: an :class:`attnlab.progress.Progress`, or None)."""

    def __init__(self, s: Session, bar) -> None:
        self.s, self.bar = s, bar
        self.t, self.tokens, self.nll, self.ntok = s.clock(), 0, 0.0, 0

    def add(self, out, votes: StepVotes, real: bool) -> None:
        p = self.s.progress
        p.tokens_seen += int(votes.tokens)
        p.examples_seen += int(votes.pairs)
        self.tokens += int(votes.tokens)
        if real:
            self.nll += float(out.nll_sum)
            self.ntok += out.num_tokens
        if self.bar is not None:
            self.bar.update(1, elapsed_s=self.s.elapsed())
        every = self.s.cfg.train.log_every
        if every and p.step % every == 0:
            self.write()

    def write(self) -> None:
        s, p = self.s, self.s.progress
        now = s.clock()
        tps = self.tokens / max(now - self.t, 1e-9)
        if D.world_size() > 1:  # the logged loss is over every rank's tokens
            self.nll, self.ntok = D.sum_floats(self.nll, self.ntok)
        rec = {"event": "train", "step": p.step, "epoch": p.epoch, "loss": self.nll / max(self.ntok, 1),
               "lr": s.optimizer.param_groups[0]["lr"], "tokens_per_s": tps, "tokens_seen": p.tokens_seen,
               "elapsed_s": p.elapsed_before + now - s.t_start, "horizon": s.budget.horizon}
        if D.is_main():
            runs.append_metrics(s.out_dir, rec)
            s.board.train(rec)
        if self.bar is not None:
            self.bar.set(loss=rec["loss"], lr=rec["lr"], tokens_per_s=tps)
        self.t, self.tokens, self.nll, self.ntok = now, 0, 0.0, 0


class NonFiniteLossError(AttnlabError):
    """Several consecutive steps produced a non-finite loss; the run stopped."""


class SkippedUpdates:
    """A non-finite loss or gradient skips the update: the weights stay as they were (the notes' §10:
    a diverging loss means lr too high). ``train.max_nonfinite`` in a row stop the run, saved, with
    the first culprit named."""

    def __init__(self, s: Session) -> None:
        self.s, self.in_a_row, self.first_bad = s, 0, None

    def skip(self, loss: torch.Tensor) -> None:
        s = self.s
        self.in_a_row += 1
        if self.first_bad is None:
            self.first_bad = first_nonfinite(s.model, loss)
        print(_("warning: step {step}: non-finite loss/gradient ({first_bad}); update skipped")
              .format(step=s.progress.step, first_bad=self.first_bad), file=sys.stderr)
        s.optimizer.zero_grad(set_to_none=True)
        if self.in_a_row >= max(s.cfg.train.max_nonfinite, 1):
            s.save()
            raise NonFiniteLossError(
                _("{in_a_row} consecutive non-finite steps (first: {first_bad}); the run stopped at "
                  "step {step}. Lower train.lr (now {lr}) or raise train.warmup_steps").format(in_a_row=self.in_a_row, first_bad=self.first_bad, step=s.progress.step, lr=s.cfg.train.lr))

    def reset(self) -> None:
        self.in_a_row, self.first_bad = 0, None


def first_nonfinite(model: nn.Module, loss: torch.Tensor) -> str:
    for name, p in model.named_parameters():
        if not torch.isfinite(p).all():
            return f"parameter {name}"
    for name, p in model.named_parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return f"gradient of {name}"
    return "loss" if not torch.isfinite(loss) else "gradient norm"
