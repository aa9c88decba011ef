"""`attnlab demo`: sized for the machine, prints its choices, the notes' sentences and a cross-attention table."""

from __future__ import annotations

import pytest

from attnlab.demo import cross_attention_table
from attnlab.evaluation.evaluate import is_right
from tests.cli.test_cli import attnlab


def test_right_translations_are_the_notes_references():
    assert is_right("i'm home .", "Je suis chez moi.") and is_right("i'm home .", "je suis à la maison .")
    assert is_right("go .", "Va !") and not is_right("go .", "je.") and not is_right("i lost .", "j'ai perdu perdu.")


def test_a_french_source_is_right_when_it_gives_the_notes_english():
    """A French → English run reads the notes' French sentences; the demo has no accepted list for them,
    so the notes' English reference is the one right answer (bench/quality.py counted 0 of 4 before)."""
    assert is_right("j'ai perdu .", "I lost.", "i lost .") and not is_right("il est calme .", "he is quiet.", "he's calm .")
    assert not is_right("j'ai perdu .", "i lost .")  # no reference given, nothing to accept
    assert not is_right("go .", "go .", "go .")  # an English source keeps the demo's French list


def test_cross_attention_table_names_what_each_output_token_looks_at(tiny_runs):
    from attnlab.translator import Translator

    tr = Translator.from_run(tiny_runs("transformer"), which="last")
    result = tr.attention("twenty-one")
    table = cross_attention_table(result).splitlines()
    assert "layer 1 of 1, 2 heads averaged" in table[0] and "looks at" in table[1]  # the map every verdict reads
    rows = table[2:]
    assert len(rows) == len(result.tgt_tokens)
    for row in rows:  # each row: the output token, one weight per source token, then the argmax's token
        cells = row.split()
        weights = [float(x) for x in cells[1:1 + len(result.src_tokens)]]
        assert abs(sum(weights) - 1) < 0.02 and cells[-1] == result.src_tokens[weights.index(max(weights))]


@pytest.mark.slow
def test_demo_runs_offline_on_numbers(tmp_path):
    """No corpus anywhere it looks (an empty $ATTNLAB_DATA_DIR, an empty cache, offline): the numbers task."""
    (tmp_path / "empty").mkdir()
    proc = attnlab("demo", "--runs-dir", str(tmp_path / "demo"), "--max-minutes", "0.05", "--threads", "1",
                   env={"ATTNLAB_DATA_DIR": str(tmp_path / "empty"), "XDG_CACHE_HOME": str(tmp_path / "cache")},
                   timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "using the offline `numbers` task" in out
    assert out.count("cross-attention, layer") == 1 and out.count("Bahdanau attention") == 1  # one table per model
    assert (tmp_path / "demo" / "transformer" / "attention").is_dir()
    assert "budget 0.05 min" in proc.stderr  # the plan says what it planned for


@pytest.mark.parametrize("kind, peak, pairs, width", [
    ("transformer", 64.0, 10_000, 128),  # the slow laptop: compute 96, the shortest pairs
    ("transformer", 322.0, 20_000, 128),  # a fast 2-core machine keeps the tiny tier's 20k
    ("bahdanau", 64.0, 20_000, 128),  # the GRU learned less from the 10k, and its attention formed at d=128
    ("bahdanau", 322.0, 20_000, 192),  # ... which a fast machine's tier forms at its own 192
])
def test_the_demo_sizes_a_slow_machines_models_for_the_notes(kind, peak, pairs, width):
    from attnlab.demo import _config
    from attnlab.training import sizing

    cfg, why = _config(kind, "fra-eng", "fra-eng.zip", 1.5, 1, peak)
    assert cfg.train.size == "tiny" and cfg.data.max_pairs == pairs and cfg.model.num_hiddens == width
    assert ("shortest pairs instead" in why) == (pairs == 10_000)
    assert ("d=128 instead" in why) == (kind == "bahdanau" and width == 128)
    # the tier's Transformer has one layer; the demo's has two, whose map of the notes' example forms more often
    assert cfg.model.num_layers == (2 if kind == "transformer" else 1)
    assert ("2 layers instead" in why) == (kind == "transformer")
    # what train() does with the keys the demo passes (training/session.py, settle_config): nothing
    assert sizing.resolve(cfg, sizing.every_key(cfg))[0] == cfg
    if kind == "bahdanau":
        assert cfg.model.embed_size == width


@pytest.mark.parametrize("tick", [0.05, 1.0])  # seconds per clock reading: a fast machine, a very slow one
def test_a_demo_run_validates_twice_so_doctor_can_check_overfitting(tmp_path, monkeypatch, tick):
    """§10: overfitting shows as a validation loss that rises while the training loss falls, which needs two
    validations; the demo's 1.5-minute runs make them however few updates the machine allows."""
    import attnlab.training.loop as loop
    from attnlab import runs
    from attnlab.analysis.diagnose import doctor
    from attnlab.demo import DEMO_OVERRIDES
    from tests.conftest import tiny_config
    from tests.training.test_budget import _FakeClock

    monkeypatch.setattr(loop, "clock", _FakeClock(tick))
    cfg = tiny_config("bahdanau", *DEMO_OVERRIDES, "train.max_minutes=1.5", "train.eval_max_sentences=8")
    res = loop.train(cfg, tmp_path / "run", progress=False)
    valid = [r for r in runs.read_metrics(tmp_path / "run") if r.get("event") == "valid"]
    assert res.stopped_by == "max_minutes" and len(valid) == 2
    assert valid[0]["step"] < valid[1]["step"] == res.step
    finding = next(f for f in doctor.run(tmp_path / "run").findings if f.symptom == "overfitting")
    assert finding.checked


@pytest.mark.parametrize("best, typical, free, speed, start, said", [
    ({2: 78.0, 1: 40.0}, {}, 1, 78.0, 2, ""),  # quiet: two threads nearly twice one; the probe as before
    ({2: 30.0, 1: 40.0}, {1: 35.0}, 1, 35.0, 1, "other programs"),  # a busy neighbour: one thread beats two
    ({2: 50.0, 1: 40.0}, {2: 33.0}, 1, 33.0, 2, "other programs"),  # shared cores, two still ahead
    ({2: 50.0, 1: 40.0}, {2: 33.0}, None, 33.0, 2, "other programs"),  # no load sample (off Linux)
    ({2: 50.0, 1: 40.0}, {2: 33.0}, 2, 33.0, 2, "no other program was seen"),  # poor scaling, nobody else
])
def test_the_demo_sizes_for_the_load_it_measures(monkeypatch, best, typical, free, speed, start, said):
    """The size follows the probes; the line blames other programs only when the load sample saw some."""
    import torch

    from attnlab import demo, device

    def probe(*a, **k):
        n = torch.get_num_threads()
        return typical[n] if k.get("typical") else best[n]

    monkeypatch.setattr(device, "measure_peak_gflops", probe)
    monkeypatch.setattr(device, "idle_sampler", lambda: None if free is None else (lambda: free))
    torch.set_num_threads(2)
    try:
        got, why = demo.machine_speed(0)
        assert (got, torch.get_num_threads()) == (speed, start) and (said in why if said else why == "")
        torch.set_num_threads(2)
        assert demo.machine_speed(2) == (best[2], "")  # --threads 2: the user's count, measured as it is
    finally:
        torch.set_num_threads(1)
