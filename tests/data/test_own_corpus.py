"""A parallel corpus of your own, any pair: a TSV or two aligned files, recorded by name, sha256 and languages;
one-line errors naming the line and the fix; the numbers task in German, Spanish and Japanese."""

from __future__ import annotations

import hashlib

import pytest

from attnlab.cli import main
from attnlab.config import ConfigError, DataConfig
from attnlab.data import numbers
from attnlab.data.corpus import prepare, read_parallel
from attnlab.errors import AttnlabError, CorpusError

EN_DE = [("I'm home.", "Ich bin zu Hause."), ("Go away!", "Geh weg!"), ("We're late.", "Wir sind spät dran."),
         ("Thank you.", "Danke schön."), ("He's tall.", "Er ist groß.")]


def _tsv(path, pairs, attribution=False):
    tail = "\tCC-BY 2.0 (France) Attribution: tatoeba.org" if attribution else ""
    path.write_text("".join(f"{a}\t{b}{tail}\n" for a, b in pairs), encoding="utf-8")
    return path


def test_a_tsv_of_two_or_three_columns_is_read_and_recorded_by_name_checksum_and_languages(tmp_path):
    for attribution in (False, True):
        path = _tsv(tmp_path / f"en-de-{attribution}.tsv", EN_DE, attribution)
        pairs, source, identity = read_parallel(str(path), "en", "de")
        assert pairs == EN_DE and source == str(path)
        assert identity["name"] == path.name and identity["langs"] == ["en", "de"]
        assert identity["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_two_aligned_files_by_comma_by_suffix_or_by_prefix(tmp_path):
    (tmp_path / "train.en").write_text("".join(f"{a}\n" for a, _ in EN_DE), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(f"{b}\r\n" for _, b in EN_DE), encoding="utf-8")  # CRLF is fine
    en, de = tmp_path / "train.en", tmp_path / "train.de"
    forward = read_parallel(f"{en},{de}", "en", "de")
    assert forward[0] == EN_DE
    assert read_parallel(f"{de},{en}", "en", "de")[0] == EN_DE  # named by language: the source is the .en file
    assert read_parallel(str(tmp_path / "train"), "en", "de")[0] == EN_DE  # JoeyNMT's prefix
    backward = read_parallel(str(tmp_path / "train"), "de", "en")
    assert backward[0] == [(b, a) for a, b in EN_DE]
    identity = forward[2]
    assert [f["file"] for f in identity["files"]] == ["train.en", "train.de"]
    assert identity["files"][0]["sha256"] == hashlib.sha256(en.read_bytes()).hexdigest()
    assert identity["sha256"] != backward[2]["sha256"]  # the direction is part of what was read


@pytest.mark.parametrize("content, match", [
    ("I'm home.\tIch bin zu Hause.\nGo away!\n", r"bad\.tsv line 2: expected 2 or 3 tab-separated columns "
                                                 r"\(source, target\[, attribution\]\), got 1: .*fix or remove"),
    ("I'm home.\tIch bin zu Hause.\n\tGeh weg!\n", r"bad\.tsv line 2: the source \(en\) side is empty; fix or remove"),
    ("a\tb\tc\td\n", r"bad\.tsv line 1: expected 2 or 3 tab-separated columns"),
    ("", r"bad\.tsv holds no sentence pairs .*source<TAB>target"),
])
def test_a_tsv_with_a_bad_row_is_one_line_naming_it(tmp_path, content, match):
    (tmp_path / "bad.tsv").write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=match) as err:
        read_parallel(str(tmp_path / "bad.tsv"), "en", "de")
    assert "\n" not in str(err.value)


