"""fra-eng: finding, parsing and clear errors; the numbers task; splits by source; prepare()."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import random
import zipfile
from pathlib import Path

import pytest

from attnlab.config import DataConfig
from attnlab.data import corpus, download, numbers
from attnlab.data.corpus import prepare, read_pairs, split_by_source
from attnlab.data.download import locate_fra_eng
from attnlab.data.numbers import numbers_pairs
from attnlab.data.pairs import pair_of
from attnlab.data.text import preprocess
from attnlab.data.vocab import EOS, UNK, Vocab
from attnlab.errors import AttnlabError, CorpusError

SAMPLE = "Go.\tVa !\nI'm home.\tJe suis chez moi.\nI'm home.\tJe suis à la maison.\nRun!\tCours\u202f!\n"
SAMPLE3 = "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #1158250 (Wittydev)\n"


def make_zip(path: Path, text: str | bytes, member: str = "fra-eng/fra.txt") -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, text)
        zf.writestr("fra-eng/_about.txt", "about")
    return path


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No $ATTNLAB_DATA_DIR, an empty private cache, no download."""
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")
    return tmp_path


# ----------------------------------------------------------------------------------------------
# locate_fra_eng


def test_locate_order_option_then_env_then_cache(isolated, monkeypatch):
    opt = isolated / "opt"
    env = isolated / "env"
    cache = isolated / "xdg" / "attnlab"
    for d in (opt, env, cache):
        d.mkdir(parents=True)
        make_zip(d / "fra-eng.zip", SAMPLE)
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(env))
    assert locate_fra_eng(opt) == opt / "fra-eng.zip"
    assert locate_fra_eng(opt / "fra-eng.zip") == opt / "fra-eng.zip"
    assert locate_fra_eng(None) == env / "fra-eng.zip"
    (opt / "fra-eng.zip").unlink()
    assert locate_fra_eng(opt) == env / "fra-eng.zip"  # an existing folder without the corpus falls through
    monkeypatch.delenv("ATTNLAB_DATA_DIR")
    assert locate_fra_eng(None) == cache / "fra-eng.zip"
    assert download.cache_dir() == cache


def test_locate_finds_bare_fra_txt_in_a_folder(isolated):
    (isolated / "d" / "fra-eng").mkdir(parents=True)
    (isolated / "d" / "fra-eng" / "fra.txt").write_text(SAMPLE, encoding="utf-8")
    assert locate_fra_eng(isolated / "d") == isolated / "d" / "fra-eng" / "fra.txt"


def test_locate_nothing_found_is_one_line_naming_every_place(isolated, monkeypatch):
    empty = isolated / "empty"
    empty.mkdir()
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(isolated / "also-empty"))
    with pytest.raises(CorpusError) as err:
        locate_fra_eng(empty)
    msg = str(err.value)
    assert "\n" not in msg and isinstance(err.value, AttnlabError)
    for place in (
        str(empty),
        "ATTNLAB_DATA_DIR",
        str(isolated / "xdg" / "attnlab"),
        "ATTNLAB_OFFLINE",
        "--data",
    ):
        assert place in msg


def test_locate_typo_in_explicit_path_is_an_error(isolated):
    with pytest.raises(CorpusError, match="does not exist"):
        locate_fra_eng(isolated / "no-such.zip")


def test_download_keeps_only_a_verified_file(isolated, monkeypatch):
    payload = make_zip(isolated / "remote.zip", SAMPLE).read_bytes()
    requested = []

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def urlopen(url, timeout):
        requested.append((url, timeout))
        return Response(payload)

    monkeypatch.setattr(download.urllib.request, "urlopen", urlopen)
    monkeypatch.setenv("ATTNLAB_OFFLINE", "0")
    target = isolated / "xdg" / "attnlab" / "fra-eng.zip"
    # the real checksum does not match our fake payload: refused and not kept
    with pytest.raises(CorpusError, match="sha256"):
        locate_fra_eng(None)
    assert not target.exists() and not list(target.parent.glob("*"))
    assert (
        requested[0][0] == "https://d2l-data.s3-accelerate.amazonaws.com/fra-eng.zip" and requested[0][1] <= 30
    )
    monkeypatch.setattr(download, "FRA_ENG_SHA256", hashlib.sha256(payload).hexdigest())
    assert locate_fra_eng(None) == target
    assert target.read_bytes() == payload
    assert read_pairs(target)[0] == ("Go.", "Va !")
    assert locate_fra_eng(None) == target and len(requested) == 2  # cached: no new download


