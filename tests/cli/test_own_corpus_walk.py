"""The walk a practitioner takes with a corpus of their own, in another language pair: write it (the numbers
task, offline, into Japanese or German), train on it with ``--data FILE data.src_lang=.. data.tgt_lang=..``,
translate, score their own test files with ``evaluate --src/--ref``, move the run folder, and score again; and a
small Japanese → English corpus given as two aligned files."""

from __future__ import annotations

import json
import shutil

import pytest

from attnlab.cli import main

# Each walk trains a 40-step run of a one-layer, 32-wide Transformer: about a second on one thread.
TINY = ["--model", "transformer", "--size", "base", "--threads", "1", "--max-steps", "40",
        "data.tokenizer=word", "data.min_freq=1", "data.num_steps=24", "data.batch_tokens=600",
        "model.num_hiddens=32", "model.num_layers=1", "model.num_heads=2", "model.ffn_num_hiddens=64",
        "train.lr=3e-3", "train.warmup_steps=5", "train.eval_frac=0", "train.eval_every=0", "train.save_every=0",
        "train.eval_max_sentences=8", "decode.max_len_b=8"]


def _ok(capsys, *argv) -> str:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert rc == 0, (argv, out.err[-2000:])
    return out.out


def _scores(run, name: str) -> dict:
    (path,) = run.glob(f"eval-{name}.json")  # a --src file's report: file-<name>-<hash of the files>
    report = json.loads(path.read_text(encoding="utf-8"))
    return {k: report[k] for k in ("bleu", "chrf", "bleu_signature", "chrf_signature", "sentences")}


@pytest.mark.parametrize("lang, tokenize", [("ja", "tok:char"), ("de", "tok:13a")])
def test_numbers_corpus_of_your_own_walk(tmp_path, capsys, monkeypatch, lang, tokenize):
    monkeypatch.chdir(tmp_path)
    tsv = tmp_path / f"numbers-{lang}.tsv"
    _ok(capsys, "data", "--dataset", "numbers", f"data.tgt_lang={lang}", "data.numbers_size=600", "--write-tsv", tsv)
    lines = tsv.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 600 and all(line.count("\t") == 1 for line in lines)
    test = lines[:12]  # their own test files: one sentence a line, source and reference
    (tmp_path / "test.en").write_text("".join(line.split("\t")[0] + "\n" for line in test), encoding="utf-8")
    (tmp_path / f"test.{lang}").write_text("".join(line.split("\t")[1] + "\n" for line in test), encoding="utf-8")

    run = tmp_path / "a" / "run"
    _ok(capsys, "train", "--out", run, "--data", tsv, "data.src_lang=en", f"data.tgt_lang={lang}", *TINY)
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    corpus = meta["data_stats"]["corpus"]
    assert corpus["name"] == tsv.name and corpus["langs"] == ["en", lang]  # not recorded as fra-eng
    assert meta["data_stats"]["langs"] == {"src": "en", "tgt": lang}
    assert meta["data_stats"]["text_rules"]["tgt"] == ("chars" if lang == "ja" else "metaspace")
    config = (run / "config.toml").read_text(encoding="utf-8")
    assert 'dataset = "file"' in config and str(tsv) not in config  # no path: the run can move

    out = _ok(capsys, "translate", run, "twenty one", "three hundred and five").splitlines()
    assert len(out) == 2 and not any("<" in line for line in out)
    if lang == "ja":
        assert all(" " not in line and line.isascii() is False for line in out if line)  # kanji, unspaced

    args = ["--src", tmp_path / "test.en", "--ref", tmp_path / f"test.{lang}"]
    printed = _ok(capsys, "evaluate", run, *args)
    assert "signature: nrefs:1" in printed and tokenize in printed
    before = _scores(run, "file-test-*")
    assert before["sentences"] == 12

    moved = tmp_path / "b" / "moved"
    shutil.move(run.parent, moved.parent)  # the folder moves, and the corpus is not beside it any more
    moved = moved.parent / "run"
    monkeypatch.chdir(tmp_path / "b")
    _ok(capsys, "evaluate", moved, *args)
    assert _scores(moved, "file-test-*") == before  # the same model, the same files: the same scores
    rc = main(["evaluate", str(moved)])  # a split of a corpus of your own: --data names it again
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "pass --data FILE" in err[0]
    _ok(capsys, "evaluate", moved, "--data", tsv)
    assert json.loads((moved / "eval-test.json").read_text())["bleu_signature"].count(tokenize) == 1


JA_EN = [("私は学生です。", "I am a student."), ("彼は先生です。", "He is a teacher."), ("猫が好きです。", "I like cats."),
         ("犬が好きです。", "I like dogs."), ("私は猫です。", "I am a cat."), ("彼は犬です。", "He is a dog."),
         ("水をください。", "Water, please."), ("お茶をください。", "Tea, please."), ("私は先生です。", "I am a teacher."),
         ("彼は学生です。", "He is a student.")]


def test_a_small_japanese_english_corpus_in_two_files(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.ja").write_text("".join(f"{ja}\n" for ja, _ in JA_EN * 8), encoding="utf-8")
    (tmp_path / "train.en").write_text("".join(f"{en}\n" for _, en in JA_EN * 8), encoding="utf-8")
    run = tmp_path / "ja-en"
    _ok(capsys, "train", "--out", run, "--data", "train.ja,train.en", *TINY)  # the languages from the suffixes
    stats = json.loads((run / "meta.json").read_text(encoding="utf-8"))["data_stats"]
    assert stats["langs"] == {"src": "ja", "tgt": "en"} and stats["text_rules"] == {"src": "chars", "tgt": "metaspace"}
    assert [f["file"] for f in stats["corpus"]["files"]] == ["train.ja", "train.en"]
    toks = json.loads((run / "tokenizers.json").read_text(encoding="utf-8"))
    assert "私" in toks["src"]["idx_to_token"] and "▁I" in toks["tgt"]["idx_to_token"]  # characters; English cased (▁: after a space)
    out = _ok(capsys, "translate", run, "私は学生です。", "犬が好きです。")
    assert out.strip() and "<" not in out
    _ok(capsys, "export", run, tmp_path / "exported")  # the export keeps the text rules: the same outputs
    assert _ok(capsys, "translate", tmp_path / "exported", "私は学生です。", "犬が好きです。") == out
    (tmp_path / "t.ja").write_text("私は学生です。\n猫が好きです。\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("I am a student.\nI like cats.\n", encoding="utf-8")
    (tmp_path / "t2.en").write_text("I'm a student.\nI love cats.\n", encoding="utf-8")
    printed = _ok(capsys, "evaluate", run, "--src", "t.ja", "--ref", "t.en", "--ref", "t2.en")
    assert "nrefs:2" in printed and "tok:13a" in printed and "the notes' examples" not in printed
    (path,) = run.glob("eval-file-t-*.json")  # file-<name>-<hash of the files>
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["files"]["src"]["file"] == "t.ja" and [r["file"] for r in report["files"]["ref"]] == ["t.en", "t2.en"]
    (tmp_path / "short.en").write_text("I am a student.\n", encoding="utf-8")
    rc = main(["evaluate", str(run), "--src", "t.ja", "--ref", "short.en"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["error: --ref short.en has 1 lines but --src t.ja has 2; give one reference line for "
                               "each source line"]
