"""What a model family is, asked of the model instead of tested on its kind name.

    t = traits(cfg.model)          # or type(model).traits(model.config)
    t.attention                    # {"enc_self": 2, "dec_self": 2, "cross": 2}: kind -> layers
    t.recurrent, t.heads, t.embeddings, t.max_target_len(max_positions, src_len)

Inspection, the translator and the web page read these facts, so a new family (Luong attention,
the encoder-only model) is described once, in its own module.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelTraits:
    """``attention``: the attention kinds the model returns (keys of its attention dicts, see
    ``outputs.py``) and how many layers of maps each has; empty for the fixed-context seq2seq.
    ``heads``: heads per attention layer (1 for additive attention). ``recurrent``: a GRU model
    (its states and gates can be explained step by step). ``embeddings``: attribute names of its
    ``nn.Embedding`` tables, the source's first. ``one_sequence``: source and target share one position table
    (decoder-only: the target starts after the source). ``attention_modules``: where the
    ``MultiHeadAttention`` of each kind sits, a dotted path with ``*`` for the layer
    (``"encoder_blocks.*.attention"``), for tools that reach one head (``attnlab heads``); empty
    without multi-head attention. ``task``: what the model is trained to do — ``"translate"``
    (source → target, decoded left to right through ``init_state``/``step``) or ``"fill"`` (the
    encoder-only masked LM: predict masked source words from both sides; it cannot generate)."""

    attention: dict[str, int] = field(default_factory=dict)
    heads: int = 1
    recurrent: bool = False
    embeddings: tuple[str, ...] = ()
    one_sequence: bool = False
    attention_modules: dict[str, str] = field(default_factory=dict)
    task: str = "translate"

    @property
    def attention_kinds(self) -> tuple[str, ...]:
        return tuple(self.attention)

    def max_target_len(self, max_positions: int, src_len: int = 0) -> int:
        """Most target positions the position table leaves after a ``src_len``-token source."""
        return max(1, max_positions - src_len - 1) if self.one_sequence else max_positions
