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

:func:`teach` goes one step further (Garg et al. 2019, "Jointly learning to align and translate with
Transformer models", their unsupervised variant): the same update plus a second term that pulls one
cross-attention head toward links read from the model's *own* average of all heads. No gold link is
used. It answers "which head should I read?" with "the one you trained to align".
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from attnlab.analysis.align.extract import Side
from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.i18n import _
from attnlab.models import traits
from attnlab.training.loop import train_step
from attnlab.training.losses import LossOutput, token_loss
from attnlab.training.optim import make_optimizer
from attnlab.translator import Translator

#: AdamW's constant learning rate for :func:`adapt` and :func:`teach` (how it was chosen, and the epochs:
#: docs/experiments/alignment.md).
ADAPT_LR = 1e-3
ADAPT_BATCH_TOKENS = 800  # padded tokens per update: about 24 of the Hansards gold's sentences
#: The alignment term's weight in :func:`teach` (per labelled row, beside the per-piece translation loss).
TEACH_WEIGHT = 1.0


@dataclass
class Adaptation:
    """What :func:`adapt` did: the epochs and updates, the lr, the first and last epoch's training
    loss (mean ``−log p`` per target piece, label smoothing left out), the seconds it took and the seed
    of its batch order and dropout."""

    epochs: int
    updates: int
    lr: float
    nll_first: float
    nll_last: float
    seconds: float
    seed: int = 0

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
    (``(source side, target side)`` in the model's direction, as :func:`attnlab.analysis.align.score.cross_maps`
    takes them), and what was done. ``tr`` and its run folder are left as they were.

    Each update is one length-bucketed batch of at most ``batch_tokens`` padded tokens (a longer pair
    gets a batch of its own), the loss the run trained with (its label smoothing), clipped as the
    run clipped, AdamW at a constant ``lr`` (no warm-up: the model is trained already). Deterministic
    in ``seed``.
    """
    t0 = time.perf_counter()
    model, updates, nll, _per_epoch = _train_copy(tr, pairs, epochs, lr, batch_tokens, seed)
    adapted = Translator(model, tr.src_tok, tr.tgt_tok, tr.cfg, tr.device, tr.run_dir, tr.checkpoint)
    done = Adaptation(epochs, updates, lr, nll[0], nll[-1], time.perf_counter() - t0, seed)
    if not math.isfinite(done.nll_last):
        raise ValueError(_("adapting at lr {lr} diverged (loss {loss}); try a smaller lr").format(
            lr=lr, loss=done.nll_last))
    return adapted, done


@dataclass
class Teaching:
    """What :func:`teach` did: the head taught (0-based), epochs, updates, the loss weight, and the
    head's cross-entropy against its labels (mean over labelled target pieces) in the first and last
    epoch, with the seconds it took and the seed."""

    layer: int
    head: int
    epochs: int
    updates: int
    weight: float
    align_first: float
    align_last: float
    seconds: float
    seed: int = 0

    @property
    def name(self) -> str:
        return f"layer {self.layer + 1} head {self.head + 1}"

    def to_json(self) -> dict[str, float | int]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


def teach(
    tr: Translator,
    pairs: Sequence[tuple[Side, Side]],
    labels: Sequence[Tensor],
    layer: int,
    head: int,
    epochs: int,
    weight: float = TEACH_WEIGHT,
    lr: float = ADAPT_LR,
    batch_tokens: int = ADAPT_BATCH_TOKENS,
    seed: int = 0,
) -> tuple[Translator, Teaching]:
    """A copy of ``tr``'s model whose cross-attention head ``(layer, head)`` (0-based) was trained to put its
    weight on ``labels``, beside the translation loss (Garg et al. 2019, "Jointly learning to align and
    translate with Transformer models", their unsupervised variant: the labels are the model's own links).

    ``labels[i]`` is pair ``i``'s ``(n + 1, m + 1)`` 0/1 matrix over its decoder inputs and source keys
    (:func:`attnlab.analysis.align.extract.piece_labels`); a row without a 1 is left out of the term.
    The term is the cross-entropy of the head's row against the label row spread evenly over its 1s,
    averaged over labelled rows, times ``weight``; the rest is :func:`adapt`'s update. ``tr`` is unchanged.
    """
    if len(labels) != len(pairs):
        raise ValueError(f"{len(labels)} label matrices for {len(pairs)} pairs")
    kind = "cross" if "cross" in traits(tr.model.config).attention else None
    if kind is None:
        raise ValueError(f"model.kind={tr.model.config.kind} has no cross-attention head to teach")
    t0 = time.perf_counter()
    seen: list[float] = []

    def objective(model: nn.Module, batch) -> tuple[LossOutput, Tensor]:
        out = model(batch.src, batch.src_valid_lens, batch.tgt_in, need_weights=True, compute_logits=False)
        lo = token_loss(model, out.hidden, batch.tgt_out, tr.cfg.train.label_smoothing)
        att = out.attention["cross"][:, layer, head].float()  # (B, T, S)
        target = torch.zeros_like(att)  # (B, T, S)
        for r, i in enumerate(batch.index.tolist()):
            m = labels[i]
            target[r, : m.shape[0], : m.shape[1]] = m
        mass = target.sum(-1)  # (B, T)
        rows = mass > 0
        ce = -(target / mass.clamp_min(1.0)[..., None] * att.clamp_min(1e-9).log()).sum(-1)[rows]  # (rows,)
        term = ce.mean() if ce.numel() else att.sum() * 0.0
        seen.append(float(term.detach()))
        return lo, weight * term

    model, updates, _nll, per_epoch = _train_copy(tr, pairs, epochs, lr, batch_tokens, seed, objective, seen)
    taught = Translator(model, tr.src_tok, tr.tgt_tok, tr.cfg, tr.device, tr.run_dir, tr.checkpoint)
    done = Teaching(layer, head, epochs, updates, weight, per_epoch[0], per_epoch[-1], time.perf_counter() - t0, seed)
    if not math.isfinite(done.align_last):
        raise ValueError(_("teaching at lr {lr} diverged; try a smaller lr").format(lr=lr))
    return taught, done


def _train_copy(tr: Translator, pairs: Sequence[tuple[Side, Side]], epochs: int, lr: float, batch_tokens: int,
                seed: int, objective=None, seen: list[float] | None = None):
    """Train a deep copy of ``tr.model`` (``objective``: :func:`train_step`'s). Returns the copy (in eval
    mode), the updates, the mean ``−log p`` per target piece of each epoch, and the mean of ``seen`` (what the
    objective appended) per epoch."""
    if epochs < 1:
        raise ValueError(f"epochs={epochs}: adapt at least one epoch")
    torch.manual_seed(seed)
    model: nn.Module = copy.deepcopy(tr.model).train()
    tc = dataclasses.replace(tr.cfg.train, lr=lr)
    opt = make_optimizer(model, tc)
    src = [s.ids for s, _t in pairs]
    tgt = [t.ids for _s, t in pairs]
    longest = max(max(len(a), len(b)) + 1 for a, b in zip(src, tgt))
    sampler = TokenBatchSampler(
        [len(a) for a in src], [len(b) for b in tgt], max(batch_tokens, longest), len(pairs), True, seed
    )
    nll: list[float] = []
    extra: list[float] = []
    updates = 0
    for epoch in range(epochs):
        total = tokens = 0.0
        first = len(seen) if seen is not None else 0
        for idx in sampler.epoch(epoch):
            batch = collate([src[i] for i in idx], [tgt[i] for i in idx], idx).to(tr.device)
            out, _loss, _updated = train_step(model, opt, batch, 1.0 / batch.num_tgt_tokens, lr, tc, tr.device, objective)
            updates += 1
            total += float(out.nll_sum)
            tokens += batch.num_tgt_tokens
        nll.append(total / max(tokens, 1))
        if seen is not None:
            part = seen[first:]
            extra.append(sum(part) / max(len(part), 1))
    model.eval()
    return model, updates, nll, extra
