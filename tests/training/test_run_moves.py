"""Runs that can move: a run folder records its corpus by name and checksum, never by a path, so every
command that reads a run works on it after the folder has moved and from any working folder.

The run below is trained as the demo trains its runs: from one folder, with a cwd-relative
``data.data_path`` (``../data/fra-eng.zip``). Such a path used to be written into ``config.toml`` (and
inherited by an export), and `evaluate`, `heads` and `compare` then failed from any other folder,
even with ``$ATTNLAB_DATA_DIR`` set.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnlab import runs
from attnlab.cli import main
from attnlab.training.loop import train
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def moved(tmp_path_factory, fra_eng_zip):
    """A tiny fra-eng Transformer trained from ``root/a`` on ``../data/fra-eng.zip``, then moved to
    ``root/b/moved`` (and copied to ``root/b/twin``, for `compare`)."""
    root = tmp_path_factory.mktemp("moves")
    (root / "data").mkdir()
    (root / "data" / "fra-eng.zip").symlink_to(Path(fra_eng_zip).resolve())  # never copied; CI names it relatively
    (root / "a").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root / "a")
        cfg = tiny_config("transformer", "data.dataset=fra-eng", "data.data_path=../data/fra-eng.zip",
                          "data.max_pairs=3000", "train.max_steps=3")
        train(cfg, "run", progress=False)
    (root / "b").mkdir()
    shutil.move(root / "a" / "run", root / "b" / "moved")
    shutil.copytree(root / "b" / "moved", root / "b" / "twin")
    return root


@pytest.fixture
def elsewhere(moved, tmp_path, monkeypatch, fra_eng_zip):
    """Work from a third folder, with the corpus found through $ATTNLAB_DATA_DIR (and an empty cache)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")
    monkeypatch.setenv("ATTNLAB_DATA_DIR", str(fra_eng_zip.parent))
    return moved


def _ok(capsys, *argv) -> str:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert rc == 0, (argv, out.err[-2000:])
    assert "warning: " not in out.err, out.err  # the corpus found is the one the run recorded
    return out.out


def test_the_run_folder_records_its_corpus_by_name_and_checksum_not_by_path(moved):
    run = moved / "b" / "moved"
    assert "data_path" not in (run / runs.CONFIG).read_text()
    assert runs.read_run(run).config.data.data_path is None
    corpus = json.loads((run / runs.META).read_text())["data_stats"]["corpus"]
    assert corpus["name"] == "fra-eng" and corpus["file"] == "fra-eng.zip" and len(corpus["sha256"]) == 64


def test_every_command_works_on_a_moved_run_from_another_folder(elsewhere, capsys, fra_eng_zip):
    run, twin = elsewhere / "b" / "moved", elsewhere / "b" / "twin"
    _ok(capsys, "translate", run, "i'm home .")
    _ok(capsys, "evaluate", run, "--max-sentences", 5)
    _ok(capsys, "attention", run, "i'm home .", "--save-dir", "figs", "--formats", "png")
    _ok(capsys, "explain", run, "i'm home .", "--save-dir", "figs")
    _ok(capsys, "heads", run, "--sentences", 4, "--no-importance", "--save-dir", "heads")
    _ok(capsys, "doctor", run)
    _ok(capsys, "compare", run, twin, "--sentences", 5, "--save-dir", "cmp")
    _ok(capsys, "params", run, "--save-dir", "figs", "--formats", "png")
    _ok(capsys, "positional", run, "--save-dir", "figs", "--formats", "png")
    assert "the run's valid split" in _ok(capsys, "selfcheck", run)
    _ok(capsys, "data", "--run", run)
    _ok(capsys, "attribute", run, "i'm home .", "--method", "rollout", "--save-dir", "figs")
    gold = fra_eng_zip.parent / "hansards-enfr"
    if gold.is_dir():
        _ok(capsys, "align", run, "--gold", gold, "--no-ibm", "--no-saliency", "--save-dir", "align")
    from attnlab.web.registry import load_runs  # what `serve` loads

    assert list(load_runs([str(run)], device="cpu")) == ["moved"]
    # an export inherits no path either, and moves too
    _ok(capsys, "export", run, "exp")
    spec = json.loads(Path("exp/config.json").read_text())
    assert spec["config"]["data"].get("data_path") is None
    shutil.move("exp", "exp-moved")
    _ok(capsys, "translate", "exp-moved", "go .")
    _ok(capsys, "evaluate", "exp-moved", "--max-sentences", 5)


def test_data_wins_and_without_it_the_error_says_how_to_give_the_corpus(elsewhere, capsys, monkeypatch, tmp_path):
    run = elsewhere / "b" / "moved"
    monkeypatch.delenv("ATTNLAB_DATA_DIR")
    assert main(["evaluate", str(run), "--max-sentences", "5"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "fra-eng corpus not found" in lines[0] and "--data" in lines[0], lines
    for data in (elsewhere / "data", elsewhere / "data" / "fra-eng.zip"):
        _ok(capsys, "evaluate", run, "--max-sentences", 5, "--data", data)
        _ok(capsys, "heads", run, "--sentences", 4, "--no-importance", "--save-dir", "heads", "--data", data)
        _ok(capsys, "compare", run, elsewhere / "b" / "twin", "--sentences", 5, "--save-dir", "cmp", "--data", data)
    # another corpus than the one recorded: used, with one warning line saying so
    other = tmp_path / "fra.txt"
    other.write_text("".join(f"Go {i}.\tVa {i} !\n" for i in range(300)), encoding="utf-8")
    assert main(["evaluate", str(run), "--max-sentences", "5", "--data", str(other)]) == 0
    warnings = [w for w in capsys.readouterr().err.splitlines() if w.startswith("warning: ")]
    assert len(warnings) == 1 and "is not the corpus" in warnings[0] and "--data" in warnings[0], warnings


def test_a_run_that_recorded_a_path_still_loads_and_the_environment_wins(elsewhere, capsys, monkeypatch, tmp_path):
    """Runs written before: config.toml holds the cwd-relative data_path. From the folder it was trained
    in, that path still finds the corpus; from anywhere else $ATTNLAB_DATA_DIR (or --data) wins."""
    old = Path(shutil.copytree(elsewhere / "b" / "moved", tmp_path / "old"))
    cfg = old / runs.CONFIG
    cfg.write_text(cfg.read_text().replace("[data]\n", '[data]\ndata_path = "../data/fra-eng.zip"\n', 1))
    assert runs.read_run(old).config.data.data_path == "../data/fra-eng.zip"
    _ok(capsys, "evaluate", old, "--max-sentences", 5)  # from tmp_path: ../data does not exist here; the env wins
    monkeypatch.delenv("ATTNLAB_DATA_DIR")
    monkeypatch.chdir(elsewhere / "a")  # where it was trained: the recorded path, tried last, still finds it
    _ok(capsys, "evaluate", old, "--max-sentences", 5)
    _ok(capsys, "export", old, tmp_path / "old-exp")
    assert json.loads((tmp_path / "old-exp" / "config.json").read_text())["config"]["data"].get("data_path") is None
