"""One alignment verdict: `explain`, `doctor`, the demo, `attention`, the web page and the training timeline say
the same thing about the same run (evaluation/alignment.py; the notes' table of §1 on `i'm home .`)."""

from __future__ import annotations

import pytest

from attnlab.data.pairs import pair_of
from attnlab.evaluation.alignment import AlignmentCheck, check_result
from attnlab.translator import Translator


@pytest.mark.slow
def test_every_verdict_on_one_run_agrees(notes_run, tmp_path, capsys):
    from attnlab import cli, demo
    from attnlab.analysis.diagnose import doctor
    from attnlab.analysis.explain import sentence as explain
    from attnlab.runs.checkpoint import resolve_checkpoint
    from attnlab.runs.probes import read_probes

    tr = Translator.from_run(notes_run)  # `best`, every command's default
    expected = check_result(tr.attention("i'm home ."), pair_of(tr.cfg.data))
    assert expected is not None and expected.formed is not None and expected.judged == 6  # je suis chez moi . <eos>: the whole table
    said = expected.summary()

    report = explain.run(tr, "i'm home .")
    assert report.depends.check == expected and report.format().count(said) == 1

    result, depends = demo.attention_report(tr, "i'm home .")
    assert depends.check == expected and said in depends.format()
    assert depends.attribution is not None and depends.attribution.steps == 16  # the IG row beside the map

    f = doctor.run(notes_run).finding("attention_not_formed")
    assert f.checked and f.detected is (not expected.formed) and said in f.evidence[0]

    assert cli.main(["attention", str(notes_run), "i'm home .", "--formats", "png", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.count(said) == 1

    best = int(resolve_checkpoint(notes_run, "best").name.removeprefix("step-"))
    probe = next(s for s in read_probes(notes_run)["sentences"] if s["sentence"] == "i'm home .")
    recorded = next(r for r in probe["steps"] if r["step"] == best)
    assert AlignmentCheck.from_json(recorded["alignment"]) == expected  # the timeline's frame of that step

    pytest.importorskip("fastapi", reason="the web extra is not installed")
    from fastapi.testclient import TestClient

    from attnlab.web.app import create_app

    with TestClient(create_app([f"notes={notes_run}"]), base_url="http://127.0.0.1") as c:
        d = c.post("/api/translate", json={"text": "i'm home .", "run": "notes"}).json()
    assert AlignmentCheck.from_json(d["alignment"]) == expected and d["alignment"]["summary"] == said


def test_each_timeline_frame_of_the_example_carries_the_verdict_recorded_with_it(notes_run):
    from attnlab.maps import timeline_frames
    from attnlab.runs.probes import read_probes

    probes = {s["sentence"]: s["steps"] for s in read_probes(notes_run)["sentences"]}
    _, frames = timeline_frames(notes_run, "i'm home .")
    marks = [("✓" in f.caption, "✗" in f.caption) for f in frames]
    recorded = [(r.get("alignment") or {}).get("formed") for r in probes["i'm home ."]]
    assert marks == [(v is True, v is False) for v in recorded] and recorded[-1] is not None
    assert all("alignment" not in r for r in probes["he's calm ."])  # no table for the other probes
    assert all("✓" not in f.caption and "✗" not in f.caption for f in timeline_frames(notes_run, "he's calm .")[1])
