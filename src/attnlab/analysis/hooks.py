"""Watching and changing what a model's modules compute, with PyTorch forward hooks, in one place.

Every analysis that looks inside a model during a pass goes through these three context managers, and
each removes its hooks when its block ends, also when the block raises:

- :func:`recording`: every call of the given modules, with its inputs and output (``explain`` lists the
  modules a sentence passes through; the roles walk-through reads queries, keys and values from them);
- :func:`replacing_output`: a module's output replaced by a function of it (the positional check runs
  the encoder without its encoding; attribution feeds its own embeddings in place of the table's);
- :func:`before_forward`: a module's inputs changed before it runs (``heads`` silences one head by
  zeroing its slice of the input of ``W_o``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from torch import nn

__all__ = ["Call", "before_forward", "recording", "replacing_output"]


@dataclass
class Call:
    """One call of a watched module: its name in the model, the module, its inputs and its output."""

    name: str
    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    output: Any = None


@contextlib.contextmanager
def recording(modules: Iterable[tuple[str, nn.Module]]) -> Iterator[list[Call]]:
    """Record each call of ``modules`` (``(name, module)`` pairs, e.g. from ``named_modules()``) in call
    order; yields the list the calls are appended to. Tensors are kept as they are (no copies): call
    inside ``torch.inference_mode()`` or detach what you keep."""
    calls: list[Call] = []
    handles = []
    try:
        for name, module in modules:
            def hook(mod, args, kwargs, output, name=name):
                calls.append(Call(name, mod, args, kwargs, output))

            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        yield calls
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def replacing_output(module: nn.Module, fn: Callable[[nn.Module, tuple[Any, ...], Any], Any]) -> Iterator[None]:
    """Inside the block, ``module``'s output is ``fn(module, args, output)``."""
    handle = module.register_forward_hook(lambda mod, args, out: fn(mod, args, out))
    try:
        yield
    finally:
        handle.remove()


@contextlib.contextmanager
def before_forward(module: nn.Module, fn: Callable[[nn.Module, tuple[Any, ...]], Any]) -> Iterator[None]:
    """Inside the block, ``module`` runs on ``fn(module, args)`` (a tuple of new inputs; None keeps them)."""
    handle = module.register_forward_pre_hook(lambda mod, args: fn(mod, args))
    try:
        yield
    finally:
        handle.remove()
