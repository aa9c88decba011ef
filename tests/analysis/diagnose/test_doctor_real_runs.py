"""The doctor's verdicts on real fra-eng runs, one bad setting each (fixtures/doctor/README.md).

No training here: the folders hold what those runs wrote (config, meta, metrics, probes).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab.analysis.diagnose import doctor as D
from attnlab.cli import main

RUNS = Path(__file__).parent / "fixtures" / "doctor"


def verdict(name):
    report = D.run(RUNS / name)
    return report, {f.symptom for f in report.detected}


def test_lr_1e_5_is_too_low_and_raised_not_lowered():
    report, seen = verdict("lr1e-5")
    assert seen == {"lr_too_low"}, report.format()
    f = report.finding("lr_too_low")
    assert f.suggestion.startswith("train.lr=0.0001 ")  # ×10, not the old "lower it to 3.3e-6"
    assert f.numbers["fall_share"] < D.SLOW_FALL_SHARE
    # unfinished and no attention yet: consequences of the lr, shown but not counted
    assert report.finding("undertrained").caused_by == "lr_too_low"
    # it translates `i'm home .` as nothing: its one row, <eos>, looks at `.`, not at <eos> as the whole table
    # says: not formed, a consequence of the lr like the rest
    f = report.finding("attention_not_formed")
    assert f.detected and f.caused_by == "lr_too_low" and "<eos> → ." in f.evidence[0]
    assert not report.healthy and any("too low to call" in m for m in report.missing)


def test_lr_1_is_too_high():
    report, seen = verdict("lr1.0")
    assert seen == {"lr_too_high"}, report.format()
    f = report.finding("lr_too_high")
    assert f.suggestion.startswith("train.lr=0.1 ")  # worse than the start: ÷10
    assert f.numbers["max_rise_share"] > D.RISE_SHARE and f.numbers["oscillation_share"] > D.OSCILLATION_SHARE


def test_one_minute_budget_is_undertrained_only():
    report, seen = verdict("budget1min")
    # judged on the whole table of §1, its map is not formed: je suis à la maison right, but `.` → home (the
    # verdict it recorded judged the words only, and said formed: the doctor reads the map again)
    assert seen == {"undertrained", "attention_not_formed"}, report.format()
    assert "--max-minutes 2" in report.finding("undertrained").suggestion
    assert report.finding("attention_not_formed").evidence[0].endswith("6 of 7 words look where the notes' table "
                                                                        "of §1 says (je, suis → i'm; à, la, maison → "
                                                                        "home; . → .; <eos> → <eos>); . → home")


def test_num_steps_6_is_truncation():
    report, seen = verdict("numsteps6")
    assert "num_steps_too_small" in seen and seen <= {"num_steps_too_small", "undertrained"}
    f = report.finding("num_steps_too_small")
    assert f.numbers["truncated_share"] > D.TRUNCATED_SHARE and f.suggestion.startswith("data.num_steps=")
    assert int(f.suggestion.split("=")[1].split()[0]) > 6


def test_good_15_minute_run_has_no_wrong_setting():
    # 1,618 updates, BLEU 45.6, still improving at the end: "train longer", nothing else;
    # 71 of 158,924 pairs cut and a weak 17+ bucket are a note, not "num_steps too small".
    # Its attention is judged by the one verdict (the notes' table on `i'm home .`, the last layer's heads
    # averaged), not by how much rows move: that map puts suis on `home`, so it has not formed, and the doctor
    # says what explain and the web page say of it. Still no wrong setting.
    report, seen = verdict("transformer-15min")
    assert seen == {"undertrained", "attention_not_formed"}, report.format()
    assert "suis → home" in report.finding("attention_not_formed").evidence[0]
    assert not {"lr_too_high", "lr_too_low", "overfitting", "num_steps_too_small"} & seen
    assert not report.missing
    assert any("harder, not truncated" in n for n in report.notes)


@pytest.mark.parametrize("name", ["lr1e-5", "lr1.0", "budget1min", "numsteps6", "transformer-15min"])
def test_cli_prints_one_verdict(name, capsys):
    assert main(["doctor", str(RUNS / name)]) == 0
    out = capsys.readouterr().out
    assert out.count("verdict: ") == 1 and "verdict: healthy" not in out


def test_sweep_trial_gets_the_doctors_verdict():
    from attnlab.analysis.experiments.sweep import _doctor

    assert _doctor(RUNS / "lr1e-5").startswith("lr too low → train.lr=0.0001")
    assert _doctor(RUNS / "lr1.0").startswith("lr too high → train.lr=0.1")
    assert _doctor(RUNS / "missing") == ""


def test_run_answers_through_the_report_protocol_in_the_language_asked():
    import json

    from attnlab import i18n
    from attnlab.analysis.report import Report

    report = D.run(RUNS / "lr1e-5")
    assert isinstance(report, Report) and report.figure() is None
    assert json.loads(json.dumps(report.to_json()))["verdict"] == report.verdict()
    assert report.short_verdict().startswith("lr too low → train.lr=0.0001")
    with i18n.using("zh"):
        title = i18n._(D.TITLES["lr_too_low"])
    assert title != D.TITLES["lr_too_low"]
    assert title in report.format("zh") and D.TITLES["lr_too_low"] in report.format()  # English again after