def test_failed_download_is_reported(isolated, monkeypatch):
    def refuse(url, timeout):
        raise download.urllib.error.URLError("no network")

    monkeypatch.setattr(download.urllib.request, "urlopen", refuse)
    monkeypatch.setenv("ATTNLAB_OFFLINE", "0")
    with pytest.raises(CorpusError, match="download from https://d2l-data.*no network"):
        locate_fra_eng(None)


# ----------------------------------------------------------------------------------------------
# read_pairs


def test_read_pairs_formats(tmp_path):
    expected = [
        ("Go.", "Va !"),
        ("I'm home.", "Je suis chez moi."),
        ("I'm home.", "Je suis à la maison."),
        ("Run!", "Cours\u202f!"),
    ]
    assert read_pairs(make_zip(tmp_path / "a.zip", SAMPLE)) == expected
    assert read_pairs(make_zip(tmp_path / "b.zip", SAMPLE, member="fra.txt")) == expected
    assert read_pairs(make_zip(tmp_path / "c.zip", SAMPLE, member="other/fra.txt")) == expected
    (tmp_path / "fra.txt").write_bytes(("\ufeff" + SAMPLE.replace("\n", "\r\n") + "\n").encode())
    assert read_pairs(tmp_path / "fra.txt") == expected  # BOM, CRLF and a blank line are fine
    (tmp_path / "three.txt").write_text(SAMPLE3, encoding="utf-8")
    assert read_pairs(tmp_path / "three.txt") == [("Go.", "Va !")]  # manythings' attribution column


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", r"empty\.txt holds no sentence pairs"),
        (b"Go.\tVa !\nHello\n", r"bad\.txt line 2: expected 2 or 3 tab-separated columns .* got 1"),
        (b"Go.\tVa !\na\tb\tc\td\n", r"bad\.txt line 2: .* got 4"),
        (b"Go.\tVa !\nGo.\t\n", r"bad\.txt line 2: the French side is empty"),
        (b"Go.\tVa !\nCaf\xe9\tCaf\xe9\n", r"bad\.txt line 2: byte 0xe9 at column 4 is not UTF-8"),
    ],
)
def test_read_pairs_errors_name_file_and_line(tmp_path, content, match):
    name = "empty.txt" if not content else "bad.txt"
    (tmp_path / name).write_bytes(content)
    with pytest.raises(CorpusError, match=match) as err:
        read_pairs(tmp_path / name)
    assert "\n" not in str(err.value)


def test_read_pairs_corrupt_archives(tmp_path):
    whole = make_zip(tmp_path / "whole.zip", SAMPLE * 50).read_bytes()
    (tmp_path / "truncated.zip").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CorpusError, match=r"truncated\.zip is not a readable zip"):
        read_pairs(tmp_path / "truncated.zip")
    rnd = random.Random(0)
    (tmp_path / "random.bin").write_bytes(bytes(rnd.randrange(256) for _ in range(4096)))
    with pytest.raises(CorpusError, match=r"random\.bin line \d+"):
        read_pairs(tmp_path / "random.bin")
    (tmp_path / "random.zip").write_bytes(bytes(rnd.randrange(256) for _ in range(4096)))
    with pytest.raises(CorpusError, match=r"random\.zip is not a readable zip"):
        read_pairs(tmp_path / "random.zip")
    # flip bytes inside the compressed member: CRC or deflate error, still a CorpusError
    damaged = bytearray(whole)
    for k in range(60, 90):
        damaged[k] ^= 0xFF
    (tmp_path / "damaged.zip").write_bytes(bytes(damaged))
    with pytest.raises(CorpusError, match=r"damaged\.zip"):
        read_pairs(tmp_path / "damaged.zip")
    with zipfile.ZipFile(tmp_path / "nofra.zip", "w") as zf:
        zf.writestr("README", "x")
    with pytest.raises(CorpusError, match="no fra.txt"):
        read_pairs(tmp_path / "nofra.zip")
    bad_member = make_zip(tmp_path / "badmember.zip", b"Go.\tVa !\nonly one column\n")
    with pytest.raises(CorpusError, match=r"badmember\.zip:fra-eng/fra\.txt line 2"):
        read_pairs(bad_member)
    with pytest.raises(CorpusError, match="is a folder without"):
        read_pairs(tmp_path)


