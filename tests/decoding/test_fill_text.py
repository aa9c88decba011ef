"""The filled sentence of `attnlab fill` (notes §28.2) shows every mask's best filler, a word: a masked LM
is trained on ``<unk>`` labels (every rare word) and may rank it first, but it names no word, and the
mask must not vanish from the text ("i'm [MASK] . → i'm." read as if the model had filled nothing)."""

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


def test_a_model_that_ranks_unk_first_fills_the_mask_with_its_best_word():
    tok = _vocab()
    ids = encode_masked(tok, "i'm [MASK] .")
    masks, filled = rank_fillers(tok, ids, _logits(ids, UNK, tok["busy"], len(tok)), top_k=2)
    assert masks[0].candidates[0][0] == "busy" and "<unk>" not in [t for t, _ in masks[0].candidates]
    assert filled == "i'm busy."


def test_a_word_filler_reads_as_before():
    tok = _vocab()
    ids = encode_masked(tok, "i'm [MASK] .")
    masks, filled = rank_fillers(tok, ids, _logits(ids, tok["home"], UNK, len(tok)), top_k=2)
    assert masks[0].candidates[0][0] == "home" and filled == "i'm home."
    assert {EOS, UNK}.isdisjoint(tok[t] for t, _ in masks[0].candidates)


def test_fill_lines_are_translated_templates():
    """`fill --lang zh` prints its lines from translated templates (the mask's token position in Chinese)."""
    from attnlab.decoding.fill import FillResult, MaskFill, format_fills
    from attnlab.i18n import speaking

    r = FillResult("[MASK] [MASK] .", ["[MASK]", "[MASK]", ".", "<eos>"],
                   [MaskFill(0, [("i'm", 0.5)]), MaskFill(1, [("home", 0.25)])], "i'm home.")
    assert format_fills([r]).splitlines() == ["[MASK] [MASK] . → i'm home.", "  [MASK] 1 (token 1):",
                                              "     50.00%  i'm", "  [MASK] 2 (token 2):", "     25.00%  home"]
    with speaking("zh"):
        text = format_fills([r])
    assert "[MASK] 2（第 2 个词元）：" in text and "token" not in text
