"""Data parallelism on PyTorch's own engine: ``torch.distributed`` + ``torchrun`` (DDP), kept thin.

Everything degrades to the single-process case when no process group is initialised, so the
training loop reads the same with 1 or N processes.

How the data is shared (the contract the tests check):

* The **global batch** of a step is cut by :class:`~attnlab.data.batching.TokenBatchSampler`
  with the budget ``batch_tokens * world_size`` (and ``max_batch_size * world_size`` pairs);
  :func:`shard` gives rank ``r`` the rows ``r, r + world_size, …`` of it (the rows are length
  sorted, so striding gives every rank similar lengths). ``data.batch_tokens`` is therefore the
  budget **per process**, and N processes with ``batch_tokens = B`` see exactly the batches of one
  process with ``batch_tokens = N * B``, in the same order. A rank's share can exceed ``B`` by at
  most one row. This is the one sharding path: the sampler knows nothing of ranks, and every rank
  takes part in every global batch, so all ranks run the same number of steps.
* Losses are summed over tokens and divided by the **global** token count (an all-reduce before
  the forward pass); since DDP averages gradients over ranks, each rank scales by ``world_size``.
  The update is then the gradient of the mean over every target token of the global batch — the
  same as one process with the whole batch (not a mean of per-rank means of unequal counts).
* A global batch with fewer pairs than ranks (only the epoch's short remainder can be) leaves some
  ranks without a pair: those run the first pair with weight 0 so every rank joins the gradient
  all-reduce, and the pair is not counted.
* The data position is the number of **global** batches done in the epoch; a resume with another
  number of processes still sees each pair once per epoch (docs/explanations/training.md).
"""

from __future__ import annotations

import datetime
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from attnlab.data.batching import TokenBatchSampler
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.interrupts import die_with_parent

DEFAULT_TIMEOUT_S = 1800.0  # torch's own default for gloo/nccl collectives
_joined = False  # set by setup(): this process initialised a group (it is a torchrun worker)
_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


# ------------------------------------------------------------------------------------ who am I


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return rank() == 0


def local_rank() -> int:
    """This process's index on its machine (``LOCAL_RANK`` from torchrun; 0 otherwise)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """Processes on this machine (``LOCAL_WORLD_SIZE`` from torchrun; 1 otherwise)."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def launched_by_torchrun() -> bool:
    """True when torchrun (or any launcher that sets the same variables) started this process."""
    return all(v in os.environ for v in _TORCHRUN_VARS)