def test_read_pairs_full_corpus(fra_eng_zip):
    import time

    t0 = time.perf_counter()
    pairs = read_pairs(fra_eng_zip)
    elapsed = time.perf_counter() - t0
    assert len(pairs) == 167_130
    assert pairs[0] == ("Go.", "Va !")
    assert len({en for en, _ in pairs}) == 116_830  # the count of distinct English sentences
    assert elapsed < 3.0  # ~0.3 s on a loaded 2-core machine; generous for CI


# ----------------------------------------------------------------------------------------------
# numbers


def test_numbers_task_is_deterministic_and_distinct():
    a = numbers_pairs(500, seed=3)
    assert a == numbers_pairs(500, seed=3)
    assert a != numbers_pairs(500, seed=4)
    assert len({en for en, _ in a}) == 500
    assert all(en == preprocess(en) and fr == preprocess(fr) for en, fr in a)
    # every digit count is represented: short numbers are not drowned out
    assert ("seven", "sept") in a or any(len(en.split()) == 1 for en, _ in a)
    assert sum(en.count("thousand") == 0 for en, _ in a) >= 100
    assert numbers_pairs(10, seed=0) != numbers_pairs(10, seed=1)
    with pytest.raises(ValueError):
        numbers_pairs(100_001)


def test_numbers_words_are_num2words_as_people_type_them():
    from num2words import num2words

    # English: num2words' words and its "and", without its hyphens and comma (#18 item 11), so the task
    # reads "twenty one" as it is typed; French: num2words as it is (the model writes it, nobody types it).
    assert num2words(21345, lang="en") == "twenty-one thousand, three hundred and forty-five"
    assert numbers._number_words(21345) == (
        "twenty one thousand three hundred and forty five",
        preprocess(num2words(21345, lang="fr")),
    )
    assert numbers._number_words(80) == ("eighty", "quatre-vingts")
    assert numbers._number_words(1005) == ("one thousand and five", "mille cinq")


# ----------------------------------------------------------------------------------------------
# split_by_source


def _pairs_with_repeats(n_sources: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for k in range(n_sources):
        for j in range(rng.randint(1, 3)):
            pairs.append((f"Sentence {k}.", f"Phrase {k} numéro {j}."))
    return pairs


def test_split_is_disjoint_stable_and_order_independent():
    pairs = _pairs_with_repeats(3000, seed=0)
    a = split_by_source(pairs, 0.1, 0.2)
    assert sorted(a["train"] + a["valid"] + a["test"]) == list(range(len(pairs)))
    sources = {name: {preprocess(pairs[i][0]) for i in idx} for name, idx in a.items()}
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]
    assert a == split_by_source(pairs, 0.1, 0.2)  # stable across calls
    n = len({p[0] for p in pairs})
    assert abs(len(sources["test"]) - 0.2 * n) < 0.05 * n and abs(len(sources["valid"]) - 0.1 * n) < 0.05 * n
    shuffled = pairs[:]
    random.Random(1).shuffle(shuffled)
    b = split_by_source(shuffled, 0.1, 0.2)
    assert {name: {shuffled[i][0] for i in idx} for name, idx in b.items()} == {
        name: {pairs[i][0] for i in idx} for name, idx in a.items()
    }
    # a source's split does not depend on the other sentences, and uses the preprocessed text
    only = split_by_source([("SENTENCE 7 .", "x"), ("Sentence 7.", "y")], 0.1, 0.2)
    assert [name for name, idx in only.items() if idx] == [
        n for n, s in sources.items() if "sentence 7 ." in s
    ]


