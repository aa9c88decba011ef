"""Beyond raw attention weights (notes §27.5, §28.5): attention rollout and gradient attribution.

The notes ask what attention weights really tell us. Two answers a learner can measure on their own model:

- **Attention rollout** (Abnar & Zuidema 2020): :func:`rollout`, for one stack of self-attention;
- **Gradient attribution** (Captum; the ``explain`` extra): input × gradient and integrated gradients
  (Sundararajan et al. 2017) of each output token's log-probability on the source embeddings.
How each is computed, and why: docs/explanations/attribution.md.

:func:`run` puts the gradient attribution beside the attention the notes read as an
alignment (§25): the last layer's cross-attention with its heads averaged (Bahdanau's single map for
the GRU model; for the decoder-only model, its output rows' self-attention on the source), and the
rollout, and measures their agreement with Spearman's rank correlation of ``|attribution|``
against the weights, per output token and per sentence (the mean over its tokens). Magnitudes
are ranked because a weight says how much a token is used, not in which direction it pushes.

Dimension key: L layers, H heads, Q queries, K keys, N positions of one stack, S source tokens
(with ``<eos>``), T output tokens, E embedding size, B interpolation points × output tokens.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from attnlab.analysis import hooks
from attnlab.analysis.report import TextReport
from attnlab.data.batching import collate
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _, ljust
from attnlab.i18n import width as cells_wide
from attnlab.models import traits

if TYPE_CHECKING:  # only for annotations: the translator is passed in
    from attnlab.translator import Translator

__all__ = [
    "METHODS",
    "Attribution",
    "AttributionError",
    "LogProb",
    "RolloutMap",
    "RolloutReport",
    "attribution_figure",
    "rank",
    "rollout",
    "rollout_figure",
    "run",
    "spearman",
]

METHODS = {"ig": N_("integrated gradients"), "ixg": N_("input × gradient"), "rollout": N_("attention rollout")}
ROLLOUT_KINDS = ("enc_self", "self")  # the single stacks of self-attention rollout is defined for
# Integrated gradients' points: the completeness gap shrinks as they grow (every report prints it, and
# says to raise --steps above 1 %); docs/experiments/attribution-steps.md measures the gap per count.
DEFAULT_STEPS = 64
# Integrated gradients' rows (points × output tokens) per forward and backward pass: small batches bound
# the memory on long sentences, keep the activations in cache, and make each backward pass short, so a
# caller that stops at a deadline between passes (the web server, web/deadline.py) stops soon after it.
# The sum over batches, and so completeness, does not depend on it.
ROWS_PER_BATCH = 32


class AttributionError(AttnlabError):
    """An attribution that cannot be computed for this model or input (one line: what, why, fix)."""


# ------------------------------------------------------------------------------------ statistics


def rank(x: Tensor) -> Tensor:
    """Ranks ``1..n`` of the values of ``x`` (flattened), ties sharing their mean rank (the
    ``average`` rule of Spearman's correlation), as float64."""
    x = x.detach().double().flatten()
    order = torch.argsort(x, stable=True)
    _unique, inverse, counts = torch.unique_consecutive(x[order], return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    mean_rank = ends - (counts.double() - 1) / 2  # mean of the ranks end-count+1 … end of each tie group
    ranks = torch.empty_like(x)
    ranks[order] = mean_rank[inverse]
    return ranks


def spearman(a: Tensor, b: Tensor) -> float | None:
    """Spearman's rank correlation of two equally long vectors: Pearson's correlation of their
    :func:`rank` s. ``None`` when it is undefined (fewer than 2 values, or one vector is constant)."""
    ra, rb = rank(a), rank(b)
    if ra.numel() != rb.numel():
        raise ValueError(f"spearman needs equally long vectors, got {ra.numel()} and {rb.numel()}")
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(ra.norm() * rb.norm())
    if ra.numel() < 2 or denom == 0.0:
        return None
    return float((ra * rb).sum()) / denom


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


# ---------------------------------------------------------------------------------------- rollout


def rollout(weights: Tensor) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020) of one stack's self-attention of one sentence.

    ``weights (L, H, N, N)`` (layers from the input up, rows = queries) → ``(L, N, N)``: entry
    ``[l, i, j]`` is the share of position ``i``'s state after layer ``l + 1`` that flows from input
    token ``j``. Per layer the heads are averaged and the identity is added for the residual
    connection, the rows renormalised to sum to 1, and the layers multiplied,
    ``R_l = Â_l R_{l-1}`` with ``R_0 = I``. Every row of the result sums to 1 (a fully masked row,
    which holds zeros, becomes the identity's row). Computed in float64, returned in ``weights``'s dtype.
    Raises ``ValueError`` unless ``weights`` is 4-D with square maps.
    """
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"rollout needs (layers, heads, N, N) self-attention, got {tuple(weights.shape)}")
    N = weights.shape[-1]
    eye = torch.eye(N, dtype=torch.float64, device=weights.device)
    a = weights.double().mean(dim=1) + eye  # (L, N, N): heads averaged, + I for the residual
    a = a / a.sum(dim=-1, keepdim=True)
    out, r = [], eye
    for layer in a:
        r = layer @ r  # (N, N)
        out.append(r)
    return torch.stack(out).to(weights.dtype)  # (L, N, N)


@dataclass
class RolloutMap:
    """One stack's last-layer attention (heads averaged) beside its rollout, both ``(N, N)`` with
    ``labels`` on both axes; ``rho[i]``: Spearman's correlation of row ``i`` of the two."""

    kind: str
    labels: list[str]
    attention: Tensor
    rollout: Tensor
    rho: list[float | None]

    @property
    def mean_rho(self) -> float | None:
        return _mean(self.rho)


@dataclass
class RolloutReport(TextReport):
    """:func:`run` with ``method="rollout"``: every self-attention stack of the model, for one sentence.
    ``format()`` prints each stack's last layer and its rollout, ``figure()`` draws them side by side."""

    source: str
    translation: str
    maps: list[RolloutMap]
    method: str = "rollout"

    def to_json(self, decimals: int = 4) -> dict[str, Any]:
        return {
            "method": self.method,
            "source": self.source,
            "translation": self.translation,
            "maps": [
                {"kind": m.kind, "labels": m.labels, "attention": _rounded(m.attention, decimals),
                 "rollout": _rounded(m.rollout, decimals), "rho": _rounded_list(m.rho),
                 "mean_rho": _rounded_list([m.mean_rho])[0]}
                for m in self.maps
            ],
        }

    def _format(self) -> str:
        return _rollout_text(self)

    def figure(self):
        return rollout_figure(self)


def run(tr: Translator, sentence: str, method: str = "ig", steps: int = DEFAULT_STEPS,
        max_len: int | None = None) -> Attribution | RolloutReport:
    """Is attention an explanation? for ``sentence`` on ``tr``'s model (see the module docstring).

    ``method``: ``"ig"`` (integrated gradients, ``steps`` points) or ``"ixg"`` (input × gradient) give an
    :class:`Attribution` of the greedy translation's first ``max_len`` output tokens (None: all);
    ``"rollout"`` gives a :class:`RolloutReport` (``steps`` unused). Raises :class:`AttributionError`
    as :func:`_gradient_attribution` and :func:`_attention_rollout` say.
    """
    if method == "rollout":
        return _attention_rollout(tr, sentence, max_len=max_len)
    return _gradient_attribution(tr, sentence, method, steps=steps, max_len=max_len)


def _attention_rollout(tr: Translator, sentence: str, max_len: int | None = None) -> RolloutReport:
    """Rollout of every self-attention stack the model has (``enc_self``: the Transformer encoder
    and the encoder-only model; ``self``: the decoder-only model over ``source <bos> target``), on
    the maps :meth:`Translator.attention` captures for ``sentence`` (greedy, teacher-forced).

    Raises :class:`AttributionError` for a sentence with no token, or a model without a stack of
    self-attention (the GRU models: their one attention is cross-attention, use ``ig``/``ixg``).
    """
    _check_sentence(tr, sentence)
    kinds = [k for k in ROLLOUT_KINDS if k in traits(tr.cfg.model).attention]
    if not kinds:
        raise AttributionError(
            _("model.kind={kind} has no stack of self-attention to roll out (rollout multiplies the "
              "self-attention of layer after layer); use --method ig or ixg for its attention").format(kind=tr.cfg.model.kind)
        )
    res = tr.attention(sentence, max_len=max_len)
    maps = []
    for kind in kinds:
        labels = res.labels(kind)[1]
        w = res.attention[kind][..., : len(labels), : len(labels)]  # (L, H, N, N)
        raw, rolled = w[-1].mean(dim=0), rollout(w)[-1]  # (N, N) each
        maps.append(RolloutMap(kind, labels, raw, rolled, [spearman(a, b) for a, b in zip(raw, rolled)]))
    return RolloutReport(sentence, res.translation, maps)


# ------------------------------------------------------------------------------ gradient attribution


@dataclass
class Attribution(TextReport):
    """Gradient attribution of one translation, beside the attention (see the module docstring):
    :func:`run` with ``method="ig"`` or ``"ixg"``. ``format()`` prints the tables and correlations,
    ``figure()`` draws the comparison maps beside the attribution.

    ``scores (T, S)``: the signed attribution of output token ``t`` (``rows``) to source token ``s``
    (``cols``, ``<eos>`` included). ``logprob (T,)``: ``f_t`` at the input; ``baseline_logprob (T,)``:
    at zero source embeddings; ``total (T,)``: each row's sum — for integrated gradients
    ``total ≈ logprob − baseline_logprob`` and ``delta = total − (logprob − baseline_logprob)``.
    ``compare``: title → ``(T, S)`` map shown beside it (attention, rollout); ``rho[title][t]`` the
    Spearman correlation of ``|scores[t]|`` with that map's row ``t`` (``None``: undefined).
    """

    source: str
    translation: str
    method: str
    rows: list[str]
    cols: list[str]
    scores: Tensor
    logprob: Tensor
    baseline_logprob: Tensor
    steps: int | None = None
    compare: dict[str, Tensor] = field(default_factory=dict)
    rho: dict[str, list[float | None]] = field(default_factory=dict)

    @property
    def total(self) -> Tensor:
        return self.scores.sum(dim=-1)  # (T,)

    @property
    def delta(self) -> Tensor:
        return self.total - (self.logprob - self.baseline_logprob)  # (T,)

    @property
    def completeness_gap(self) -> float | None:
        """Integrated gradients' largest ``|delta| / |logprob − baseline_logprob|`` over the output
        tokens (``None`` for input × gradient, which promises no completeness, or no output token).
        It shrinks as ``steps`` grows: the Transformer's ReLU kinks make it converge slowly."""
        if self.method != "ig" or not len(self.rows):
            return None
        diff = (self.logprob - self.baseline_logprob).abs().clamp_min(torch.finfo(torch.float32).tiny)
        return float((self.delta.abs() / diff).max())

    @property
    def shares(self) -> Tensor:
        """``|scores| / Σ|scores|`` per row: each source token's share of the output token's attribution."""
        a = self.scores.abs()
        return a / a.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)  # (T, S)

    def mean_rho(self, title: str) -> float | None:
        """The per-sentence correlation: the mean of the per-token ones that are defined."""
        return _mean(self.rho[title])

    def top1_agreement(self, title: str) -> float:
        """Share of output tokens whose most-attributed source token is the map's most-weighted one."""
        m = self.compare[title]
        return float((self.scores.abs().argmax(-1) == m.argmax(-1)).double().mean()) if len(self.rows) else 0.0

    def to_json(self, decimals: int = 4) -> dict[str, Any]:
        return {
            "method": self.method,
            "method_name": METHODS[self.method],
            "steps": self.steps,
            "source": self.source,
            "translation": self.translation,
            "rows": self.rows,
            "cols": self.cols,
            "scores": _rounded(self.scores, decimals),
            "shares": _rounded(self.shares, decimals),
            "logprob": _rounded(self.logprob, decimals),
            "baseline_logprob": _rounded(self.baseline_logprob, decimals),
            "total": _rounded(self.total, decimals),
            "delta": _rounded(self.delta, decimals),
            "completeness_gap": _rounded_list([self.completeness_gap])[0],
            "compare": [
                {"title": t, "weights": _rounded(m, decimals), "rho": _rounded_list(self.rho[t]),
                 "mean_rho": _rounded_list([self.mean_rho(t)])[0],
                 "top1_agreement": round(self.top1_agreement(t), 4)}
                for t, m in self.compare.items()
            ],
        }

    def _format(self) -> str:
        return _attribution_text(self)

    def figure(self):
        return attribution_figure(self)


def _gradient_attribution(
    tr: Translator, sentence: str, method: str = "ig", steps: int = DEFAULT_STEPS, max_len: int | None = None
) -> Attribution:
    """Attribute each output token of ``sentence``'s greedy translation to the source tokens.

    ``method``: ``"ig"`` (integrated gradients, ``steps`` Gauss–Legendre points from zero source
    embeddings) or ``"ixg"`` (input × gradient). ``max_len``: at most this many output tokens.
    The attention beside it is :func:`~attnlab.translator.teacher_forced`'s capture over the same
    output. Raises :class:`AttributionError` for an unknown method, ``steps < 1``, a sentence with
    no token, a model that does not translate (encoder-only: use rollout), or a missing Captum.
    """
    from attnlab.translator import decode_many, teacher_forced, token_labels  # no cycle: loaded when used

    if method not in ("ig", "ixg"):
        raise AttributionError(_("unknown gradient method {method!r}; use ig (integrated gradients) or "
                                 "ixg (input × gradient), or rollout").format(method=method))
    if steps < 1:
        raise AttributionError(_("steps={steps} must be >= 1 (integrated gradients' interpolation "
                                 "points)").format(steps=steps))
    t = traits(tr.cfg.model)
    if t.task != "translate":
        raise AttributionError(
            _("model.kind={kind} fills masked words and produces no translation to attribute; use "
              "--method rollout (its self-attention)").format(kind=tr.cfg.model.kind)
        )
    ids = _check_sentence(tr, sentence)
    hyp = decode_many(tr.model, [ids], tr.cfg.decode, tr.device, beam_size=1, max_len=max_len)[0][0]
    out_ids = list(hyp.tokens)
    batch = collate([ids], [out_ids], [0])
    rows = token_labels(tr.tgt_tok, out_ids, eos=bool(hyp.finished))
    T, S = len(rows), batch.src.shape[1]
    f = LogProb(tr.model, t.embeddings[0], batch, T, tr.device)
    scores = _captum_attribution(f, method, steps)  # (T, S)
    weights = teacher_forced(tr.model, batch, tr.device).attention or {}
    compare = _comparison_maps({k: v[0].float().cpu() for k, v in weights.items()}, S, T, t)
    result = Attribution(
        sentence, tr.tgt_tok.decode(out_ids), method, rows, token_labels(tr.src_tok, ids),
        scores, f.at_input(), f.at_baseline(), steps if method == "ig" else None, compare,
    )
    result.rho = {title: [spearman(a, w) for a, w in zip(scores.abs(), m)] for title, m in compare.items()}
    return result


class LogProb:
    """``f(e) (B, T)``: the teacher-forced log-probability of each output token given source token
    embeddings ``e (B, S, E)`` in place of the source embedding table's output
    (:func:`attnlab.analysis.hooks.replacing_output`, in the calling thread's passes only),
    every other input fixed; the model runs in eval mode (dropout off), its mode restored after."""

    def __init__(self, model: nn.Module, embedding: str, batch, T: int, device: torch.device) -> None:
        self.model, self.T = model, T
        self.table = model.get_submodule(embedding)
        self.src, self.valid = batch.src.to(device), batch.src_valid_lens.to(device)
        self.tgt_in, self.tgt_out = batch.tgt_in.to(device), batch.tgt_out.to(device)
        with torch.no_grad():
            self.embedded = self.table(self.src).detach()  # (1, S, E): the input the gradients are taken at

    def __call__(self, emb: Tensor) -> Tensor:
        n = emb.shape[0]
        with self._replaced(emb):
            out = self.model(self.src.expand(n, -1), self.valid.expand(n), self.tgt_in.expand(n, -1))
        logp = out.logits[:, : self.T].float().log_softmax(dim=-1)  # (B, T, V)
        return logp.gather(-1, self.tgt_out[:, : self.T, None].expand(n, -1, 1))[..., 0]  # (B, T)

    @contextmanager
    def _replaced(self, emb: Tensor):
        was_training = self.model.training
        self.model.eval()
        owner = threading.get_ident()

        def replace(_module: nn.Module, _inputs: Any, out: Tensor) -> Tensor:
            # The table's output := emb, in this thread's passes only: a server runs other requests
            # on the same model at once, and their tables must stay theirs.
            return emb if threading.get_ident() == owner else out

        try:
            with hooks.replacing_output(self.table, replace):
                yield
        finally:
            self.model.train(was_training)

    def at_input(self) -> Tensor:
        with torch.no_grad():
            return self(self.embedded)[0].cpu()  # (T,)

    def at_baseline(self) -> Tensor:
        with torch.no_grad():
            return self(torch.zeros_like(self.embedded))[0].cpu()  # (T,)


def _captum_attribution(f: LogProb, method: str, steps: int) -> Tensor:
    """Captum's attribution of every ``f_t`` at once: one copy of the input per output token, each
    with its own target column (rows of a batch never mix), summed over the embedding dim → ``(T, S)``."""
    try:
        import captum.attr  # noqa: F401  (the optional `explain` extra)
    except ImportError:
        raise AttributionError(
            _("gradient attribution needs Captum, the `explain` extra: pip install -e '.[explain]' in "
              "the attnlab checkout (--method rollout needs nothing more)")
        ) from None
    T = f.T
    if T == 0:
        return torch.zeros(0, f.embedded.shape[1])
    inputs = f.embedded.expand(T, -1, -1).clone().requires_grad_(True)  # (T, S, E)
    target = list(range(T))
    with torch.enable_grad():  # the caller may be under no_grad; the gradients are the point here
        return _attribute(f, method, steps, inputs, target)


def _attribute(f: LogProb, method: str, steps: int, inputs: Tensor, target: list[int]) -> Tensor:
    from captum.attr import InputXGradient, IntegratedGradients

    if method == "ig":
        attr = IntegratedGradients(f).attribute(
            inputs, baselines=torch.zeros_like(inputs), target=target, n_steps=steps,
            internal_batch_size=max(len(target), ROWS_PER_BATCH),
        )
    else:
        attr = InputXGradient(f).attribute(inputs, target=target)
    return attr.detach().sum(dim=-1).float().cpu()  # (T, S)


def _comparison_maps(maps: dict[str, Tensor], S: int, T: int, t) -> dict[str, Tensor]:
    """The ``(T, S)`` maps shown beside the attribution: the attention that reads as an alignment
    (last layer, heads averaged) and, where the model has a self-attention stack, the rollout."""
    out: dict[str, Tensor] = {}
    if "cross" in maps:
        L = maps["cross"].shape[0]
        cross = maps["cross"][-1].mean(dim=0)[:T, :S]  # (T, S)
        title = (_("additive attention (Bahdanau)") if t.recurrent
                 else _("cross-attention, layer {layer} of {layers}").format(layer=L, layers=L))
        out[title + (_(", heads averaged") if t.heads > 1 else "")] = cross
        if "enc_self" in maps:
            # Our composition, not Abnar & Zuidema's (they roll out one stack): the last layer's
            # cross-attention read back through the encoder's rollout to the source tokens.
            out[_("cross-attention × encoder rollout")] = cross @ rollout(maps["enc_self"][..., :S, :S])[-1]
    if "self" in maps:
        L = maps["self"].shape[0]
        rows = slice(S, S + T)  # the decoder-only query that reads input t predicts output t
        out[_("self-attention on the source, layer {layer} of {layers}, heads averaged").format(layer=L, layers=L)] = (
            maps["self"][-1].mean(0)[rows, :S])
        out[_("rollout on the source")] = rollout(maps["self"])[-1][rows, :S]
    return out


def _check_sentence(tr: Translator, sentence: str) -> list[int]:
    ids = tr.encode_source(sentence)[0]
    if not ids:
        raise AttributionError(_("{sentence!r} has no token after preprocessing; give a sentence in the "
                                 "run's source language").format(sentence=sentence))
    return ids


def _rounded(x: Tensor, decimals: int) -> Any:
    return torch.round(x.double(), decimals=decimals).tolist()


def _rounded_list(values: list[float | None]) -> list[float | None]:
    return [None if v is None or math.isnan(v) else round(v, 4) for v in values]


# ------------------------------------------------------------------------------ tables and figures


def _table(
    rows: list[str], cols: list[str], cells: list[list[str]], extra: dict[str, list[str]], corner: str = N_("output")
) -> list[str]:
    """Aligned text table: one row per ``rows`` label (headed ``corner``, translated), one column per ``cols``
    label, then ``│`` and the ``extra`` columns (header → one value per row)."""
    width = [max(len(c), *(len(r[j]) for r in cells)) if cells else len(c) for j, c in enumerate(cols)]
    ewidth = {h: max(len(h), *(len(v) for v in vals)) if vals else len(h) for h, vals in extra.items()}
    corner = _(corner)
    lw = max([cells_wide(corner), *map(cells_wide, rows)])
    head = " ".join([ljust(corner, lw), *(f"{c:>{w}}" for c, w in zip(cols, width))])
    if extra:
        head += " │ " + " ".join(f"{h:>{ewidth[h]}}" for h in extra)
    out = [head]
    for i, (label, r) in enumerate(zip(rows, cells)):
        line = " ".join([ljust(label, lw), *(f"{v:>{w}}" for v, w in zip(r, width))])
        if extra:
            line += " │ " + " ".join(f"{vals[i]:>{ewidth[h]}}" for h, vals in extra.items())
        out.append(line)
    return out


def _pct(m: Tensor) -> list[list[str]]:
    return [[f"{100 * float(v):.0f}" for v in row] for row in m]


def _rho_text(v: float | None) -> str:
    return "—" if v is None else f"{v:+.2f}"


def _attribution_text(a: Attribution) -> str:
    """The readable report of ``attnlab attribute``: the attribution table, each comparison map
    with its per-token ρ, and the per-sentence correlations."""
    from attnlab.maps import display_tokens

    rows, cols = display_tokens(a.rows), display_tokens(a.cols)
    how = (_("{steps} steps from zero source embeddings").format(steps=a.steps) if a.method == "ig"
           else _("embedding · gradient"))
    lines = [f"{a.source} → {a.translation}", "",
             _("{method} ({how}): each output token's log-probability attributed to the source tokens, as shares of "
               "|attribution| in %; Σa is the row's signed sum").format(method=_(METHODS[a.method]), how=how)
             + (_(", f(x)−f(0) what completeness says it must be") if a.method == "ig" else "")]
    extra = {"Σa": [f"{float(v):+.3f}" for v in a.total]}
    if a.method == "ig":
        extra["f(x)−f(0)"] = [f"{float(v):+.3f}" for v in a.logprob - a.baseline_logprob]
    lines += _table(rows, cols, _pct(a.shares), extra)
    for title, m in a.compare.items():
        lines += ["", _("{title} (%), and Spearman ρ of |attribution| against it, per output token").format(title=title)]
        lines += _table(rows, cols, _pct(m), {"ρ": [_rho_text(v) for v in a.rho[title]]})
    if not a.compare:
        lines += ["", _("this model has no attention to compare with (a fixed context, notes §1)")]
    lines.append("")
    if a.completeness_gap is not None:
        lines.append(_("completeness: |Σa − (f(x)−f(0))| is at most {share} of |f(x)−f(0)| over the output "
                       "tokens").format(share=f"{100 * a.completeness_gap:.2f} %")
                     + (_(" (over 1 %: raise --steps)") if a.completeness_gap > 0.01 else ""))
    for title in a.compare:
        top1 = a.top1_agreement(title)
        lines.append(_("per sentence, {title}: ρ = {rho} (mean over the output tokens), top-1 agreement {k}/{n}").format(
            title=title, rho=_rho_text(a.mean_rho(title)), k=round(top1 * len(a.rows)), n=len(a.rows)))
    return "\n".join(lines)


def _rollout_text(r: RolloutReport) -> str:
    """The readable report of ``attnlab attribute --method rollout``: per stack, the last layer's
    attention and the rollout, with each row's ρ between them."""
    from attnlab.maps import display_tokens

    lines = [f"{r.source} → {r.translation}"]
    for m in r.maps:
        labels = display_tokens(m.labels)
        lines += ["", _("{kind}: last layer, heads averaged (%)").format(kind=m.kind)]
        lines += _table(labels, labels, _pct(m.attention), {}, corner=N_("query"))
        lines += ["", _("{kind}: attention rollout through every layer (%), and ρ against the last layer's row").format(
            kind=m.kind)]
        lines += _table(labels, labels, _pct(m.rollout), {"ρ": [_rho_text(v) for v in m.rho]}, corner=N_("query"))
        lines.append(_("per sentence: ρ = {rho} (mean over the rows)").format(rho=_rho_text(m.mean_rho)))
    return "\n".join(lines)


def _panel(ax, m: Tensor, rows: list[str], cols: list[str], title: str, signed: bool = False):
    # Attention and rollout are drawn as every attention map is (viz.attention.CMAP: darker = larger, one
    # 0…1 scale, the notes §23); a signed attribution is drawn per row as a / max|a| on a diverging scale
    # (red pushes the token up, blue down).
    from attnlab.viz.attention import CMAP

    cmap, lo = ("RdBu_r", -1.0) if signed else (CMAP, 0.0)
    image = ax.imshow(m.numpy(), cmap=cmap, vmin=lo, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols, rotation=90, fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows, fontsize=8)
    ax.set_title(title, fontsize=9)
    return image


def attribution_figure(a: Attribution):
    """The comparison maps and the attribution side by side (a matplotlib ``Figure``); the
    attribution panel's rows carry each output token's ρ against the first map."""
    from attnlab.maps import display_tokens
    from attnlab.viz.figure import new_figure

    rows, cols = display_tokens(a.rows), display_tokens(a.cols)
    n = len(a.compare) + 1
    fig = new_figure((3.2 * n + 1.5, 0.32 * max(len(rows), len(cols)) + 2.8))
    axes = fig.subplots(1, n, squeeze=False)[0]
    for ax, (title, m) in zip(axes, a.compare.items()):
        image = _panel(ax, m, rows, cols, title + "\n" + _("ρ per sentence {rho}").format(rho=_rho_text(a.mean_rho(title))))
    if a.compare:
        fig.colorbar(image, ax=list(axes[:-1]), shrink=0.8, label=_("weight"))
    peak = a.scores.abs().amax(dim=-1, keepdim=True).clamp_min(torch.finfo(a.scores.dtype).tiny)
    first = next(iter(a.rho.values()), None)
    labelled = [f"{r} (ρ {_rho_text(first[i])})" for i, r in enumerate(rows)] if first else rows
    how = _(", {steps} steps").format(steps=a.steps) if a.steps else ""
    signed = _panel(axes[-1], a.scores / peak, labelled, cols, _(METHODS[a.method]) + how + "\n" + _("row / max|a|"),
                    True)
    fig.colorbar(signed, ax=axes[-1], shrink=0.8, label=_("attribution"))
    fig.suptitle(_("“{source}” → {translation}: is attention an explanation?").format(
        source=a.source, translation=a.translation or _("(empty)")), fontsize=10)
    return fig


def rollout_figure(r: RolloutReport):
    """Per self-attention stack: the last layer's attention (heads averaged) beside its rollout."""
    from attnlab.maps import display_tokens
    from attnlab.viz.figure import new_figure

    size = max(len(m.labels) for m in r.maps)
    fig = new_figure((7.5, (0.3 * size + 2.5) * len(r.maps)))
    axes = fig.subplots(len(r.maps), 2, squeeze=False)
    for (left, right), m in zip(axes, r.maps):
        labels = display_tokens(m.labels)
        _panel(left, m.attention, labels, labels, _("{kind}: last layer, heads averaged").format(kind=m.kind))
        image = _panel(right, m.rollout, labels, labels, _("{kind}: rollout · ρ {rho}").format(
            kind=m.kind, rho=_rho_text(m.mean_rho)))
        fig.colorbar(image, ax=[left, right], shrink=0.8, label=_("weight"))
    fig.suptitle(_("“{source}” → {translation}: attention rollout (Abnar & Zuidema 2020)").format(
        source=r.source, translation=r.translation or _("(empty)")), fontsize=10)
    return fig
