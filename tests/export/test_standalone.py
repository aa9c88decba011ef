"""An export stands alone: its tokenizer files and CTranslate2 folder work without attnlab, and the
README's plain-ctranslate2 script prints what `attnlab translate OUT --engine ctranslate2` prints."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer

from attnlab.data.specials import EOS
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import preprocess
from attnlab.data.tokenizer_files import from_hf
from attnlab.data.vocab import Vocab, load_tokenizer
from attnlab.export.folder import export_run, portable_meta
from attnlab.export.standalone import tokenizer_json

README = Path(__file__).resolve().parents[2] / "README.md"
SENTENCES = ["I'm home.", "i'm home .", "Go.", "zzzqx", ""]


def _hf(tok, tmp_path) -> HFTokenizer:
    path = tmp_path / f"tokenizer.{tok.lang}.json"
    path.write_text(tokenizer_json(tok), encoding="utf-8")
    return HFTokenizer.from_file(str(path))


def test_word_tokenizer_round_trips_with_eos(tmp_path):
    vocab = Vocab.build([preprocess(s).split() for s in ("I'm home.", "Go!", "Hi, you.")], lang="en")
    hf = _hf(vocab, tmp_path)
    enc = hf.encode("i'm home .")
    assert enc.ids == vocab.encode("i'm home .") + [EOS] and enc.tokens[-1] == "<eos>"
    assert hf.encode("I'm home.").ids == enc.ids  # raw text: the normalizer is attnlab's preprocessing
    assert hf.encode("i'm home .", add_special_tokens=False).ids == vocab.encode("i'm home .")
    assert hf.decode(enc.ids) == "i'm home." == vocab.decode(enc.ids)  # <eos> is special: left out
    assert hf.decode(hf.encode("go ! hi , you .").ids) == "go! hi, you."
    back = load_tokenizer(from_hf(hf.to_str(), "word", "en"))  # attnlab reads its export back unchanged
    assert back.encode("i'm home .") == vocab.encode("i'm home .")


def test_french_and_bpe_decoders_detokenize_as_attnlab(tmp_path):
    fr = Vocab.build([preprocess("Va ! Je suis chez moi, merci.").split()], lang="fr")
    hf = _hf(fr, tmp_path)
    ids = hf.encode("va ! je suis chez moi , merci .").ids
    assert hf.decode(ids) == fr.decode(ids) == "va ! je suis chez moi, merci."
    texts = ["I'm home.", "Go!", "Hi, you.", "home is where i am ."] * 5
    bpe = BPETokenizer.train(texts, vocab_size=60, lang="en")
    hb = _hf(bpe, tmp_path)
    enc = hb.encode("I'm home.")
    assert enc.ids == bpe.encode("I'm home.") + [EOS]
    assert hb.decode(enc.ids) == bpe.decode(enc.ids) == "i'm home."
    back = load_tokenizer(from_hf(hb.to_str(), "bpe", "en"))
    assert back.encode("Go home!") == bpe.encode("Go home!") and back.decode(enc.ids) == "i'm home."


def test_portable_meta_drops_what_names_the_machine():
    meta = {"argv": ["attnlab", "train"], "versions": {"torch": "2", "platform": "Linux-x"},
            "data_stats": {"source": "fra-eng.zip at /home/me/data/fra-eng.zip", "dataset": "fra-eng"},
            "corpus": {"name": "fra-eng", "sha256": "ab"}}
    assert portable_meta(meta) == {"versions": {"torch": "2"},
                                   "data_stats": {"source": "fra-eng.zip at fra-eng.zip", "dataset": "fra-eng"},
                                   "corpus": {"name": "fra-eng", "sha256": "ab"}}


def readme_script() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    return next(b for b in blocks if "ctranslate2.Translator(" in b)


@pytest.mark.slow
def test_readme_script_equals_attnlab_translate(export_runs, tmp_path):
    pytest.importorskip("ctranslate2")
    run = export_runs("transformer", 150)
    out = export_run(run, tmp_path / "out", fmt="ctranslate2")
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "attnlab-transformer"
    text = json.dumps(config)
    assert str(run) not in text and "argv" not in text and "platform" not in text
    assert str(Path.home()) not in text and os.uname().nodename not in text
    sentences = [*SENTENCES, "twenty one", "Three hundred and four", "seven thousand"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # attnlab cannot even be imported by path
    script = readme_script() + "\nassert 'attnlab' not in sys.modules\n"
    plain = subprocess.run([sys.executable, "-c", script, str(out)], input="\n".join(sentences) + "\n",
                           capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    ours = subprocess.run([sys.executable, "-m", "attnlab", "translate", str(out), "--engine", "ctranslate2", "-q"],
                          input="\n".join(sentences) + "\n", capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ATTNLAB_OFFLINE": "1"})
    assert ours.returncode == 0, ours.stderr
    assert plain.stdout.splitlines() == ours.stdout.splitlines()
    assert len(ours.stdout.splitlines()) == len(sentences) and any(ours.stdout.splitlines())


# ------------------------------------------------------------------------------ the side's own text rule

CHARS_TEXTS = ["私は家にいます。", "我有 iPhone 12 手机。", "ABC def！", "Ｔｅｓｔです", "二万千三百四十五", "a , b"]
CHARS_PROBES = [*CHARS_TEXTS, "  私は\u200b家 ,  iPhone12!?", "x\ufffdy", "東京タワー３３３ｍ", "I'm home."]


def _chars_tokenizers():
    from attnlab.data.languages import text_rules

    rules = text_rules("chars", "ja")
    word = Vocab.build([rules.preprocess(t).split() for t in CHARS_TEXTS], "ja", text="chars")
    return word, BPETokenizer.train(CHARS_TEXTS * 3, vocab_size=80, lang="ja", text="chars")


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_a_chars_export_cuts_text_as_attnlab(tmp_path, kind):
    """No D2L normalizer in a characters run's file: HF encodes raw text to attnlab's ids, case and script kept,
    and decodes with the chars rule's spacing (a space only between two runs of letters or digits)."""
    tok = dict(zip(("word", "bpe"), _chars_tokenizers()))[kind]
    hf = _hf(tok, tmp_path)
    assert "Lowercase" not in hf.to_str()
    for text in CHARS_PROBES:
        ids = hf.encode(text).ids
        assert ids == tok.encode(text) + [EOS], text
        assert hf.decode(ids) == tok.decode(ids), text
    assert hf.decode(hf.encode("我有 iPhone 12 手机。").ids) == "我有iPhone 12手机。"
    back = load_tokenizer({**from_hf(hf.to_str(), kind, "ja"), "text": "chars"})  # as runs/exported.py reads it
    assert all(back.encode(t) == tok.encode(t) for t in CHARS_PROBES)
    if kind == "bpe":
        assert back.decode(tok.encode("ABC def！")) == "ABC def！"


