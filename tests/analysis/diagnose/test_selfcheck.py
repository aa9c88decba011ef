"""`attnlab selfcheck` answers through the report protocol (its checks: tests/cli/test_views.py)."""

from __future__ import annotations

import json

from attnlab.analysis.diagnose import selfcheck
from attnlab.analysis.report import Report
from attnlab.translator import Translator


def test_run_answers_through_the_report_protocol(tiny_runs):
    run = tiny_runs("transformer")
    report = selfcheck.run(Translator.from_run(run), ["twenty one", "three hundred and forty two"])
    assert isinstance(report, Report) and report.passed and report.figure() is None
    text = report.format()
    assert text.startswith(f"selfcheck of {run} (transformer, checkpoint step-") and "from the sentences given" in text
    assert text.count("PASS") == 5 and "all 5 checks passed" in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["passed"] is True and len(data["results"]) == 5 and data["sentences"][0] == "twenty one"


def test_without_sentences_it_takes_the_runs_valid_split(tiny_runs):
    report = selfcheck.run(Translator.from_run(tiny_runs("transformer")), n=3)
    assert report.source == "the run's valid split" and len(report.sentences) == 3
