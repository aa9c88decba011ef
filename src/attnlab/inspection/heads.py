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
  slice ``[..., h·Dh:(h+1)·Dh]`` of the input of ``out_proj`` = W_o zeroed by a forward pre-hook,
  the other heads untouched; Michel et al. 2019).

Averages are over real (non-padding) queries only; padding keys carry exactly 0 weight.

Dimension key: B batch, L layers, H heads, Q queries, K keys, S source len, T target len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from attnlab.data import corpus
from attnlab.data.batching import collate
from attnlab.data.text import detokenize
from attnlab.data.vocab import EOS
from attnlab.errors import AttnlabError
from attnlab.evaluation.bleu import corpus_scores
from attnlab.inspection.plots import new_figure, save_figure
from attnlab.models import traits
from attnlab.training.losses import sequence_loss
from attnlab.translator import Translator, decode_many, teacher_forced

#: Statistics per head, in table/figure order (``diag_agreement`` only for cross heads).
STATS = ("distance", "prev", "same", "next", "eos", "entropy", "diag_agreement", "bleu_drop", "loss_increase")
LABELS = {
    "distance": "mean distance",
    "prev": "prev token",
    "same": "same token",
    "next": "next token",
    "eos": "on <eos>",
    "entropy": "entropy (nats)",
    "diag_agreement": "diag agreement",
    "bleu_drop": "BLEU drop (masked)",
    "loss_increase": "loss increase (masked)",
}
KIND_NAMES = {
    "enc_self": "encoder self",
    "dec_self": "decoder self (masked)",
    "cross": "cross (enc-dec)",
    "self": "decoder-only self (causal)",
}
#: A statistic above this share names the head's role in the table (e.g. "previous-token head").
ROLE_SHARE = 0.5


@dataclass
class HeadStats:
    kind: str  # enc_self, dec_self, cross, self
    layer: int
    head: int
    values: dict[str, float] = field(default_factory=dict)  # STATS -> value (NaN where not defined)

    @property
    def role(self) -> str:
        v = self.values
        roles = []
        if v.get("diag_agreement", 0.0) > 0.7:
            roles.append("monotone alignment")
        for key, name in (
            ("prev", "previous-token"),
            ("same", "same-token"),
            ("next", "next-token"),
            ("eos", "<eos> sink"),
        ):
            if v.get(key, 0.0) > ROLE_SHARE:
                roles.append(name)
        if not roles and self.kind != "cross" and v.get("distance", 0.0) > 3:
            roles.append("long-range")
        return ", ".join(roles) or "-"


