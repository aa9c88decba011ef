"""Small things a learner reads: the evaluation's progress counts the sentences its report counts, a bad
ATTNLAB_LANG is not echoed back whole, and an export's hint tries a sentence in the model's source language."""

from __future__ import annotations

import shutil

import pytest

from attnlab import i18n
from attnlab.cli import main


def test_evaluate_progress_counts_the_empty_lines_too(tiny_runs, tmp_path, capsys, english_only):
    """Pass: with an empty line among 4 --src lines, the progress ends at 4/4 beside the report's 4 sentences."""
    run = shutil.copytree(tiny_runs("transformer"), tmp_path / "run")
    src = tmp_path / "src.txt"
    src.write_text("twenty one\n\nthree\nfive\n", encoding="utf-8")
    assert main(["evaluate", str(run), "--src", str(src), "--ref", str(src)]) == 0
    out, err = capsys.readouterr()
    assert "4 sentences" in out
    assert "4/4" in err and "3/3" not in err, err


def test_a_huge_attnlab_lang_is_not_echoed_whole(monkeypatch, english_only, capsys):
    """Pass: ATTNLAB_LANG of 100,000 characters gives one short error line that says how long the value was."""
    monkeypatch.setenv(i18n.ENV_VAR, "x" * 100_000)
    assert main(["params", "--model", "transformer", "--src-vocab", "10", "--tgt-vocab", "10"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 200 and "100,000 characters" in err and "en, zh" in err, err


def test_the_export_hint_speaks_the_source_language(tiny_runs, tmp_path, capsys):
    """Pass: a numbers run's export hint tries the numbers task's example, not the notes' English sentence."""
    pytest.importorskip("ctranslate2")
    assert main(["export", str(tiny_runs("transformer")), str(tmp_path / "out"), "--format", "ctranslate2"]) == 0
    hint = capsys.readouterr().out.strip().splitlines()[-1]
    assert hint.endswith("--engine ctranslate2 twenty-one") and "i'm home" not in hint, hint
