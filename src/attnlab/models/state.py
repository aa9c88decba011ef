"""The decoding state a model carries from one ``step`` to the next, and how beams pick its rows.

:mod:`attnlab.models.outputs` (``StepOutput.state``) and :mod:`attnlab.models.protocol` both
import this module, which imports neither: the models' layers point one way.

Dimension key: B batch, L layers, D model dim; N rows picked (beams, unfinished rows).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from torch import Tensor

from attnlab.attention.kv_cache import KVCache

__all__ = ["DecoderState", "select_rows"]


def select_rows(value: Any, index: Tensor) -> Any:
    """Pick batch rows ``index`` of a tensor (dim 0), a :class:`KVCache`, a :class:`DecoderState`,
    or a list/tuple of those; anything else (ints, None) is returned unchanged."""
    if isinstance(value, Tensor):
        return value.index_select(0, index)
    if isinstance(value, KVCache | DecoderState):
        return value.select(index)
    if isinstance(value, list):
        return [select_rows(v, index) for v in value]
    if isinstance(value, tuple):
        return tuple(select_rows(v, index) for v in value)
    return value


@dataclasses.dataclass
class DecoderState:
    """Base for the per-model decoding states (dataclasses).

    Contract: every tensor field is batch-first (dim 0 = batch row), except fields named in
    ``batch_dim1`` (GRU hidden states ``(L, B, D)``), whose batch axis is dim 1.
    """

    batch_dim1: ClassVar[tuple[str, ...]] = ()

    def select(self, index: Tensor) -> DecoderState:
        """A new state holding rows ``index`` (LongTensor ``(N,)``; repeats allowed) of every tensor,
        :class:`KVCache` and list of them. Beam search reorders/expands beams with it and greedy
        search drops finished rows; the original state is left untouched."""
        changes = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in self.batch_dim1 and isinstance(value, Tensor):
                changes[f.name] = value.index_select(1, index)  # (L, N, D)
            else:
                changes[f.name] = select_rows(value, index)
        return dataclasses.replace(self, **changes)
