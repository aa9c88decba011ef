"""The narrow protocol every model obeys, so one greedy and one beam search serve them all
(D2L's encoder–decoder interface; STYLE.md habit 6).

    out = model(src, src_valid_lens, tgt_in, need_weights=False, compute_logits=True)  # ModelOutput
    enc = model.encode(src, src_valid_lens)                                           # EncoderOutput
    state = model.init_state(enc, src_valid_lens)                                     # DecoderState
    step = model.step(tokens, state, need_weights=False)                              # StepOutput

``tokens`` is ``(B,)``: the previous target token of each row (``<bos>`` first). Every model has
``output: nn.Linear(D, V)`` — the notes' W_o, b_o (§8) — and ``config``: its ModelConfig.

Dimension key: B batch, S source len, T target len, D model dim, V target vocab.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Protocol, runtime_checkable

from torch import Tensor, nn

from attnlab.attention.kv_cache import KVCache
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput

__all__ = ["DecoderState", "EncoderOutput", "ModelOutput", "Seq2SeqModel", "StepOutput", "select_rows"]


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
                changes[f.name] = value.index_select(1, index)
            else:
                changes[f.name] = select_rows(value, index)
        return dataclasses.replace(self, **changes)


@runtime_checkable
class Seq2SeqModel(Protocol):
    """Structural type of every attnlab model (for type checkers and ``isinstance``)."""

    output: nn.Linear

    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput: ...

    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput: ...

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> DecoderState: ...

    def step(self, tokens: Tensor, state: DecoderState, need_weights: bool = False) -> StepOutput: ...
