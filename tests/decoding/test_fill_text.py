"""The filled sentence of `attnlab fill` (notes §28.2) shows every mask's best filler, ``<unk>`` included:
a masked LM is trained on ``<unk>`` labels (every rare word), and a mask it fills with one must not
vanish from the text ("i'm [MASK] . → i'm." read as if the model had filled nothing)."""

from __future__ import annotations

import torch

from attnlab.data.specials import EOS, MASK, UNK
from attnlab.data.vocab import Vocab
from attnlab.decoding.fill import encode_masked, rank_fillers


def _vocab() -> Vocab:
    return Vocab.build([["i'm", "home", ".", "busy"]], lang="en")


def _logits(ids: list[int], best: int, second: int, size: int) -> torch.Tensor:
    logits = torch.zeros(len(ids) + 1, size)  # (S, V): the sequence ids <eos>
    pos = ids.index(MASK)
    logits[pos, best], logits[pos, second] = 5.0, 3.0
    return logits


def test_a_mask_filled_by_unk_stays_visible_in_the_sentence():
    tok = _vocab()
    ids = encode_masked(tok, "i'm [MASK] .")
    masks, filled = rank_fillers(tok, ids, _logits(ids, UNK, tok["busy"], len(tok)), top_k=2)
    assert [t for t, _ in masks[0].candidates] == ["<unk>", "busy"]  # the model's own ranking, unk kept
    assert filled == "i'm <unk>."


def test_a_word_filler_reads_as_before():
    tok = _vocab()
    ids = encode_masked(tok, "i'm [MASK] .")
    masks, filled = rank_fillers(tok, ids, _logits(ids, tok["home"], UNK, len(tok)), top_k=2)
    assert masks[0].candidates[0][0] == "home" and filled == "i'm home."
    assert EOS not in [tok[t] for t, _ in masks[0].candidates]
