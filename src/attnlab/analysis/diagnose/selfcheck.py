"""Invariants that catch mask and decoding bugs, run on the user's own trained model.

A learner cannot tell a bug from a weak model by looking at bad translations; these checks can.
Each compares two computations that must agree on any model, trained or not (tests check equivalences, not only shapes):

1. padding does not change outputs — a sentence alone, with extra ``<pad>`` on both sides, and
   inside a padded batch give the same logits at its real positions (notes §23: masked keys get
   exactly zero weight);
2. no future-token leak — changing target tokens from position c on leaves the logits before c
   unchanged (notes §18, §24: the causal mask);
3. step-by-step decoding (KV cache, or the GRU state) == the full teacher-forced recomputation;
4. beam search with beam 1 == greedy search (tokens and scores);
5. batched decoding == one sentence at a time (greedy and beam search).

Logit checks report the largest absolute difference, scaled by the logits' magnitude; decoding
checks require identical tokens and report the largest score difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from attnlab.analysis.report import TextReport
from attnlab.data.batching import collate
from attnlab.data.vocab import PAD
from attnlab.decoding.beam import beam_search
from attnlab.decoding.greedy import greedy_search, max_lengths
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _, ljust, width
from attnlab.translator import Translator, decode_many

__all__ = ["BUILTIN_SENTENCES", "CheckResult", "SelfcheckReport", "run", "selfcheck_sentences"]

# The notes' examples plus longer ones, so several lengths (and so padding) occur in one batch. The
# numbers are written as the numbers task spells them (numbers.numbers_canonical: no hyphens, no comma).
BUILTIN_SENTENCES = (
    "go .",
    "i lost .",
    "he's calm .",
    "i'm home .",
    "i think you should go home now .",
    "twenty one",
    "three hundred and forty two",
    "nine thousand nine hundred and ninety nine",
)


@dataclass
class CheckResult:
    name: str
    passed: bool
    max_deviation: float
    tolerance: float
    detail: str = ""


@dataclass
class SelfcheckReport(TextReport):
    """The five checks on one model: ``format()`` one PASS/FAIL line per check and a summary,
    ``passed`` whether all passed, ``to_json()`` every result; nothing to draw."""

    results: list[CheckResult]
    run: str = ""  # the run folder checked
    model: str = ""  # its model kind
    checkpoint: str = ""
    device: str = ""
    sentences: list[str] = field(default_factory=list)
    source: str = ""  # where the sentences came from

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def _format(self) -> str:
        header = _("selfcheck of {run} ({model}, checkpoint {checkpoint}, {device}) on {n} sentences from "
                   "{source}").format(run=self.run, model=self.model, checkpoint=self.checkpoint, device=self.device,
                                      n=len(self.sentences), source=_(self.source))
        return _text(self.results, header)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "passed": self.passed}


def selfcheck_sentences(translator: Translator, n: int = 8, data: str | None = None) -> tuple[list[str], str]:
    """Up to ``n`` sentences of several lengths from the run's valid split, else built-in examples.

    Returns ``(sentences, where they came from)``. The corpus is read with the run's own tokenizers, found
    at ``data`` (``--data``) or as :meth:`Translator.prepare_corpus` says; when it cannot be found (an
    ``AttnlabError``) the built-in examples are used, unless ``data`` named it (then the error stands).
    """
    try:
        prepared = translator.prepare_corpus(data)
        split = prepared.splits["valid"]
        texts = [split.src_text[i] for i in split.unique_sources()]
    except AttnlabError:
        if data:
            raise
        texts = []
    if not texts:
        return list(BUILTIN_SENTENCES[:n]), N_("built-in examples (the run's corpus was not found)")
    texts.sort(key=lambda s: (len(s.split()), s))
    if len(texts) > n:  # spread over the lengths: shortest and longest included
        texts = [texts[round(i * (len(texts) - 1) / (n - 1))] for i in range(n)] if n > 1 else texts[:1]
    return texts, N_("the run's valid split")


def _max_abs(a: Tensor, b: Tensor) -> float:
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0


def _forward_logits(
    model, src: list[int], tgt: list[int], device, src_pad: int = 0, tgt_pad: int = 0
) -> Tensor:
    """Teacher-forced logits ``(T, V)`` of one pair, with optional extra padding on either side."""
    b = collate([src], [tgt], [0])
    s = torch.cat([b.src, torch.full((1, src_pad), PAD, dtype=b.src.dtype)], dim=1)  # (1, S + src_pad)
    t = torch.cat([b.tgt_in, torch.full((1, tgt_pad), PAD, dtype=b.tgt_in.dtype)], dim=1)  # (1, T + tgt_pad)
    out = model(s.to(device), b.src_valid_lens.to(device), t.to(device))
    return out.logits[0, : b.tgt_in.shape[1]].float().cpu()  # (T, V)


def _check(name: str, dev: float, tol: float, detail: str) -> CheckResult:
    return CheckResult(name, dev <= tol, dev, tol, detail)


def run(
    translator: Translator,
    sentences: list[str] | None = None,
    n: int = 8,
    data: str | None = None,
    tol: float | None = None,
) -> SelfcheckReport:
    """Run the five checks on ``translator.model`` with ``sentences`` (None: up to ``n`` of the run's
    valid split, found at ``data``, see :func:`selfcheck_sentences`); one result per check.

    ``tol`` bounds the logit deviation relative to the largest logit magnitude (default 1e-4 on the
    CPU, 5e-3 on an accelerator, where reductions may be ordered differently).

    Raises:
        AttnlabError: when no sentence has a token after preprocessing.
    """
    if sentences is None:
        sentences, source = selfcheck_sentences(translator, n, data)
    else:
        sentences, source = list(sentences), N_("the sentences given")
    model, device, dcfg = translator.model, translator.device, translator.cfg.decode
    if tol is None:
        tol = 1e-4 if device.type == "cpu" else 5e-3
    srcs = [translator.encode_source(s)[0] for s in sentences]
    srcs = [s for s in srcs if s]
    if not srcs:
        raise AttnlabError(_("no sentence to check has a token after preprocessing; give sentences in the "
                                 "run's source language"))
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            results = _run(model, srcs, device, dcfg, tol)
    finally:
        model.train(was_training)
    ckpt = translator.checkpoint
    checkpoint = "-" if ckpt is None else "exported" if Path(ckpt) == Path(translator.run_dir or "") else Path(ckpt).name
    return SelfcheckReport(results, str(translator.run_dir or ""), translator.cfg.model.kind, checkpoint,
                           str(device), sentences, source)


def _run(model, srcs: list[list[int]], device, dcfg, tol: float) -> list[CheckResult]:
    gen = torch.Generator().manual_seed(0)
    tgts = _targets(model, srcs, device, dcfg, gen)
    alone = [_forward_logits(model, s, t, device) for s, t in zip(srcs, tgts)]
    scale = max(1.0, max(float(a.abs().max()) for a in alone))
    return [
        _padding_check(model, srcs, tgts, alone, device, scale, tol),  # 1
        _causal_check(model, srcs, tgts, alone, device, scale, tol, gen),  # 2
        _cached_check(model, srcs, tgts, alone, device, scale, tol),  # 3
        *_decoding_checks(model, srcs, device, dcfg, tol),  # 4, 5
    ]


def _targets(model, srcs: list[list[int]], device, dcfg, gen: torch.Generator) -> list[list[int]]:
    """Teacher-forced targets: the model's own greedy outputs, lengthened with random real tokens when
    shorter than 4 (a weak model often stops at once, which would leave nothing for the causal check)."""
    V = model.output.out_features
    tgts = []
    for h in decode_many(model, srcs, dcfg, device, beam_size=1):
        t = list(h[0].tokens)
        tgts.append(t + torch.randint(4, max(V, 5), (max(0, 4 - len(t)),), generator=gen).tolist())
    return tgts


def _padding_check(model, srcs, tgts, alone, device, scale: float, tol: float) -> CheckResult:
    """1. padding: extra pads alone, and the sentence inside a padded batch of all the others."""
    dev = 0.0
    for s, t, ref in zip(srcs, tgts, alone):
        dev = max(dev, _max_abs(_forward_logits(model, s, t, device, src_pad=5, tgt_pad=4), ref))
    batch = collate(srcs, tgts)
    out = model(batch.src.to(device), batch.src_valid_lens.to(device), batch.tgt_in.to(device))
    for i, ref in enumerate(alone):
        dev = max(dev, _max_abs(out.logits[i, : ref.shape[0]].float().cpu(), ref))
    return _check(
        _("padding does not change outputs"),
        dev / scale,
        tol,
        _("{n} sentences alone vs +5 source/+4 target pads vs one padded batch").format(n=len(srcs)),
    )


def _causal_check(model, srcs, tgts, alone, device, scale: float, tol: float, gen) -> CheckResult:
    """2. no future-token leak: scramble target inputs from position c on; logits before c must not move."""
    V = model.output.out_features
    dev, tried = 0.0, 0
    for s, t, ref in zip(srcs, tgts, alone):
        T = len(t) + 1  # >= 5 by construction
        cut = T // 2
        b = collate([s], [t], [0])
        tgt_in = b.tgt_in.clone()
        tgt_in[0, cut:] = torch.randint(4, max(V, 5), (T - cut,), generator=gen)  # any real token ids
        logits = (
            model(b.src.to(device), b.src_valid_lens.to(device), tgt_in.to(device)).logits[0].float().cpu()
        )
        dev = max(dev, _max_abs(logits[:cut], ref[:cut]))
        tried += 1
    return _check(
        _("no future-token leak (causal mask)"),
        dev / scale,
        tol,
        _("target inputs changed from the middle on in {n} sentences").format(n=tried),
    )


def _cached_check(model, srcs, tgts, alone, device, scale: float, tol: float) -> CheckResult:
    """3. step-by-step decoding (cached) == full teacher-forced recomputation."""
    dev = 0.0
    for s, t, ref in zip(srcs, tgts, alone):
        b = collate([s], [t], [0])
        src, valid = b.src.to(device), b.src_valid_lens.to(device)
        state = model.init_state(model.encode(src, valid), valid)
        for pos in range(b.tgt_in.shape[1]):
            step = model.step(b.tgt_in[:, pos].to(device), state)
            state = step.state
            dev = max(dev, _max_abs(step.logits[0].float().cpu(), ref[pos]))
    return _check(
        _("step-by-step (KV-cached) == full recomputation"),
        dev / scale,
        tol,
        _("model.step over <bos> y… vs one teacher-forced forward"),
    )


def _decoding_checks(model, srcs, device, dcfg, tol: float) -> list[CheckResult]:
    """4. beam 1 == greedy, 5. batched == one at a time: identical tokens, scores within tolerance."""
    b = collate(srcs, [[] for _ in srcs])
    src, valid = b.src.to(device), b.src_valid_lens.to(device)
    cap = int(getattr(model.config, "max_positions", 1024))
    limit = max_lengths(valid, dcfg.max_len_a, dcfg.max_len_b, cap=cap)
    greedy = greedy_search(model, src, valid, limit)
    beam1 = [h[0] for h in beam_search(model, src, valid, 1, limit, dcfg.length_penalty)]
    one_by_one, batched = [], []
    for beam in (1, max(3, dcfg.beam_size)):
        batched += [
            h[0] for h in decode_many(model, srcs, dcfg, device, beam_size=beam, batch_size=len(srcs))
        ]
        one_by_one += [h[0] for h in decode_many(model, srcs, dcfg, device, beam_size=beam, batch_size=1)]
    return [
        _compare_hyps(_("beam search (beam 1) == greedy"), greedy, beam1, tol),
        _compare_hyps(
            _("batched == one at a time (greedy and beam {beam})").format(beam=max(3, dcfg.beam_size)),
            one_by_one, batched, tol
        ),
    ]


def _compare_hyps(name: str, a, b, tol: float) -> CheckResult:
    differ = sum(x.tokens != y.tokens or x.finished != y.finished for x, y in zip(a, b))
    dev = max((abs(x.score - y.score) for x, y in zip(a, b)), default=0.0)
    detail = _("{n} hypotheses, {differ} with different tokens").format(n=len(a), differ=differ)
    return CheckResult(name, differ == 0 and dev <= tol, dev, tol, detail)


def _text(results: list[CheckResult], header: str = "") -> str:
    """One line per check: PASS/FAIL, name, largest deviation and tolerance, then a summary line."""
    lines = [header] if header else []
    cells = max(width(r.name) for r in results)
    for r in results:
        lines.append(
            f"  {'PASS' if r.passed else 'FAIL'}  {ljust(r.name, cells)}  "
            + _("max deviation {dev:.1e} (tolerance {tol:.0e}; {detail})").format(
                dev=r.max_deviation, tol=r.tolerance, detail=r.detail)
        )
    failed = [r for r in results if not r.passed]
    if failed:
        lines.append(
            _("{failed} of {n} checks FAILED: this is a bug in the model or decoding code, not a weak model — "
              "please report it with this output").format(failed=len(failed), n=len(results))
        )
    else:
        lines.append(
            _("all {n} checks passed: masks and decoding behave; quality is up to training").format(n=len(results))
        )
    return "\n".join(lines)
