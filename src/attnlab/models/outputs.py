"""What the models return: output dataclasses that carry attention weights when asked for
(weights are returned, never stored on modules: docs/DESIGN.md, Conventions).

Attention dicts map a kind to a tensor shaped ``(B, layers, heads, queries, keys)``:
``enc_self``, ``dec_self``, ``cross`` for encoder–decoder models, ``self`` for the decoder-only
model (over its concatenated ``source <bos> target`` sequence); Bahdanau's ``cross`` is
``(B, 1, 1, T, S)``; seq2seq has none. An empty dict means weights were not requested.

Dimension key: B batch, S source len, T target len, D model dim, V target vocab.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from attnlab.models.state import DecoderState


@dataclass
class ModelOutput:
    """Teacher-forced pass. ``logits (B, T, V)`` (None when ``compute_logits=False``),
    ``hidden (B, T, D)`` the final decoder states before the output layer W_o."""

    logits: Tensor | None
    hidden: Tensor
    attention: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class EncoderOutput:
    """What ``encode`` returns and ``init_state`` consumes.

    ``memory (B, S, D)``: the encoder states (the source prefix states for decoder-only).
    ``extra``: model-specific values (the GRU final state ``(L, B, D)``, the decoder-only
    source KV caches). ``attention``: ``enc_self`` (or ``self``) weights when requested.
    """

    memory: Tensor
    extra: Any = None
    attention: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class StepOutput:
    """One decoding step. ``logits (B, V)`` for the next token, the updated ``state`` and the
    step's attention (``queries == 1``) when requested."""

    logits: Tensor
    state: DecoderState
    attention: dict[str, Tensor] = field(default_factory=dict)
