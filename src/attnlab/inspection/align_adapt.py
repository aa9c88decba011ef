"""Adapt a trained model to the gold sentences before reading its alignment (notes §25): the same data
IBM Model 2 gets.

The IBM Model 2 baseline of ``attnlab align`` is trained on the gold sentence pairs themselves (the
usual, transductive practice of word alignment: an aligner sees the text it aligns, never its links).
The translation model has not seen them: it learned Tatoeba's short everyday sentences, and the gold
set is parliamentary debate. :func:`adapt` puts the two on the same footing. It trains a *copy* of the
model for a few epochs on the gold pairs' text, with the trainer's own update (:func:`train_step`: the run's
loss, teacher forcing §3, clipping, the non-finite guard), optimizer (:func:`make_optimizer`) and length-bucketed batches (:class:`TokenBatchSampler`),
and returns a :class:`~attnlab.translator.Translator` of that copy. Nothing is written to the run.

So the learner can measure how much of attention's distance from the gold links is the domain gap
(bench/RESULTS.md, "Adapted to the gold sentences"): the run on disk is untouched, and the heads of
the copy are read and scored exactly as the original's.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.inspection.align_extract import Side
from attnlab.training.loop import train_step
from attnlab.training.optim import make_optimizer
from attnlab.translator import Translator

#: What was measured: 40 epochs at lr 1e-3 took a 15-minute Transformer's average of all heads from
#: 47.3 % to 28.7 % AER (bench/RESULTS.md); fewer epochs gain less (10: 30.6 %, 20: 29.6 %).
ADAPT_LR = 1e-3
ADAPT_BATCH_TOKENS = 800  # about 24 gold sentences: the batches the measured runs used


@dataclass
class Adaptation:
    """What :func:`adapt` did: the epochs and updates, the lr, the first and last epoch's training
    loss (mean ``−log p`` per target piece, label smoothing left out) and the seconds it took."""

    epochs: int
    updates: int
    lr: float
    nll_first: float
    nll_last: float
    seconds: float

    def to_json(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


def adapt(
    tr: Translator,
    pairs: Sequence[tuple[Side, Side]],
    epochs: int,
    lr: float = ADAPT_LR,
    batch_tokens: int = ADAPT_BATCH_TOKENS,
    seed: int = 0,
) -> tuple[Translator, Adaptation]:
    """A :class:`Translator` of a copy of ``tr``'s model trained ``epochs`` epochs on ``pairs``
    (``(source side, target side)`` in the model's direction, as :func:`attnlab.inspection.align.cross_maps`
    takes them), and what was done. ``tr`` and its run folder are left as they were.

    Each update is one length-bucketed batch of at most ``batch_tokens`` padded tokens (a longer pair
    gets a batch of its own), the loss the run trained with (its label smoothing), clipped as the
    run clipped, AdamW at a constant ``lr`` (no warm-up: the model is trained already). Deterministic
    in ``seed``.
    """
    if epochs < 1:
        raise ValueError(f"epochs={epochs}: adapt at least one epoch")
    t0 = time.perf_counter()
    torch.manual_seed(seed)
    model: nn.Module = copy.deepcopy(tr.model).train()
    tc = dataclasses.replace(tr.cfg.train, lr=lr)
    opt = make_optimizer(model, tc)
    src = [s.ids for s, _ in pairs]
    tgt = [t.ids for _, t in pairs]
    longest = max(max(len(a), len(b)) + 1 for a, b in zip(src, tgt))
    sampler = TokenBatchSampler(
        [len(a) for a in src], [len(b) for b in tgt], max(batch_tokens, longest), len(pairs), True, seed
    )
    nll: list[float] = []
    updates = 0
    for epoch in range(epochs):
        total = tokens = 0.0
        for idx in sampler.epoch(epoch):
            batch = collate([src[i] for i in idx], [tgt[i] for i in idx], idx).to(tr.device)
            out, _, _ = train_step(model, opt, batch, 1.0 / batch.num_tgt_tokens, lr, tc, tr.device)  # the loop's own
            updates += 1
            total += float(out.nll_sum)
            tokens += batch.num_tgt_tokens
        nll.append(total / max(tokens, 1))
    model.eval()
    adapted = Translator(model, tr.src_tok, tr.tgt_tok, tr.cfg, tr.device, tr.run_dir, tr.checkpoint)
    done = Adaptation(epochs, updates, lr, nll[0], nll[-1], time.perf_counter() - t0)
    if not math.isfinite(done.nll_last):
        raise ValueError(f"adapting at lr {lr} diverged (loss {done.nll_last}); try a smaller lr")
    return adapted, done
