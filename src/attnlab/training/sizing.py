"""``train.size="auto"``: size the model, vocabulary and batches for this machine and this budget.

What a run can learn in M minutes depends on how many floating-point operations it can do, so the
choice is keyed on the **compute budget** ``C = peak GFLOP/s × minutes`` (a 1-second fp32 matmul probe
measures the peak on the threads the run will use). A 2.5-minute run on a 64 GFLOP/s laptop (C = 160)
needs a small model, a word vocabulary of short sentences and small batches, so that it makes enough
updates to learn anything; an hour on a fast machine (C ≈ 20,000) affords the base preset.

The tiers below were measured with ``bench/quality.py`` (budgets × machine speeds, bench/RESULTS.md).
Keys the user set (on the command line, in ``--config``) always win over the tier's; ``--size base``
(``train.size=base``) keeps the preset as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnlab import config as config_mod
from attnlab import device
from attnlab.config import Config, ModelConfig
from attnlab.models import traits


@dataclass(frozen=True)
class Tier:
    name: str
    max_compute: float  # GFLOP/s x minutes below which this tier is chosen
    settings: dict[str, dict[str, dict[str, Any]]]  # family -> section -> key -> value


#: The corpus file is sorted by length: its first 20k pairs are the 1-4 word sentences, the first 80k
#: reach 5-6 words. A small budget spends its updates better on them (bench/RESULTS.md).
_SHORT, _MEDIUM_SHORT = 20_000, 80_000
#: The small Transformer's data and batches: at 12 minutes like 64 GFLOP/s (C ≈ 770) the 120k shortest pairs
#: in 800-token batches scored 29.3 / 30.6 test BLEU against 80k in 600-token batches' 26.8 / 27.4 / 27.5,
#: and at 8 minutes like 64 (C ≈ 510) 25.8 against 24.3 (bench/RESULTS.md, 2026-12-02). The GRU's was not measured.
_SMALL_PAIRS, _SMALL_BATCH = 120_000, 800
#: The small GRU's width: at 12 / 8 minutes like 64 GFLOP/s, 192 scored 19.6 / 17.4 test BLEU against 256's 17.2 / 14.9
#: (more updates), and its attention moved 0.41 / 0.33 against 0.16 / 0.17 (seed 1, bench/RESULTS.md, 2026-12-02);
#: seeds 2 and 3 at 12 minutes: +0.65 and +0.61 BLEU, movement 0.29 / 0.35 against 0.24 / 0.18.
_SMALL_GRU = 192

#: The tiny/small cut: at 1.5 minutes on a 195 GFLOP/s machine (C ≈ 290) tiny got all four of the notes'
#: sentences right for both models and small one of four (486 and 364 updates); at C ≈ 480 small led in
#: BLEU (16.0 against 12.7) but still missed one sentence. 500 keeps the 1.5-minute demo tiny on every
#: 2-core machine up to 330 GFLOP/s (bench/RESULTS.md, "How the tiers were chosen").
TIERS: tuple[Tier, ...] = (
    Tier("tiny", 500, {
        "transformer": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
                        "model": {"num_hiddens": 128, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 512,
                                  "dropout": 0.0},
                        "train": {"lr": 2e-3}},
        "gru": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
                "model": {"num_hiddens": 192, "embed_size": 192, "num_layers": 1, "dropout": 0.0},
                "train": {"lr": 3e-3}},
    }),
    Tier("small", 1500, {
        "transformer": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SMALL_PAIRS,
                                         "batch_tokens": _SMALL_BATCH},
                        "model": {"num_hiddens": 192, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 768,
                                  "dropout": 0.0},
                        "train": {"lr": 1.5e-3}},
        "gru": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _MEDIUM_SHORT, "batch_tokens": 800},
                "model": {"num_hiddens": _SMALL_GRU, "embed_size": _SMALL_GRU, "num_layers": 1, "dropout": 0.0},
                "train": {"lr": 3e-3}},
    }),
    #: medium: dropout 0 won 41.0 against 37.6 greedy test BLEU in 15 minutes at the same load (1,869 and
    #: 1,614 updates, under two epochs; bench/RESULTS.md). The GRU's 0.1 was not measured against 0.
    Tier("medium", 8000, {
        "transformer": {"data": {"batch_tokens": 1600}, "model": {"dropout": 0.0}, "train": {"lr": 1.5e-3}},
        "gru": {"data": {"batch_tokens": 2400}, "model": {"dropout": 0.1}, "train": {"lr": 3e-3}},
    }),
)


def family(model: ModelConfig) -> str:
    """Which tier settings a model takes: the recurrent ones ("gru") or the Transformers'."""
    return "gru" if traits(model).recurrent else "transformer"


