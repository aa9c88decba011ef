"""Every analysis command shows its report through `cli.present`, and its files are named by what was asked:
the same command with another sentence count, other runs or other overrides writes other files, never over
the first one's (a rerun with the same settings may replace)."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main


def _wrote(out: str) -> list[str]:
    return [line.removeprefix("wrote ") for line in out.splitlines() if line.startswith("wrote ")]


def test_heads_with_other_sentences_keeps_both_reports(tiny_runs, tmp_path, capsys):
    run, out = tiny_runs("transformer"), tmp_path / "h"
    for n in (3, 4):
        assert main(["heads", str(run), "--sentences", str(n), "--no-importance", "--save-dir", str(out),
                     "--quiet"]) == 0
    printed = _wrote(capsys.readouterr().out)
    reports = sorted(out.glob("*.json"))
    assert len(reports) == 2, printed
    assert sorted(json.loads(p.read_text())["sentences"] for p in reports) == [3, 4]
    assert len(list(out.glob("*.md"))) == 2 and len(list(out.glob("*_cross.png"))) == 2
    assert sorted(printed) == sorted(str(p) for p in out.iterdir())  # every file written is said, once


@pytest.mark.slow  # each comparison times decoding
def test_compare_of_other_runs_or_sentences_keeps_every_comparison(tiny_runs, tmp_path, capsys):
    t, b, s = tiny_runs("transformer"), tiny_runs("bahdanau"), tiny_runs("seq2seq")
    out = tmp_path / "cmp"
    for runs, n in (([t, b], 4), ([t, s], 4), ([t, b], 5)):
        assert main(["compare", *map(str, runs), "--sentences", str(n), "--save-dir", str(out), "--quiet",
                     "--timing-cap", "0.1"]) == 0
    capsys.readouterr()
    seen = {(tuple(r["kind"] for r in d["runs"]), d["scored_on"])
            for d in (json.loads(p.read_text()) for p in out.glob("*.json"))}
    assert len(seen) == 3, seen


def test_params_with_other_overrides_keeps_both_figures(tmp_path, capsys):
    base = ["params", "--model", "transformer", "--src-vocab", "100", "--tgt-vocab", "120", "--save-dir",
            str(tmp_path), "--formats", "png"]
    for width in (32, 64):
        assert main([*base, f"model.num_hiddens={width}", "model.num_layers=1"]) == 0
    assert main(base) == 0  # the preset alone: no override in its name
    printed = _wrote(capsys.readouterr().out)
    assert len(set(printed)) == 3 and len(list(tmp_path.glob("*.png"))) == 3
    assert (tmp_path / "params_transformer-src100-tgt120.png").is_file()


def test_stem_is_plain_for_defaults_and_names_every_other_setting():
    from attnlab.cli.present import stem

    assert stem("heads") == "heads" and stem("heads", sentences=None, checkpoint="best") == "heads"
    assert stem("heads", sentences=8, checkpoint="last") == "heads-sentences8-last"
    assert stem("", sentence="go", beam=4) == "go-beam4"  # attention's and explain's names, as before
    a, b = (stem("params_transformer", text=[f"model.num_hiddens={w}"]) for w in (32, 64))
    assert a != b and a.startswith("params_transformer-model-num-hiddens-32")
