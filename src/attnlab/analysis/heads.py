"""`attnlab heads`: do attention heads specialise? (notes §11, §28.5; Voita et al. 2019; Clark et al. 2019)

For every head of a Transformer (encoder self, decoder masked self, encoder–decoder cross) or of the
decoder-only model (causal self over ``source <eos> <bos> target``), measured on a validation sample
with teacher forcing on the reference translations:

- **mean attention distance** ``Σ_k w_qk |pos(q) − pos(k)|`` in tokens (cross heads: the distance from
  the diagonal position ``t · (S−1)/(T−1)``, so 0 means a monotone, word-by-word alignment);
- **previous / same / next** token: the weight on the key one position before, at, and after the
  query (cross heads: around the diagonal position);
- **<eos>**: the weight on source ``<eos>`` keys (a "no-op" sink many heads learn);
- **entropy** of each query's weights in nats (0 = one key, ``ln K`` = uniform);
- **diagonal agreement** (cross heads): share of queries whose most-attended key lies within one
  token of the diagonal (the monotone alignment that English→French mostly follows);
- **importance**: the drop in greedy BLEU and the rise in loss when that one head is silenced (its
  slice ``[..., h·Dh:(h+1)·Dh]`` of the input of ``out_proj`` = W_o zeroed before W_o runs,
  the other heads untouched; Michel et al. 2019), with a paired-bootstrap 95 % interval (Koehn 2004):
  docs/explanations/heads.md.

Averages are over real (non-padding) queries only; padding keys carry exactly 0 weight. **The plain answer
to §28.5** (:func:`answer`): which heads do what and which are noise, as docs/explanations/heads.md defines.

Dimension key: B batch, L layers, H heads, Q queries, K keys, S source len, T target len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from attnlab.analysis.hooks import before_forward
from attnlab.analysis.report import TextReport
from attnlab.data.batching import collate
from attnlab.data.vocab import EOS
from attnlab.errors import AttnlabError
from attnlab.evaluation.bleu import bleu_from_stats, bleu_tokenize, sentence_stats
from attnlab.evaluation.loss import sentence_nll
from attnlab.i18n import N_, _
from attnlab.models import traits
from attnlab.translator import Translator, decode_many, teacher_forced
from attnlab.viz.attention import CMAP
from attnlab.viz.figure import new_figure

#: Statistics per head, in table/figure order (``diag_agreement`` only for cross heads).
STATS = ("distance", "prev", "same", "next", "eos", "entropy", "diag_agreement", "bleu_drop", "loss_increase")
LABELS = {
    "distance": N_("mean distance"),
    "prev": N_("prev token"),
    "same": N_("same token"),
    "next": N_("next token"),
    "eos": N_("on <eos>"),
    "entropy": N_("entropy (nats)"),
    "diag_agreement": N_("diag agreement"),
    "bleu_drop": N_("BLEU drop (masked)"),
    "loss_increase": N_("loss increase (masked)"),
}
#: A cross head's queries and keys are two sentences: its "same" key is the one at the diagonal position.
CROSS_LABELS = {"same": N_("diagonal position")}


def label(stat: str, kind: str) -> str:
    """The (English) name of ``stat`` for a head of ``kind``, as its figure's panel is titled."""
    return CROSS_LABELS.get(stat, LABELS[stat]) if kind == "cross" else LABELS[stat]


KIND_NAMES = {
    "enc_self": N_("encoder self"),
    "dec_self": N_("decoder self (masked)"),
    "cross": N_("cross (enc-dec)"),
    "self": N_("decoder-only self (causal)"),
}
#: A statistic above this share names the head's role in the table (e.g. "previous-token head").
ROLE_SHARE = 0.5
#: A head whose attention is this close to uniform (focus = 1 − entropy / ln K below it: its entropy within 10 %
#: of uniform attention's over the same keys) picks no key: with no effect when silenced, it is noise (§28.5).
NOISE_FOCUS = 0.1
#: Bootstrap resamples of the sentences for the importance intervals, and their coverage.
BOOTSTRAP_RESAMPLES = 1000
CONFIDENCE = 0.95
#: What silencing a head did, judged on the BLEU drop's interval (``effect`` in the table).
EFFECTS = {
    "hurts": N_("BLEU falls when silenced (beyond the noise)"),
    "helps": N_("BLEU rises when silenced (beyond the noise)"),
    "noise": N_("within the noise"),
}


