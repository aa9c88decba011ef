"""The numbers task accepts numbers as people type them (#18 item 11): `twenty one` is the `twenty-one`
the model learned, and `nine thousand nine hundred` the task's `nine thousand , nine hundred`."""

from __future__ import annotations

import pytest
from num2words import num2words

from attnlab.data.corpus import numbers_canonical
from attnlab.data.text import preprocess
from attnlab.translator import Translator


@pytest.mark.parametrize("k", [*range(0, 130), *range(130, 100_000, 37), 1005, 1100, 21_345, 99_999])
def test_typed_numbers_become_the_tasks_spelling(k):
    task = preprocess(num2words(k, lang="en"))  # what numbers_pairs trains on
    typed = task.replace("-", " ").replace(" ,", "")  # no hyphens, no commas
    assert numbers_canonical(typed) == task
    assert numbers_canonical(task) == task  # already in the task's form: unchanged


def test_other_text_is_only_preprocessed():
    for text in ("I'm home.", "one and two", "thousand", "forty", "twenty twenty", "he's calm ."):
        assert numbers_canonical(text) == " ".join(preprocess(text).split())


def test_a_numbers_run_reads_typed_numbers_as_its_own(tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"), device="cpu")
    assert tr.encode_source("twenty one") == tr.encode_source("twenty-one")
    assert tr.encode_source("nine thousand nine hundred and ninety nine") == tr.encode_source(
        "nine thousand , nine hundred and ninety-nine")
    assert tr.translate("twenty one") == tr.translate("twenty-one")
