"""Progress a program can read: plain lines at most every interval, JSON lines, no carriage returns."""

from __future__ import annotations

import io
import json
import sys

import pytest

from attnlab.progress import Progress, json_stderr, resolve_format


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def run(fmt: str, seconds: int = 60, per_second: int = 5, **kw) -> str:
    out, clock = io.StringIO(), Clock()
    p = Progress("train x", fmt, stream=out, clock=clock, interval_s=10, **kw)
    p.message("budget 1 min")
    for i in range(seconds * per_second):
        clock.t = i / per_second
        p.update(1, loss=2.5, lr=1e-3, tokens_per_s=1234.5)
        if i == 100:
            p.event("valid", "step 101: valid loss 2.000  BLEU 10.0", step=101, valid_bleu=10.0)
    p.close()
    return out.getvalue()


def test_auto_is_plain_off_a_terminal():
    assert resolve_format("auto", io.StringIO()) == "plain"
    with pytest.raises(ValueError, match="choose one of"):
        resolve_format("fancy", io.StringIO())


def test_plain_lines_every_interval_and_messages_on_their_own_lines():
    text = run("plain", budget_s=60)
    assert "\r" not in text
    lines = text.splitlines()
    progress = [ln for ln in lines if ln.startswith("train x: step")]
    assert len(progress) == 5  # 60 s at one line per 10 s: at 10, 20, 30, 40 and 50 s (none at the start)
    assert lines[0] == "budget 1 min"
    assert "step 101: valid loss 2.000  BLEU 10.0" in lines
    assert progress[0] == "train x: step 51, loss 2.500, lr 1.00e-03, tok/s 1,234, elapsed 0:10, ETA 0:50"


def test_plain_eta_from_a_fixed_total():
    text = run("plain", seconds=20, total=200)
    first = text.splitlines()[1]
    assert first.startswith("train x: step 51/200") and first.endswith("ETA 0:29"), first


def test_json_lines_parse_and_carry_the_figures():
    recs = [json.loads(ln) for ln in run("json", budget_s=60).splitlines()]
    assert [r["event"] for r in recs].count("progress") == 5
    assert recs[0] == {"event": "message", "text": "budget 1 min"}
    prog = next(r for r in recs if r["event"] == "progress")
    assert prog["step"] == 51 and prog["loss"] == 2.5 and prog["elapsed_s"] == 10.0 and prog["eta_s"] == 50.0
    assert any(r["event"] == "valid" and r["valid_bleu"] == 10.0 for r in recs)


def test_json_stderr_wraps_every_other_line(capsys):
    with json_stderr():
        print("warning: something", file=sys.stderr)
        sys.stderr.write("two\nlines")
    recs = [json.loads(ln) for ln in capsys.readouterr().err.splitlines()]
    assert recs == [{"event": "message", "text": t} for t in ("warning: something", "two", "lines")]


def test_a_time_budget_bar_has_a_total_that_does_not_move():
    out, clock = io.StringIO(), Clock()
    p = Progress("train x", "bar", stream=out, clock=clock, budget_s=60)
    for i in range(30):
        clock.t = i
        p.update(1, elapsed_s=float(i), loss=1.0)
    assert p.bar.total == 60
    p.close()
    assert "/60 s" in out.getvalue() and "step=30" in out.getvalue()


def test_a_summary_line_closes_a_short_job():
    out, clock = io.StringIO(), Clock()
    p = Progress("translate", "plain", unit="line", total=5, stream=out, clock=clock)
    clock.t = 1.0
    p.update(5)
    assert out.getvalue() == ""  # under the interval: no line yet
    p.close(summary=True)
    assert out.getvalue() == "translate: line 5/5, elapsed 0:01, ETA 0:00\n"
