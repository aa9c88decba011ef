"""``train.size="auto"``: size the model, vocabulary and batches for this machine and this budget.

What a run can learn in M minutes depends on how many floating-point operations it can do, so the
choice is keyed on the **compute budget** ``C = peak GFLOP/s × minutes`` (the 1-second fp32 matmul probe,
:func:`attnlab.device.measure_peak_gflops`, on the threads the run will use). A few minutes on a laptop
need a small model, a word vocabulary of short sentences and small batches, so that the run makes enough
updates to learn anything; an hour on a fast machine affords the base preset.

The tiers below were chosen by measurement with ``bench/quality.py`` (budgets × machine speeds): the
figures behind each cut and setting are in docs/experiments/sizing-tiers.md.
Keys the user set (on the command line, in ``--config``) always win over the tier's; ``--size base``
(``train.size=base``) keeps the preset as it is. ``--size notes`` is not chosen by any budget: it is the
notes' own sizes (§5–8: 32-wide embeddings and states, an output layer W_o of its own), for a model whose
shapes are the ones the notes write down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from attnlab import config as config_mod
from attnlab import device
from attnlab.config import Config, ModelConfig
from attnlab.data.pairs import corpus_of
from attnlab.i18n import _
from attnlab.models import traits


@dataclass(frozen=True)
class Tier:
    name: str
    max_compute: float  # GFLOP/s x minutes below which this tier is chosen
    settings: dict[str, dict[str, dict[str, Any]]]  # family -> section -> key -> value


#: The corpus file is sorted by length: its first 20k pairs are the 1-4 word sentences, the first 80k
#: reach 5-6 words. A small budget spends its updates better on them (bench/RESULTS.md).
_SHORT, _MEDIUM_SHORT = 20_000, 80_000
#: The small Transformer's data and batches: more, longer pairs in larger batches scored higher at its
#: budgets (docs/experiments/sizing-tiers.md). The GRU's were not measured.
_SMALL_PAIRS, _SMALL_BATCH = 120_000, 800
#: The small Transformer's vocabulary: words seen at least 5 times. A smaller W_o makes each update cheaper, and
#: the extra updates scored higher than the rarer words (bench/RESULTS.md, "The tiers re-tuned under the quota,
#: timed"). The other tiers keep 3.
_SMALL_MIN_FREQ = 5
#: The tiny and small Transformers' depth: one encoder and one decoder layer. Under a laptop's CPU quota the
#: second layer's cost bought more as updates, and a third layer lost (bench/RESULTS.md, "Depth under the
#: quota"). The demo keeps two
#: (attnlab.demo.DEMO_TRANSFORMER_LAYERS), whose map of the notes' example formed more often.
_SHORT_LAYERS = 1
#: The small GRU's width: narrower than the preset's 256, it makes more updates in the budget, and scored
#: higher with attention that moves more (docs/experiments/sizing-tiers.md).
_SMALL_GRU = 192

#: The tiny/small cut at C = 500: below it, tiny gets more of the notes' sentences right than small, and the
#: 1.5-minute demo stays tiny on the slow machines measured (docs/experiments/sizing-tiers.md).
TIERS: tuple[Tier, ...] = (
    Tier("tiny", 500, {
        "transformer": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
                        "model": {"num_hiddens": 128, "num_layers": _SHORT_LAYERS, "num_heads": 4,
                                  "ffn_num_hiddens": 512, "dropout": 0.0},
                        "train": {"lr": 2e-3}},
        "gru": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
                "model": {"num_hiddens": 192, "embed_size": 192, "num_layers": 1, "dropout": 0.0},
                "train": {"lr": 3e-3}},
    }),
    Tier("small", 1500, {
        "transformer": {"data": {"tokenizer": "word", "min_freq": _SMALL_MIN_FREQ, "max_pairs": _SMALL_PAIRS,
                                         "batch_tokens": _SMALL_BATCH},
                        "model": {"num_hiddens": 192, "num_layers": _SHORT_LAYERS, "num_heads": 4,
                                  "ffn_num_hiddens": 768, "dropout": 0.0},
                        "train": {"lr": 1.5e-3}},
        "gru": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _MEDIUM_SHORT, "batch_tokens": 800},
                "model": {"num_hiddens": _SMALL_GRU, "embed_size": _SMALL_GRU, "num_layers": 1, "dropout": 0.0},
                "train": {"lr": 3e-3}},
    }),
    #: medium: no dropout for the Transformer, which sees its data under two epochs in such a budget
    #: (docs/experiments/sizing-tiers.md). The GRU's 0.1 was not measured against 0.
    Tier("medium", 8000, {
        "transformer": {"data": {"batch_tokens": 1600}, "model": {"dropout": 0.0}, "train": {"lr": 1.5e-3}},
        "gru": {"data": {"batch_tokens": 2400}, "model": {"dropout": 0.1}, "train": {"lr": 3e-3}},
    }),
)


#: The notes' sizes (§5: ``embed_size=32``; §6: ``num_hiddens=32``; §8: ``W_o: (V_tgt, 32)``, a matrix of its
#: own, so ``tie_embeddings`` is off). The GRU is one layer, the one recurrence h_t = GRU(x_t, h_t−1) of §6
#: (D2L stacks two; at this width one layer made more updates and translated better in the demo's budget,
#: docs/experiments/notes-size.md); the Transformer is D2L's (10.7 zh / 11.7 en: 32 wide, FFN 64, 4 heads,
#: 2 layers). The data and batches are the tiny tier's, so the model makes many updates in a short budget; the
#: lr is D2L's 0.005; no dropout, as in the tiers for short budgets. A named tier only: never chosen for a budget.
NOTES_TIER = Tier("notes", 0, {
    "transformer": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
                    "model": {"num_hiddens": 32, "num_layers": 2, "num_heads": 4, "ffn_num_hiddens": 64,
                              "dropout": 0.0, "tie_embeddings": False},
                    "train": {"lr": 5e-3}},
    "gru": {"data": {"tokenizer": "word", "min_freq": 3, "max_pairs": _SHORT, "batch_tokens": 400},
            "model": {"num_hiddens": 32, "embed_size": 32, "num_layers": 1, "dropout": 0.0, "tie_embeddings": False},
            "train": {"lr": 5e-3}},
})

#: Every tier ``train.size`` may name (config.SIZES lists these names after "auto" and "base").
NAMED_TIERS: tuple[Tier, ...] = (*TIERS, NOTES_TIER)


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


def every_key(cfg: Config) -> frozenset[str]:
    """Every key of ``cfg``: the ``explicit`` of a config already sized (:func:`resolve`) and then adjusted by its
    caller, which the library's ``train`` must not size again. Without it, ``train`` takes a key set back to
    its preset's value for one left unset (:func:`explicit_keys`) and gives it the tier's value again."""
    return frozenset(f"{s}.{k}" for s, sec in config_mod.to_dict(cfg).items() for k in sec)


def resolve(cfg: Config, explicit: frozenset[str] | None = None, peak: float | None = None) -> tuple[Config, str]:
    """Settle ``train.size``: returns the concrete config and one line saying what was chosen and why.

    Only ``size="auto"`` with a minute budget changes anything; any other run takes the base preset.
    """
    tc, corpus = cfg.train, corpus_of(cfg.data.dataset)
    if tc.size == "base":
        return cfg, ""
    if tc.size == "auto" and (tc.max_minutes <= 0 or corpus is None or not corpus.sized):
        return apply_tier(cfg, None, frozenset()), ""
    explicit = explicit if explicit is not None else explicit_keys(cfg)
    if tc.size != "auto":
        return apply_tier(cfg, next(t for t in NAMED_TIERS if t.name == tc.size), explicit), ""
    peak = peak if peak is not None else device.measure_peak_gflops()
    tier = tier_for(peak * tc.max_minutes)
    sized = apply_tier(cfg, tier, explicit)
    if sized.data.max_pairs >= corpus.pairs and "data.max_pairs" not in explicit:
        # A tier's "first N pairs" of fra-eng is the whole of a smaller corpus (cmn-eng's 29k): say so, read all.
        sized = replace(sized, data=replace(sized.data, max_pairs=0))
    return sized, describe(sized, peak, tier)


def describe(cfg: Config, peak: float, tier: Tier | None) -> str:
    d, m = cfg.data, cfg.model
    vocab = (f"BPE {d.bpe_vocab_size // 1000}k" if d.tokenizer == "bpe"
             else _("word vocabulary (min freq {n})").format(n=d.min_freq))
    pairs = _(", the {n:,} shortest pairs").format(n=d.max_pairs) if d.max_pairs else ""
    return _("machine {peak:.0f} GFLOP/s, budget {minutes:g} min (compute {compute:,.0f} GFLOP/s·min) → size {tier}: "
             "d={d}, {layers} layers, {vocab}{pairs}, {tokens}-token batches, dropout {dropout:g}, lr {lr:g}").format(
        peak=peak, minutes=cfg.train.max_minutes, compute=peak * cfg.train.max_minutes,
        tier=tier.name if tier else "base", d=m.num_hiddens, layers=m.num_layers, vocab=vocab, pairs=pairs,
        tokens=d.batch_tokens, dropout=m.dropout, lr=cfg.train.lr)