def test_a_metaspace_source_splits_as_its_unmarked_tokens():
    """The metaspace rule's word-start marks do not move a sentence to another split: hashed with them, every
    English source of a small own corpus re-drew and none fell in the test split (evaluate had nothing)."""
    marked = [("\u2581I \u2581like \u2581cats .", "x"), ("\u2581We \u2581want \u2581books .", "y"),
              ("\u2581He \u2581sees \u2581tea .", "z"), ("\u2581Go .", "w")]
    plain = [(src.replace("\u2581", ""), tgt) for src, tgt in marked]
    for frac in (0.2, 0.4):
        assert split_by_source(marked, frac, frac, preprocessed=True) == split_by_source(
            plain, frac, frac, preprocessed=True)


def test_split_is_pinned():
    # Changing the hash or salt silently re-draws every test set; this pins it.
    got = split_by_source(
        [("I'm home.", "x"), ("Go.", "y"), ("He's calm.", "z"), ("I lost.", "w")], 0.25, 0.25
    )
    assert got == split_by_source(
        [("i'm home .", "x"), ("go .", "y"), ("he's calm .", "z"), ("i lost .", "w")],
        0.25,
        0.25,
        preprocessed=True,
    )
    assert (
        corpus._bucket("i'm home .")
        == int.from_bytes(hashlib.sha256(b"attnlab-split-v1\x00i'm home .").digest()[:8], "big") / 2**64
    )


# ----------------------------------------------------------------------------------------------
# prepare


def test_prepare_numbers_truncates_and_counts(isolated):
    cfg = DataConfig(dataset="numbers", numbers_size=600, num_steps=6, min_freq=1, batch_tokens=64)
    p = prepare(cfg)
    st = p.stats
    assert st["pairs_read"] == st["pairs_used"] == 600 and st["dropped_empty"] == 0
    assert sum(s["pairs"] for s in st["splits"].values()) == 600
    hist_src = st["length_histogram"]["src"]
    long_src = sum(c for k, c in enumerate(hist_src) if k > cfg.num_steps - 1)
    assert long_src > 0  # the setting really truncates
    assert sum(s["truncated_src"] for s in st["splits"].values()) == long_src
    for name, split in p.splits.items():
        assert len(split.src) == len(split.tgt) == len(split.src_text) == len(split.references)
        assert all(len(x) <= cfg.num_steps - 1 for x in split.src + split.tgt)
        assert all(EOS not in x for x in split.src)
        cut = sum(len(p.src_tok.encode(t)) > cfg.num_steps - 1 for t in split.src_text)
        assert st["splits"][name]["truncated_src"] == cut
    assert isinstance(p.src_tok, Vocab) and p.src_tok.lang == "en" and p.tgt_tok.lang == "fr"
    assert prepare(cfg).splits["test"].src_text == p.splits["test"].src_text  # deterministic


def test_prepare_builds_vocab_from_train_only_and_reuses_given_tokenizers(isolated, tmp_path):
    zpath = make_zip(tmp_path / "fra-eng.zip", "".join(f"Word{k} here.\tMot{k} ici.\n" for k in range(400)))
    cfg = DataConfig(data_path=str(zpath), min_freq=1, valid_frac=0.1, test_frac=0.1)
    p = prepare(cfg)
    train_words = {w for t in p.splits["train"].src_text for w in t.split()}
    assert set(p.src_tok.idx_to_token[4:]) == train_words
    test_only = {w for t in p.splits["test"].src_text for w in t.split()} - train_words
    assert test_only and p.stats["splits"]["test"]["unk_src"] == len(test_only)
    # a trained run passes its saved tokenizers: ids must come from them, not from a rebuild
    given = (Vocab(p.src_tok.idx_to_token[:6], "en"), p.tgt_tok)
    q = prepare(cfg, tokenizers=given)
    assert q.src_tok is given[0] and q.stats["vocab"]["src"] == 6
    assert all(i < 6 for x in q.splits["train"].src for i in x)


def test_prepare_bpe(isolated, tmp_path):
    zpath = make_zip(
        tmp_path / "fra-eng.zip", SAMPLE * 3 + "".join(f"Cat {k}.\tChat {k}.\n" for k in range(200))
    )
    p = prepare(DataConfig(data_path=str(zpath), tokenizer="bpe", bpe_vocab_size=100))
    assert p.stats["tokenizer"] == "bpe" and p.src_tok.kind == "bpe" and p.tgt_tok.lang == "fr"
    split = p.splits["train"]
    for ids, text in zip(split.tgt, split.tgt_text):
        assert preprocess(p.tgt_tok.decode(ids)) == text


