"""What the page shows (issue 18, item 8): <pad> columns on request, and tokens without BPE's ``▁``."""

from __future__ import annotations

import pytest

from attnlab.translator import AttentionResult
from attnlab.web.routes.translate import display_fields


@pytest.mark.parametrize("run", ["transformer", "bahdanau"])
def test_pad_adds_padding_columns_that_get_no_weight(client, run):
    bare = client.post("/api/translate", json={"text": "twenty one", "run": run}).json()
    r = client.post("/api/translate", json={"text": "twenty one", "run": run, "pad": 2})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["pad"] == 2 and bare["pad"] == 0
    assert d["src_tokens"] == bare["src_tokens"] + ["<pad>", "<pad>"]
    assert d["translation"] == bare["translation"]  # padding changes no prediction
    for kind in ("enc_self", "cross"):
        if kind not in d["attention"]:
            continue
        a = d["attention"][kind]
        assert a["keys"][-2:] == ["<pad>", "<pad>"]
        for layer in a["weights"]:
            for head in layer:
                for row in head:
                    assert row[-2:] == [0.0, 0.0]  # masked_softmax: exactly 0 (§23)
    assert client.post("/api/translate", json={"text": "twenty one", "pad": 9}).status_code == 422


def test_word_tokens_need_no_display_labels(client):
    d = client.post("/api/translate", json={"text": "twenty one"}).json()
    assert d["token_labels"] == {}  # a word vocabulary shows its tokens as they are
    assert d["tgt_continues"] == [False] * len(d["tgt_tokens"])


def test_bpe_pieces_are_labelled_without_their_word_start_mark():
    res = AttentionResult(
        "my house .", "ma maison.",
        ["▁my", "▁ho", "use", "▁.", "<eos>", "<pad>"],
        ["▁ma", "▁mai", "son", "▁.", "<eos>"],
        ["<bos>", "▁ma", "▁mai", "son", "▁."],
    )
    d = display_fields(res)
    assert d["token_labels"] == {
        "▁my": "my", "▁ho": "ho", "use": "·use", "▁.": ".", "▁ma": "ma", "▁mai": "mai", "son": "·son",
    }
    assert not any("▁" in v for v in d["token_labels"].values())
    assert d["tgt_continues"] == [False, False, True, False, False]
    # joined as the page joins them: a space before each piece that starts a word
    shown = [d["token_labels"].get(t, t) for t in res.tgt_tokens[:-1]]
    words = "".join(("" if c else " ") + s.removeprefix("·") for s, c in zip(shown, d["tgt_continues"]))
    assert words.strip() == "ma maison ."
