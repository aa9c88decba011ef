"""Sampling instead of search: each output token drawn from the model's distribution (fairseq's
``--sampling``, ``--sampling-topk``, ``--temperature``; Fan et al. 2018 for top-k).

Dimension key: B batch (rows still decoding), V vocab.

Greedy search (:func:`attnlab.decoding.greedy.greedy_search`) takes this object's draw in place of its
argmax; everything else (the banned tokens, the length limits, ``<eos>``) is the same. A draw is reproducible:
the generator is seeded from ``decode.seed``. The hypothesis' score stays the model's own log-probability of
what was drawn (temperature and top-k shape the draw, not the score), so sampled and searched outputs compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["Sampler"]


@dataclass
class Sampler:
    """Draws one token a row: from the ``topk`` most likely (0 = every allowed token), at ``temperature``."""

    generator: torch.Generator
    topk: int = 0
    temperature: float = 1.0

    @classmethod
    def seeded(cls, seed: int, device: torch.device, topk: int = 0, temperature: float = 1.0) -> Sampler:
        """A sampler whose draws depend only on ``seed`` (and the inputs), on ``device``'s generator."""
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))
        return cls(generator, int(topk), float(temperature))

    def draw(self, log_probs: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, V)`` log-probabilities (banned tokens at ``-inf``) → the drawn tokens' log-probabilities
        and the tokens, ``(B,)`` each. With ``topk = 1`` (or a temperature near 0) this is the argmax."""
        scaled = log_probs / self.temperature  # (B, V)
        if 0 < self.topk < scaled.shape[-1]:
            kth = scaled.topk(self.topk, dim=-1).values[:, -1:]  # (B, 1) the k-th largest
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)  # (B, V)
        tokens = torch.multinomial(probs, 1, generator=self.generator)  # (B, 1)
        return log_probs.gather(1, tokens)[:, 0], tokens[:, 0]
