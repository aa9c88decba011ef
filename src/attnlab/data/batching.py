"""Teacher-forcing batches and length-bucketed, token-budgeted batch sampling (the notes' §3, §4, §22).

Dimension key: B batch, S padded source length (incl. ``<eos>``), T padded target length (+1).

For a pair ``x = x1..xm``, ``y = y1..yn`` a :class:`Batch` row holds (the notes' §4 and §22):

* ``src``     = ``x1..xm <eos> <pad>...``            ``src_valid_lens`` = m + 1
* ``tgt_in``  = ``<bos> y1..yn <pad>...``  (decoder input: teacher forcing feeds the gold prefix)
* ``tgt_out`` = ``y1..yn <eos> <pad>...``  (labels: the next token at every position)
  ``tgt_valid_lens`` = n + 1; label positions ``>= tgt_valid_lens`` are ``<pad>`` and ignored by the loss.

At test time there is no ``tgt_in``: the decoder feeds back its own predictions (decoding/).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from attnlab.data.vocab import BOS, EOS, PAD

__all__ = ["Batch", "collate", "TokenBatchSampler"]


@dataclass
class Batch:
    """One batch of pairs, batch-first; see the module docstring for what each row holds.

    ``src (B, S)``, ``src_valid_lens (B,)``, ``tgt_in (B, T)``, ``tgt_out (B, T)``,
    ``tgt_valid_lens (B,)``, ``index (B,)`` (positions of the rows in their split). All int64.
    """

    src: torch.Tensor
    src_valid_lens: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_valid_lens: torch.Tensor
    index: torch.Tensor
    _num_tgt_tokens: int | None = field(default=None, repr=False, compare=False)

    def _tensors(self) -> dict[str, torch.Tensor]:
        return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor on ``device`` (``non_blocking`` pays off with pinned memory)."""
        moved = {k: v.to(device, non_blocking=non_blocking) for k, v in self._tensors().items()}
        return Batch(**moved, _num_tgt_tokens=self._num_tgt_tokens)

    def pin_memory(self) -> Batch:
        """A copy in page-locked memory (called by ``DataLoader(pin_memory=True)``)."""
        pinned = {k: v.pin_memory() for k, v in self._tensors().items()}
        return Batch(**pinned, _num_tgt_tokens=self._num_tgt_tokens)

    @property
    def batch_size(self) -> int:
        return self.src.shape[0]

    @property
    def num_tgt_tokens(self) -> int:
        """Number of non-pad labels (``tgt_valid_lens.sum()``): the loss normaliser.

        Computed on the CPU at collate time and carried through :meth:`to`, so asking for it
        never synchronises with a GPU.
        """
        if self._num_tgt_tokens is None:
            self._num_tgt_tokens = int(self.tgt_valid_lens.sum())
        return self._num_tgt_tokens


def collate(
    src_seqs: Sequence[Sequence[int]],
    tgt_seqs: Sequence[Sequence[int]],
    index: Sequence[int] | None = None,
    pad_to: int | None = None,
) -> Batch:
    """Build a :class:`Batch` from source and target id lists (without ``<eos>``/``<bos>``).

    Appends ``<eos>`` to each source, builds ``tgt_in = <bos> y`` and ``tgt_out = y <eos>``, and
    pads with ``<pad>`` to the longest row (or to at least ``pad_to`` on both sides, like D2L's
    fixed ``num_steps`` padding). ``index`` defaults to ``0..B-1``.
    Raises ``ValueError`` for an empty batch or mismatched lengths.
    """
    b = len(src_seqs)
    if b == 0 or len(tgt_seqs) != b:
        raise ValueError(
            f"collate needs the same positive number of sources and targets, got {b} and {len(tgt_seqs)}"
        )
    if index is None:
        index = range(b)
    elif len(index) != b:
        raise ValueError(f"collate got {len(index)} indices for {b} pairs")
    src_lens = [len(x) + 1 for x in src_seqs]
    tgt_lens = [len(y) + 1 for y in tgt_seqs]
    s_max = max(max(src_lens), pad_to or 0)
    t_max = max(max(tgt_lens), pad_to or 0)
    src = [[*x, EOS] + [PAD] * (s_max - n) for x, n in zip(src_seqs, src_lens)]
    tgt_in = [[BOS, *y] + [PAD] * (t_max - n) for y, n in zip(tgt_seqs, tgt_lens)]
    tgt_out = [[*y, EOS] + [PAD] * (t_max - n) for y, n in zip(tgt_seqs, tgt_lens)]
    return Batch(
        src=torch.tensor(src, dtype=torch.long),  # (B, S)
        src_valid_lens=torch.tensor(src_lens, dtype=torch.long),  # (B,)
        tgt_in=torch.tensor(tgt_in, dtype=torch.long),  # (B, T)
        tgt_out=torch.tensor(tgt_out, dtype=torch.long),  # (B, T)
        tgt_valid_lens=torch.tensor(tgt_lens, dtype=torch.long),  # (B,)
        index=torch.tensor(list(index), dtype=torch.long),  # (B,)
        _num_tgt_tokens=sum(tgt_lens),
    )


