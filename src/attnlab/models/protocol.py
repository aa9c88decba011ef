"""The narrow protocol every model obeys, so one greedy and one beam search serve them all
(D2L's encoder–decoder interface; docs/DESIGN.md, The main contracts).

    out = model(src, src_valid_lens, tgt_in, need_weights=False, compute_logits=True)  # ModelOutput
    enc = model.encode(src, src_valid_lens)                                           # EncoderOutput
    state = model.init_state(enc, src_valid_lens)                                     # DecoderState
    step = model.step(tokens, state, need_weights=False)                              # StepOutput

``tokens`` is ``(B,)``: the previous target token of each row (``<bos>`` first). Every model has
``output: nn.Linear(D, V)`` — the notes' W_o, b_o (§8) — and ``config``: its ModelConfig.
The outputs live in :mod:`attnlab.models.outputs` and the decoding state in
:mod:`attnlab.models.state`; both are re-exported here (``from attnlab.models.protocol import DecoderState``).

Dimension key: B batch, S source len, T target len, D model dim, V target vocab.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from torch import Tensor, nn

from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.state import DecoderState, select_rows

__all__ = ["DecoderState", "EncoderOutput", "ModelOutput", "Seq2SeqModel", "StepOutput", "select_rows"]


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
