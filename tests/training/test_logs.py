"""`attnlab train 2> log`: with stderr a file, the log holds lines a program can read (no carriage
returns, at most one progress line per 10 s); `--log-format json` makes every line a JSON event."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

TINY = ["--size", "base", "data.dataset=numbers", "data.tokenizer=word", "data.numbers_size=400",
        "data.batch_tokens=600", "data.num_steps=16", "model.num_hiddens=32", "model.embed_size=32",
        "model.num_layers=1", "model.num_heads=2", "model.ffn_num_hiddens=64", "train.eval_max_sentences=16",
        "train.threads=1", "decode.max_len_b=6", "train.log_every=5"]


def train_to_log(tmp_path, *args: str) -> tuple[str, float]:
    log = tmp_path / "log"
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.run([sys.executable, "-m", "attnlab", "train", "--model", "transformer", "--out",
                               str(tmp_path / "run"), *args, *TINY], stdout=subprocess.PIPE, stderr=err, text=True,
                              env={**os.environ, "ATTNLAB_OFFLINE": "1"}, timeout=600)
    wall = time.monotonic() - t0
    text = log.read_text(encoding="utf-8")
    assert proc.returncode == 0, text
    assert "stopped by" in proc.stdout  # the summary stays on stdout
    return text, wall


@pytest.mark.slow
def test_a_timed_run_logs_plain_lines(tmp_path):
    text, wall = train_to_log(tmp_path, "--max-minutes", "0.3")
    assert "\r" not in text
    lines = text.splitlines()
    progress = [ln for ln in lines if ln.startswith("train transformer: step ")]
    assert 1 <= len(progress) <= wall / 10, text
    assert all("loss" in ln and "lr" in ln and "tok/s" in ln and "ETA" in ln for ln in progress), progress
    assert lines[0].startswith("budget 0.3 min")  # a message is a line of its own, not glued to a bar
    assert all(ln.startswith(("budget", "train transformer: step", "step ")) for ln in lines), text


@pytest.mark.slow
def test_json_log_parses_line_by_line(tmp_path):
    text, _ = train_to_log(tmp_path, "--max-steps", "40", "--log-format", "json", "--log-interval", "0.01")
    recs = [json.loads(ln) for ln in text.splitlines()]  # every line
    events = {r["event"] for r in recs}
    assert {"message", "progress", "valid", "end"} <= events, events
    prog = [r for r in recs if r["event"] == "progress"]
    assert all(r["total"] == 40 and {"step", "elapsed_s"} <= set(r) for r in prog)
    assert recs[-1]["event"] == "end" and recs[-1]["step"] == 40


def _command_to_log(tmp_path, *argv: str) -> str:
    log = tmp_path / "cmd.log"
    with open(log, "w", encoding="utf-8") as err:
        proc = subprocess.run([sys.executable, "-m", "attnlab", *argv], stdout=subprocess.PIPE, stderr=err, text=True,
                              env={**os.environ, "ATTNLAB_OFFLINE": "1"}, timeout=600)
    text = log.read_text(encoding="utf-8")
    assert proc.returncode == 0, text
    return text


@pytest.mark.slow
def test_evaluate_heads_and_compare_log_lines_not_redraws(tiny_runs, tmp_path):
    """Every long command reports through attnlab.progress: with stderr a file, a line at the end, no ``\\r``."""
    import shutil

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(tiny_runs("transformer"), a)  # evaluate and compare write into the run folders
    shutil.copytree(tiny_runs("transformer"), b)
    for argv, line in ((["evaluate", str(a), "--max-sentences", "6", "--checkpoint", "last"], "sent 6/6"),
                       (["heads", str(a), "--sentences", "4", "--checkpoint", "last"], "head 6/6"),
                       (["compare", str(a), str(b), "--sentences", "4", "--checkpoint", "last"], "run 2/2")):
        text = _command_to_log(tmp_path, *argv)
        assert "\r" not in text, (argv[0], text)
        assert line in text, (argv[0], text)  # the plain progress line a short job ends with