def test_two_files_of_different_lengths_or_a_missing_side_are_one_line(tmp_path):
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n", encoding="utf-8")
    (tmp_path / "a.de").write_text("eins\nzwei\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"a\.en has 3 lines but .*a\.de has 2; aligned files hold one sentence a "
                                          r"line, the same number each") as err:
        read_parallel(str(tmp_path / "a"), "en", "de")
    assert "\n" not in str(err.value)
    (tmp_path / "a.de").write_text("eins\n\ndrei\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"a\.de line 2: the target \(de\) side is empty while the other is not"):
        read_parallel(str(tmp_path / "a"), "en", "de")
    with pytest.raises(CorpusError, match=r"nothing does not exist \(nor nothing\.en and nothing\.de beside it\); "
                                          r"pass --data a TSV file, two aligned files A,B, or a prefix P"):
        read_parallel(str(tmp_path / "nothing"), "en", "de")
    with pytest.raises(CorpusError, match=r"b\.de does not exist"):
        read_parallel(f"{tmp_path / 'a.en'},{tmp_path / 'b.de'}", "en", "de")


@pytest.mark.parametrize("kwargs, match", [
    ({"dataset": "file", "src_lang": "en", "tgt_lang": "deu"},
     r"data.tgt_lang='deu' is not an ISO 639-1 language code; give two lowercase letters"),
    ({"dataset": "file", "src_lang": "xx", "tgt_lang": "de"}, r"data.src_lang='xx' is not an ISO 639-1"),
    ({"dataset": "file"}, r"a corpus of your own .* needs its languages: add data.src_lang=.. data.tgt_lang=.."),
    ({"dataset": "numbers", "tgt_lang": "it"}, r"data.tgt_lang=it does not fit data.dataset=numbers, which reads "
                                               r"en-fr, en-de, en-es, en-ja"),
    ({"src_lang": "en", "tgt_lang": "de"}, r"does not fit data.dataset=fra-eng, .* data.dataset=file \(--data FILE\)"),
])
def test_unknown_or_missing_languages_are_one_line_config_errors(kwargs, match):
    from attnlab.data.pairs import pair_of

    with pytest.raises(ConfigError, match=match) as err:
        pair_of(DataConfig(**kwargs))  # the form is checked on creation, the fit to a corpus by its record
    assert "\n" not in str(err.value) and isinstance(err.value, AttnlabError)


def test_languages_of_each_dataset():
    from attnlab.data.pairs import pair_of

    def langs(**kw):
        return pair_of(DataConfig(**kw)).langs

    assert langs() == ("en", "fr") and langs(direction="fr-en") == ("fr", "en")
    assert langs(src_lang="fr", tgt_lang="en", direction="fr-en") == ("fr", "en")
    assert langs(dataset="numbers") == ("en", "fr")
    assert langs(dataset="numbers", tgt_lang="ja") == ("en", "ja")
    assert langs(dataset="file", src_lang="zh", tgt_lang="en") == ("zh", "en")


@pytest.mark.parametrize("lang, word", [("de", "einundzwanzigtausenddreihundertfünfundvierzig"),
                                        ("es", "mil"), ("ja", "二万千三百四十五")])
def test_the_numbers_task_in_other_languages(lang, word):
    fr, other = numbers.numbers_pairs(200, seed=3), numbers.numbers_pairs(200, seed=3, lang=lang)
    assert [en for en, _ in other] == [en for en, _ in fr]  # the same numbers, the same English
    assert word in numbers._number_words(21345, lang)[1]
    p = prepare(DataConfig(dataset="numbers", tgt_lang=lang, numbers_size=300, min_freq=1))
    assert (p.tgt_tok.lang, p.stats["langs"]) == (lang, {"src": "en", "tgt": lang})
    if lang == "ja":  # characters: a vocabulary of the kanji the numbers use
        assert p.stats["text_rules"]["tgt"] == "chars" and all(len(t) == 1 for t in p.tgt_tok.idx_to_token[4:])
    with pytest.raises(ValueError, match="not a language of the numbers task"):
        numbers.numbers_pairs(10, lang="it")


def test_prepare_records_a_file_corpus_honestly(tmp_path):
    path = _tsv(tmp_path / "mine.tsv", EN_DE * 20)
    p = prepare(DataConfig(dataset="file", data_path=str(path), src_lang="en", tgt_lang="de", min_freq=1))
    st = p.stats
    assert st["dataset"] == "file" and st["corpus"]["name"] == "mine.tsv" and st["corpus"]["langs"] == ["en", "de"]
    assert st["langs"] == {"src": "en", "tgt": "de"} and st["text_rules"] == {"src": "metaspace", "tgt": "metaspace"}
    assert (p.src_tok.text, p.tgt_tok.lang) == ("metaspace", "de")
    assert "▁Hause" in p.tgt_tok.idx_to_token  # German as written, not lowercased (▁: after a space)
    with pytest.raises(CorpusError, match="pass --data FILE"):
        prepare(DataConfig(dataset="file", src_lang="en", tgt_lang="de"))


def _config_data(capsys, *argv) -> str:
    assert main(["config", "--model", "transformer", *map(str, argv)]) == 0
    return capsys.readouterr().out.split("[model]")[0]


def test_train_data_takes_a_corpus_of_your_own_unless_it_is_fra_eng(tmp_path, capsys):
    tsv = _tsv(tmp_path / "my.tsv", EN_DE)
    data = _config_data(capsys, "--data", tsv, "data.src_lang=en", "data.tgt_lang=de")
    assert 'dataset = "file"' in data and 'src_lang = "en"' in data and 'tgt_lang = "de"' in data
    (tmp_path / "t.en").write_text("a\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("b\n", encoding="utf-8")
    data = _config_data(capsys, "--data", f"{tmp_path / 't.en'},{tmp_path / 't.de'}")  # languages from the suffixes
    assert 'dataset = "file"' in data and 'src_lang = "en"' in data and 'tgt_lang = "de"' in data
    for fra_eng in (tmp_path / "fra-eng.zip", tmp_path / "fra.txt", tmp_path):
        assert 'dataset = "fra-eng"' in _config_data(capsys, "--data", fra_eng)
    assert 'dataset = "fra-eng"' in _config_data(capsys, "--data", tsv, "--dataset", "fra-eng")  # named: kept
    assert main(["config", "--model", "transformer", "--data", str(tsv)]) == 2  # no languages: one line
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs its languages" in err and "--dataset fra-eng" in err
