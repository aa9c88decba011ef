"""`attnlab compare`: every score on the same sentences, one unit (words), refusal to mix splits."""

from __future__ import annotations

import json
import math
import random
import shutil

import pytest

from attnlab.analysis.diagnose import compare as Cm
from attnlab.cli import main
from attnlab.data.numbers import numbers_pairs
from attnlab.errors import AttnlabError
from attnlab.evaluation.evaluate import evaluate_split
from attnlab.translator import Translator
from tests.conftest import tiny_config


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_runs_without_reports_are_scored_now_on_the_same_sentences(tiny_runs, tmp_path, capsys):
    a, b = tiny_runs("transformer"), tiny_runs("bahdanau")
    out = tmp_path / "cmp"
    assert main(["compare", str(a), str(b), "--sentences", "10", "--save-dir", str(out), "--quiet",
                 "--timing-cap", "0.2"]) == 0
    captured = capsys.readouterr()
    assert "compare" not in captured.err  # --quiet: no progress bar
    name = "compare-transformer-bahdanau-sentences10"  # the runs compared and a setting other than the default
    data = json.loads((out / f"{name}.json").read_text())
    assert data["length_unit"] == "words" and data["scored_on"].startswith("the same 10 validation sentences")
    runs = data["runs"]
    assert [r["kind"] for r in runs] == ["transformer", "bahdanau"]
    for r, run in zip(runs, (a, b)):
        model = Translator.from_run(run).model
        assert r["parameters"] == sum(p.numel() for p in model.parameters())
        assert sum(row["sentences"] for row in r["by_length"]) == 10  # every run, all 10 sentences
        assert 0 < r["words_per_token"] <= 1 and r["train_words_per_s"] > 0
    md = (out / f"{name}.md").read_text()
    assert "the same 10 validation sentences" in md and "BLEU by source length (words)" in md
    assert "tokens" not in md.replace("words per token", "")  # one unit throughout
    # numbers runs: the task's own examples, not the notes' English sentences their vocabulary cannot read
    assert "## The numbers task's examples" in md and "| twenty-one | vingt et un |" in md and "| i'm home . |" not in md


def test_compare_scores_what_evaluate_scores(tiny_runs):
    # the BLEU compare measures on its sample equals `evaluate` on the same validation sentences
    run = tiny_runs("transformer")
    tr = Translator.from_run(run)
    from attnlab.data import corpus

    split = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok)).splits["valid"]
    n = len(split.unique_sources())  # the whole validation split (the sample would go on into test)
    expect = evaluate_split(tr, split, beam_size=1, max_sentences=n)
    sample = Cm.common_sample(tr, n)
    assert sample.sources == expect["sources"]  # the same sentences...
    assert tr.translate(sample.sources, beam_size=1) == expect["hypotheses"]  # ...the same translations
    got = Cm.summarise_run(run, tr, sample, None)
    assert got.chrf == pytest.approx(expect["chrf"]) and got.bleu == pytest.approx(expect["bleu"])
    assert got.by_length == expect["by_length"]


def test_one_report_missing_means_no_report_is_used(tiny_runs, tmp_path, capsys):
    a = _copy(tiny_runs("transformer"), tmp_path / "a")
    b = tiny_runs("bahdanau")
    assert main(["evaluate", str(a), "--split", "test", "--beam", "1", "--quiet"]) == 0
    capsys.readouterr()
    c = Cm.run([a, b], bleu_sentences=8, cap_s=0.2)
    assert c.scored_on.startswith("the same 8 validation sentences")
    assert c.why == "bahdanau has no eval-test.json"
    assert all(sum(row["sentences"] for row in r.by_length) == 8 for r in c.runs)
    # both evaluated on the same test split with the same beam: the reports are used
    b2 = _copy(b, tmp_path / "b")
    assert main(["evaluate", str(b2), "--split", "test", "--beam", "1", "--quiet"]) == 0
    capsys.readouterr()
    c = Cm.run([a, b2], bleu_sentences=8, cap_s=0.2)
    report = json.loads((a / "eval-test.json").read_text())
    assert c.why == "" and c.scored_on.startswith(f"the test split: {report['sentences']} sentences, beam 1")
    assert c.runs[0].bleu == report["bleu"]
    # a report of other weights is not used
    (b2 / "eval-test.json").write_text(
        json.dumps(
            {**json.loads((b2 / "eval-test.json").read_text()), "checkpoint": {"weights_sha256": "0" * 64}}
        )
    )
    c = Cm.run([a, b2], bleu_sentences=8, cap_s=0.2)
    assert "scored other weights" in c.why and c.scored_on.startswith("the same 8")


