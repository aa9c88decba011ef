"""Masked-word filling with an encoder-only run (notes §28.2): what ``attnlab fill`` prints.

>>> tr = Translator.from_run("runs/encoder-only")                  # doctest: +SKIP
>>> fill_masks(tr.model, tr.src_tok, ["i'm [MASK] ."], top_k=3)[0].masks[0].candidates  # doctest: +SKIP
[('home', 0.41), ('sorry', 0.09), ('busy', 0.07)]

A sentence is preprocessed as in training, with each ``[MASK]`` (any case) standing for one token
of the model's vocabulary — a word for the word tokenizer, one subword piece for BPE. The model
reads the whole sentence at once, both sides of every mask (its attention is not causal), and each
masked position gets its own distribution over the vocabulary; several masks are predicted
together, each without seeing the others' answers (BERT's independence assumption).

No reserved token can fill a mask: ``<pad>``, ``<eos>`` and ``[MASK]`` itself (the model is never
trained to predict them), nor ``<unk>``, which the model does learn (rare words became it) but
which names no word, so a filled sentence would show nothing where the mask was. They are masked
to -inf before ranking, so the fillers shown and the filled sentence hold words of the vocabulary
only; the probabilities are the softmax over the words that may fill, renormalised over them.

Dimension key: B batch, S source len (with ``<eos>``), V source vocab.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from attnlab.data.batching import collate
from attnlab.data.specials import EOS, MASK, MASK_TOKEN, SPECIALS
from attnlab.errors import AttnlabError
from attnlab.i18n import _

__all__ = ["FillError", "FillResult", "MaskFill", "encode_masked", "fill_masks", "format_fills", "mask_labels", "rank_fillers"]

_MASK_RE = re.compile(re.escape(MASK_TOKEN), re.IGNORECASE)
#: every reserved id, <unk> <pad> <bos>/[MASK] <eos> (specials.py): left out of the ranking, so a mask gets a word
NEVER_FILLS = tuple(range(len(SPECIALS)))


class FillError(AttnlabError):
    """A sentence ``fill`` cannot answer (no ``[MASK]``, too long)."""


@dataclass
class MaskFill:
    """One masked position: its index in the token sequence and the ``top_k`` fillers, best first."""

    position: int
    candidates: list[tuple[str, float]]  # (token, probability)


@dataclass
class FillResult:
    sentence: str
    tokens: list[str]  # the model's input, [MASK] shown as such, with the final <eos>
    masks: list[MaskFill] = field(default_factory=list)
    filled: str = ""  # the sentence with every mask replaced by its best filler, detokenised


def encode_masked(tok, sentence: str, max_tokens: int | None = None, require_mask: bool = True) -> list[int]:
    """Ids of ``sentence`` with :data:`~attnlab.data.specials.MASK` where it says ``[MASK]``.

    The pieces between the masks go through ``tok.encode`` (preprocessing included). Raises
    :class:`FillError` when there is no ``[MASK]`` (with ``require_mask``) or when the sentence holds
    more than ``max_tokens`` tokens (the position table's room).
    """
    pieces = _MASK_RE.split(sentence)
    if require_mask and len(pieces) < 2:
        raise FillError(_("{sentence!r} has no {mask}; write it where a word should be filled, e.g. \"i'm {mask} .\"")
                        .format(sentence=sentence, mask=MASK_TOKEN))
    ids: list[int] = []
    for n, piece in enumerate(pieces):
        if n:
            ids.append(MASK)
        ids += tok.encode(piece)
    if max_tokens is not None and len(ids) > max_tokens:
        raise FillError(_("{sentence!r} has {n} tokens; this model reads at most {max_tokens}; shorten it").format(
            sentence=sentence, n=len(ids), max_tokens=max_tokens))
    return ids


def mask_labels(tok, ids: Sequence[int]) -> list[str]:
    """Token labels of ``ids`` with ``[MASK]`` for the mask id (its row is ``<bos>``'s: ``specials.py``)."""
    return [MASK_TOKEN if i == MASK else tok.id_to_token(i) for i in ids]


def fill_masks(model: nn.Module, tok, sentences: Sequence[str], top_k: int = 5,
               device: torch.device | None = None) -> list[FillResult]:
    """The ``top_k`` fillers of every ``[MASK]`` of every sentence (one batch, in eval mode; the
    model's mode is restored). Raises :class:`FillError` for a sentence without ``[MASK]``."""
    if top_k < 1:
        raise FillError(_("top_k={top_k} must be >= 1").format(top_k=top_k))
    device = device or next(model.parameters()).device
    limit = int(model.config.max_positions) - 1  # room for <eos>
    encoded = [encode_masked(tok, s, limit) for s in sentences]
    if not encoded:
        return []
    batch = collate(encoded, [[] for _ in encoded], list(range(len(encoded))))
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            logits = model(batch.src.to(device), batch.src_valid_lens.to(device), batch.tgt_in.to(device)).logits
    finally:
        model.train(was_training)
    results = []
    for row, (sentence, ids) in enumerate(zip(sentences, encoded)):
        masks, filled = rank_fillers(tok, ids, logits[row], top_k)
        results.append(FillResult(sentence, mask_labels(tok, ids) + [tok.id_to_token(EOS)], masks, filled))
    return results


def rank_fillers(tok, ids: Sequence[int], logits: torch.Tensor, top_k: int = 5) -> tuple[list[MaskFill], str]:
    """``(the top_k fillers of each mask in ids, the text with each mask's best filler)`` from the
    model's ``logits (S, V)`` over the sequence ``ids <eos>`` (:data:`NEVER_FILLS` left out)."""
    logits = logits.float().cpu().clone()  # (S, V)
    logits[:, list(NEVER_FILLS)] = float("-inf")
    probs = torch.softmax(logits, dim=-1)  # (S, V)
    k = min(top_k, probs.shape[-1] - len(NEVER_FILLS))
    masks, best = [], list(ids)
    for pos in (p for p, i in enumerate(ids) if i == MASK):
        p, idx = probs[pos].topk(k)  # (k,), (k,)
        masks.append(MaskFill(pos, [(tok.id_to_token(int(i)), float(q)) for q, i in zip(p, idx)]))
        best[pos] = int(idx[0])
    return masks, tok.decode(best, keep_unk=True)  # an unknown word of the sentence stays visible as <unk>


def format_fills(results: Sequence[FillResult]) -> str:
    """What ``attnlab fill`` prints: per sentence, the filled sentence, then each mask's fillers."""
    lines = []
    for r in results:
        lines.append(_("{sentence} → {filled}").format(sentence=r.sentence, filled=r.filled))
        for n, m in enumerate(r.masks, 1):
            where = (_("{mask} {n} (token {position})").format(mask=MASK_TOKEN, n=n, position=m.position + 1)
                     if len(r.masks) > 1 else MASK_TOKEN)
            lines.append(_("  {mask}:").format(mask=where))
            lines += [_("    {p:7.2%}  {token}").format(p=p, token=t) for t, p in m.candidates]
    return "\n".join(lines)
