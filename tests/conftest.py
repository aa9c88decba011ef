"""Shared fixtures: tiny configs and tiny trained runs (trained once per session, on the `numbers` task)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from attnlab import config as C

torch.set_num_threads(1)  # tests run under pytest-xdist on 2 cores: one thread per worker
os.environ.setdefault("ATTNLAB_OFFLINE", "1")

SHARED_DATA = Path(os.environ.get("ATTNLAB_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def tiny_config(kind: str = "transformer", *extra: str) -> C.Config:
    """A model small enough to train in seconds on the `numbers` task."""
    return C.apply_overrides(C.preset(kind), [
        "data.dataset=numbers", "data.tokenizer=word", "data.numbers_size=400", "data.batch_tokens=600", "data.num_steps=16",
        "model.num_hiddens=32", "model.embed_size=32", "model.num_layers=1", "model.num_heads=2",
        "model.ffn_num_hiddens=64", "model.dropout=0.1", "model.attention_dropout=0.1", "train.lr=3e-3", "train.warmup_steps=5",
        "train.eval_every=0", "train.eval_frac=0", "train.save_every=0", "train.log_every=5", "train.eval_max_sentences=16",
        "train.label_smoothing=0.1",
        "train.threads=1", "decode.max_len_b=6", *extra])


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """Trained tiny runs of every model kind, built lazily: tiny_runs('bahdanau') -> Path."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, Path] = {}

    def get(kind: str = "transformer") -> Path:
        if kind not in cache:
            run = root / kind
            train(tiny_config(kind, "train.max_steps=40"), run, progress=False)
            cache[kind] = run
        return cache[kind]

    return get


@pytest.fixture(scope="session")
def fra_eng_zip() -> Path:
    path = (SHARED_DATA / "fra-eng.zip").resolve()  # absolute: tests change folder, CI names it relatively
    if not path.is_file():
        pytest.skip(f"fra-eng corpus not found at {path} (set ATTNLAB_DATA_DIR)")
    return path


@pytest.fixture
def english_only(monkeypatch):
    """The test starts and ends in English, whatever ATTNLAB_LANG the machine has (the i18n tests)."""
    from attnlab import i18n

    monkeypatch.delenv(i18n.ENV_VAR, raising=False)
    i18n.set_language("en")
    yield
    i18n.set_language("en")
