import json

import pytest

from attnlab.data.corpus import Split
from attnlab.evaluation.evaluate import evaluate_split
from attnlab.translator import Translator


def test_each_source_is_scored_once_against_all_its_references(tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"), "last")
    ids = [tr.src_tok.encode(s) for s in ("twenty one", "three", "twenty one")]
    refs = [["vingt et un", "vingt-et-un"], ["trois"], ["vingt et un", "vingt-et-un"]]
    split = Split(src=ids, tgt=[[], [], []], src_text=["twenty one", "three", "twenty one"],
                  tgt_text=["vingt et un", "trois", "vingt-et-un"], references=refs)
    out = evaluate_split(tr, split)
    assert out["sentences"] == 2  # the repeated source (a second translation of it) is not scored twice
    assert out["sources"] == ["twenty one", "three"]
    assert out["max_references"] == 2
    assert sum(b["sentences"] for b in out["by_length"]) == 2


def test_a_numbers_run_shows_the_numbers_tasks_examples(tiny_runs, tmp_path, capsys):
    """A numbers model is shown the task's examples and their targets, never the notes' English sentences
    (its vocabulary holds none of them: it was asked to translate "i'm home .")."""
    import shutil

    from attnlab.cli import main
    from attnlab.notes import NUMBERS_EXAMPLES, SENTENCES

    run = tmp_path / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    assert main(["evaluate", str(run), "--max-sentences", "4", "--checkpoint", "last", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "the numbers task's examples" in out and "the notes' examples" not in out
    assert all(s in out for s in NUMBERS_EXAMPLES) and not any(s in out for s in SENTENCES), out
    assert "(ref: trois cent cinq)" in out
    report = json.loads((run / "eval-test-first4-last.json").read_text(encoding="utf-8"))  # its own settings
    assert [ex["source"] for ex in report["notes_examples"]] == list(NUMBERS_EXAMPLES)
    assert [ex["reference"] for ex in report["notes_examples"]] == ["vingt et un", "trois cent cinq", "mille deux cents"]


@pytest.mark.parametrize("lang", ["fr", "de", "es", "ja"])
def test_numbers_references_are_the_tasks_own_targets(lang):
    from attnlab.data.numbers import english_value, numbers_pairs, numbers_reference

    for en, target in numbers_pairs(300, lang=lang):
        assert numbers_reference(en, lang) == target, en
    assert english_value("twenty-one") == 21 and english_value("one thousand, two hundred") == 1200
    assert english_value("i'm home .") is None and english_value("hundred hundred") is None


def test_report_names_differ_by_setting_and_by_file(tmp_path):
    """`evaluate --src` run with beam 1 then beam 4 wrote one eval-file-<name>.json over the other, and two
    test files of one name in two folders shared it; the default split report keeps its name."""
    from attnlab.evaluation.evaluate import file_report_name, report_name

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for folder, text in (("a", "one\n"), ("b", "two\n")):
        (tmp_path / folder / "test.zh").write_text(text, encoding="utf-8")
        (tmp_path / folder / "test.en").write_text(text, encoding="utf-8")
    a = file_report_name(tmp_path / "a" / "test.zh", [tmp_path / "a" / "test.en"])
    b = file_report_name(tmp_path / "b" / "test.zh", [tmp_path / "b" / "test.en"])
    other_ref = file_report_name(tmp_path / "a" / "test.zh", [tmp_path / "b" / "test.en"])
    assert len({a, b, other_ref}) == 3 and a.startswith("file-test-")
    assert a == file_report_name(tmp_path / "a" / "test.zh", [tmp_path / "a" / "test.en"])  # a rerun may replace
    names = {report_name("test"), report_name("test", 4), report_name("test", 1), report_name("test", None, 50),
             report_name("test", checkpoint="last"), report_name(a), report_name(a, 4)}
    assert len(names) == 7 and report_name("test") == "test"  # what the web page, compare and doctor read


def test_an_empty_split_or_src_file_is_one_error_line_not_a_traceback(tiny_runs, tmp_path, monkeypatch, capsys):
    """A corpus too small for its test share (every source hashed into train) and an empty --src file each end
    `attnlab evaluate` with one `error:` line that says what to do (sacreBLEU's 'no hypotheses' escaped once)."""
    from attnlab.cli import main
    from attnlab.data import corpus

    run = tiny_runs("transformer")
    empty = tmp_path / "empty.src"
    empty.write_text("", encoding="utf-8")
    for argv, said in ((["evaluate", str(run), "--src", str(empty), "--ref", str(empty)], "holds no sentences"),
                       (["evaluate", str(run)], "test split of this corpus holds no sentence")):
        with monkeypatch.context() as m:
            m.setattr(corpus, "_split_of", lambda *a: "train")  # no source falls in the test split
            assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and said in err and "; " in err, err  # what, then the fix
        assert "\n" not in err and "Traceback" not in err, err


@pytest.mark.slow  # a 2-step training on a loaded machine takes seconds
def test_a_chinese_source_is_bucketed_by_characters_in_wider_buckets(tmp_path):
    """A zh→en run counts its source in characters; its BLEU-by-length buckets are the character-sized ones
    (``我喜欢猫。``, 5 characters, is a short sentence: bucket 1-6, not the word-sized 5-8)."""
    from attnlab.evaluation.bleu import CHARACTER_BUCKETS, DEFAULT_BUCKETS
    from attnlab.evaluation.evaluate import evaluate_files
    from attnlab.training.loop import train
    from attnlab.translator import Translator
    from tests.cli.test_any_pair_surface import _corpus
    from tests.conftest import tiny_config

    assert all(c[0] >= w[0] and c[1] >= w[1] for c, w in zip(CHARACTER_BUCKETS, DEFAULT_BUCKETS))
    tsv = _corpus(tmp_path / "zh-en.tsv", "zh", "en")
    cfg = tiny_config("transformer", "data.dataset=file", f"data.data_path={tsv}", "data.src_lang=zh",
                      "data.tgt_lang=en", "data.min_freq=1", "data.num_steps=12", "train.max_steps=2")
    train(cfg, tmp_path / "run", progress=False)
    tr = Translator.from_run(tmp_path / "run")
    report = evaluate_files(tr, ["我喜欢猫。", "我们想要书。"], [["I like cats.", "We want books."]])
    assert report["length_unit"] == "characters"
    assert [(r["bucket"], r["sentences"]) for r in report["by_length"]] == [("1-6", 2)]