def restart_count() -> int:
    """How many times torchrun's elastic agent restarted the workers (``--max-restarts``)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def timeout() -> datetime.timedelta:
    """Collective timeout from ``$ATTNLAB_DIST_TIMEOUT`` (seconds; default 1800).

    A collective that waits longer (a hung or stopped peer) raises, so the job exits non-zero
    instead of hanging. It must exceed the longest time one rank works alone: rank 0 validates
    while the others wait at a barrier. Raises :class:`AttnlabError` for a value that is not a
    positive number.
    """
    raw = os.environ.get("ATTNLAB_DIST_TIMEOUT", "").strip()
    if not raw:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise AttnlabError(
            _("ATTNLAB_DIST_TIMEOUT={raw!r} is not a positive number of seconds; "
              "set e.g. ATTNLAB_DIST_TIMEOUT=600 or unset it (default 1800)").format(raw=raw)
        )
    return datetime.timedelta(seconds=seconds)


# ----------------------------------------------------------------------------- set up, tear down


def setup(device: torch.device) -> tuple[torch.device, bool]:
    """Join the process group described by torchrun's environment, if any.

    Returns ``(device, created)``: on CUDA the device becomes ``cuda:LOCAL_RANK`` (when no index
    was asked for) and the backend is ``nccl``; on CPU the backend is ``gloo``. ``created`` is
    True when this call initialised the group (the caller then calls :func:`teardown`). Without
    torchrun's variables, or when a group already exists, nothing changes. A torchrun worker dies with
    its agent (:func:`attnlab.interrupts.die_with_parent`): nobody would watch or stop it otherwise.
    """
    if not launched_by_torchrun() or is_distributed():
        return device, False
    if "TORCHELASTIC_RUN_ID" in os.environ:  # torchrun's agent is the parent, alive for the workers' whole life
        agent = os.environ.get("ATTNLAB_AGENT_PID", "")
        die_with_parent(int(agent) if agent.isdigit() else None)  # a killed torchrun takes its workers along
    kwargs: dict[str, Any] = {"timeout": timeout()}
    store = _attempt_store(kwargs["timeout"])
    if store is not None:
        kwargs.update(store=store, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    if device.type == "cuda":
        if device.index is None:
            device = torch.device("cuda", local_rank())
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device, **kwargs)
    else:
        dist.init_process_group("gloo", **kwargs)
    global _joined
    _joined = True
    return device, True


def _attempt_store(wait: datetime.timedelta) -> dist.Store | None:
    """The elastic agent's store seen under a prefix of this restart attempt (None: use ``env://``).

    By default torchrun's workers of every attempt share the agent's TCPStore (``MASTER_PORT`` does
    not change between restarts) and torch's ``env://`` rendezvous adds no per-attempt prefix. The
    restarted group would then find the dead group's keys — Gloo's peer addresses among them — and
    connect to ports nobody listens on any more ("Connection refused"), or wait on keys that never
    change (a hang). A prefix per attempt gives every attempt fresh keys.

    Only with one agent (one machine, which ``--nproc`` always is): agents count their restarts
    separately, so on several machines the counts can differ. There torchrun must run with
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, which builds a fresh store every round (served by rank
    0 on a port torch found free and released earlier: it can be taken meanwhile, so one machine is
    better served by this prefix over the agent's store, whose port stays open), and ``env://`` is right.
    """
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    if os.environ.get("GROUP_WORLD_SIZE", "1") != "1":
        if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0 and os.environ.get("RANK") == "0":
            print("warning: elastic restarts on several machines need TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in "
                  "torchrun's environment (a restarted group may otherwise find the dead group's keys); "
                  "see docs/distributed.md", file=sys.stderr)
        return None
    base = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        int(os.environ["WORLD_SIZE"]),
        is_master=False,
        timeout=wait,
    )
    return dist.PrefixStore(f"attnlab/attempt_{restart_count()}", base)


def teardown() -> None:
    """Leave the group. The group is not always freed by this: see :func:`end_process`."""
    if is_distributed():
        dist.destroy_process_group()


def joined_a_group() -> bool:
    """True once :func:`setup` has initialised a process group in this process."""
    return _joined


def end_process(code: int) -> NoReturn:
    """End a torchrun worker with ``code`` now, without the interpreter's finalization.

    :class:`~torch.nn.parallel.DistributedDataParallel` keeps the gloo group alive after
    ``destroy_process_group()``: the group's threads are still running when the command returns, and
    the interpreter's shutdown then runs beside them. A thread of C++ code that needs the GIL while
    the interpreter finalizes (to free a tensor Python made, say) is ended inside that code, which
    aborts the process ("terminate called without an active exception", SIGABRT) or leaves a lock
    held. Under load a finished rank died so while another was still writing, failing the job.
    Nothing is left to do at this point: everything the command writes is written and closed before
    it returns, so only the standard streams are flushed here.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can be said
            pass
    os._exit(code)


# How gloo and NCCL report a peer process that went away mid-collective (its socket closed or reset).
_LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused")


def lost_peer_line(exc: BaseException) -> str | None:
    """One line for a worker whose collective failed because another worker went away, else None (a bug:
    its traceback is wanted). The worker that went away is the cause, and the launcher names it
    (:func:`attnlab.training.launch.failure_line`): under ``attnlab --nproc`` this line is "" (say
    nothing more); under a torchrun started by hand it says what happened."""
    if not isinstance(exc, RuntimeError) or not any(m in str(exc) for m in _LOST_PEER):
        return None
    if os.environ.get("ATTNLAB_AGENT_PID"):
        return ""
    why = next(m for m in _LOST_PEER if m in str(exc))
    return _("error: rank {rank} lost another worker of the job ({why}); the job stops, and the run folder keeps "
             "its last checkpoint for --resume").format(rank=os.environ.get("RANK", "?"), why=why)


def threads_per_process() -> int:
    """``CPUs // local processes`` (at least 1): ranks on one machine share its CPUs (:func:`attnlab.device.cpu_threads`:
    the cores it may run on, within its CPU quota)."""
    from attnlab.device import cpu_threads

    return max(1, cpu_threads() // max(local_world_size(), 1))


# ----------------------------------------------------------------------------------- collectives


def _collective_device() -> torch.device:
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum ``t`` over ranks in place (moving it to the backend's device and back when needed)."""
    if is_distributed():
        dev = _collective_device()
        if t.device != dev:
            tmp = t.to(dev)
            dist.all_reduce(tmp, op=dist.ReduceOp.SUM)
            t.copy_(tmp)
        else:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def sum_floats(*values: float) -> list[float]:
    """Sum a few Python numbers over ranks in one float64 all-reduce (exact for counts < 2**53)."""
    if not is_distributed():
        return [float(v) for v in values]
    t = torch.tensor(values, dtype=torch.float64)
    return all_reduce_sum(t).tolist()


def barrier() -> None:
    if is_distributed():
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


def broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank (picklable objects; small ones — this is not a tensor path)."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * world_size()
    dist.all_gather_object(out, obj)
    return out


# ------------------------------------------------------------------------------ data sharding


def epoch_batches(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    batch_tokens: int,
    max_batch_size: int,
    seed: int,
    epoch: int,
    world: int,
    exclude: np.ndarray | None = None,
) -> list[list[int]]:
    """The global batches of ``epoch`` for ``world`` processes (lists of split indices).

    Deterministic in ``(seed, epoch, world, exclude)``; equal to one process's batches with
    ``batch_tokens * world``. ``exclude`` (bool ``(N,)``, True = already consumed this epoch)
    drops pairs and cuts the rest afresh (a resume with another number of processes).
    Raises ``ValueError`` when one pair is wider than the per-process ``batch_tokens``.
    """
    n = len(src_lens)
    widest = max((max(s, t) + 1 for s, t in zip(src_lens, tgt_lens)), default=0)
    if widest > batch_tokens:
        raise ValueError(
            _("a pair needs {widest} tokens per row, more than data.batch_tokens={batch_tokens}; "
              "raise data.batch_tokens or truncate to a smaller data.num_steps").format(
                widest=widest, batch_tokens=batch_tokens)
        )
    keep = np.arange(n) if exclude is None else np.flatnonzero(~np.asarray(exclude, dtype=bool))
    if len(keep) == 0:
        return []
    sampler = TokenBatchSampler(
        [src_lens[i] for i in keep.tolist()],
        [tgt_lens[i] for i in keep.tolist()],
        batch_tokens * world,
        max_batch_size * world,
        shuffle=True,
        seed=seed,
    )
    batches = sampler.epoch(epoch)
    if exclude is None:
        return batches
    return [keep[b].tolist() for b in batches]  # subset positions -> split indices


def consumed_mask(
    n: int, batches: Sequence[Sequence[int]], upto: int, exclude: np.ndarray | None = None
) -> np.ndarray:
    """Bool ``(n,)``: pairs consumed this epoch once the first ``upto`` of ``batches`` are done."""
    mask = np.zeros(n, dtype=bool) if exclude is None else np.asarray(exclude, dtype=bool).copy()
    for b in batches[:upto]:
        mask[list(b)] = True
    return mask


def shard(batch: Sequence[int], rank_: int, world: int) -> tuple[list[int], bool]:
    """Rank ``rank_``'s rows of a global batch: ``(indices, real)``.

    Rows ``rank_, rank_ + world, …``. When the batch has fewer rows than ranks, a rank left
    without one gets ``([batch[0]], False)``: run it with weight 0 (DDP needs every rank in the
    gradient all-reduce) and do not count it.
    """
    part = list(batch[rank_::world])
    if part:
        return part, True
    return [batch[0]], False


# --------------------------------------------------------------------------------------- DDP


class _DDP(DistributedDataParallel):
    """DDP that forwards ``.output`` (the notes' ``W_o``) to the wrapped model (see :func:`wrap_ddp`)."""

    @property
    def output(self) -> torch.nn.Module:
        return self.module.output


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model`` inside DistributedDataParallel (rank 0's weights are broadcast to every rank).

    The wrapper forwards ``.output`` (the notes' ``W_o``) to the model: the loss path projects only
    the non-pad rows through it *after* ``forward`` (losses.py). That is safe under DDP: gradients
    are all-reduced by hooks on each parameter, wherever in the graph it was used.
    """
    return _DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
