"""Device selection and mixed precision: CPU everywhere, the GPU when one is present."""

from __future__ import annotations

import contextlib

import torch

from attnlab.errors import AttnlabError


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` → ``cuda`` when available, else ``cpu``; an unavailable CUDA request is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise AttnlabError(f"train.device={name!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AttnlabError(f"train.device={name!r} but no CUDA GPU is visible; use train.device=cpu or auto")
    return dev


def autocast(device: torch.device, enabled: bool = True):
    """bf16 autocast on CUDA (Hopper/Ampere run bf16 matmuls at several times fp32 speed); no-op on CPU."""
    if enabled and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def set_threads(n: int) -> None:
    if n > 0:
        torch.set_num_threads(n)
