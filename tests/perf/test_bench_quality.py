"""bench/quality.py scores a run with the corpus it was given, and bench/wallclock.py reads what the run recorded."""

import json

import pytest

from tests.perf.test_bench_throughput import BENCH, _load_script


@pytest.mark.slow
def test_a_run_is_scored_on_the_corpus_given_without_the_environment(fra_eng_zip, tmp_path, monkeypatch, capsys):
    # A run folder keeps no data path (it may move): scoring must take --data again, not fail after training.
    monkeypatch.delenv("ATTNLAB_DATA_DIR", raising=False)
    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")
    quality = _load_script(BENCH / "quality.py")
    tiny = ["train.max_steps=3", "train.size=base", "model.num_hiddens=32", "model.num_layers=1", "model.num_heads=2",
            "model.ffn_num_hiddens=64", "data.tokenizer=word", "data.max_pairs=2000", "train.eval_max_sentences=8",
            "decode.max_len_b=4"]
    row = quality.run_one("transformer", 0.5, tmp_path, str(fra_eng_zip), 1, tiny, beam=1, tag="t")
    assert row["updates"] == 3 and 0 <= row["bleu_greedy"] <= 100
    meta = json.loads((tmp_path / "transformer-t" / "meta.json").read_text())
    assert meta["wall_s"]["update"] > 0

    wallclock = _load_script(BENCH / "wallclock.py")
    assert wallclock.main([str(tmp_path / "transformer-t"), "--per-update"]) == 0
    out = capsys.readouterr().out
    assert "| update |" in out and "(3 updates)" in out
