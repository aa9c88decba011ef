"""Learning-rate schedules (the notes' §10: lr is the first knob to tune).

All schedules warm up linearly over ``warmup_steps`` (the Transformer needs it: Adam's early
second-moment estimates are noisy and a full lr at step 1 can blow up a post-norm stack).
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from attnlab.config import TrainConfig


def lr_factor(step: int, cfg: TrainConfig, shape: str | None = None) -> float:
    """Multiplier of ``cfg.lr`` at optimizer step ``step`` (0-based: the first update uses step 0) for the
    step-defined schedules ``shape`` (default ``cfg.schedule``; "auto" without a budget = inverse_sqrt).
    Budgeted schedules are planned in ``budget.py``."""
    s = step + 1
    warm = cfg.warmup_steps
    shape = shape or cfg.schedule
    if warm and s <= warm:
        return s / warm
    if shape == "constant":
        return 1.0
    if shape in ("inverse_sqrt", "auto"):
        # Vaswani et al. (2017) §5.3 after warmup, normalised so the peak factor is 1.
        return math.sqrt(max(warm, 1) / s)
    # cosine decay from lr to min_lr_ratio * lr over the remaining steps
    total = max(cfg.max_steps - warm, 1)
    progress = min(max(s - warm, 0) / total, 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def make_scheduler(optimizer: Optimizer, cfg: TrainConfig) -> LambdaLR:
    return LambdaLR(optimizer, lambda step: lr_factor(step, cfg))