def test_a_moses_export_says_how_to_cut_exactly(tmp_path):
    """Moses has no HF equivalent: the file approximates it (case kept, punctuation split), and the record says
    the exact rule; with sacremoses first and a whitespace split, the ids are attnlab's."""
    from sacremoses import MosesTokenizer
    from tokenizers import pre_tokenizers

    from attnlab.data.languages import text_rules
    from attnlab.export.standalone import text_rule_record

    texts = ["Ich bin zu Hause.", "Wie geht's, Anna?", "Das ist z.B. gut!"]
    rules = text_rules("moses", "de")
    vocab = Vocab.build([rules.preprocess(t).split() for t in texts], "de", text="moses")
    hf = _hf(vocab, tmp_path)
    assert hf.encode("Ich bin zu Hause.", add_special_tokens=False).ids == vocab.encode("Ich bin zu Hause.")
    record = text_rule_record(vocab)
    assert record["rule"] == "moses" and record["lang"] == "de" and not record["exact_in_tokenizer_file"]
    assert "MosesTokenizer(lang='de')" in record["exact"]
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # what the record says to do
    moses = MosesTokenizer(lang="de")
    for text in texts:
        cut = " ".join(moses.tokenize(text, escape=False))
        assert hf.encode(cut, add_special_tokens=False).ids == vocab.encode(text), text
    assert text_rule_record(word_vocab_en())["exact_in_tokenizer_file"]
    bpe = BPETokenizer.train(texts * 3, vocab_size=60, lang="de", text="moses")
    back = load_tokenizer({**from_hf(_hf(bpe, tmp_path).to_str(), "bpe", "de"), "text": "moses"})
    assert all(back.encode(t) == bpe.encode(t) for t in texts)  # attnlab cuts with sacremoses, then its BPE
    hb = _hf(bpe, tmp_path)
    assert "Metaspace(" in text_rule_record(bpe)["exact"]
    hb.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")  # as it says
    for text in texts:
        cut = " ".join(moses.tokenize(text, escape=False))
        assert hb.encode(cut, add_special_tokens=False).ids == bpe.encode(text), text


def word_vocab_en() -> Vocab:
    return Vocab.build([preprocess("I'm home.").split()], lang="en")
