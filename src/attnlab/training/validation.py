"""What a training run measures on the valid split at its planned steps (the notes' §10, §21):
the plain cross-entropy and perplexity, greedy BLEU/chrF on a sample, and the attention of the probe
sentences (``probes.jsonl``, read by ``attnlab attention --timeline``).

A fill model (the encoder-only masked LM, ``traits.task == "fill"``) translates nothing: its loss
and accuracy are over masked positions drawn by a generator seeded the same at every validation
(the same sentences, the same masks, so two validations compare), ``valid_fill_acc`` is that
masked-token accuracy in %, and BLEU is skipped. :func:`selection_score` is what the best
checkpoint is chosen by: BLEU, or the fill accuracy."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attnlab import config as config_mod
from attnlab import runs
from attnlab.config import Config
from attnlab.data.batching import TokenBatchSampler, collate
from attnlab.data.pairs import pair_of
from attnlab.device import autocast
from attnlab.evaluation.alignment import check_result
from attnlab.evaluation.bleu import bleu_tokenize, corpus_scores
from attnlab.models import traits
from attnlab.training.losses import sequence_loss
from attnlab.translator import Translator, decode_many

FILL_SEED = 0  # the validation masks' generator seed (fixed: every validation scores the same masks)


def selection_score(rec: dict[str, Any]) -> float:
    """The figure a validation record's checkpoint is ranked by (higher is better; -1 when absent):
    ``valid_bleu`` for a translation model, ``valid_fill_acc`` for a fill model."""
    return float(rec.get("valid_bleu", rec.get("valid_fill_acc", -1.0)))


def batches_of(split, sampler: TokenBatchSampler, epoch: int):
    for idx in sampler.epoch(epoch):
        yield collate([split.src[i] for i in idx], [split.tgt[i] for i in idx], idx)


def validation_loss(model: nn.Module, split, cfg: Config, device: torch.device) -> dict[str, float]:
    """Plain (unsmoothed) cross-entropy per token and perplexity over the whole split (at most
    ``train.eval_max_pairs`` pairs); a fill model's over its masked positions, plus ``valid_fill_acc``."""
    if not split.src:
        return {"valid_loss": float("nan"), "valid_ppl": float("nan"), "valid_acc": float("nan")}
    n = cfg.train.eval_max_pairs or len(split.src)  # a fixed subset keeps validation cheap under a budget
    split = dataclasses.replace(split, src=split.src[:n], tgt=split.tgt[:n])
    sampler = TokenBatchSampler([len(s) for s in split.src], [len(t) for t in split.tgt],
                                cfg.data.batch_tokens * 2, cfg.data.max_batch_size, shuffle=False, seed=0)
    was_training = model.training
    model.eval()
    nll, ntok, correct = 0.0, 0, 0
    fills = traits(model.config).task == "fill"
    masks = torch.Generator().manual_seed(FILL_SEED)  # unused by a translation model
    try:
        with torch.inference_mode(), autocast(device, cfg.train.amp):
            for batch in batches_of(split, sampler, 0):
                out = sequence_loss(model, batch.to(device), 0.0, generator=masks)
                nll += float(out.nll_sum)
                ntok += out.num_tokens
                correct += out.num_correct
    finally:
        model.train(was_training)
    loss = nll / max(ntok, 1)
    rec = {"valid_loss": loss, "valid_ppl": math.exp(min(loss, 50)), "valid_acc": correct / max(ntok, 1)}
    if fills:
        rec["valid_fill_acc"] = 100.0 * rec["valid_acc"]
    return rec


def validation_bleu(model: nn.Module, prepared, cfg: Config, device: torch.device) -> dict[str, Any]:
    """Greedy BLEU/chrF on the first ``train.eval_max_sentences`` distinct valid sources, scored as
    ``attnlab evaluate`` scores (detokenized, all references). Nothing for a fill model."""
    if traits(model.config).task == "fill":
        return {}
    split = prepared.splits["valid"]
    rows = split.unique_sources()[: cfg.train.eval_max_sentences]  # each source once, all its references
    if not rows:
        return {}
    hyps = decode_many(model, [split.src[i] for i in rows], cfg.decode, device, beam_size=1)
    texts = [prepared.tgt_tok.decode(h[0].tokens) for h in hyps]
    refs = [[prepared.tgt_tok.detokenize(r.split()) for r in split.references[i]] for i in rows]  # as `attnlab evaluate`
    scores = corpus_scores(texts, refs, tokenize=bleu_tokenize(prepared.tgt_tok.lang))
    return {"valid_bleu": scores["bleu"], "valid_chrf": scores["chrf"]}


def record_probes(model: nn.Module, prepared, cfg: Config, device: torch.device, run_dir: Path, step: int) -> None:
    """Attention of the probe sentences at this step (inspection: `attnlab attention --timeline`)."""
    sentences = [s for s in cfg.train.probe_sentences if s.strip()]
    pair = pair_of(cfg.data)
    if tuple(cfg.train.probe_sentences) == config_mod.TrainConfig().probe_sentences:
        sentences = list(pair.probes)  # the default: the pair's own (the notes' English, French, Mandarin ...)
    if not sentences:
        return
    # The translator's attention capture (the figures' and the web page's), one sentence at a time
    # (a batch would pad the keys) over sources cut as training cuts them; the model's mode is kept.
    was_training = model.training
    try:
        tr = Translator(model, prepared.src_tok, prepared.tgt_tok, cfg, device, max_src_tokens=cfg.data.num_steps - 1)
        results = [tr.attention(s) for s in sentences]
    finally:
        model.train(was_training)
    records = []
    for s, r in zip(sentences, results):
        n = len(r.tgt_tokens)  # one row per output token: the queries that produced it
        att = {
            kind: torch.round(w[..., -n:, :].float().mean(dim=1), decimals=4).tolist()  # (layers, T_out, keys): heads averaged
            for kind, w in r.attention.items()
            if kind != "enc_self"  # the encoder's queries produce no output token
        }
        rec = {
            "step": step, "sentence": s, "src_tokens": r.src_tokens, "tgt_tokens": r.tgt_tokens,
            "translation": r.translation, "attention": att,
        }
        verdict = check_result(r, pair)  # the one alignment verdict, on the unrounded map
        if verdict is not None and verdict.table:  # only the notes' example has a table; "can't judge" is kept too
            rec["alignment"] = verdict.to_json()
        records.append(rec)
    runs.append_jsonl(run_dir / "probes.jsonl", records)  # a full disk warns; the run still saves
