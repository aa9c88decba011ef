"""A small, explicit key/value cache for incremental (step-by-step) decoding.

At decoding step t the new query attends to the keys and values of every earlier step; instead of
recomputing them, each self-attention layer appends its new ``k, v`` here. Cross-attention layers
hold the memory's ``k, v`` once per sentence (``static``): they are computed in ``init_state`` and
never grow.

Dimension key: B batch, H heads, T cached steps, Dh head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of the steps seen so far, each ``(B, H, T, Dh)`` (``None`` when empty).

    ``static=True`` marks a cross-attention cache: attention reads it and never appends.
    """

    k: Tensor | None = None
    v: Tensor | None = None
    static: bool = False

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, H, t, Dh)`` new keys/values along the time axis; return all keys and values.

        Raises:
            RuntimeError: on a static (cross-attention) cache.
        """
        if self.static:
            raise RuntimeError("cannot append to a static (cross-attention) KVCache")
        if self.k is None or self.v is None:
            self.k, self.v = k, v
        else:
            self.k = torch.cat([self.k, k], dim=-2)  # (B, H, T + t, Dh)
            self.v = torch.cat([self.v, v], dim=-2)
        return self.k, self.v

    def select(self, index: Tensor) -> KVCache:
        """A new cache holding the batch rows ``index`` (LongTensor ``(N,)``, repeats allowed).

        Beam search uses it to reorder and expand rows; tensors are gathered, never aliased in place.
        """
        if self.k is None or self.v is None:
            return KVCache(None, None, self.static)
        return KVCache(self.k.index_select(0, index), self.v.index_select(0, index), self.static)
