"""`attnlab train --nproc N`: start N data-parallel workers on this machine with torchrun.

This is PyTorch's own elastic launcher (``python -m torch.distributed.run``), not a home-made one:
it picks a free rendezvous port (``--standalone``), sets ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/…
for each worker, watches them, and (with ``max_restarts``) restarts all of them when one dies; the
restarted workers resume from the run's ``last`` checkpoint (``loop.train``). Every worker runs the
same ``python -m attnlab train …`` command line without ``--nproc``.

For several machines use torchrun directly (docs/distributed.md), e.g. on each machine::

    TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 torchrun --nnodes 2 --nproc-per-node 4 \\
        --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m attnlab train --model transformer --out runs/big
"""

from __future__ import annotations

import os
import subprocess
import sys

from attnlab.errors import AttnlabError


def strip_nproc(argv: list[str]) -> list[str]:
    """``argv`` without ``--nproc N`` / ``--nproc=N`` (the workers must not launch again)."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--nproc":
            skip = i + 1 < len(argv)
            continue
        if a.startswith("--nproc="):
            continue
        out.append(a)
    return out


def torchrun_command(nproc: int, argv: list[str], max_restarts: int = 0) -> list[str]:
    """The torchrun command line that runs ``attnlab <argv>`` (``--nproc`` removed) on ``nproc`` workers."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "attnlab",
        *strip_nproc(argv),
    ]


def launch_nproc(nproc: int, argv: list[str], max_restarts: int | None = None) -> int:
    """Run ``attnlab <argv>`` on ``nproc`` local processes under torchrun; returns its exit code.

    ``argv`` is the command line after the program name (``sys.argv[1:]``), with or without
    ``--nproc``. ``max_restarts`` defaults to ``$ATTNLAB_MAX_RESTARTS`` (else 0): how many times a
    failed worker makes the whole group restart from the last checkpoint. Raises
    :class:`AttnlabError` for ``nproc < 1`` or when called from inside a torchrun worker.
    """
    if nproc < 1:
        raise AttnlabError(f"--nproc {nproc}: the number of processes must be at least 1")
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        raise AttnlabError(
            "--nproc inside a torchrun worker would launch workers of workers; "
            "drop --nproc when you start attnlab with torchrun"
        )
    if max_restarts is None:
        raw = os.environ.get("ATTNLAB_MAX_RESTARTS", "0")
        try:
            max_restarts = int(raw)
        except ValueError:
            raise AttnlabError(
                f"ATTNLAB_MAX_RESTARTS={raw!r} is not a whole number; set e.g. 1 or unset it"
            ) from None
    # A fresh rendezvous store every round: a restarted group never sees the dead group's keys.
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", **os.environ}  # a value the user set wins
    proc = subprocess.Popen(torchrun_command(nproc, argv, max_restarts), env=env)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            # Ctrl-C reached torchrun and the workers too (same process group): they stop at the end
            # of the step and save `last`; wait for that rather than killing them mid-write.
            continue