def tier_for(compute: float) -> Tier | None:
    """The tier for ``compute`` GFLOP/s-minutes; None = the base preset."""
    return next((t for t in TIERS if compute < t.max_compute), None)


def apply_tier(cfg: Config, tier: Tier | None, explicit: frozenset[str]) -> Config:
    """``cfg`` with the tier's settings for its model family, except the keys in ``explicit``."""
    name = "base" if tier is None else tier.name
    items = [f"train.size={name}"]
    if tier is not None:
        for section, values in tier.settings[family(cfg.model)].items():
            items += [f"{section}.{k}={v}" for k, v in values.items() if f"{section}.{k}" not in explicit]
    return config_mod.apply_overrides(cfg, items)


def explicit_keys(cfg: Config) -> frozenset[str]:
    """The keys where ``cfg`` differs from its kind's preset (for callers that do not know what the
    user typed: the library's ``train``)."""
    base = config_mod.to_dict(config_mod.preset(cfg.model.kind))
    mine = config_mod.to_dict(cfg)
    return frozenset(f"{s}.{k}" for s, sec in mine.items() for k, v in sec.items() if base[s].get(k) != v)


def resolve(cfg: Config, explicit: frozenset[str] | None = None, peak: float | None = None) -> tuple[Config, str]:
    """Settle ``train.size``: returns the concrete config and one line saying what was chosen and why.

    Only ``size="auto"`` with a minute budget changes anything; any other run takes the base preset.
    """
    tc = cfg.train
    if tc.size != "auto":
        if tc.size == "base":
            return cfg, ""
        tier = next(t for t in TIERS if t.name == tc.size)
        return apply_tier(cfg, tier, explicit if explicit is not None else explicit_keys(cfg)), ""
    if tc.max_minutes <= 0 or cfg.data.dataset != "fra-eng":
        return apply_tier(cfg, None, frozenset()), ""
    explicit = explicit if explicit is not None else explicit_keys(cfg)
    peak = peak if peak is not None else device.measure_peak_gflops()
    compute = peak * tc.max_minutes
    tier = tier_for(compute)
    sized = apply_tier(cfg, tier, explicit)
    return sized, describe(sized, peak, tier)


def describe(cfg: Config, peak: float, tier: Tier | None) -> str:
    d, m = cfg.data, cfg.model
    vocab = f"BPE {d.bpe_vocab_size // 1000}k" if d.tokenizer == "bpe" else f"word vocabulary (min freq {d.min_freq})"
    pairs = f", the {d.max_pairs:,} shortest pairs" if d.max_pairs else ""
    return (f"machine {peak:.0f} GFLOP/s, budget {cfg.train.max_minutes:g} min "
            f"(compute {peak * cfg.train.max_minutes:,.0f} GFLOP/s·min) → size {tier.name if tier else 'base'}: "
            f"d={m.num_hiddens}, {m.num_layers} layers, {vocab}{pairs}, {d.batch_tokens}-token batches, "
            f"dropout {m.dropout:g}, lr {cfg.train.lr:g}")
