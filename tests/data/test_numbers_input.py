"""The numbers task reads numbers as people type them (#18 item 11): `twenty one` is the task's own
spelling, and `twenty-one`, `one thousand, two hundred` or `three hundred forty two` read the same."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from num2words import num2words

from attnlab.analysis.diagnose.selfcheck import BUILTIN_SENTENCES
from attnlab.config import DataConfig
from attnlab.data.numbers import NUMBERS_MAX, _number_words, numbers_canonical, numbers_pairs, source_text
from attnlab.data.text import preprocess
from attnlab.data.vocab import UNK, Vocab
from attnlab.translator import Translator

numbers = st.integers(0, NUMBERS_MAX)
EDGES = (0, 21, 99, 100, 101, 121, 1000, 1005, 1100, 1234, 21_000, 21_005, 21_345, 90_900, 99_999)


def _typed(k: int) -> list[str]:
    """Ways to write ``k``: num2words' own (hyphens, comma), and with its hyphens, comma or "and" left out."""
    hyphenated = preprocess(num2words(k, lang="en"))
    return [
        hyphenated,
        hyphenated.replace("-", " "),
        hyphenated.replace(" ,", ""),
        " ".join(w for w in hyphenated.split() if w not in ("and", ",")),
        " ".join(w for w in hyphenated.replace("-", " ").split() if w not in ("and", ",")),
    ]


def _with_examples(test):
    for k in EDGES:
        test = example(k)(test)
    return test


@settings(max_examples=300, deadline=None)
@given(numbers)
@_with_examples
def test_every_way_of_writing_a_number_is_the_tasks_spelling(k):
    task = _number_words(k)[0]  # what numbers_pairs trains on
    assert "-" not in task and "," not in task  # as people type it
    assert numbers_canonical(task) == task  # already the task's spelling: unchanged
    for typed in _typed(k):
        assert numbers_canonical(typed) == task, typed
        # a run trained on num2words' hyphens gets its own spelling back
        assert numbers_canonical(typed, hyphens=True) == preprocess(num2words(k, lang="en")), typed


# "hundred", "thousand", "and", "," and hyphens, but never a number word after them: nothing to rewrite
OTHER_WORDS = ["I'm", "home", ".", "a", "hundred", "thousand", "and", ",", "people", "well-known", "he's", "!"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(OTHER_WORDS), max_size=8))
def test_text_without_number_words_is_only_preprocessed(words):
    text = " ".join(words)
    assert numbers_canonical(text) == preprocess(text)
    assert numbers_canonical(text, hyphens=True) == preprocess(text)


def test_the_task_trains_on_its_own_spelling():
    for en, _ in numbers_pairs(300, seed=2):
        assert numbers_canonical(en) == en and "-" not in en and "," not in en


def test_source_text_follows_the_runs_vocabulary():
    cfg = DataConfig(dataset="numbers")
    now = Vocab.build([_number_words(k)[0].split() for k in range(200)], lang="en")
    before = Vocab.build([preprocess(num2words(k, lang="en")).split() for k in range(200)], lang="en")
    assert source_text(cfg, "twenty-one", now) == "twenty one"
    assert source_text(cfg, "twenty one", before) == "twenty-one"  # a run trained on num2words' hyphens
    assert source_text(cfg, "one hundred forty two", None) == "one hundred and forty two"
    assert source_text(DataConfig(dataset="fra-eng"), "Twenty-one!", now) == "Twenty-one!"  # fra-eng: as given


@pytest.fixture(scope="module")
def numbers_run(tiny_runs):
    return Translator.from_run(tiny_runs("transformer"), device="cpu")


@settings(max_examples=60, deadline=None)
@given(numbers)
@_with_examples
def test_a_numbers_run_reads_every_spelling_of_a_number_the_same(numbers_run, k):
    tr = numbers_run
    task = tr.encode_source(_number_words(k)[0])
    assert task == (tr.src_tok.encode(_number_words(k)[0]), False)  # the task's spelling goes in as it is
    for typed in _typed(k):
        assert tr.encode_source(typed) == task, typed


def test_typed_numbers_translate_as_the_tasks_spelling(numbers_run):
    tr = numbers_run
    typed = ["twenty-one", "three hundred forty two", "nine thousand, nine hundred and ninety-nine"]
    task = ["twenty one", "three hundred and forty two", "nine thousand nine hundred and ninety nine"]
    assert tr.translate(typed) == tr.translate(task)
    res = tr.attention("twenty-one")
    assert res.src_tokens == ["twenty", "one", "<eos>"]  # the keys are the words the model read


def test_selfchecks_numbers_examples_are_the_tasks_spelling(numbers_run):
    task_words = {w for en, _ in numbers_pairs(3000) for w in en.split()}
    examples = [s for s in BUILTIN_SENTENCES if set(s.split()) <= task_words]
    assert len(examples) == 3  # twenty one, three hundred and forty two, nine thousand nine hundred and ninety nine
    for s in examples:
        assert numbers_canonical(s) == s
        assert UNK not in numbers_run.encode_source(s)[0], s
