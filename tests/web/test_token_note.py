"""The page's note on what a map's tokens are follows the run's tokenizer: BPE pieces, metaspace words or
characters, never "BPE pieces" on a run that has none (the server's token_kinds, app.js's tokenNote)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import replace

import pytest

from attnlab.config import DataConfig
from attnlab.web.page_text import STATIC_DIR
from attnlab.web.registry import token_kinds


def test_token_kinds_follow_the_tokenizer_and_each_sides_text_rule():
    own = DataConfig(dataset="file", src_lang="en", tgt_lang="de")  # a corpus of your own: metaspace both sides
    assert token_kinds(own) == ("metaspace", "metaspace")
    assert token_kinds(replace(own, tokenizer="bpe")) == ("bpe", "bpe")
    assert token_kinds(replace(own, preprocess="d2l")) == ("words", "words")
    assert token_kinds(DataConfig(dataset="cmn-eng")) == ("words", "characters")
    assert token_kinds(DataConfig(dataset="cmn-eng", direction="zh-en")) == ("characters", "words")


def test_runs_api_sends_each_sides_token_kind(client):
    runs = client.get("/api/runs").json()["runs"]
    pairs = [r["pair"] for r in (runs.values() if isinstance(runs, dict) else runs)]
    assert pairs and all((p["src_tokens"], p["tgt_tokens"]) == ("words", "words") for p in pairs)


def _token_note(pair: dict) -> str:
    """app.js's tokenNote(run) for a run of ``pair``, run by node with t() filling fields untranslated."""
    js = (STATIC_DIR / "app.js").read_text(encoding="utf-8")
    notes = re.search(r"^const TOKEN_NOTES = \{.*?^\};", js, re.S | re.M).group(0)
    funcs = [re.search(rf"^function {name}\(.*?^}}$|^function {name}\(.*$", js, re.S | re.M).group(0)
             for name in ("pairOf", "pairNames", "tokenNote")]
    prelude = ("const N_ = (m) => m;\nconst t = (m, f) => m.replace(/\\{(\\w+)\\}/g, (_, k) => (f || {})[k]);\n")
    code = prelude + notes + "\n" + "\n".join(funcs) + f"\nprocess.stdout.write(tokenNote({{pair: {json.dumps(pair)}}}));\n"
    return subprocess.run(["node", "-e", code], capture_output=True, text=True, check=True, timeout=30).stdout


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the page's function")
def test_the_page_shows_the_note_that_fits_the_runs_tokens():
    names = {"src_name": "English", "tgt_name": "German"}
    assert "BPE pieces" in _token_note({**names, "src_tokens": "bpe", "tgt_tokens": "bpe"})
    metaspace = _token_note({**names, "src_tokens": "metaspace", "tgt_tokens": "metaspace"})
    assert "BPE" not in metaspace and metaspace.startswith("English / German tokens are whole words")
    chars = _token_note({"src_name": "English", "tgt_name": "Chinese", "src_tokens": "words",
                         "tgt_tokens": "characters"})
    assert chars.startswith("Chinese tokens are single characters") and "English" not in chars
    assert _token_note({**names, "src_tokens": "words", "tgt_tokens": "words"}) == ""
