"""`attnlab doctor`: each of the notes' §10 symptoms on synthetic curves, and on real tiny runs."""

from __future__ import annotations

import json
import math

import pytest

from attnlab.cli import main
from attnlab.inspection import doctor as D
from tests.conftest import tiny_config

V = 100  # target vocabulary: ln V = 4.6 is the uniform-guess loss


def curve(losses, every=10, start=10):
    return [{"event": "train", "step": start + every * i, "loss": x} for i, x in enumerate(losses)]


def healthy_losses(n=20):
    return [4.6 * (0.45 + 0.55 * math.exp(-i / 4)) for i in range(n)]  # fast drop, then flattening


def detected(report):
    return {f.symptom for f in report.findings if f.detected}


def test_healthy_curve_passes():
    valid = [{"step": s, "valid_loss": x} for s, x in ((50, 3.0), (100, 2.5), (150, 2.3), (200, 2.2))]
    r = D.diagnose_curves(curve(healthy_losses()), valid, V, lr=1e-3)
    assert r.healthy, D.format_report(r)
    assert "verdict: healthy" in D.format_report(r)


def test_spike_above_uniform_is_lr_too_high():
    losses = healthy_losses()
    losses[8] = 15.0  # confidently wrong: far above ln V
    r = D.diagnose_curves(curve(losses), [], V, lr=1e-2)
    f = r.finding("lr_too_high")
    assert f.detected and f.suggestion.startswith("train.lr=0.00333")
    assert f.numbers["peak_loss"] == 15.0 and any("ln V" in e for e in f.evidence)


def test_oscillation_is_lr_too_high():
    losses = [3.0 + (0.6 if i % 2 else -0.6) for i in range(20)]  # zig-zag, never above ln V, no trend
    f = D.diagnose_curves(curve(losses), [], V, lr=1e-3).finding("lr_too_high")
    assert f.detected and f.numbers["rel_change_std"] > D.OSCILLATION_REL_STD


def test_nonfinite_loss_is_lr_too_high():
    losses = healthy_losses()
    losses[5] = float("nan")
    f = D.diagnose_curves(curve(losses), [], V).finding("lr_too_high")
    assert f.detected and f.numbers["nonfinite_events"] == 1


def test_slow_curve_is_lr_too_low():
    losses = [5.0 - 0.02 * i for i in range(20)]  # straight, slow, still above 0.8 ln V
    r = D.diagnose_curves(curve(losses), [], V, lr=1e-4)
    assert detected(r) == {"lr_too_low"}
    assert r.finding("lr_too_low").suggestion.startswith("train.lr=0.001")  # 10x: still above ln V


def test_stuck_far_above_uniform_but_not_falling_is_not_slow():
    f = D.diagnose_curves(curve([4.6] * 20), [], V, lr=1e-4).finding("lr_too_low")
    assert not f.detected  # a flat curve is not "slow": raising the lr is not the answer it supports


def test_rising_valid_loss_is_overfitting():
    train = curve([3.0 - 0.1 * i for i in range(20)])
    valid = [{"step": s, "valid_loss": x} for s, x in ((50, 2.9), (100, 2.6), (150, 2.8), (200, 3.1))]
    f = D.diagnose_curves(train, valid, V).finding("overfitting")
    assert f.detected and f.numbers["valid_loss_min_step"] == 100
    assert "best" in f.suggestion


def test_large_gap_is_overfitting():
    train = curve([2.0 - 0.05 * i for i in range(20)])  # ends at 1.05
    valid = [{"step": 200, "valid_loss": 2.5}]
    f = D.diagnose_curves(train, valid, V).finding("overfitting")
    assert f.detected and f.numbers["gap_ratio"] > D.OVERFIT_GAP_RATIO


def test_truncation_and_long_sentences_are_num_steps():
    stats = {
        "num_steps": 10,
        "splits": {"train": {"pairs": 1000, "truncated": 80}},
        "length_histogram": {"src": [0] + [50] * 15, "tgt": [0] + [40] * 20},
    }
    ev = {
        "by_length": [
            {"bucket": "1-4", "lo": 1, "hi": 4, "sentences": 100, "bleu": 40.0},
            {"bucket": "5-8", "lo": 5, "hi": 8, "sentences": 100, "bleu": 30.0},
            {"bucket": "9-12", "lo": 9, "hi": 12, "sentences": 50, "bleu": 8.0},
        ]
    }
    f = D.diagnose_curves(curve(healthy_losses()), [], V, stats, ev).finding("num_steps_too_small")
    assert f.detected and len(f.evidence) == 2
    assert f.suggestion.startswith("data.num_steps=21")  # 99 % of the 20-token targets + <eos>
    assert D.suggest_num_steps([0, 10, 10]) == 3


def test_small_buckets_are_ignored():
    ev = {
        "by_length": [
            {"bucket": "1-4", "lo": 1, "hi": 4, "sentences": 100, "bleu": 40.0},
            {"bucket": "17+", "lo": 17, "hi": 10**9, "sentences": 3, "bleu": 0.0},
        ]
    }
    f = D.diagnose_curves(curve(healthy_losses()), [], V, {}, ev).finding("num_steps_too_small")
    assert not f.detected


def test_unreadable_run_exits_2(tmp_path, capsys):
    assert main(["doctor", str(tmp_path / "missing")]) == 2
    assert "error:" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ real runs


def _train(path, lr):
    from attnlab.training.loop import train

    cfg = tiny_config(
        "transformer", f"train.lr={lr}", "train.max_steps=60", "train.eval_every=20", "train.log_every=5"
    )
    train(cfg, path, progress=False)
    return path


@pytest.mark.slow
def test_real_runs_high_lr_flagged_healthy_passes(tmp_path, capsys):
    # The tiny configuration's own lr (3e-3) is healthy; 1.0 (~300x) reliably overshoots on the
    # numbers task even with warm-up and clipping (10x, 3e-2, still trains: pre-norm + clipping are forgiving).
    good = _train(tmp_path / "good", 3e-3)
    bad = _train(tmp_path / "bad", 1.0)
    assert main(["doctor", str(good)]) == 0
    assert "verdict: healthy" in capsys.readouterr().out
    assert main(["doctor", str(bad), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["healthy"]
    high = next(f for f in out["findings"] if f["symptom"] == "lr_too_high")
    assert high["detected"] and high["suggestion"].startswith("train.lr=")
