"""A BERT-style encoder-only model trained by masked-token prediction (notes §28.2–3; Devlin et al. 2019).

The third way to stack Transformer blocks (§28.2): the encoder alone. Its self-attention is the
encoder's — every position sees every real position, before and after it (no causal mask, §23) — so
it reads a whole sentence at once and predicts a hidden word from both sides. That same property is
why it cannot write left to right: a position's state depends on the words *after* it, which do not
exist yet while generating (``init_state``/``step`` refuse, naming ``attnlab fill``).

It learns from the **source (English) side** of the corpus only, by BERT's masked-LM objective
(:func:`mask_tokens`): pick 15 % of each sentence's word positions, show the model ``[MASK]`` at 80 %
of them, a random word at 10 %, the word itself at 10 %, and score its prediction of the original
word there only. The loss is ``training/losses.py``'s :func:`~attnlab.training.losses.masked_lm_loss`.

``[MASK]`` is the reserved id :data:`attnlab.data.specials.MASK` (``<bos>``'s row of the *source*
table, which a source never holds: see ``specials.py``), so every vocabulary keeps D2L's four ids.

The blocks are ``transformer.py``'s :class:`EncoderBlock` with its embeddings (×√D + positions); the
output layer ``W_o`` maps back onto the source vocabulary and shares the source embedding's weight
when ``tie_embeddings`` is set. It obeys ``forward``/``encode`` of the model protocol; its
``forward`` ignores ``tgt_in`` and returns one row per *source* position.

Dimension key: B batch, S source len, D model dim (num_hiddens), H heads, L layers, V source vocab.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from attnlab.attention.masks import padding_mask
from attnlab.attention.positional import check_positions
from attnlab.config import ModelConfig
from attnlab.data.specials import MASK, PAD, SPECIALS
from attnlab.errors import AttnlabError
from attnlab.i18n import _
from attnlab.models.outputs import EncoderOutput, ModelOutput, StepOutput
from attnlab.models.state import DecoderState
from attnlab.models.traits import ModelTraits
from attnlab.models.transformer import (
    EncoderBlock,
    init_blocks,
    make_embedding,
    make_positional,
    run_encoder,
)

# BERT's recipe (Devlin et al. 2019, §3.1 and appendix A.1): 15 % of the positions are predicted;
# of those 80 % are shown as [MASK], 10 % as a random word, 10 % unchanged — so the model cannot
# learn that only [MASK] positions matter, and fine-tuning text (which has no [MASK]) is not foreign.
MASK_PROB, MASK_TOKEN_SHARE, RANDOM_TOKEN_SHARE = 0.15, 0.8, 0.1


class CannotGenerateError(AttnlabError):
    """An encoder-only model was asked to generate (translate, decode step by step)."""


def _cannot_generate() -> CannotGenerateError:
    return CannotGenerateError(
        _("an encoder-only model cannot generate left to right: each position's state depends on the "
          "words after it (notes §28.2), so it fills masked words instead; use `attnlab fill RUN \"i'm [MASK] .\"`")
    )


def mask_tokens(
    src: Tensor, src_valid_lens: Tensor, vocab_size: int, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """BERT's corruption of a batch of sources ``x1..xm <eos> <pad>…`` → ``(inputs, labels)``, both ``(B, S)``.

    Candidates are the word positions ``k < src_valid_lens - 1`` (never ``<eos>``, never ``<pad>``).
    Each row gets ``max(1, round(0.15 · m))`` chosen positions, uniformly at random (BERT's
    ``create_pretraining_data.py`` rule: every sentence teaches something, short ones included).
    A chosen position becomes ``[MASK]`` (80 %), a random non-special word (10 %) or stays (10 %).
    ``labels`` holds the original token at the chosen positions and ``<pad>`` elsewhere (the loss's
    ``ignore_index``). Draws come from ``generator`` (the global CPU generator when None: its state
    travels in every checkpoint, so a resumed run draws the same masks) on the CPU, whatever the device.
    """
    B, S = src.shape
    words = (src_valid_lens.cpu() - 1).clamp(min=0)  # (B,) word positions: <eos> excluded
    candidate = torch.arange(S)[None, :] < words[:, None]  # (B, S)
    count = torch.where(words > 0, (words.double() * MASK_PROB).round().long().clamp(min=1), 0)  # (B,)
    scores = torch.rand(B, S, generator=generator).masked_fill(~candidate, 2.0)  # non-candidates sort last
    rank = scores.argsort(dim=1).argsort(dim=1)  # (B, S): each position's place in its row's random order
    chosen = rank < count[:, None]  # (B, S)
    how = torch.rand(B, S, generator=generator)  # (B, S): which of the 80/10/10 cases
    random_words = torch.randint(len(SPECIALS), max(vocab_size, len(SPECIALS) + 1), (B, S), generator=generator)
    original = src.cpu()
    inputs = torch.where(chosen & (how < MASK_TOKEN_SHARE), torch.full_like(original, MASK), original)
    swap = chosen & (how >= MASK_TOKEN_SHARE) & (how < MASK_TOKEN_SHARE + RANDOM_TOKEN_SHARE)
    inputs = torch.where(swap, random_words, inputs)
    labels = torch.where(chosen, original, torch.full_like(original, PAD))
    return inputs.to(src.device), labels.to(src.device)


class EncoderOnly(nn.Module):
    """Bidirectional Transformer encoder with a masked-LM output layer (the notes' §28.2 "BERT")."""

    @staticmethod
    def traits(cfg: ModelConfig) -> ModelTraits:
        return ModelTraits({"enc_self": cfg.num_layers}, heads=cfg.num_heads, embeddings=("src_embedding",),
                           attention_modules={"enc_self": "encoder_blocks.*.attention"}, task="fill")

    def __init__(self, cfg: ModelConfig, src_vocab_size: int, tgt_vocab_size: int = 0) -> None:
        """``tgt_vocab_size`` is unused: the model predicts source words (the builders' signature)."""
        super().__init__()
        self.config = cfg
        D = cfg.num_hiddens
        self.src_embedding = make_embedding(src_vocab_size, D)
        self.positional = make_positional(cfg)
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder_blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_layers))
        init_blocks(self.encoder_blocks)
        self.encoder_norm = nn.LayerNorm(D) if cfg.norm_first else nn.Identity()
        self.output = nn.Linear(D, src_vocab_size)  # W_o, b_o (§8) over the source vocabulary
        if cfg.tie_embeddings:
            self.output.weight = self.src_embedding.weight
        self.scale = math.sqrt(D)

    def encode(self, src: Tensor, src_valid_lens: Tensor, need_weights: bool = False) -> EncoderOutput:
        """``src (B, S)`` → states ``(B, S, D)``; ``enc_self`` weights ``(B, L, H, S, S)`` if asked.

        The only mask is the padding mask (§23): no causal mask, so every real position attends to
        every real position, later ones included.
        """
        S = src.shape[1]
        check_positions(S, self.config.max_positions)
        positions = torch.arange(S, device=src.device)
        x = self.dropout(self.src_embedding(src) * self.scale + self.positional(positions))  # (B, S, D)
        mask = padding_mask(src_valid_lens, S)[:, None, :]  # (B, 1, S): padding columns stay empty
        x, attention = run_encoder(self.encoder_blocks, x, mask, need_weights)
        return EncoderOutput(memory=self.encoder_norm(x), attention=attention)

    def forward(
        self,
        src: Tensor,
        src_valid_lens: Tensor,
        tgt_in: Tensor | None = None,
        need_weights: bool = False,
        compute_logits: bool = True,
    ) -> ModelOutput:
        """``hidden (B, S, D)`` and ``logits (B, S, V)``: a prediction of the source word at every
        position (the loss reads the masked ones). ``tgt_in`` is ignored (there is no target)."""
        enc = self.encode(src, src_valid_lens, need_weights=need_weights)
        logits = self.output(enc.memory) if compute_logits else None
        return ModelOutput(logits, enc.memory, enc.attention)

    def init_state(self, enc: EncoderOutput, src_valid_lens: Tensor) -> DecoderState:
        raise _cannot_generate()

    def step(self, tokens: Tensor, state: DecoderState, need_weights: bool = False) -> StepOutput:
        raise _cannot_generate()
