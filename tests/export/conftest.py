"""Runs for the export tests: trained on `numbers` once per session, cached by (kind, steps, overrides)."""

from __future__ import annotations

import pytest

from tests.conftest import tiny_config


@pytest.fixture(scope="session")
def export_runs(tmp_path_factory):
    """``export_runs(kind, steps, *overrides) -> Path``: a tiny run trained for ``steps`` steps.

    150 steps give short real outputs that end with ``<eos>``; 1 step gives an untrained model whose
    outputs run to the length limit (the truncation path).
    """
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("export-runs")
    cache = {}

    def get(kind: str = "transformer", steps: int = 150, *overrides: str):
        key = (kind, steps, overrides)
        if key not in cache:
            run = root / f"{kind}-{steps}-{len(cache)}"
            train(tiny_config(kind, f"train.max_steps={steps}", *overrides), run, progress=False)
            cache[key] = run
        return cache[key]

    return get


@pytest.fixture(scope="session")
def numbers_sentences():
    """60 English number sentences, most of them outside the tiny runs' training pairs."""
    from attnlab.data.numbers import numbers_pairs

    return [src for src, _ in numbers_pairs(60, seed=5)]