def test_prepare_fr_en_swaps_sides_and_groups_references_by_the_french_source(isolated, tmp_path):
    zpath = make_zip(tmp_path / "fra-eng.zip", SAMPLE * 3 + "".join(f"Cat {k}.\tChat {k}.\n" for k in range(200)))
    cfg = DataConfig(data_path=str(zpath), direction="fr-en", min_freq=1, valid_frac=0.1, test_frac=0.1)
    assert pair_of(cfg).langs == ("fr", "en")
    fwd, rev = prepare(dataclasses.replace(cfg, direction="en-fr")), prepare(cfg)
    assert (rev.src_tok.lang, rev.tgt_tok.lang) == ("fr", "en")
    pairs = lambda p: {(s, t) for sp in p.splits.values() for s, t in zip(sp.src_text, sp.tgt_text)}
    assert pairs(rev) == {(t, s) for s, t in pairs(fwd)}  # every pair, its sides swapped
    assert rev.stats["distinct_sources"] == len({t for _, t in pairs(fwd)})  # one per distinct French sentence
    for split in rev.splits.values():  # a French source's references are its English translations
        for s, t, refs in zip(split.src_text, split.tgt_text, split.references):
            assert t in refs and set(refs) == {e for e, f in pairs(fwd) if f == s}
    home = [refs for sp in rev.splits.values() for s, refs in zip(sp.src_text, sp.references) if s.startswith("je suis")]
    assert home and all(refs == ["i'm home ."] for refs in home)


def test_fr_en_is_for_fra_eng_only():
    with pytest.raises(AttnlabError, match="data.direction=fr-en does not fit data.dataset=numbers, which reads en-fr"):
        pair_of(DataConfig(dataset="numbers", direction="fr-en"))
    with pytest.raises(AttnlabError, match="data.dataset=fra-eng, which reads en-fr, fr-en"):
        pair_of(DataConfig(direction="en-de"))
    with pytest.raises(AttnlabError, match="is not a direction; give source-target as two ISO 639-1 codes"):
        DataConfig(direction="english-french")


def test_prepare_missing_corpus_is_a_corpus_error(isolated):
    (isolated / "empty").mkdir()
    with pytest.raises(CorpusError, match="not found"):
        prepare(DataConfig(data_path=str(isolated / "empty")))


@pytest.mark.slow
def test_prepare_full_fra_eng(fra_eng_zip):
    import time

    t0 = time.perf_counter()
    p = prepare(DataConfig(data_path=str(fra_eng_zip)))
    elapsed = time.perf_counter() - t0
    st = p.stats
    assert st["pairs_read"] == st["pairs_used"] == 167_130
    assert st["distinct_sources"] == 116_827  # 116,830 raw; D2L preprocessing merges 3 spellings
    assert sum(s["sources"] for s in st["splits"].values()) == st["distinct_sources"]
    assert sum(st["length_histogram"]["src"]) == 167_130
    assert p.src_tok.encode("I'm home.")[-1] == 4  # "." is the most frequent token, as in the notes' §4
    test = p.splits["test"]
    # every test source keeps all its references: the corpus's translations of that source
    all_refs: dict[str, set[str]] = {}
    for en, fr in read_pairs(fra_eng_zip):
        all_refs.setdefault(preprocess(en), set()).add(preprocess(fr))
    for src, refs, tgt in zip(test.src_text, test.references, test.tgt_text):
        assert set(refs) == all_refs[src] and tgt in refs
    assert len(test.unique_sources()) == st["splits"]["test"]["sources"]
    assert test.src[0] and UNK not in p.src_tok.encode("I'm home.")
    print(f"prepare(fra-eng, word) took {elapsed:.2f} s")
    assert elapsed < 20.0  # ~3 s on a loaded 2-core machine


def test_environment_is_offline_for_tests():
    assert os.environ.get("ATTNLAB_OFFLINE") == "1"
