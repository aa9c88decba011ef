"""`attnlab serve`: registered in the CLI, loopback by default, one-line errors for bad runs."""

from __future__ import annotations

import pytest

from attnlab.cli import main, make_parser
from attnlab.web.registry import load_runs, parse_run_spec


def test_serve_is_registered_with_loopback_default():
    args = make_parser().parse_args(["serve", "runs/a"])
    assert args.host == "127.0.0.1" and args.port == 8000 and args.runs == ["runs/a"]


def test_serve_refuses_a_missing_run(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_run_names(tiny_runs, tmp_path):
    assert parse_run_spec("b=runs/x") == ("b", tmp_path.__class__("runs/x"))
    run = tiny_runs("bahdanau")
    runs = load_runs([run, run, f"mine={run}"])
    assert list(runs) == ["bahdanau", "bahdanau-2", "mine"]
    with pytest.raises(Exception, match="given twice"):
        load_runs([f"a={run}", f"a={run}"])
    with pytest.raises(Exception, match="run name"):
        load_runs([f"../x={run}"])
