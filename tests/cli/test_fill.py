"""`attnlab fill` on a real encoder-only `numbers` run: it trains, it answers, its attention is a full
matrix, and the commands that translate refuse it in one line."""

from __future__ import annotations

import json
import re

import pytest
import torch

from attnlab import runs
from attnlab.cli import main
from attnlab.translator import Translator
from tests.cli.test_cli import assert_one_line_error, attnlab

SENTENCE = "three hundred [MASK] five"


@pytest.fixture(scope="module")
def run(tiny_runs):
    return tiny_runs("encoder-only")


def test_the_run_trains_and_validates_by_fill_accuracy(run):
    valid = [r for r in runs.read_metrics(run) if r.get("event") == "valid"]
    assert valid and "valid_bleu" not in valid[-1]
    assert 0.0 <= valid[-1]["valid_fill_acc"] <= 100.0
    assert valid[-1]["valid_fill_acc"] == pytest.approx(100 * valid[-1]["valid_acc"])
    assert (run / "checkpoints" / "BEST").is_file()  # chosen by the fill accuracy


def test_fill_prints_the_top_k_of_every_mask(run, capsys):
    assert main(["fill", str(run), SENTENCE, "[MASK] thousand two [MASK]", "--top", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    first, second = out.index(next(line for line in out if line.startswith(SENTENCE))), None
    assert out[first].startswith(f"{SENTENCE} → three hundred ")
    second = next(i for i, line in enumerate(out) if line.startswith("[MASK] thousand two [MASK] → "))
    rows = [line for line in out if re.match(r"^\s+\d+\.\d\d%\s+\S+$", line)]
    assert len(rows) == 3 * 3  # three fillers for each of the three masks
    assert sum("[MASK] 1" in line or "[MASK] 2" in line for line in out[second:]) == 2  # each mask its own list
    probs = [float(r.split("%")[0]) for r in rows]
    for block in (probs[0:3], probs[3:6], probs[6:9]):
        assert block == sorted(block, reverse=True) and sum(block) <= 100.0 + 1e-6
    for token in (r.split()[-1] for r in rows):
        assert token not in ("<pad>", "<eos>", "<bos>", "[MASK]")


def test_attention_of_an_encoder_only_run_is_a_full_matrix(run, tmp_path, capsys):
    result = Translator.from_run(run).attention(SENTENCE, extra_pad=2)
    assert set(result.attention) == {"enc_self"}
    w = result.attention["enc_self"]  # (layers, heads, S, S)
    n = len(result.src_tokens) - 2  # real tokens: three hundred [MASK] five <eos>
    assert result.src_tokens[:n] == ["three", "hundred", "[MASK]", "five", "<eos>"]
    real = w[..., :n, :n]
    later = torch.ones(n, n, dtype=torch.bool).triu(1)  # (query, key) with the key after the query
    assert (real[..., later] > 0).all()  # every real position sees the later ones: not triangular
    assert torch.all(w[..., n:] == 0)  # padding columns are empty (§23)
    assert result.translation.startswith("three hundred ") and "[MASK]" not in result.translation
    assert main(["attention", str(run), SENTENCE, "--save-dir", str(tmp_path), "--json", "--formats", "png"]) == 0
    written = capsys.readouterr().out
    assert "_enc_self.png" in written
    doc = json.loads(next(tmp_path.glob("*_attention.json")).read_text())
    assert set(doc["kinds"]) == {"enc_self"}


def test_translate_and_evaluate_refuse_a_fill_model(run, tiny_runs):
    assert_one_line_error(attnlab("translate", str(run), "three hundred"), "use `attnlab fill")
    assert_one_line_error(attnlab("evaluate", str(run), "--max-sentences", "2"), "use `attnlab fill")
    assert_one_line_error(attnlab("fill", str(tiny_runs("transformer")), SENTENCE), "needs an encoder-only run")


def test_fill_needs_a_mask(run, capsys):
    assert main(["fill", str(run), "three hundred"]) == 2
    assert "has no [MASK]" in capsys.readouterr().err


def test_no_reserved_token_is_ever_a_filler_and_the_line_shows_the_word(run, capsys):
    # --top larger than the vocabulary lists every candidate: <unk> (which the model does learn) was among them,
    # and ranked first it printed "… → three hundred five", the mask gone from the sentence (notes §28.2)
    assert main(["fill", str(run), SENTENCE, "--top", "100000"]) == 0
    out = capsys.readouterr().out.splitlines()
    fillers = [line.split()[-1] for line in out if re.match(r"^\s+\d+\.\d\d%\s+\S+$", line)]
    tok = Translator.from_run(run).src_tok
    assert len(fillers) == len(tok) - 4  # the whole vocabulary but its four reserved ids
    reserved = {"<unk>", "<pad>", "<bos>", "<eos>", "[MASK]"}
    assert not reserved & set(fillers)
    assert out[0] == f"{SENTENCE} → {SENTENCE.replace('[MASK]', fillers[0])}"
