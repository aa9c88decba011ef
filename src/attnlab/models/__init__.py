"""The five model families behind one protocol, chosen from a plain ``kind → builder`` dict
(a plain dict: no registries, no dotted paths). A builder is the family's class, or a function that
builds the parts and passes them in (Bahdanau's score function); either answers ``traits(cfg)``.

    model = build_model(cfg.model, len(src_tok), len(tgt_tok))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from attnlab.attention.additive import AdditiveAttention
from attnlab.config import ConfigError, ModelConfig
from attnlab.i18n import _
from attnlab.models.decoder_only import DecoderOnly
from attnlab.models.encoder_only import EncoderOnly
from attnlab.models.gru import Bahdanau, Seq2Seq
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.protocol import DecoderState, Seq2SeqModel
from attnlab.models.traits import ModelTraits
from attnlab.models.transformer import Transformer

#: Bahdanau's score functions (``model.attention_score``): name → a module class built as
#: ``cls(key_size, query_size, num_hiddens, dropout)`` that offers ``project_keys(keys)`` and
#: ``forward(queries, keys, values, mask, projected_keys) -> (context, weights)`` (see
#: :class:`~attnlab.attention.additive.AdditiveAttention`, the notes' additive score). A new score is one
#: module and one entry here.
BAHDANAU_SCORES: dict[str, Callable[..., nn.Module]] = {
    "additive": AdditiveAttention,
}


def build_bahdanau(cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int) -> Bahdanau:
    """The GRU encoder–decoder with the attention ``cfg.attention_score`` names (notes §1–3): the part is
    chosen here and passed in, so the model file never names a score function."""
    if cfg.attention_score not in BAHDANAU_SCORES:
        raise ConfigError(_("model.attention_score={attention_score!r} is not valid; choose one of: "
                            "{choices}").format(attention_score=cfg.attention_score, choices=', '.join(BAHDANAU_SCORES)))
    return Bahdanau(cfg, src_vocab_size, tgt_vocab_size, attention=BAHDANAU_SCORES[cfg.attention_score])


build_bahdanau.traits = Bahdanau.traits  # every builder answers traits(cfg) without building (see traits())


BUILDERS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "seq2seq": Seq2Seq,
    "bahdanau": build_bahdanau,
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
        raise ConfigError(_("model.kind={kind!r} is not valid; choose one of: {choices}").format(kind=cfg.kind, choices=', '.join(BUILDERS)))
    for key in ("attention_score", "attention_query"):  # Bahdanau's parts: refused on another family
        if getattr(cfg, key) != getattr(ModelConfig, key) and BUILDERS[cfg.kind] is not build_bahdanau:
            raise ConfigError(_("model.{key}={value} is for the bahdanau model, not {kind}; drop it").format(key=key, value=getattr(cfg, key), kind=cfg.kind))
    if src_vocab_size < 1 or tgt_vocab_size < 1:
        raise ConfigError(
            _("vocabulary sizes must be >= 1 (got source {src_vocab_size}, target {tgt_vocab_size}); "
              "check the tokenizers").format(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
        )
    return BUILDERS[cfg.kind](cfg, src_vocab_size, tgt_vocab_size)


def traits(cfg: ModelConfig | Any) -> ModelTraits:
    """What the family ``cfg.kind`` is (attention kinds, heads, recurrence, tables), without building it."""
    if not isinstance(cfg, ModelConfig) and isinstance(getattr(cfg, "model", None), ModelConfig):
        cfg = cfg.model
    if cfg.kind not in BUILDERS:
        raise ConfigError(_("model.kind={kind!r} is not valid; choose one of: {choices}").format(kind=cfg.kind, choices=', '.join(BUILDERS)))
    return BUILDERS[cfg.kind].traits(cfg)


__all__ = [
    "BAHDANAU_SCORES",
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
    "build_bahdanau",
    "build_model",
    "traits",
]