@dataclass
class HeadsReport:
    run: str
    sentences: int
    base_bleu: float
    base_loss: float
    heads: list[HeadStats]
    shape: dict[str, tuple[int, int]]  # kind -> (layers, heads)

    def grid(self, kind: str, stat: str) -> Tensor:
        """``(layers, heads)`` values of ``stat`` for ``kind``."""
        L, H = self.shape[kind]
        out = torch.full((L, H), float("nan"))
        for h in self.heads:
            if h.kind == kind:
                out[h.layer, h.head] = h.values.get(stat, float("nan"))
        return out

    def to_json(self) -> dict[str, Any]:
        def clean(x: float) -> float | None:
            return None if not math.isfinite(x) else round(x, 5)

        return {
            "run": self.run,
            "sentences": self.sentences,
            "base_bleu": self.base_bleu,
            "base_loss": self.base_loss,
            "shape": {k: list(v) for k, v in self.shape.items()},
            "heads": [
                {
                    "kind": h.kind,
                    "layer": h.layer,
                    "head": h.head,
                    "role": h.role,
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
            f"`attnlab heads` needs a multi-head model (transformer or decoder-only); this run's "
            f"model.kind={model.config.kind} has {'one additive attention' if t.attention else 'no attention'}"
        )
    modules = {}
    for kind, path in t.attention_modules.items():
        blocks, attr = path.split(".*.")  # "decoder_blocks.*.cross_attention": one per block
        modules[kind] = [getattr(block, attr) for block in model.get_submodule(blocks)]
    return modules


class silence_head:  # noqa: N801 - used like a function: `with silence_head(mha, h): ...`
    """Context manager: zero head ``h``'s slice of the input of ``mha.out_proj`` (its output drops out
    of the concatenation before W_o mixes the heads, notes §11); removed on exit."""

    def __init__(self, mha: nn.Module, head: int) -> None:
        self.mha, self.head = mha, head
        self.handle = None

    def __enter__(self):
        Dh = self.mha.head_size
        lo, hi = self.head * Dh, (self.head + 1) * Dh

        def hook(module, args):  # noqa: ARG001
            x = args[0].clone()
            x[..., lo:hi] = 0  # (B, Q, H*Dh): head h's columns
            return (x, *args[1:])

        self.handle = self.mha.out_proj.register_forward_pre_hook(hook)
        return self

    def __exit__(self, *exc):
        self.handle.remove()
        return False


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
            refs.append([detokenize(r.split(), "fr") for r in split.references[i]])
    if not src:
        raise AttnlabError("the run's validation and test splits are empty; nothing to measure heads on")
    return src, tgt, refs


def score_sample(
    model: nn.Module,
    tr,
    src: list[list[int]],
    tgt: list[list[int]],
    refs: list[list[str]],
    batch_size: int = 64,
) -> tuple[float, float]:
    """Greedy BLEU (all references) and teacher-forced loss per token of ``model`` on the sample."""
    src = [s[: tr.max_src_tokens] for s in src]
    hyps = decode_many(model, src, tr.cfg.decode, tr.device, beam_size=1)
    bleu = corpus_scores([tr.tgt_tok.decode(h[0].tokens) for h in hyps], refs)["bleu"]
    nll, ntok = 0.0, 0
    with torch.inference_mode():
        for start in range(0, len(src), batch_size):
            idx = list(range(start, min(start + batch_size, len(src))))
            batch = collate([src[i] for i in idx], [tgt[i] for i in idx], idx).to(tr.device)
            out = sequence_loss(model, batch, 0.0)
            nll += float(out.nll_sum)
            ntok += out.num_tokens
    return bleu, nll / max(ntok, 1)


def analyse_heads(
    run_dir: str | Path,
    sentences: int = 100,
    which: str = "best",
    device: str = "cpu",
    importance: bool = True,
    batch_size: int = 32,
    log=None,
) -> HeadsReport:
    """Measure every head of the run's model on ``sentences`` validation sentences.

    Raises :class:`AttnlabError` for a model without multi-head attention or an unreadable run.
    """
    if sentences < 1:
        raise AttnlabError(f"--sentences {sentences} must be at least 1")
    tr = Translator.from_run(run_dir, which=which, device=device)
    model = tr.model.eval()
    modules = attention_modules(model)
    prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    src, tgt, refs = _sample(prepared, sentences)
    src = [s[: tr.max_src_tokens] for s in src]

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

    base_bleu, base_loss = score_sample(model, tr, src, tgt, refs)
    heads: list[HeadStats] = []
    shape = {}
    for kind, mods in modules.items():
        L, H = len(mods), mods[0].num_heads
        shape[kind] = (L, H)
        acc = sums[kind]
        for layer in range(L):
            for h in range(H):
                n = float(acc["count"][layer, h]) or 1.0
                vals = {k: float(acc[k][layer, h]) / n for k in STATS if k in acc}
                vals.setdefault("diag_agreement", float("nan"))
                if importance:
                    with silence_head(mods[layer], h):
                        bleu, loss = score_sample(model, tr, src, tgt, refs)
                    vals["bleu_drop"], vals["loss_increase"] = base_bleu - bleu, loss - base_loss
                    if log:
                        log(
                            f"  {kind} layer {layer} head {h}: BLEU {bleu:.2f} ({bleu - base_bleu:+.2f}), "
                            f"loss {loss:.3f} ({loss - base_loss:+.3f})"
                        )
                else:
                    vals["bleu_drop"] = vals["loss_increase"] = float("nan")
                heads.append(HeadStats(kind, layer, h, vals))
    return HeadsReport(str(run_dir), len(src), base_bleu, base_loss, heads, shape)


def format_table(report: HeadsReport) -> str:
    """Markdown: one row per head, with its role when one statistic dominates."""
    head = ["attention", "layer", "head", *(LABELS[s] for s in STATS), "role"]
    lines = [
        f"Heads of {report.run} on {report.sentences} validation sentences "
        f"(greedy BLEU {report.base_bleu:.2f}, loss {report.base_loss:.3f} with every head on).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for h in report.heads:
        cells = [
            "-" if not math.isfinite(h.values.get(s, float("nan"))) else f"{h.values[s]:.3f}" for s in STATS
        ]
        lines.append(
            "| "
            + " | ".join([KIND_NAMES.get(h.kind, h.kind), str(h.layer), str(h.head), *cells, h.role])
            + " |"
        )
    return "\n".join(lines)


def draw_heads(report: HeadsReport, out_dir: str | Path, stem: str = "heads") -> list[Path]:
    """One heatmap (layers × heads) per attention kind (rows) and statistic (columns), values annotated."""
    kinds = list(report.shape)
    stats = [s for s in STATS if any(math.isfinite(h.values.get(s, float("nan"))) for h in report.heads)]
    L = max(n for n, _ in report.shape.values())
    H = max(n for _, n in report.shape.values())
    cell = 0.45
    fig = new_figure((max(8.0, len(stats) * (H * cell + 1.1)), max(3.0, len(kinds) * (L * cell + 1.3))))
    axes = fig.subplots(len(kinds), len(stats), squeeze=False)
    for c, stat in enumerate(stats):
        # One colour scale per statistic (column), so kinds compare: shares on [0, 1], importance
        # diverging around 0 (a negative drop means the model did better without that head).
        column = torch.cat([report.grid(k, stat).flatten() for k in kinds])
        top = float(column[torch.isfinite(column)].abs().max()) if torch.isfinite(column).any() else 1.0
        diverging = stat in ("bleu_drop", "loss_increase")
        share = stat in ("prev", "same", "next", "eos", "diag_agreement")
        vmin, vmax = (-(top or 1.0), top or 1.0) if diverging else (0.0, 1.0 if share else (top or 1.0))
        for r, kind in enumerate(kinds):
            ax = axes[r][c]
            grid = report.grid(kind, stat)
            if not torch.isfinite(grid).any():
                ax.axis("off")
                continue
            im = ax.imshow(
                grid.numpy(), cmap="RdBu_r" if diverging else "viridis", aspect="auto", vmin=vmin, vmax=vmax
            )
            for i in range(grid.shape[0]):
                for j in range(grid.shape[1]):
                    v = float(grid[i, j])
                    if math.isfinite(v):
                        light = abs(v) / vmax > 0.5 if not diverging else abs(v) / vmax < 0.6
                        ax.text(
                            j,
                            i,
                            f"{v:.2f}",
                            ha="center",
                            va="center",
                            fontsize=6,
                            color="black" if light else "white",
                        )
            ax.set_xticks(range(grid.shape[1]))
            ax.set_yticks(range(grid.shape[0]))
            ax.tick_params(labelsize=6)
            ax.set_title(LABELS[stat], fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{KIND_NAMES.get(kind, kind)}\nlayer", fontsize=7)
            if r == len(kinds) - 1:
                ax.set_xlabel("head", fontsize=7)
            fig.colorbar(im, ax=ax, shrink=0.8).ax.tick_params(labelsize=5)
    fig.suptitle(
        f"heads of {Path(report.run).name}: {report.sentences} validation sentences, "
        f"BLEU {report.base_bleu:.1f} with all heads",
        fontsize=9,
    )
    return save_figure(fig, Path(out_dir) / stem)
