"""data/pairs.py: one record per corpus and language pair; cmn-eng read from its zip both ways; a column whose
script contradicts its language code is refused; nothing outside data/ tests a corpus or a pair by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.config import DATASETS, ConfigError, DataConfig
from attnlab.data.corpus import prepare, read_pairs, read_parallel
from attnlab.data.pairs import CORPORA, corpus_named_by, pair_of, resolved
from attnlab.errors import CorpusError
from attnlab.i18n import using

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("ATTNLAB_DATA_DIR", ROOT.parent / "shared" / "data"))  # as tests/conftest.py


def test_every_named_corpus_has_a_record():
    assert set(CORPORA) == set(DATASETS)


def test_a_file_name_says_which_named_corpus_it_is():
    """`--data cmn-eng.zip` (train, data, demo) needs no --dataset: the name says it (it was read as fra-eng)."""
    assert [corpus_named_by(n) for n in ("cmn-eng.zip", "cmn.txt", "fra-eng.zip", "fra.txt")] == [
        "cmn-eng", "cmn-eng", "fra-eng", "fra-eng"]
    assert corpus_named_by("my.tsv") is None and corpus_named_by("") is None


def test_the_records_of_each_named_pair():
    fr = pair_of(DataConfig())
    assert (fr.langs, fr.rules, fr.bleu_tokenize, fr.direction) == (("en", "fr"), ("d2l", "d2l"), "13a", "en-fr")
    assert fr.notes_table is not None and fr.notes_example == "i'm home ." and fr.probes[-1] == "i'm home ."
    back = pair_of(DataConfig(direction="fr-en"))
    assert back.notes_reversed and back.notes_example == "je suis chez moi ." and back.probes[-1] == "je suis chez moi ."
    zh = pair_of(DataConfig(dataset="cmn-eng"))
    assert (zh.langs, zh.rules, zh.bleu_tokenize, zh.direction) == (("en", "zh"), ("d2l", "chars"), "zh", "en-zh")
    assert zh.notes_table is None and zh.notes_example is None  # the notes' table is an en-fr table
    assert zh.examples[0] == ("I'm home.", "我在家里。") and zh.length_unit("src") == "words"
    assert zh.length_unit("tgt") == "characters"
    rev = pair_of(DataConfig(dataset="cmn-eng", direction="zh-en"))
    assert (rev.langs, rev.rules, rev.bleu_tokenize) == (("zh", "en"), ("chars", "d2l"), "13a")
    assert rev.probes[0] == "我在家里。" and rev.length_unit("src") == "characters"
    num = pair_of(DataConfig(dataset="numbers", tgt_lang="ja"))
    assert num.generated and num.langs == ("en", "ja") and num.bleu_tokenize == "char"
    assert num.examples[0] == ("twenty-one", "二十一")
    own = pair_of(DataConfig(dataset="file", src_lang="de", tgt_lang="en"))
    assert own.rules == ("metaspace", "metaspace") and own.probes == () and own.notes_table is None
    assert pair_of(DataConfig(dataset="file", src_lang="en", tgt_lang="de")).probes[-1] == "i'm home ."
    with using("zh"):
        assert zh.title() == "英语 → 中文"
    with using("en"):
        assert zh.title() == "English → Chinese"


def test_a_direction_must_fit_its_corpus_and_a_run_records_its_pair():
    with pytest.raises(ConfigError, match=r"data.direction=en-fr does not fit data.dataset=cmn-eng, which reads "
                                          r"en-zh, zh-en"):
        pair_of(DataConfig(dataset="cmn-eng", direction="en-fr"))
    # config.toml names the pair, never fra-eng's default on another corpus
    assert resolved(DataConfig(dataset="cmn-eng")).direction == "en-zh"
    assert resolved(DataConfig(dataset="numbers", tgt_lang="de")).direction == "en-de"
    # an older run's numbers config said en-fr whatever its target: its data.tgt_lang decides
    assert pair_of(DataConfig(dataset="numbers", direction="en-fr", tgt_lang="de")).tgt == "de"


@pytest.fixture(scope="module")
def cmn_eng_zip() -> Path:
    path = (SHARED_DATA / "cmn-eng.zip").resolve()
    if not path.is_file():
        pytest.skip(f"cmn-eng corpus not found at {path} (set ATTNLAB_DATA_DIR)")
    return path


def test_cmn_eng_is_read_from_its_zip_both_ways(cmn_eng_zip):
    raw = read_pairs(cmn_eng_zip, CORPORA["cmn-eng"])
    assert len(raw) > 29_000 and raw[0][0] == "Hi."  # the byte-order mark is dropped
    cfg = DataConfig(dataset="cmn-eng", data_path=str(cmn_eng_zip), max_pairs=3000, min_freq=1)
    fwd, rev = prepare(cfg), prepare(DataConfig(**{**cfg.__dict__, "direction": "zh-en"}))
    assert (fwd.src_tok.lang, fwd.tgt_tok.lang, rev.src_tok.lang, rev.tgt_tok.lang) == ("en", "zh", "zh", "en")
    assert fwd.stats["text_rules"] == {"src": "d2l", "tgt": "chars"}
    zh = fwd.splits["train"].tgt_text[0].split()
    assert all(len(t) == 1 for t in zh if "\u4e00" <= t <= "\u9fff")  # one token a character
    assert fwd.stats["corpus"]["name"] == "cmn-eng"
    assert fwd.stats["corpus"]["sha256"] == rev.stats["corpus"]["sha256"]


def test_cmn_eng_missing_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(CorpusError, match=r"cmn-eng corpus not found; .* It has no download: put its cmn-eng.zip "
                                          r"\(or cmn.txt\) in .*cache.*ATTNLAB_DATA_DIR") as err:
        prepare(DataConfig(dataset="cmn-eng"))
    assert "\n" not in str(err.value)


def test_a_column_in_the_wrong_script_is_a_one_line_error(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    lines = ["我在家里。\tI'm home.", "谢谢。\tThank you.", "他跑了。\tHe ran.", "Tom 来了。\tTom came."]
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"pairs.tsv column 1 is declared data.src_lang=en, but 100 % of its first "
                                          r"lines are written in a script without spaces .*; swap data.src_lang and "
                                          r"data.tgt_lang") as err:
        read_parallel(str(tsv), "en", "zh")
    assert "\n" not in str(err.value)
    assert len(read_parallel(str(tsv), "zh", "en")[0]) == 4  # the right codes read it
    (tmp_path / "a.de").write_text("Ich bin zu Hause.\nDanke.\n", encoding="utf-8")
    (tmp_path / "a.ja").write_text("Thank you.\nI'm home.\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"a.ja is declared data.tgt_lang=ja, but 100 % of its first lines are "
                                          r"written in a space-separated script; give that column's language code"):
        read_parallel(str(tmp_path / "a"), "de", "ja")
    # a majority judges: one line of English names among Chinese lines is fine
    tsv.write_text("\n".join([*lines, "Tom\tTom"]) + "\n", encoding="utf-8")
    assert len(read_parallel(str(tsv), "zh", "en")[0]) == 5


@pytest.mark.slow  # parses every module of src/attnlab
def test_no_corpus_or_pair_is_tested_by_name_outside_data():
    tool = ROOT.parent / "shared" / "tools" / "structure.py"
    if not tool.is_file():
        pytest.skip(f"{tool} not found")
    out = subprocess.run([sys.executable, str(tool), "--max-pair-tests", "5"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:]