def test_runs_split_differently_are_refused(tiny_runs, tmp_path, capsys):
    a = tiny_runs("transformer")
    b = _copy(tiny_runs("bahdanau"), tmp_path / "b")
    cfg = (b / "config.toml").read_text()
    assert "valid_frac = 0.02" in cfg
    (b / "config.toml").write_text(cfg.replace("valid_frac = 0.02", "valid_frac = 0.05"))
    with pytest.raises(AttnlabError, match="split the data differently .*data.valid_frac = 0.02 vs 0.05"):
        Cm.run([a, b], bleu_sentences=4, cap_s=0.2)
    assert main(["compare", str(a), str(b), "--quiet"]) == 2
    assert "split the data differently" in capsys.readouterr().err


@pytest.fixture(scope="module")
def two_directions(tmp_path_factory):
    """Tiny fra-eng runs of both directions, on a fra.txt of number pairs (no real corpus needed)."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("directions")
    fra = root / "fra.txt"
    fra.write_text("".join(f"{e}\t{f}\tCC-BY 2.0\n" for e, f in numbers_pairs(400, seed=1)), encoding="utf-8")
    for direction in ("en-fr", "fr-en"):
        cfg = tiny_config("transformer", "train.max_steps=8", "data.dataset=fra-eng", f"data.data_path={fra}",
                          f"data.direction={direction}", "data.min_freq=1")
        train(cfg, root / direction, progress=False)
    return root / "en-fr", root / "fr-en"


def test_runs_of_other_directions_are_refused(two_directions, tmp_path, capsys):
    """An fr→en run beside an en→fr one was fed the first run's French and scored against its English."""
    en_fr, fr_en = two_directions
    with pytest.raises(AttnlabError, match="en-fr translates en→fr and fr-en fr→en"):
        Cm.run([en_fr, fr_en], bleu_sentences=4, cap_s=0.2)
    assert main(["compare", str(fr_en), str(en_fr), "--quiet", "--save-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "compare runs of one data.direction" in err[0], err
    assert not (tmp_path / "o").exists()


def test_progress_bar_and_argument_errors(tiny_runs, tmp_path, capsys):
    a, b = tiny_runs("transformer"), tiny_runs("bahdanau")
    assert main(["compare", str(a), str(b), "--sentences", "4", "--save-dir", str(tmp_path),
                 "--timing-cap", "0.2"]) == 0
    assert "compare" in capsys.readouterr().err  # tqdm's bar, on stderr
    assert main(["compare", str(a)]) == 2
    assert "at least two" in capsys.readouterr().err
    with pytest.raises(AttnlabError, match="must be at least 1"):
        Cm.run([a, b], bleu_sentences=0)


def test_run_answers_through_the_report_protocol(tiny_runs):
    from attnlab.analysis.report import Report

    a, b = tiny_runs("transformer"), tiny_runs("bahdanau")
    c = Cm.run([a, b], bleu_sentences=4, cap_s=0.2)
    assert isinstance(c, Report)
    assert c.format().startswith("# Comparison: transformer vs bahdanau") and c.format("en") == str(c)
    assert c.figure().get_suptitle().startswith("compare: transformer (transformer) vs bahdanau (bahdanau)")
    data = json.loads(json.dumps(c.to_json()))
    assert data["length_unit"] == "words" and [r["name"] for r in data["runs"]] == ["transformer", "bahdanau"]


def _summary(name, recurrent, train_wps, long_bleu, pps, log_se=0.02):
    arch = {"recurrent": recurrent, "heads": 1 if recurrent else 4, "attention": ["cross"] if recurrent else
            ["enc_self", "dec_self", "cross"], "positional": None if recurrent else "sinusoidal", "width": 32,
            "layers": 1 if recurrent else 2, "ffn": None if recurrent else 64, "batch": 400}
    return Cm.RunSummary(name, name, "bahdanau" if recurrent else "transformer", 1000, train_wps, 10.0, 20.0, 40.0,
                         [{"bucket": "1-4", "bleu": 30.0, "sentences": 50},
                          {"bucket": "5-8", "bleu": 20.0, "sentences": 10}],
                         architecture=arch,
                         throughput=[{"length": n, "positions_per_s": p, "log_mean": math.log(p), "log_se": log_se,
                                      "repeats": 10, "lo": p * 0.96, "hi": p * 1.04}
                                     for n, p in zip((8, 16, 32), pps)],
                         longest={"bleu": long_bleu, "sentences": 50, "words": "9–12"})


def test_the_notes_table_is_answered_by_the_runs_and_says_when_they_contradict_it():
    """§26: the notes' rows read off each model, D2L's O(n) / O(1), and the measured rows; a GRU that trains more
    words/s than the Transformer is called a contradiction, with the reason the measurements give."""
    gru = _summary("gru", True, 31_000, 13.0, (9_000, 11_000, 12_000))
    tf = _summary("tf", False, 25_000, 29.0, (32_000, 41_000, 50_000))
    text = Cm.notes_table(Cm.Comparison([gru, tf], "the same 60 validation sentences"))
    assert "| attention type | additive, one head | scaled dot product, 4 heads |" in text
    assert "| sequential operations (D2L) | O(n): one step per position | O(1): every position in one product |" in text
    assert "| parallelism, measured: training words/s | 31,000 | 25,000 |" in text
    assert "- Parallelism: contradicted by these runs' training speed" in text
    assert "3.6–4.2× faster" in text and "batches of 400 and 400 positions" in text
    assert "the Transformer gains as n grows" in text and "- Long-range: agrees." in text
    slow = _summary("tf", False, 40_000, 5.0, (5_000, 5_000, 4_000))
    text = Cm.notes_table(Cm.Comparison([gru, slow], ""))
    assert "- Parallelism: agrees." in text and "loses ground as n grows" in text and "- Long-range: contradicted" in text
    assert "the test split's 50 longest sentences (9–12 words)" in text
    noisy = _summary("tf", False, 25_000, 29.0, (32_000, 31_000, 34_000), log_se=0.1)
    assert "can't tell whether the Transformer gains as n grows" in Cm.notes_table(Cm.Comparison([gru, noisy], ""))


def test_compare_prints_the_notes_table_measured_on_the_runs(tiny_runs):
    c = Cm.run([tiny_runs("transformer"), tiny_runs("bahdanau")], bleu_sentences=4, cap_s=0.2)
    text = c.format()
    assert "## The notes' §26 table, on these runs" in text
    assert [len(r.throughput) for r in c.runs] == [3, 3] and all(x["positions_per_s"] > 0 for x in c.runs[0].throughput)
    assert c.runs[0].architecture["heads"] == 2 and c.runs[1].architecture["recurrent"]


# ---------------------------------------------------------------- repeated timings, fitted trends (§26)


def test_the_slope_and_its_interval_on_synthetic_ratios():
    x = [math.log(n) for n in (8, 16, 32)]
    b, lo, hi = Cm.slope_interval(x, [0.5 * v for v in x], [0.05] * 3)  # ratio ∝ n^0.5, exact
    assert b == pytest.approx(0.5) and 0 < lo < 0.5 < hi
    assert hi - lo == pytest.approx(2 * 1.959964 * 0.05 / math.sqrt(sum((v - sum(x) / 3) ** 2 for v in x)))
    # the two runs: 1.06×, 0.81×, 1.52× and 1.44×, 1.21×, 1.34×, each one timing (±20 %): no trend either way
    for ratios in ((1.06, 0.81, 1.52), (1.44, 1.21, 1.34)):
        b, lo, hi = Cm.slope_interval(x, [math.log(r) for r in ratios], [math.log(1.2) / 1.96] * 3)
        assert lo < 0 < hi, (ratios, b, lo, hi)
    # scatter beyond the points' errors widens the interval (the Birge ratio); a falling ratio is a negative slope
    tight = Cm.slope_interval(x, [0.0, 0.3, 0.1], [0.01] * 3)
    assert tight[2] - tight[1] > 2 * 1.96 * 0.01 / math.sqrt(sum((v - sum(x) / 3) ** 2 for v in x))
    assert Cm.slope_interval(x, [-0.4 * v for v in x], [0.02] * 3)[2] < 0
    assert all(math.isnan(v) for v in Cm.slope_interval([1.0], [1.0], [0.1]))


def test_a_timing_is_repeated_until_its_interval_is_within_ten_percent_or_the_cap():
    rng = random.Random(0)
    t = Cm.repeat_rate(lambda: 100 * math.exp(rng.gauss(0, 0.2)))  # ±20 % per timing
    assert t.hi / t.rate <= 1.1 + 1e-9 and t.rate / t.lo <= 1.1 + 1e-9 and t.n > Cm.TIMING_MIN_REPS
    assert t.lo < 100 < t.hi
    now = [0.0]

    def clock():  # each reading advances one second: a one-second cap ends it at the first check
        now[0] += 1.0
        return now[0]

    capped = Cm.repeat_rate(lambda: 100 * math.exp(rng.gauss(0, 1.0)), cap_s=1.0, clock=clock)
    assert capped.n == Cm.TIMING_MIN_REPS and capped.hi / capped.lo > 1.2  # stopped by the cap, and it shows


@pytest.mark.slow
def test_compare_twice_on_the_same_runs_reaches_the_same_conclusion(tiny_runs, monkeypatch):
    """Timings that vary ±25 % from one call to the next (a shared CPU) around a Transformer whose advantage
    grows as n^0.3: two comparisons of the same runs fit the same slope sign, whatever each timing drew."""
    rng = random.Random(1)

    def fake_time(model, batch, device, clock=None):
        n = batch.src.shape[1]
        rate = 1e4 * (n / 8) ** (0.3 if type(model).__name__ == "Transformer" else 0.0)  # positions/s
        return batch.num_tgt_tokens / rate * math.exp(rng.gauss(0, 0.25))

    monkeypatch.setattr(Cm, "time_forward_backward", fake_time)
    a, b = tiny_runs("transformer"), tiny_runs("bahdanau")
    said = []
    for _ in range(2):
        text = Cm.run([a, b], bleu_sentences=4, cap_s=0.5).format()
        said.append([line.rsplit(": ", 1)[-1] for line in text.splitlines() if "Against sentence length" in line])
    assert said[0] == said[1] and said[0][0].startswith("the Transformer gains as n grows"), said


def test_a_pair_counted_in_characters_says_characters_in_every_length_and_speed():
    """A side the chars rule cuts (Pair.length_unit) is counted in characters: the lengths by the source's unit,
    the speeds by the target's, in the text and on the figure's axes; never "words" for a character count."""
    gru = _summary("gru", True, 31_000, 13.0, (9_000, 11_000, 12_000))
    tf = _summary("tf", False, 25_000, 29.0, (32_000, 41_000, 50_000))
    both = Cm.Comparison([gru, tf], "the same 60 validation sentences", src_unit="characters", tgt_unit="characters")
    text = both.format()
    assert "words" not in text
    assert "## BLEU by source length (characters)" in text and "train characters/s" in text
    assert "| parallelism, measured: training characters/s | 31,000 | 25,000 |" in text
    assert "(50 sentences of 9–12 characters)" in text and "trained 31,000 characters/s" in text
    fig = both.figure()
    labels = [ax.get_xlabel() + " " + ax.get_ylabel() for ax in fig.axes]
    assert "source length (characters)" in labels[0] and not any("words" in x for x in labels)
    assert json.loads(json.dumps(both.to_json()))["length_unit"] == "characters"
    mixed = Cm.Comparison([gru, tf], "", src_unit="words", tgt_unit="characters").format()
    assert "## BLEU by source length (words)" in mixed and "train characters/s" in mixed
    assert "(50 sentences of 9–12 words)" in mixed
