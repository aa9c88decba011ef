"""--resume without --data finds a corpus of your own where the run can look (the current folder, then
$ATTNLAB_DATA_DIR) by its recorded name and sha256, or names the file it needs in one line."""

from __future__ import annotations

import hashlib

import pytest

from attnlab.cli import main
from attnlab.data.corpus import locate_recorded


def identity(path):
    return {"name": path.name, "file": path.name, "sha256": "x",
            "files": [{"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}]}


def test_the_recorded_corpus_is_found_by_name_and_checksum(tmp_path, monkeypatch):
    (tmp_path / "here").mkdir()
    tsv = tmp_path / "here" / "pairs.tsv"
    tsv.write_text("go .\tva !\n", encoding="utf-8")
    rec = identity(tsv)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert locate_recorded(rec) is None  # not in the current folder
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(tmp_path / "here"))
    assert locate_recorded(rec) == str(tsv)
    monkeypatch.chdir(tmp_path / "here")
    assert locate_recorded(rec) == str(tsv)
    tsv.write_text("go .\tpars !\n", encoding="utf-8")  # same name, other bytes: another corpus
    assert locate_recorded(rec) is None


@pytest.mark.slow
def test_resume_without_data_finds_the_corpus_or_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    assert main(["data", "--dataset", "numbers", "--write-tsv", "corpus.tsv", "data.numbers_size=200"]) == 0
    small = ["data.batch_tokens=600", "model.num_hiddens=32", "model.embed_size=32", "model.num_layers=1",
             "model.num_heads=2", "model.ffn_num_hiddens=64", "train.eval_every=0", "train.eval_frac=0",
             "train.warmup_steps=2", "train.threads=1"]
    assert main(["train", "--model", "transformer", "--data", "corpus.tsv", "data.src_lang=en", "data.tgt_lang=fr",
                 "--out", "run", "--max-steps", "2", "-q", *small]) == 0
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["train", "--out", "../run", "--resume", "--max-steps", "3", "-q"]) == 2
    err = capsys.readouterr().err
    assert "corpus.tsv" in err and "pass --data" in err
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out", "run", "--resume", "--max-steps", "3", "-q"]) == 0
    assert "2 updates -> 3 updates" in capsys.readouterr().err  # the plan changes, and says so
