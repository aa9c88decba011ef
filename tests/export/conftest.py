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


# Two layers of width 64, 600 steps on 3,000 pairs: every output of `unseen_numbers` is the right
# French (no empty string), so int8 rounding cannot flip it unless it is far off (about 12 s).
STABLE_PAIRS = 3000
STABLE = ("transformer", 600, f"data.numbers_size={STABLE_PAIRS}", "model.num_hiddens=64", "model.embed_size=64",
          "model.ffn_num_hiddens=128", "model.num_layers=2")


@pytest.fixture(scope="session")
def stable_run(export_runs):
    """A Transformer trained well on `numbers`: greedy gives the reference on every `unseen_numbers` pair."""
    return export_runs(*STABLE)


@pytest.fixture(scope="session")
def unseen_numbers():
    """200 (English, French) number pairs that `stable_run` never saw (none of its task's pairs)."""
    from attnlab.data.corpus import numbers_pairs

    seen = set(numbers_pairs(STABLE_PAIRS))
    return [p for p in numbers_pairs(2000, seed=5) if p not in seen][:200]