@dataclass
class HeadStats:
    kind: str  # enc_self, dec_self, cross, self
    layer: int
    head: int
    values: dict[str, float] = field(default_factory=dict)  # STATS -> value (NaN where not defined)

    @property
    def effect(self) -> str:
        """``hurts``/``helps``/``noise`` from the BLEU drop's bootstrap interval; "" when not measured."""
        lo, hi = self.values.get("bleu_drop_lo", math.nan), self.values.get("bleu_drop_hi", math.nan)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return ""
        return "hurts" if lo > 0 else "helps" if hi < 0 else "noise"

    @property
    def focus(self) -> float:
        """``1 − entropy / ln K``: 0 for uniform attention over the keys each query may see, 1 for one key
        (NaN when every query sees one key: nothing to choose)."""
        uniform = self.values.get("uniform_entropy", math.nan)
        if not (math.isfinite(uniform) and uniform > 0):
            return math.nan
        return 1.0 - self.values.get("entropy", math.nan) / uniform

    @property
    def matters(self) -> bool | None:
        """Silencing it moved BLEU or the teacher-forced loss beyond the noise; None when not measured."""
        if not self.effect:
            return None
        return self.effect != "noise" or self.values.get("loss_increase_lo", math.nan) > 0 \
            or self.values.get("loss_increase_hi", math.nan) < 0

    @property
    def role(self) -> str:
        v = self.values
        roles = []
        if v.get("diag_agreement", 0.0) > 0.7:
            roles.append(N_("monotone alignment"))
        for key, name in (
            ("prev", N_("previous-token")),
            # a cross head's query and keys are two sentences: "same" is the key at the diagonal position
            ("same", N_("diagonal-position") if self.kind == "cross" else N_("same-token")),
            ("next", N_("next-token")),
            ("eos", N_("<eos> sink")),
        ):
            if v.get(key, 0.0) > ROLE_SHARE:
                roles.append(name)
        if not roles and self.kind != "cross" and v.get("distance", 0.0) > 3:
            roles.append(N_("long-range"))
        return ", ".join(roles) or "-"


