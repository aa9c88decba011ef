"""The five model families behind one protocol, chosen from a plain ``kind → builder`` dict
(STYLE.md habit 4: no registries, no dotted paths).

    model = build_model(cfg.model, len(src_tok), len(tgt_tok))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from attnlab.config import ConfigError, ModelConfig
from attnlab.models.decoder_only import DecoderOnly
from attnlab.models.encoder_only import EncoderOnly
from attnlab.models.gru import Bahdanau, Seq2Seq
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.protocol import DecoderState, Seq2SeqModel
from attnlab.models.traits import ModelTraits
from attnlab.models.transformer import Transformer

BUILDERS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "seq2seq": Seq2Seq,
    "bahdanau": Bahdanau,
    "transformer": Transformer,
    "decoder-only": DecoderOnly,
    "encoder-only": EncoderOnly,
}


def build_model(cfg: ModelConfig | Any, src_vocab_size: int, tgt_vocab_size: int) -> nn.Module:
    """Build the model ``cfg.kind`` for the given vocabulary sizes.

    ``cfg`` is a :class:`ModelConfig` (a whole ``Config`` is accepted too: its ``model`` section is used).
    Raises :class:`ConfigError` for an unknown kind or a vocabulary size below 1.
    """
    if not isinstance(cfg, ModelConfig) and isinstance(getattr(cfg, "model", None), ModelConfig):
        cfg = cfg.model
    if cfg.kind not in BUILDERS:
        raise ConfigError(f"model.kind={cfg.kind!r} is not valid; choose one of: {', '.join(BUILDERS)}")
    if src_vocab_size < 1 or tgt_vocab_size < 1:
        raise ConfigError(
            f"vocabulary sizes must be >= 1 (got source {src_vocab_size}, target {tgt_vocab_size}); "
            "check the tokenizers"
        )
    return BUILDERS[cfg.kind](cfg, src_vocab_size, tgt_vocab_size)


def traits(cfg: ModelConfig | Any) -> ModelTraits:
    """What the family ``cfg.kind`` is (attention kinds, heads, recurrence, tables), without building it."""
    if not isinstance(cfg, ModelConfig) and isinstance(getattr(cfg, "model", None), ModelConfig):
        cfg = cfg.model
    if cfg.kind not in BUILDERS:
        raise ConfigError(f"model.kind={cfg.kind!r} is not valid; choose one of: {', '.join(BUILDERS)}")
    return BUILDERS[cfg.kind].traits(cfg)


__all__ = [
    "BUILDERS",
    "Bahdanau",
    "DecoderOnly",
    "DecoderState",
    "EncoderOnly",
    "ModelTraits",
    "EncoderOutput",
    "ModelOutput",
    "Seq2Seq",
    "Seq2SeqModel",
    "StepOutput",
    "Transformer",
    "build_model",
    "traits",
]
