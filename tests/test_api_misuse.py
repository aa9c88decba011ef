"""Notebook API misuse: one clear error naming the argument, the value and the rule (an AttnlabError, and a
ValueError or TypeError as Python's own would be), never a torch allocation error, a silent default or a traceback
from deep inside."""

from __future__ import annotations

import pytest

import attnlab
from attnlab.errors import ArgumentError, ArgumentTypeError, AttnlabError


@pytest.fixture(scope="module")
def tr(tiny_runs):
    return attnlab.load(tiny_runs("transformer"), device="cpu")


CASES = {  # name -> (call, error class, what the message must say)
    "beam huge": (lambda t: t.translate("twenty one", beam_size=10**6), ArgumentError,
                  ("beam_size=1000000", "target vocabulary", "or less")),
    "beam 0": (lambda t: t.translate("twenty one", beam_size=0), ArgumentError, ("beam_size=0", "at least 1")),
    "beam 1.5": (lambda t: t.translate("twenty one", beam_size=1.5), ArgumentTypeError,
                 ("beam_size=1.5", "whole number")),
    "beam True": (lambda t: t.translate_full(["one"], beam_size=True), ArgumentTypeError, ("beam_size=True",)),
    "nbest 0": (lambda t: t.translate_full(["one"], nbest=0), ArgumentError, ("nbest=0", "at least 1")),
    "max_len 0": (lambda t: t.translate_full("twenty one", max_len=0), ArgumentError, ("max_len=0", "at least 1")),
    "max_len -5": (lambda t: t.translate_full("twenty one", max_len=-5), ArgumentError, ("max_len=-5",)),
    "length_penalty nan": (lambda t: t.translate("one", length_penalty=float("nan")), ArgumentError,
                           ("length_penalty=nan", "finite")),
    "attention None": (lambda t: t.attention(None), ArgumentTypeError, ("attention()", "NoneType", "str")),
    "attention extra_pad -1": (lambda t: t.attention("one", extra_pad=-1), ArgumentError, ("extra_pad=-1",)),
    "attention extra_pad huge": (lambda t: t.attention("one", extra_pad=10**9), ArgumentError,
                                 ("extra_pad=1000000000", "or less")),
    "attention max_len 0": (lambda t: t.attention("one", max_len=0), ArgumentError, ("max_len=0",)),
    "attention beam 0": (lambda t: t.attention("one", beam_size=0), ArgumentError, ("beam_size=0",)),
    "load None": (lambda t: attnlab.load(None), ArgumentTypeError, ("run folder", "NoneType")),
    "load which None": (lambda t: attnlab.load(t.run_dir, which=None), ArgumentTypeError, ("which=None",)),
    "a megabyte value": (lambda t: t.translate("one", beam_size="x" * 10**6), ArgumentTypeError,
                         ("characters)",)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_misuse_is_one_clear_error(case, tr):
    """Pass: the call raises the named AttnlabError subclass (a ValueError; a TypeError for a wrong type) with one
    short line naming the argument and the value."""
    call, cls, needles = CASES[case]
    with pytest.raises(cls) as caught:
        call(tr)
    e = caught.value
    assert isinstance(e, AttnlabError) and isinstance(e, ValueError)
    assert isinstance(e, TypeError) == (cls is ArgumentTypeError)
    message = str(e)
    assert "\n" not in message and len(message) < 300, message
    for needle in needles:
        assert needle in message, message


def test_good_values_still_work(tr):
    """Pass: the checks refuse nothing valid: None means the run's default, numpy integers count as whole numbers,
    max_len=1 gives at most one token, the largest beam is the target vocabulary's size."""
    import numpy as np

    assert tr.translate("twenty one", beam_size=None) == tr.translate("twenty one", beam_size=np.int64(1))
    assert len(tr.translate_full("twenty one", max_len=1)[0].tokens) <= 1
    assert isinstance(tr.translate("one", beam_size=len(tr.tgt_tok)), str)
    assert tr.attention("one", extra_pad=0).src_tokens[-1] == "<eos>"