class TokenBatchSampler:
    """Length-bucketed batches under a token budget, deterministic in ``(seed, epoch)``.

    Per epoch ``e``:

    1. Pairs are sorted by ``(src_len, tgt_len)``; ties are broken by a seeded random permutation
       (the jitter), so batch boundaries move from epoch to epoch while padding stays minimal.
       With ``shuffle=False`` ties keep index order and nothing is random (use for evaluation).
    2. Batches are cut greedily along that order: a pair joins the current batch unless
       ``(batch_size + 1) * max(S, T) > batch_tokens`` or the batch already holds
       ``max_batch_size`` pairs, where ``S = max src_len + 1`` (the source ``<eos>``) and
       ``T = max tgt_len + 1`` (``<bos>``/``<eos>``) — exactly the padded shapes :func:`collate` makes.
    3. With ``shuffle=True`` the batch order is shuffled with ``random.Random(seed * 1000 + e)``.

    ``epoch(e)`` returns the batches (lists of indices). Every pair is in exactly one batch.
    Several processes share these batches through :mod:`attnlab.training.distributed`
    (``epoch_batches`` cuts the global batches with this sampler, ``shard`` splits each one's rows).
    Raises ``ValueError`` if a single pair cannot fit the budget or if the arguments are invalid.
    """

    def __init__(
        self,
        src_lens: Sequence[int],
        tgt_lens: Sequence[int],
        batch_tokens: int,
        max_batch_size: int,
        shuffle: bool,
        seed: int,
    ) -> None:
        if len(src_lens) != len(tgt_lens):
            raise ValueError(f"src_lens has {len(src_lens)} entries but tgt_lens has {len(tgt_lens)}")
        if batch_tokens < 1 or max_batch_size < 1:
            raise ValueError(f"batch_tokens={batch_tokens} and max_batch_size={max_batch_size} must be >= 1")
        self.src_lens = np.asarray(src_lens, dtype=np.int64).reshape(-1)  # (N,)
        self.tgt_lens = np.asarray(tgt_lens, dtype=np.int64).reshape(-1)  # (N,)
        self._src_list: list[int] = self.src_lens.tolist()
        self._tgt_list: list[int] = self.tgt_lens.tolist()
        self.batch_tokens = int(batch_tokens)
        self.max_batch_size = int(max_batch_size)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        if len(self.src_lens):
            widest = np.maximum(self.src_lens, self.tgt_lens) + 1
            worst = int(widest.argmax())
            if widest[worst] > self.batch_tokens:
                raise ValueError(
                    f"pair {worst} needs {int(widest[worst])} tokens per row, more than batch_tokens={batch_tokens}; "
                    "raise data.batch_tokens or truncate to a smaller data.num_steps"
                )

    def __repr__(self) -> str:
        return (
            f"TokenBatchSampler(n={len(self.src_lens)}, batch_tokens={self.batch_tokens}, "
            f"max_batch_size={self.max_batch_size}, shuffle={self.shuffle}, seed={self.seed})"
        )

    def _order(self, rng: random.Random) -> np.ndarray:
        n = len(self.src_lens)
        if self.shuffle:
            ties = np.array([rng.random() for _ in range(n)])
        else:
            ties = np.arange(n)
        return np.lexsort((ties, self.tgt_lens, self.src_lens))  # last key is the primary one

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        batches: list[list[int]] = []
        cur: list[int] = []
        width = 0  # max(S, T) of the current batch
        src, tgt = self._src_list, self._tgt_list  # Python ints: faster than numpy scalars here
        budget, cap = self.batch_tokens, self.max_batch_size
        for i in order.tolist():
            w = max(width, src[i] + 1, tgt[i] + 1)
            if cur and (len(cur) + 1 > cap or (len(cur) + 1) * w > budget):
                batches.append(cur)
                cur, w = [], max(src[i], tgt[i]) + 1
            cur.append(i)
            width = w
        if cur:
            batches.append(cur)
        return batches

    def epoch(self, e: int) -> list[list[int]]:
        """The batches of epoch ``e`` in their final order (deterministic in ``(seed, e)``)."""
        rng = random.Random(self.seed * 1000 + e)
        batches = self._cut(self._order(rng))
        if self.shuffle:
            rng.shuffle(batches)
        return batches