@dataclass
class HeadsReport(TextReport):
    """What :func:`run` measured: ``format()`` is the Markdown table (one row per head, its role and
    what silencing it did), ``figures()`` each kind's statistics as layers × heads grids (``figure()``: the
    first kind's), ``to_json()``
    every value with its interval."""

    run: str
    sentences: int
    base_bleu: float
    base_loss: float
    heads: list[HeadStats]
    shape: dict[str, tuple[int, int]]  # kind -> (layers, heads)
    resamples: int = 0  # bootstrap resamples behind the importance intervals (0: not measured)

    def grid(self, kind: str, stat: str) -> Tensor:
        """``(layers, heads)`` values of ``stat`` for ``kind``."""
        L, H = self.shape[kind]
        out = torch.full((L, H), float("nan"))
        for h in self.heads:
            if h.kind == kind:
                out[h.layer, h.head] = h.values.get(stat, float("nan"))
        return out

    def _format(self) -> str:
        return _table(self)

    def figure(self):
        """The first kind's figure (``enc_self``, or the decoder-only ``self``)."""
        return _kind_figure(self, next(iter(self.shape)))

    def figures(self) -> dict[str, Any]:
        """One readable figure per attention kind, by kind (``self.shape``'s order), rather than every kind
        in one."""
        return {kind: _kind_figure(self, kind) for kind in self.shape}

    def to_json(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if not math.isfinite(x) else round(x, 5)

        return {
            "run": self.run,
            "sentences": self.sentences,
            "base_bleu": self.base_bleu,
            "base_loss": self.base_loss,
            "bootstrap": {"resamples": self.resamples, "confidence": CONFIDENCE},
            "shape": {k: list(v) for k, v in self.shape.items()},
            "heads": [
                {
                    "kind": h.kind,
                    "layer": h.layer,
                    "head": h.head,
                    "role": h.role,
                    "effect": h.effect,
                    "focus": clean(h.focus),
                    **{k: clean(v) for k, v in h.values.items()},
                }
                for h in self.heads
            ],
        }


def attention_modules(model: nn.Module) -> dict[str, list[nn.Module]]:
    """kind → the ``MultiHeadAttention`` of each layer, in the order of the model's attention dict
    (found where the model's traits say they sit, ``ModelTraits.attention_modules``).

    Raises :class:`AttnlabError` for models without multi-head attention (seq2seq, Bahdanau).
    """
    t = traits(model.config)
    if not t.attention_modules:
        raise AttnlabError(
            _("`attnlab heads` needs a multi-head model (transformer or decoder-only); this run's "
              "model.kind={kind} has {value}").format(kind=model.config.kind, value=_('one additive attention') if t.attention else _('no attention'))
        )
    modules = {}
    for kind, path in t.attention_modules.items():
        blocks, attr = path.split(".*.")  # "decoder_blocks.*.cross_attention": one per block
        modules[kind] = [getattr(block, attr) for block in model.get_submodule(blocks)]
    return modules


def silence_head(mha: nn.Module, head: int):
    """Context manager, ``with silence_head(mha, h): ...``: zero head ``h``'s slice of the input of
    ``mha.out_proj`` (its output drops out of the concatenation before W_o mixes the heads, notes §11;
    Michel et al. 2019); the other heads are untouched, and the hook goes when the block ends."""
    Dh = mha.head_size
    lo, hi = head * Dh, (head + 1) * Dh

    def zero_head(module, args):  # noqa: ARG001
        x = args[0].clone()
        x[..., lo:hi] = 0  # (B, Q, H*Dh): head h's columns
        return (x, *args[1:])

    return before_forward(mha.out_proj, zero_head)


def _positions(kind: str, batch, S: int, T: int) -> dict[str, Tensor]:
    """Query/key positions, validity and <eos> keys for one attention kind of a batch."""
    B = batch.src.shape[0]
    s_ar, t_ar = torch.arange(S), torch.arange(T)
    sv, tv = batch.src_valid_lens[:, None], batch.tgt_valid_lens[:, None]  # (B, 1)
    src_pos, src_ok = s_ar.expand(B, S).float(), s_ar[None] < sv  # (B, S)
    tgt_pos, tgt_ok = t_ar.expand(B, T).float(), t_ar[None] < tv  # (B, T)
    src_eos = (batch.src == EOS) & src_ok
    if kind == "enc_self":
        return {"qpos": src_pos, "qok": src_ok, "kpos": src_pos, "keos": src_eos}
    if kind == "dec_self":
        return {"qpos": tgt_pos, "qok": tgt_ok, "kpos": tgt_pos, "keos": torch.zeros(B, T, dtype=torch.bool)}
    if kind == "cross":
        diag = tgt_pos * (sv - 1).float() / (tv - 1).clamp_min(1).float()  # (B, T): monotone alignment
        return {"qpos": diag, "qok": tgt_ok, "kpos": src_pos, "keos": src_eos, "diag": diag}
    # decoder-only: padded (source, target) sequence; target positions continue from the valid source
    pos = torch.cat([src_pos, sv.float() + tgt_pos], dim=1)  # (B, S + T)
    ok = torch.cat([src_ok, tgt_ok], dim=1)
    eos = torch.cat([src_eos, torch.zeros(B, T, dtype=torch.bool)], dim=1)
    return {"qpos": pos, "qok": ok, "kpos": pos, "keos": eos}


def _head_sums(w: Tensor, p: dict[str, Tensor]) -> dict[str, Tensor]:
    """Per-head sums over real queries: ``w (B, L, H, Q, K)`` → each statistic ``(L, H)``, plus ``count``."""
    qpos = p["qpos"][:, None, None, :, None]  # (B, 1, 1, Q, 1)
    kpos = p["kpos"][:, None, None, None, :]  # (B, 1, 1, 1, K)
    qok = p["qok"][:, None, None, :].float()  # (B, 1, 1, Q)
    anchor = qpos.round()
    per_q = {
        "distance": (w * (qpos - kpos).abs()).sum(-1),
        "prev": (w * (kpos == anchor - 1)).sum(-1),
        "same": (w * (kpos == anchor)).sum(-1),
        "next": (w * (kpos == anchor + 1)).sum(-1),
        "eos": (w * p["keos"][:, None, None, None, :]).sum(-1),
        "entropy": -(w * torch.log(w.clamp_min(1e-12))).sum(-1),
        # uniform attention's entropy, ln K, K = the keys the mask lets the query see (weight above 0)
        "uniform_entropy": (w > 0).sum(-1).clamp_min(1).float().log(),
    }  # each (B, L, H, Q)
    if "diag" in p:
        top = w.argmax(-1).float()  # (B, L, H, Q)
        per_q["diag_agreement"] = ((top - p["diag"][:, None, None, :]).abs() <= 1.0).float()
    out = {k: (v * qok).sum(dim=(0, 3)) for k, v in per_q.items()}  # (L, H)
    out["count"] = qok.sum().expand_as(out["distance"])
    return out


def _sample(prepared, n: int) -> tuple[list[list[int]], list[list[int]], list[list[str]]]:
    """The first ``n`` distinct validation sources (then test ones if validation is smaller)."""
    src, tgt, refs = [], [], []
    for name in ("valid", "test"):
        split = prepared.splits.get(name)
        if split is None:
            continue
        for i in split.unique_sources():
            if len(src) >= n:
                break
            src.append(split.src[i])
            tgt.append(split.tgt[i])
            refs.append([prepared.tgt_tok.detokenize(r.split()) for r in split.references[i]])  # the target's rules
    if not src:
        raise AttnlabError(_("the run's validation and test splits are empty; nothing to measure heads "
                             "on"))
    return src, tgt, refs


@dataclass
class SampleScores:
    """One model variant on the sample, per sentence, so that any resample of the sentences can be
    scored without decoding again: sacreBLEU's sufficient statistics and the teacher-forced NLL."""

    bleu_stats: np.ndarray  # (N, 2 + 2n): hyp length, closest ref length, n-gram matches, n-gram totals
    nll: np.ndarray  # (N,) summed negative log-likelihood of each sentence's reference (nats)
    tokens: np.ndarray  # (N,) its target tokens (with <eos>)
    hypotheses: list[str] = field(default_factory=list)  # the greedy translations scored
    tokenize: str = "13a"  # sacreBLEU's tokenizer of the statistics (bleu_tokenize of the target language)

    def bleu(self, counts: np.ndarray | None = None) -> np.ndarray | float:
        """Corpus BLEU of the sample, or of each resample: ``counts (R, N)`` = draws of each sentence."""
        if counts is None:
            return bleu_from_stats(self.bleu_stats.sum(0), self.tokenize)
        summed = counts @ self.bleu_stats  # (R, 2 + 2n)
        return np.array([bleu_from_stats(row, self.tokenize) for row in summed])

    def loss(self, counts: np.ndarray | None = None) -> np.ndarray | float:
        """Loss per token of the sample, or of each resample (``counts (R, N)``)."""
        if counts is None:
            return float(self.nll.sum() / max(self.tokens.sum(), 1))
        return (counts @ self.nll) / np.maximum(counts @ self.tokens, 1)


def score_sample(
    model: nn.Module,
    tr,
    src: list[list[int]],
    tgt: list[list[int]],
    refs: list[list[str]],
    batch_size: int = 64,
) -> SampleScores:
    """Greedy translations (all references) and teacher-forced NLL of ``model``, per sentence: BLEU's
    statistics (with the target language's tokenizer, as ``evaluate`` scores) and the loss as
    :mod:`attnlab.evaluation` computes them."""
    src = [s[: tr.max_src_tokens] for s in src]
    hyps = decode_many(model, src, tr.cfg.decode, tr.device, beam_size=1)
    texts = [tr.tgt_tok.decode(h[0].tokens) for h in hyps]
    tokenize = bleu_tokenize(tr.tgt_tok.lang)
    stats = np.array(sentence_stats(texts, refs, tokenize=tokenize), dtype=np.int64)
    nll, tokens = sentence_nll(model, src, tgt, tr.device, batch_size)
    return SampleScores(stats, np.array(nll), np.array(tokens, dtype=np.float64), texts, tokenize)


def bootstrap_counts(n: int, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> np.ndarray:
    """``(resamples, n)``: how often each of ``n`` sentences is drawn in each resample (with replacement)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(resamples, n))
    counts = np.zeros((resamples, n))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1)
    return counts


def paired_interval(
    base: np.ndarray, other: np.ndarray, confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """The ``confidence`` percentile interval of ``base - other`` over paired resamples."""
    q = (1 - confidence) / 2
    lo, hi = np.quantile(base - other, [q, 1 - q])
    return float(lo), float(hi)


def _attention_sums(model, modules, src, tgt, tr, batch_size: int) -> dict[str, dict[str, Tensor]]:
    """Per-kind sums of :func:`_head_sums` over the sample, teacher-forced on the references."""
    sums: dict[str, dict[str, Tensor]] = {}
    with torch.inference_mode():
        for start in range(0, len(src), batch_size):
            idx = list(range(start, min(start + batch_size, len(src))))
            batch = collate([src[i] for i in idx], [tgt[i] for i in idx], idx)
            out = teacher_forced(model, batch, tr.device, compute_logits=False)  # over the references
            S, T = batch.src.shape[1], batch.tgt_in.shape[1]
            for kind in modules:
                w = out.attention[kind].float().cpu()  # (B, L, H, Q, K)
                part = _head_sums(w, _positions(kind, batch, S, T))
                acc = sums.setdefault(kind, {k: torch.zeros_like(v) for k, v in part.items()})
                for k, v in part.items():
                    acc[k] += v
    return sums


def _importance(mha, h: int, model, tr, sample, base: SampleScores, boot) -> dict[str, float]:
    """BLEU drop and loss increase when head ``h`` of ``mha`` is silenced, with paired intervals
    (``boot = (counts, base BLEU per resample, base loss per resample)``)."""
    counts, base_bleu, base_loss = boot
    with silence_head(mha, h):
        masked = score_sample(model, tr, *sample)
    lo, hi = paired_interval(base_bleu, masked.bleu(counts))
    llo, lhi = paired_interval(masked.loss(counts), base_loss)  # increase = masked - base
    return {
        "bleu_drop": base.bleu() - masked.bleu(),
        "bleu_drop_lo": lo,
        "bleu_drop_hi": hi,
        "loss_increase": masked.loss() - base.loss(),
        "loss_increase_lo": llo,
        "loss_increase_hi": lhi,
    }


def run(
    run_dir: str | Path,
    sentences: int = 100,
    which: str = "best",
    device: str = "cpu",
    importance: bool = True,
    batch_size: int = 32,
    resamples: int = BOOTSTRAP_RESAMPLES,
    progress: bool = False,
    data: str | Path | None = None,
) -> HeadsReport:
    """Measure every head of the run's model on ``sentences`` validation sentences; with
    ``importance``, silence each head in turn and bootstrap the differences (``resamples`` paired
    resamples of the sentences, seed 0). ``progress``: progress on stderr, one tick per head (:mod:`attnlab.progress`).
    ``data``: where the corpus is (``--data``; see :meth:`Translator.prepare_corpus`).

    Raises :class:`AttnlabError` for a model without multi-head attention, an unreadable run,
    ``sentences < 1`` or ``resamples < 1``.
    """
    from attnlab.progress import Progress

    if sentences < 1:
        raise AttnlabError(_("--sentences {sentences} must be at least 1").format(sentences=sentences))
    if resamples < 1:
        raise AttnlabError(_("resamples={resamples} must be at least 1").format(resamples=resamples))
    tr = Translator.from_run(run_dir, which=which, device=device)
    model = tr.model.eval()
    modules = attention_modules(model)
    prepared = tr.prepare_corpus(data)
    src, tgt, refs = _sample(prepared, sentences)
    src = [s[: tr.max_src_tokens] for s in src]
    sums = _attention_sums(model, modules, src, tgt, tr, batch_size)
    base = score_sample(model, tr, src, tgt, refs)
    counts = bootstrap_counts(len(src), resamples)
    boot = (counts, base.bleu(counts), base.loss(counts))
    heads: list[HeadStats] = []
    shape = {kind: (len(mods), mods[0].num_heads) for kind, mods in modules.items()}
    total = sum(L * H for L, H in shape.values()) if importance else 0
    bar = Progress(_("heads (masking)"), unit="head", total=total) if progress and total else None
    try:
        for kind, mods in modules.items():
            L, H = shape[kind]
            acc = sums[kind]
            for layer in range(L):
                for h in range(H):
                    n = float(acc["count"][layer, h]) or 1.0
                    vals = {k: float(acc[k][layer, h]) / n for k in (*STATS, "uniform_entropy") if k in acc}
                    vals.setdefault("diag_agreement", float("nan"))
                    if importance:
                        vals.update(_importance(mods[layer], h, model, tr, (src, tgt, refs), base, boot))
                        if bar is not None:
                            bar.update(1, masked=f"{kind} {layer + 1}.{h + 1}", bleu=f"{-vals['bleu_drop']:+.2f}")
                    else:
                        vals["bleu_drop"] = vals["loss_increase"] = float("nan")
                    heads.append(HeadStats(kind, layer, h, vals))
        if bar is not None:
            bar.close(summary=True)
    finally:
        if bar is not None:
            bar.close()
    return HeadsReport(
        str(run_dir), len(src), base.bleu(), base.loss(), heads, shape, resamples if importance else 0
    )


def _cell(h: HeadStats, stat: str) -> str:
    """A table cell: the value, and for the importance columns its bootstrap interval."""
    v = h.values.get(stat, float("nan"))
    if not math.isfinite(v):
        return "-"
    lo, hi = h.values.get(f"{stat}_lo", math.nan), h.values.get(f"{stat}_hi", math.nan)
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{v:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    return f"{v:.3f}"


def importance_summary(report: HeadsReport) -> str:
    """One line: how many heads' silencing changed BLEU beyond the noise, in each direction."""
    effects = [h.effect for h in report.heads if h.effect]
    if not effects:
        return _("importance not measured (--no-importance).")
    loss_up = sum(h.values.get("loss_increase_lo", math.nan) > 0 for h in report.heads)
    return _(
        "Silencing one head at a time ({confidence:.0%} paired bootstrap interval over the {sentences} sentences, "
        "{resamples} resamples): {hurts} of {n} heads lower BLEU beyond the noise, {helps} raise it beyond the "
        "noise, {noise} are within the noise (their interval contains 0); {loss_up} raise the teacher-forced loss "
        "beyond the noise (a finer measure than BLEU)."
    ).format(confidence=CONFIDENCE, sentences=report.sentences, resamples=report.resamples,
             hurts=effects.count("hurts"), n=len(effects), helps=effects.count("helps"),
             noise=effects.count("noise"), loss_up=loss_up)


def _table(report: HeadsReport) -> str:
    """Markdown: one row per head, its role when one statistic dominates, and what silencing it did
    (importance columns: value [interval])."""
    aligned = any("align_aer" in h.values for h in report.heads)  # `heads --gold`: align's AER per head
    head = [_("attention"), _("layer"), _("head"), *(_(LABELS[s]) for s in STATS), _("silenced"), _("role")]
    head += [_("AER vs gold")] if aligned else []
    lines = [
        _("Heads of {run} on {n} validation sentences (greedy BLEU {bleu:.2f}, loss {loss:.3f} with every head "
          "on).").format(run=report.run, n=report.sentences, bleu=report.base_bleu, loss=report.base_loss),
        importance_summary(report),
        *([alignment_summary(report)] if aligned else []),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for h in report.heads:
        cells = [_cell(h, s) for s in STATS]
        effect = _(EFFECTS.get(h.effect, "-"))
        role = _role_text(h)
        row = [_(KIND_NAMES.get(h.kind, h.kind)), str(h.layer + 1), str(h.head + 1), *cells, effect, role]
        lines.append("| " + " | ".join(row + ([_aer_cell(h)] if aligned else [])) + " |")
    return "\n".join([*lines, "", answer(report)])


def _head_name(h: HeadStats) -> str:
    return _("{kind} layer {layer} head {head}").format(kind=_(KIND_NAMES.get(h.kind, h.kind)), layer=h.layer + 1,
                                                          head=h.head + 1)


def _role_text(h: HeadStats) -> str:
    """The head's role in the learner's language: its English names (kept as data in to_json), each translated."""
    return ", ".join(_(r) for r in h.role.split(", "))


def answer(report: HeadsReport) -> str:
    """The plain answer to the notes' §28.5 ("do different heads really learn different things?"): each head
    in one of three groups (see the module docstring for what "noise" means here) and one line of totals."""
    does, pattern, noise, unknown = [], [], [], []
    for h in report.heads:
        focus = h.focus
        picks = not (math.isfinite(focus) and focus < NOISE_FOCUS)
        what = _role_text(h) if h.role != "-" else (_("focus {focus:.2f}").format(focus=focus) if math.isfinite(focus) else "")
        if h.matters:
            does.append((h, what or _("no pattern among those measured")))
        elif h.matters is None:
            (pattern if picks else unknown).append((h, what))
        elif picks:
            pattern.append((h, what))
        else:
            noise.append((h, _("focus {focus:.2f}").format(focus=focus)))

    def listed(items: list[tuple[HeadStats, str]]) -> str:
        return "; ".join(f"{_head_name(h)} ({what})" if what else _head_name(h) for h, what in items) or _("none")

    lines = [
        _("## The answer to §28.5: do different heads learn different things?"),
        _("Noise, here: attention within {share:.0%} of uniform attention's entropy over the same keys (focus = "
          "1 − entropy / ln K below {focus:g}: it picks no key) and, when silenced, no change in BLEU or loss beyond "
          "the sampling noise of the {n} sentences.").format(share=NOISE_FOCUS, focus=NOISE_FOCUS, n=report.sentences),
    ]
    if report.resamples:
        lines += [
            _("- does something measurable (silencing it moves BLEU or the loss beyond the noise): {heads}").format(
                heads=listed(does)),
            _("- has a pattern, but the model does without it (silenced alone: within the noise; other heads may "
              "cover it): {heads}").format(heads=listed(pattern)),
            _("- indistinguishable from noise: {heads}").format(heads=listed(noise)),
            _("In short, of {total} heads: doing a measurable job {does}; attending in a pattern the model can "
              "spare {pattern}; noise {noise}.").format(does=len(does), total=len(report.heads), pattern=len(pattern),
                                                 noise=len(noise)),
        ]
    else:
        lines += [
            _("- attends in a pattern: {heads}").format(heads=listed(pattern)),
            _("- attends nearly uniformly, like noise: {heads}").format(heads=listed(unknown)),
            _("Whether any head matters was not measured (--no-importance): run without it to silence each head."),
        ]
    return "\n".join(lines)


def _aer_cell(h: HeadStats) -> str:
    aer = h.values.get("align_aer", math.nan)
    return (_("{aer:.1f} % (shift {shift})").format(aer=100 * aer, shift=int(h.values["align_shift"]))
            if math.isfinite(aer) else "-")


def alignment_summary(report: HeadsReport, top: int = 3) -> str:
    """One line naming the alignment heads: the ``top`` heads with the lowest AER against gold."""
    scored = sorted(
        (h for h in report.heads if math.isfinite(h.values.get("align_aer", math.nan))),
        key=lambda h: (h.values["align_aer"], h.layer, h.head),
    )
    named = ", ".join(
        _("{kind} layer {layer} head {head} ({aer:.1f} %)").format(
            kind=_(KIND_NAMES.get(h.kind, h.kind)), layer=h.layer + 1, head=h.head + 1, aer=100 * h.values["align_aer"])
        for h in scored[:top]
    )
    return _(
        "Alignment heads (AER against gold word alignments, each head's links by argmax at its better shift, lower "
        "is better; see `attnlab align`): {named}."
    ).format(named=named)


#: Statistics whose values are shares of one query's weight (colour scale 0–1), and the importance
#: ones (a diverging scale around 0: a negative drop means the model did better without that head).
SHARES = ("prev", "same", "next", "eos", "diag_agreement")
SIGNED = ("bleu_drop", "loss_increase")
#: Text sizes of the heads figures, in points: nothing smaller than 8 pt (a test checks it).
FONT = {"value": 8, "tick": 8, "label": 9, "title": 10, "suptitle": 11}


def _scale(report: HeadsReport, stat: str) -> tuple[float, float]:
    """``(vmin, vmax)`` of ``stat``, the same in every kind's figure so that kinds compare."""
    column = torch.cat([report.grid(k, stat).flatten() for k in report.shape])
    finite = column[torch.isfinite(column)]
    top = float(finite.abs().max()) if finite.numel() else 1.0
    if stat in SIGNED:
        return -(top or 1.0), top or 1.0
    return 0.0, 1.0 if stat in SHARES else (top or 1.0)


def _kind_figure(report: HeadsReport, kind: str):
    """The statistics of ``kind``'s heads as a Figure: one panel per statistic, each a layers × heads
    grid with the values written in and a last column, "mean", averaging the layer's heads. Layers
    and heads count from 1; text is at least 8 pt (:data:`FONT`); one colour bar per panel, on the
    scale :func:`_scale` gives the statistic in every kind."""
    stats = [s for s in STATS if torch.isfinite(report.grid(kind, s)).any()]
    L, H = report.shape[kind]
    n_cols = min(3, len(stats))
    n_rows = math.ceil(len(stats) / n_cols)
    cell = 0.62  # inches per grid cell: room for "+0.12" at 8 pt
    panel_w, panel_h = (H + 1) * cell + 1.9, L * cell + 1.2
    fig = new_figure((n_cols * panel_w, n_rows * panel_h + 0.9))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    for i, ax in enumerate(axes.flat):
        if i >= len(stats):
            ax.axis("off")
            continue
        _heads_panel(fig, ax, report, kind, stats[i])
    fig.suptitle(
        _("{kind} heads of {run}: {n} validation sentences, BLEU {bleu:.1f} with all heads (layers and heads counted "
          "from 1)").format(kind=_(KIND_NAMES.get(kind, kind)), run=Path(report.run).name, n=report.sentences,
                            bleu=report.base_bleu),
        fontsize=FONT["suptitle"],
    )
    return fig


def _heads_panel(fig, ax, report: HeadsReport, kind: str, stat: str) -> None:
    """One statistic: the ``(L, H)`` grid and its per-layer mean over the heads as a last column."""
    grid = report.grid(kind, stat)  # (L, H)
    finite = torch.isfinite(grid)
    mean = torch.where(finite, grid, 0.0).sum(1) / finite.sum(1).clamp_min(1)  # (L,): heads averaged
    mean[finite.sum(1) == 0] = float("nan")
    shown = torch.cat([grid, mean[:, None]], dim=1)  # (L, H + 1)
    vmin, vmax = _scale(report, stat)
    cmap = "RdBu_r" if stat in SIGNED else CMAP  # darker = larger, as in every attention figure
    lo, hi = report.grid(kind, f"{stat}_lo"), report.grid(kind, f"{stat}_hi")  # (L, H); NaN: no interval
    beyond = (lo > 0) | (hi < 0)  # the bootstrap interval excludes 0: an effect beyond the noise
    im = ax.imshow(shown.numpy(), cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    for i in range(shown.shape[0]):
        for j in range(shown.shape[1]):
            v = float(shown[i, j])
            if math.isfinite(v):
                r, g, b, _alpha = im.cmap(im.norm(v))
                dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5  # the cell's luminance picks the ink
                star = "*" if j < beyond.shape[1] and bool(beyond[i, j]) else ""
                ax.text(j, i, f"{v:+.2f}{star}" if stat in SIGNED else f"{v:.2f}", ha="center", va="center",
                        fontsize=FONT["value"], color="white" if dark else "black")
    H = grid.shape[1]
    ax.axvline(H - 0.5, color="white", lw=3)  # the mean column stands apart from the heads
    ax.set_xticks(range(H + 1), [str(h + 1) for h in range(H)] + [_("mean")])
    ax.set_yticks(range(grid.shape[0]), [str(i + 1) for i in range(grid.shape[0])])
    ax.tick_params(labelsize=FONT["tick"])
    noise = stat in SIGNED and bool(torch.isfinite(lo).any())
    ax.set_title(_(label(stat, kind)) + ("\n" + _("* beyond the noise ({confidence:.0%} interval excludes 0)").format(
        confidence=CONFIDENCE) if noise else ""),
                 fontsize=FONT["title"])
    ax.set_xlabel(_("head"), fontsize=FONT["label"])
    ax.set_ylabel(_("layer"), fontsize=FONT["label"])
    fig.colorbar(im, ax=ax, shrink=0.9).ax.tick_params(labelsize=FONT["tick"])

