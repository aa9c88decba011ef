"""The decoding options on the command line: a trailing decode.key=value is applied, never translated;
another section's key or an unknown one is one error line; --nbest --format tsv/jsonl print every
hypothesis with its rank and score, sorted and equal to translate_full's; the options reach evaluate,
whose --output keeps the hypotheses."""

from __future__ import annotations

import json
import shutil

import pytest

from attnlab.cli import main
from attnlab.translator import Translator


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_a_trailing_decode_setting_is_applied_not_translated(tiny_runs, capsys):
    run = str(tiny_runs("transformer"))
    assert main(["translate", run, "--beam", "4", "--format", "jsonl", "decode.length_penalty=0", "twenty one"]) == 0
    rows = jsonl(capsys.readouterr().out)
    assert len(rows) == 1 and rows[0]["line"] == 1  # one sentence: the setting was not translated
    assert rows[0]["score"] == rows[0]["log_prob"]  # alpha 0: no length normalisation
    assert main(["translate", run, "decode.length_penalty=0.6", "twenty one", "seven"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize(("setting", "needle"), [
    ("model.num_layers=3", "only decode.* settings apply"),
    ("decode.lenght_penalty=0.6", "valid keys in [decode]"),
    ("decode.temperature=0.5", "decode.sampling=true"),
])
def test_a_setting_that_cannot_apply_is_one_error_line(tiny_runs, capsys, setting, needle):
    assert main(["translate", str(tiny_runs("transformer")), setting, "twenty one"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0], err


def test_nbest_scores_are_sorted_and_equal_translate_full(tiny_runs, capsys):
    run = tiny_runs("transformer")
    sentences = ["twenty one", "three hundred and five"]
    assert main(["translate", str(run), "--beam", "4", "--nbest", "3", "--format", "jsonl", *sentences]) == 0
    rows = jsonl(capsys.readouterr().out)
    full = Translator.from_run(run).translate_full(sentences, beam_size=4, nbest=3)
    assert [(r["line"], r["rank"]) for r in rows] == [(i, k) for i in (1, 2) for k in (1, 2, 3)]
    for i, hyps in enumerate(full, 1):
        mine = [r for r in rows if r["line"] == i]
        assert [r["score"] for r in mine] == sorted((r["score"] for r in mine), reverse=True)
        assert [(r["text"], r["score"], r["log_prob"], r["tokens"], r["length"]) for r in mine] == [
            (h.text, h.normalized_score, h.score, h.tokens, len(h.tokens)) for h in hyps]
    assert main(["translate", str(run), "--beam", "4", "--nbest", "3", "--format", "tsv", *sentences]) == 0
    tsv = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(int(c[0]), int(c[1]), round(float(c[2]), 4), int(c[3]), c[4]) for c in tsv] == [
        (r["line"], r["rank"], round(r["score"], 4), r["length"], r["text"]) for r in rows]


def test_the_length_options_cap_the_output(tiny_runs, capsys):
    run = str(tiny_runs("transformer"))
    assert main(["translate", run, "--beam", "4", "--length-penalty", "5", "--max-len-a", "0", "--max-len-b", "2",
                 "--format", "jsonl", "three hundred and five", "one thousand two hundred"]) == 0
    assert all(r["length"] + r["finished"] <= 2 for r in jsonl(capsys.readouterr().out))


def test_evaluate_takes_the_options_and_keeps_its_hypotheses(tiny_runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs("transformer"), run)
    out = tmp_path / "hyp.txt"
    assert main(["evaluate", str(run), "--max-sentences", "6", "--quiet", "--output", str(out),
                 "--max-len-a", "0", "decode.max_len_b=2"]) == 0
    hyps = out.read_text(encoding="utf-8").splitlines()
    # the report is named by the settings that differ from the run's: it never replaces eval-test.json
    (kept,) = run.glob("hyps-test-*.txt")
    assert kept.name == "hyps-test-first6-max-len-a0.0-max-len-b2.txt"
    assert hyps == kept.read_text(encoding="utf-8").splitlines()  # the sources' order
    assert all(len(h.split()) <= 2 for h in hyps)
    capsys.readouterr()
    assert main(["evaluate", str(run), "hello"]) == 2
    assert "is not a setting" in capsys.readouterr().err


def test_export_keeps_the_decode_settings_it_is_given(tiny_runs, tmp_path, capsys):
    run, out = str(tiny_runs("transformer")), tmp_path / "exp"
    assert main(["export", run, str(out), "--beam", "4", "decode.length_penalty=0.6"]) == 0
    spec = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert (spec["config"]["decode"]["beam_size"], spec["config"]["decode"]["length_penalty"]) == (4, 0.6)
    assert Translator.from_run(out).cfg.decode.beam_size == 4  # the export's default beam
    capsys.readouterr()
    assert main(["export", run, str(tmp_path / "exp2"), "model.num_layers=3"]) == 2
    assert "only decode.* settings apply" in capsys.readouterr().err
    assert not (tmp_path / "exp2").exists()
