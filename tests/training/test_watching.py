"""Watching training: curves.png redrawn at each validation, TensorBoard logging, progress bars on
`evaluate` and `translate --file` (#17 item 5)."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import sys

import numpy as np
import pytest
from PIL import Image

from attnlab import runs
from attnlab.cli import main
from attnlab.runs.probes import read_probes
from attnlab.training.loop import train
from attnlab.training.run_record import CurvesPainter, prepare_run_dir
from attnlab.training.tensorboard import BOARD_DIR, attention_image
from tests.conftest import tiny_config

HAVE_TB = importlib.util.find_spec("tensorboard") is not None
needs_tb = pytest.mark.skipif(not HAVE_TB, reason="the tensorboard extra is not installed (pip install -e '.[tensorboard]')")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _watched_config(*extra: str):
    return tiny_config("transformer", "train.eval_every=5", "train.log_every=5", "train.max_steps=10",
                       f"train.tensorboard={'true' if HAVE_TB else 'false'}", *extra)


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """A 10-step run validating at steps 5 and 10, with what curves.png was right after each validation."""
    run = tmp_path_factory.mktemp("watch") / "run"
    seen: list[dict] = []
    original = CurvesPainter.after_validation

    def spy(self, run_dir):
        drawn = original(self, run_dir)
        png = run_dir / "curves.png"
        seen.append({
            "drawn": drawn, "png": png.read_bytes() if png.is_file() else None,
            "valid_steps": [r["step"] for r in runs.read_metrics(run_dir) if r.get("event") == "valid"],
            "finished": "finished" in json.loads((run_dir / runs.META).read_text()),
            "temporaries": [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")],
        })
        return drawn

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CurvesPainter, "after_validation", spy)
        train(_watched_config(), run, progress=False)
    return run, seen


def test_curves_png_is_drawn_at_the_first_validation(watched):
    run, seen = watched
    first = seen[0]
    assert first["valid_steps"] == [5] and not first["finished"]  # mid-run: finish_meta has not drawn yet
    assert first["drawn"] and first["png"] is not None and first["png"].startswith(PNG_MAGIC)
    img = Image.open(io.BytesIO(first["png"]))
    img.load()  # decodes every byte: a torn file fails here
    assert img.format == "PNG" and min(img.size) > 100
    assert first["temporaries"] == []  # written to a temporary file and renamed: none left behind
    assert len(seen) == 2 and (run / "curves.png").is_file() and (run / "curves.svg").is_file()  # the end draws both


def test_an_unwatched_run_draws_its_curves_at_the_end_only(tmp_path):
    drawn = []
    original = CurvesPainter.after_validation

    def spy(self, run_dir):
        drawn.append(original(self, run_dir))
        return drawn[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CurvesPainter, "after_validation", spy)
        train(_watched_config("train.tensorboard=false"), tmp_path / "run", progress=False, watch=False)
    assert drawn == [False, False]  # both validations (steps 5 and 10) left it alone
    assert (tmp_path / "run" / "curves.png").is_file() and (tmp_path / "run" / "curves.svg").is_file()


def test_curves_painter_throttles_by_its_own_cost(tmp_path):
    runs.append_metrics(tmp_path, {"event": "train", "step": 1, "loss": 2.0, "lr": 1e-3})
    painter = CurvesPainter()
    assert painter.after_validation(tmp_path) and painter.cost_s > 0
    before = (tmp_path / "curves.png").stat().st_mtime_ns
    # right after a draw: less than RATIO times its cost has passed, so the next one is skipped
    assert not painter.after_validation(tmp_path) and painter.skipped == 1
    assert (tmp_path / "curves.png").stat().st_mtime_ns == before
    painter.RATIO = 0  # no throttle: every validation draws
    assert painter.after_validation(tmp_path) and painter.draws == 2


def _board(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / BOARD_DIR), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def _scalars(acc, tag):
    return [(e.step, e.value) for e in acc.Scalars(tag)]


@needs_tb
def test_tensorboard_holds_the_metrics_records_and_the_probe_maps(watched):
    run, _ = watched
    acc = _board(run)
    recs = runs.read_metrics(run)
    train_recs = [r for r in recs if r.get("event") == "train"]
    valid_recs = [r for r in recs if r.get("event") == "valid"]
    for key, tag in (("loss", "train/loss"), ("lr", "train/lr"), ("tokens_per_s", "train/tokens_per_s")):
        got = _scalars(acc, tag)
        assert [s for s, _ in got] == [r["step"] for r in train_recs] == [5, 10]
        assert np.allclose([v for _, v in got], [r[key] for r in train_recs], rtol=1e-6)  # float32 in the events
    for key, tag in (("valid_loss", "valid/loss"), ("valid_bleu", "valid/bleu"), ("valid_chrf", "valid/chrf")):
        got = _scalars(acc, tag)
        assert [s for s, _ in got] == [r["step"] for r in valid_recs] == [5, 10]
        assert np.allclose([v for _, v in got], [r[key] for r in valid_recs], rtol=1e-6)
    # each probe sentence's image at each validation is its probes.jsonl cross-attention record
    sentences = read_probes(run)["sentences"]
    assert sentences and set(acc.Tags()["images"]) == {f"probes/{n}/cross" for n in range(1, len(sentences) + 1)}
    for n, entry in enumerate(sentences, start=1):
        images = acc.Images(f"probes/{n}/cross")
        assert [e.step for e in images] == [5, 10]  # validations only (step 0 is recorded before training)
        for event in images:
            rec = next(r for r in entry["steps"] if r["step"] == event.step)
            decoded = np.asarray(Image.open(io.BytesIO(event.encoded_image_string)).convert("RGB"))
            assert np.array_equal(decoded, attention_image(rec["attention"]["cross"], rec["tgt_tokens"], rec["src_tokens"]))
        assert f"probes/{n}/text_summary" in acc.Tags()["tensors"]


@needs_tb
def test_resume_appends_to_the_same_log_without_repeating_steps(watched, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "run"
    shutil.copytree(watched[0], run)
    # A killed process logged step 12 after the last checkpoint (step 10): the resumed run must hide it.
    dead = SummaryWriter(str(run / BOARD_DIR))
    dead.add_scalar("train/loss", 999.0, 12)
    dead.close()
    files_before = len(list((run / BOARD_DIR).iterdir()))
    train(_watched_config("train.max_steps=20"), run, resume=True, progress=False)
    acc = _board(run)
    recs = runs.read_metrics(run)
    loss = _scalars(acc, "train/loss")
    assert [s for s, _ in loss] == [r["step"] for r in recs if r.get("event") == "train"] == [5, 10, 15, 20]
    assert 999.0 not in [v for _, v in loss]
    assert [s for s, _ in _scalars(acc, "valid/bleu")] == [r["step"] for r in recs if r.get("event") == "valid"]
    assert len(list((run / BOARD_DIR).iterdir())) == files_before + 1  # appended: a new event file beside the old


def test_missing_extra_is_one_line_before_anything_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the extra were not installed
    out = tmp_path / "run"
    rc = main(["train", "--model", "transformer", "--dataset", "numbers", "--size", "base", "--out", str(out),
               "--quiet", "train.tensorboard=true"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: train.tensorboard=true needs the tensorboard package") and "pip install" in err
    assert not out.exists()


def test_new_run_sets_a_dead_runs_board_aside(tmp_path):
    (tmp_path / BOARD_DIR).mkdir()
    (tmp_path / BOARD_DIR / "events.out.tfevents.1").write_bytes(b"old")
    prepare_run_dir(tiny_config(), tmp_path, resume=False)
    assert not (tmp_path / BOARD_DIR).exists()
    assert (tmp_path / f"{BOARD_DIR}.old" / "events.out.tfevents.1").read_bytes() == b"old"


# ------------------------------------------------------------------------------------ progress bars


def test_evaluate_bar_changes_nothing_but_stderr(tiny_runs, capsys):
    from attnlab.data import corpus
    from attnlab.evaluation.evaluate import evaluate_split
    from attnlab.translator import Translator

    tr = Translator.from_run(tiny_runs("transformer"), "last")
    split = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok)).splits["test"]
    quiet = evaluate_split(tr, split, batch_size=4)
    assert capsys.readouterr().err == ""
    shown = evaluate_split(tr, split, batch_size=4, progress=True)
    n = quiet["sentences"]
    assert n > 4 and f"{n}/{n}" in capsys.readouterr().err  # several batches, every sentence ticked
    for key in ("hypotheses", "bleu", "chrf", "by_length", "sources"):
        assert shown[key] == quiet[key], key


@pytest.mark.parametrize("quiet", [False, True])
def test_cli_bars_only_when_not_quiet(tiny_runs, tmp_path, capsys, quiet):
    run = tmp_path / "run"
    shutil.copytree(tiny_runs("transformer"), run)  # evaluate writes its report into the run folder
    flag = ["--quiet"] if quiet else []
    assert main(["evaluate", str(run), "--max-sentences", "6", *flag]) == 0
    err = capsys.readouterr().err
    assert ("6/6" in err) is not quiet
    src = tmp_path / "in.txt"
    src.write_text("twenty-one\nthree\nseven\nfive\nninety-nine", encoding="utf-8")  # the last line unended
    out = tmp_path / "out.txt"
    assert main(["translate", str(run), "--file", str(src), "--output", str(out), *flag]) == 0
    err = capsys.readouterr().err
    assert ("5/5" in err) is not quiet  # the unended last line is counted
    assert len(out.read_text(encoding="utf-8").splitlines()) == 5


def test_probe_images_are_labelled_and_readable():
    """Each weight is at least 16 px square, and the tokens label the rows (left) and columns (top)."""
    maps = np.full((2, 3, 4), 0.25)  # (layers, output tokens, keys)
    bare = attention_image(maps)
    assert bare.shape[0] == 3 * 32 and bare.shape[1] >= 2 * 4 * 32  # a short sentence: 32-px squares
    img = attention_image(maps, ["je", "suis", "<eos>"], ["i'm", "home", ".", "<eos>"])
    margin_top, margin_left = img.shape[0] - bare.shape[0], img.shape[1] - bare.shape[1]
    assert margin_top > 10 and margin_left > 10
    assert (img[:margin_top, margin_left:] < 128).any()  # column labels drawn above the map
    assert (img[margin_top:, :margin_left] < 128).any()  # row labels left of it
    assert np.array_equal(img[margin_top:, margin_left:], bare)  # the map itself unchanged
    long = attention_image(np.full((1, 40, 40), 0.5))
    assert long.shape[0] == 40 * 16  # long maps stay readable: 16 px per token at least
