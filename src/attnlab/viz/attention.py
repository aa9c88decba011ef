"""The attention maps of a trained model, drawn (notes §23–25).

- ``enc_self`` (Transformer encoder self-attention, §23): every source token attends to every
  source token; the source is drawn padded to a batch-like width so the ``<pad>`` columns are
  visibly empty — ``masked_softmax`` gives them exactly zero weight.
- ``dec_self`` (decoder masked self-attention, §24): lower-triangular, a query never sees a later
  target position.
- ``cross`` (encoder–decoder attention, §25; Bahdanau's attention over the decoding steps, §1–3):
  one row per generated token, one column per source token — the soft alignment.
- ``self`` (decoder-only model, §28): one causal map over ``source <pad>… <bos> target``, with the
  source/target boundary marked.

Maps are ``(layers, heads, queries, keys)`` tensors, as :meth:`attnlab.translator.Translator.attention`
captures them; their JSON is :mod:`attnlab.maps`'s. The timeline of the probe
sentences reads ``probes.jsonl`` through :func:`attnlab.runs.probes.read_probes`. Figures use
the matplotlib object API through :mod:`attnlab.viz.curves` (Agg, no pyplot).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from attnlab.data.specials import MASK_TOKEN, SPECIALS
from attnlab.data.text import preprocess
from attnlab.errors import AttnlabError
from attnlab.maps import KIND_TITLES, map_axes
from attnlab.models import traits
from attnlab.runs.probes import PROBES_FILE, read_probes
from attnlab.viz.curves import new_figure, save_figure

if TYPE_CHECKING:  # the translator imports this module to draw its results: no import back at run time
    from attnlab.translator import AttentionResult, Translator

__all__ = [
    "NoAttentionError",
    "attention_figure",
    "attention_html",
    "attention_maps",
    "continues_word",
    "display_tokens",
    "draw_attention",
    "draw_maps",
    "draw_timeline",
    "map_labels",
    "run_name",
    "slug",
    "timeline_figure",
]

PAD_TOKEN = "<pad>"


class NoAttentionError(AttnlabError):
    """The model has no attention weights to show (the fixed-context seq2seq baseline)."""


def _no_attention(kind: str) -> NoAttentionError:
    return NoAttentionError(
        f"model.kind={kind} has no attention: its decoder sees one fixed context vector (notes §1); "
        "train a bahdanau, transformer or decoder-only model to see attention maps"
    )


def attention_maps(
    translator: Translator, sentence: str, beam_size: int = 1, extra_pad: int = 3
) -> AttentionResult:
    """Translate ``sentence`` and recompute every attention map with ``extra_pad`` padding positions.

    The source is padded with ``extra_pad`` ``<pad>`` tokens after its ``<eos>`` (its valid length is
    unchanged), as it would be in a batch next to a longer sentence: the maps then show the padding
    columns the notes' §23 talks about, and their weight is exactly 0. ``src_tokens`` of the result
    includes those ``<pad>`` labels, so every map's key axis matches its labels. The maps are
    :meth:`Translator.attention`'s, the one capture of the CLI, the web page and the probes.

    Returns an :class:`AttentionResult` whose ``attention`` maps kind → ``(layers, heads, Q, K)``:
    ``enc_self (L, H, S, S)``, ``dec_self (L, H, T, T)``, ``cross (L, H, T, S)`` (Bahdanau: ``L = H = 1``),
    ``self (L, H, S + T, S + T)`` for the decoder-only model, where ``S`` counts the pads and
    ``T = len(tgt_tokens)``.

    Raises:
        NoAttentionError: for the seq2seq model. AttnlabError: if the sentence has no token.
    """
    if extra_pad < 0:
        raise AttnlabError(f"extra_pad={extra_pad} must be >= 0")
    if not traits(translator.cfg.model).attention:
        raise _no_attention(translator.cfg.model.kind)
    if not translator.encode_source(sentence)[0]:
        raise AttnlabError(f"{sentence!r} has no token after preprocessing; give an English sentence")
    return translator.attention(sentence, beam_size=beam_size, extra_pad=extra_pad)


#: BPE's word-start mark (SentencePiece's U+2581, :mod:`attnlab.data.subword`), and the mark a
#: displayed piece that continues the word before it carries instead.
WORD_START, CONTINUES = "\u2581", "·"
_SPECIAL_LABELS = (*SPECIALS, MASK_TOKEN)


def display_tokens(tokens) -> list[str]:
    """Token labels as a reader should see them: BPE pieces without their ``▁``.

    A sequence that holds a ``▁`` piece is BPE (a word vocabulary never makes one): ``▁mai`` shows
    as ``mai`` and a piece that continues the word before it, ``son``, as ``·son``, so the columns
    stay one per token and the word ``maison`` reads ``mai ·son``. Specials (``<eos>``, ``<pad>``,
    ``[MASK]``, …) are unchanged, and so is a sequence of words.
    """
    tokens = list(tokens)
    if not any(t.startswith(WORD_START) for t in tokens):
        return tokens
    return [
        t if t in _SPECIAL_LABELS
        else (t[len(WORD_START):] or WORD_START) if t.startswith(WORD_START)
        else CONTINUES + t
        for t in tokens
    ]


def continues_word(tokens) -> list[bool]:
    """For each token, whether it continues the word before it (a BPE piece without ``▁``; see
    :func:`display_tokens`): text built from the pieces joins these without a space."""
    return [shown.startswith(CONTINUES) and shown != raw for raw, shown in zip(tokens, display_tokens(tokens))]


def map_labels(result: AttentionResult, kind: str) -> tuple[list[str], list[str]]:
    """``(row labels, column labels)`` of map ``kind`` in a figure, as :func:`display_tokens` shows them.

    Rows and columns are the map's queries and keys (:func:`~attnlab.maps.map_axes`),
    except that cross-attention rows name the token each query predicted: the alignment reads
    "this output looked at that input". Decoder self-attention runs over the decoder inputs
    ``<bos> y1 …``; the decoder-only map over ``source <bos> target``.
    """
    queries, keys, outputs = map_axes(result, kind)
    return display_tokens(outputs if kind == "cross" else queries), display_tokens(keys)


def _fit(weights: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """A map cut to its labels (:meth:`Translator.attention` already gives them so; a result built
    elsewhere may carry a longer map). Raises ``ValueError`` when the map is smaller than its labels."""
    if weights.shape[-2] < rows or weights.shape[-1] < cols:
        raise ValueError(f"attention map {tuple(weights.shape)} is smaller than its labels ({rows}, {cols})")
    return weights[..., :rows, :cols]


def slug(sentence: str, limit: int = 40) -> str:
    """A file-name-safe form of a sentence: ``"i'm home ."`` → ``"i-m-home"``."""
    s = re.sub(r"[^0-9a-zA-Z]+", "-", preprocess(sentence)).strip("-").lower()
    return s[:limit].strip("-") or "sentence"


def _style_tick_labels(labels, texts) -> None:
    for label, text in zip(labels, texts):
        if text in (PAD_TOKEN, "<bos>", "<eos>"):
            label.set_color("tab:gray" if text == PAD_TOKEN else "tab:blue")


_AXIS_NAMES = {  # kind -> (row axis, column axis)
    "cross": ("query → predicted token", "key (source token)"),
    "enc_self": ("query (source token)", "key (source token)"),
    "dec_self": ("query (decoder input)", "key (decoder input)"),
    "self": ("query position", "key: source ┆ target"),
}


def _pick_kind(result: AttentionResult, kind: str | None) -> str:
    """``kind``, or the map people look at first (cross, else the decoder-only self); checked against the result."""
    if not result.attention:
        raise _no_attention("seq2seq")  # the only model without attention maps
    if kind is None:
        return next(k for k in ("cross", "self", "dec_self", "enc_self") if k in result.attention)
    if kind not in result.attention:
        raise AttnlabError(f"no {kind!r} attention in this model; its kinds are {', '.join(result.attention)}")
    return kind


def _one_based(value: int | None, count: int, what: str, kind: str) -> list[int]:
    """The 0-based indices picked by a 1-based ``value`` (``None``: all ``count`` of them)."""
    if value is None:
        return list(range(count))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= count:
        raise AttnlabError(
            f"{what}={value!r} is out of range: the {kind} maps have {count} {what}(s), counted from 1 "
            f"as in the figure titles (1…{count}); None for all"
        )
    return [value - 1]


def _panels(result: AttentionResult, kind: str, layer, head) -> list[list[tuple[str, torch.Tensor]]]:
    """``(title, (Q, K) weights)`` of each panel: one row per layer shown, one column per head shown
    and, where the model has several heads, a last column with the layer's heads averaged (the one
    panel when ``head`` is ``None``); cut to the labels. Titles count layers and heads from 1."""
    queries, keys = map_labels(result, kind)
    w = _fit(result.attention[kind].detach().float().cpu(), len(queries), len(keys))  # (L, H, Q, K)
    n_layers, n_heads = int(w.shape[0]), int(w.shape[1])
    layers = _one_based(layer, n_layers, "layer", kind)
    if head is None or head == "all":
        heads = list(range(n_heads))
    else:
        heads = _one_based(head, n_heads, "head", kind)
    if kind == "cross" and n_layers == n_heads == 1:  # Bahdanau: one map over the decoding steps
        return [[("one row per decoding step", w[0, 0])]]
    mean = [(f"layer {i + 1}, mean of {n_heads} heads", w[i].mean(dim=0)) for i in layers]  # (Q, K) each
    if head is None and n_heads > 1:
        return [[m] for m in mean]
    grid = [[(f"layer {i + 1}, head {h + 1}", w[i, h]) for h in heads] for i in layers]
    # The heads' mean beside the heads: what the layer passes on is their sum through W_o (§11), and
    # the mean is the map a reader compares each head against.
    return [row + [m] for row, m in zip(grid, mean)] if n_heads > 1 else grid


def attention_figure(
    result: AttentionResult, kind: str | None = None, layer: int | None = None, head: int | str | None = None,
    title: str | None = None,
):
    """Map ``kind`` of ``result`` as a Figure: one token-labelled panel per layer (× head) and a colour bar.

    ``kind``: default ``cross`` (or ``self``, decoder-only). ``layer``, ``head`` count from 1 like
    the panel titles; ``layer=None``: every layer; ``head=None``: heads averaged; ``head="all"``:
    every head (the layers × heads grid that ``attnlab attention`` writes). With several heads, every
    row of panels ends with the layer's heads averaged. Queries are rows, keys columns, ``<bos> <eos>
    <pad>`` included. The colour scale is fixed, 0 to 1, in every figure (a flat map of 0.36 looks
    pale, not bright), and each panel's title prints its largest weight; ``title`` (e.g. the run)
    heads the suptitle. ``len(fig.axes)`` is the number of panels plus one (the colour bar).
    Raises :class:`NoAttentionError` (seq2seq) or :class:`AttnlabError` for a kind, layer or head
    the model does not have.
    """
    kind = _pick_kind(result, kind)
    queries, keys = map_labels(result, kind)
    grid = _panels(result, kind, layer, head)
    n_rows, n_cols = len(grid), len(grid[0])
    cell = 0.28  # inches per token: labels stay legible, big grids stay bounded
    panel_w, panel_h = max(2.6, cell * len(keys) + 0.8), max(2.0, cell * len(queries) + 0.8)
    fig = new_figure((min(4 + panel_w * n_cols, 40), min(1.6 + panel_h * n_rows, 40)))
    axes = fig.subplots(n_rows, n_cols, squeeze=False)
    image = None
    for r, row in enumerate(grid):
        for c, (name, w) in enumerate(row):
            image = _draw_panel(axes[r][c], w, queries, keys, name, result, kind)
            if c == 0:
                axes[r][c].set_ylabel(_AXIS_NAMES[kind][0], fontsize=8)
            if r == n_rows - 1:
                axes[r][c].set_xlabel(_AXIS_NAMES[kind][1], fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (fixed scale 0–1)")
    heading = KIND_TITLES[kind]
    if kind == "cross" and tuple(result.attention[kind].shape[:2]) == (1, 1):
        heading = "Bahdanau attention over the decoding steps (§1–3)"
    shown = f"“{result.translation}”" if result.translation else "(empty translation)"
    note = ""
    if any(t.startswith(CONTINUES) for t in (*queries, *keys)):
        note = f"\nBPE pieces, one per row/column: {CONTINUES}x continues the word before it"
    fig.suptitle(f"{title + ' · ' if title else ''}{heading}\n“{result.source}” → {shown}{note}", fontsize=10)
    return fig


def _draw_panel(ax, w: torch.Tensor, queries, keys, name: str, result: AttentionResult, kind: str):
    # vmin/vmax fixed at 0 and 1: colours mean the same weight in every panel, figure and run.
    image = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(keys)))
    ax.set_yticks(range(len(queries)))
    ax.set_xticklabels(keys, rotation=90, fontsize=8)
    ax.set_yticklabels(queries, fontsize=8)
    _style_tick_labels(ax.get_xticklabels(), keys)
    _style_tick_labels(ax.get_yticklabels(), queries)
    if kind == "self":  # the source | target boundary of the decoder-only sequence
        b = len(result.src_tokens) - 0.5
        ax.axvline(b, color="tab:red", lw=1.2, ls="--")
        ax.axhline(b, color="tab:red", lw=1.2, ls="--")
    ax.set_title(f"{name} · max {float(w.max()):.2f}", fontsize=9)
    return image


def attention_html(result: AttentionResult) -> str:
    """An HTML summary of ``result`` for Jupyter: sentence, translation, and each kind's figure
    (every layer, heads averaged) as an inline PNG."""
    import base64
    import html

    parts = [f"<p><b>{html.escape(result.source)}</b> → {html.escape(result.translation) or '(empty)'}"
             + (" <i>(source truncated)</i>" if result.truncated else "") + "</p>"]
    if not result.attention:
        parts.append("<p>no attention maps (the seq2seq decoder sees one fixed context vector, notes §1)</p>")
    for kind in result.attention:
        png = base64.b64encode(attention_figure(result, kind).png()).decode("ascii")
        shape = "×".join(map(str, result.attention[kind].shape))
        parts.append(f"<p><code>{kind}</code> (layers×heads×queries×keys = {shape})<br>"
                     f'<img src="data:image/png;base64,{png}"/></p>')
    parts.append("<p><code>.plot(kind, layer=…, head=…)</code> draws one layer or head "
                 "(counted from 1); <code>.attention[kind]</code> holds the tensors.</p>")
    return "\n".join(parts)


def run_name(translator: Translator) -> str:
    """``run-folder (kind)``, or the kind alone when they coincide."""
    kind = translator.cfg.model.kind
    name = Path(translator.run_dir).resolve().name if translator.run_dir is not None else kind
    return name if name == kind else f"{name} ({kind})"


def draw_attention(
    translator: Translator,
    sentence: str,
    out_dir: str | Path,
    beam_size: int = 1,
    formats=("png", "svg"),
    extra_pad: int = 3,
) -> list[Path]:
    """Draw every attention map of ``sentence`` as a layers × heads grid; returns the written paths.

    One figure per kind (see :data:`KIND_TITLES`), written as ``out_dir/<slug>_<kind>.<fmt>``.
    Queries are rows, keys are columns, both labelled with tokens (``<bos> <eos> <pad>`` included);
    each row of heads ends with their mean; the colour scale is 0–1 in every figure, with each
    panel's largest weight in its title; titled with the run and the translation.

    Raises:
        NoAttentionError: for the seq2seq model (it has no attention).
    """
    result = attention_maps(translator, sentence, beam_size=beam_size, extra_pad=extra_pad)
    return draw_maps(result, out_dir, run_name(translator), formats)


def draw_maps(result: AttentionResult, out_dir: str | Path, title: str, formats=("png", "svg")) -> list[Path]:
    """Write every map of ``result`` as :func:`attention_figure`'s layers × heads grid (see
    :func:`draw_attention`); ``title`` names the run."""
    written: list[Path] = []
    for kind in ("enc_self", "dec_self", "cross", "self"):
        if kind in result.attention:
            fig = attention_figure(result, kind, head="all", title=title)
            written += save_figure(fig, Path(out_dir) / f"{slug(result.source)}_{kind}", formats=formats)
    return written


# ---------------------------------------------------------------------------------------------
# Attention as it forms: the probes recorded during training (issue 5, item 10)


def _probe_steps(run_dir: Path, sentence: str) -> tuple[str, list[dict[str, Any]]]:
    """The probe as training spelled it and its records, one per step in step order (a step
    recorded twice by a resumed run: the latest). Raises :class:`AttnlabError` when the run has no
    probes file or ``sentence`` (compared preprocessed) is not one of its probes."""
    if not (run_dir / PROBES_FILE).is_file():
        raise AttnlabError(
            f"{run_dir / PROBES_FILE} does not exist: the run recorded no probe attention (it needs "
            "train.probe_sentences and at least one validation); train again or resume it"
        )
    timeline = read_probes(run_dir)["sentences"]
    want = preprocess(sentence)
    mine = [s for s in timeline if preprocess(s["sentence"]) == want]
    if not mine:
        probes = sorted(s["sentence"] for s in timeline)
        raise AttnlabError(
            f"{sentence!r} is not one of the run's probe sentences ({', '.join(map(repr, probes))}); "
            "pick one of them, or set train.probe_sentences before training"
        )
    by_step = {r["step"]: r for s in mine for r in s["steps"]}
    return mine[0]["sentence"], [by_step[k] for k in sorted(by_step)]


def _probe_cross(rec: dict[str, Any]) -> torch.Tensor | None:
    """The record's cross-attention ``(T_out, S)``: averaged over heads (already) and layers.

    Probes store, per kind, ``(layers, T_out, keys)``; the decoder-only ``self`` keys run over
    ``source <bos> targets``. Both start with the source positions, so the first ``len(src_tokens)``
    columns are the source's.
    """
    att = rec.get("attention") or {}
    raw = att.get("cross", att.get("self"))
    if not raw:
        return None
    w = torch.tensor(raw, dtype=torch.float32)  # (layers, T_out, keys)
    return w.mean(dim=0)[:, : len(rec["src_tokens"])]  # (T_out, S)


def _pick(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)``, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def timeline_figure(run_dir: str | Path, sentence: str, max_panels: int = 8):
    """How the cross-attention of a probe sentence sharpens during training, as a Figure.

    Reads ``run_dir/probes.jsonl``: a strip of cross-attention maps (heads and layers averaged; rows:
    generated tokens, columns: source tokens) at up to ``max_panels`` recorded steps, first and last
    included, on one 0–1 colour scale.

    Raises:
        AttnlabError: no probes file, the sentence was not a probe (the message lists the probes),
        or the model records no cross-attention (seq2seq).
    """
    run_dir = Path(run_dir)
    name, frames = _probe_frames(run_dir, sentence)
    chosen = [frames[i] for i in _pick(len(frames), max_panels)]
    n_src = max(len(f[1]["src_tokens"]) for f in chosen)
    n_tgt = max(max(len(f[1]["tgt_tokens"]), 1) for f in chosen)
    panel_w, panel_h = max(2.0, 0.3 * n_src + 1.0), max(2.0, 0.3 * n_tgt + 1.2)
    fig = new_figure((min(max(6.0, 1.5 + panel_w * len(chosen)), 48), panel_h + 1.2))
    axes = fig.subplots(1, len(chosen), squeeze=False)[0]
    image = None
    for ax, (step, rec, w) in zip(axes, chosen):
        image = _draw_probe(ax, step, rec, w)
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="attention weight")
    fig.suptitle(
        f"{run_dir.resolve().name} · cross-attention during training\n“{name}” "
        f"(layers and heads averaged; one colour scale, 0–1)",
        fontsize=10,
    )
    return fig


def _probe_frames(run_dir: Path, sentence: str) -> tuple[str, list[tuple[int, dict[str, Any], torch.Tensor]]]:
    """The probe's name and its ``(step, record, (T_out, S) cross-attention)`` frames (see :func:`timeline_figure`)."""
    name, steps = _probe_steps(run_dir, sentence)
    frames = [(r["step"], r, w) for r in steps if (w := _probe_cross(r)) is not None]
    if not frames:
        raise _no_attention("seq2seq")
    return name, frames


def draw_timeline(
    run_dir: str | Path, sentence: str, out_dir: str | Path, max_panels: int = 8, formats=("png",)
) -> list[Path]:
    """Write :func:`timeline_figure` as ``out_dir/<slug>_timeline.png``, plus an animated
    ``<slug>_timeline.gif`` over every recorded step when Pillow is installed; returns the paths.

    Raises what :func:`timeline_figure` raises.
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    fig = timeline_figure(run_dir, sentence, max_panels)
    stem = out_dir / f"{slug(sentence)}_timeline"
    written = save_figure(fig, stem, formats=formats)
    name, frames = _probe_frames(run_dir, sentence)
    gif = _animate(frames, stem.with_suffix(".gif"), run_dir.resolve().name, name)
    if gif is not None:
        written.append(gif)
    return written


def _draw_probe(ax, step: int, rec: dict[str, Any], w: torch.Tensor):
    src, tgt = display_tokens(rec["src_tokens"]), display_tokens(rec["tgt_tokens"])
    rows = w[: len(tgt)] if tgt else w[:1]
    image = ax.imshow(
        rows.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest"
    )
    ax.set_xticks(range(len(src)))
    ax.set_xticklabels(src, rotation=90, fontsize=8)
    ax.set_yticks(range(rows.shape[0]))
    ax.set_yticklabels(tgt if tgt else ["<eos>?"], fontsize=8)
    ax.set_title(f"step {step}", fontsize=9)
    ax.set_xlabel(f"→ {rec.get('translation', '')}"[:40], fontsize=8)
    return image


def _animate(frames, path: Path, run_name: str, sentence: str) -> Path | None:
    """An animated GIF of every recorded step through matplotlib's PillowWriter; None without Pillow."""
    try:  # optional extras: Pillow writes GIFs, matplotlib draws (neither is a core dependency)
        import PIL  # noqa: F401
        from matplotlib.animation import PillowWriter
    except ImportError:
        return None
    n_src = max(len(f[1]["src_tokens"]) for f in frames)
    n_tgt = max(max(len(f[1]["tgt_tokens"]), 1) for f in frames)
    fig = new_figure((max(3.5, 0.35 * n_src + 2.5), max(3.0, 0.35 * n_tgt + 2.0)))
    ax = fig.add_subplot()
    cax = None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gif", dir=path.parent)
    os.close(fd)
    try:
        writer = PillowWriter(fps=max(1, min(4, math.ceil(len(frames) / 8))))
        with writer.saving(fig, tmp, dpi=100):
            for step, rec, w in frames:
                ax.clear()
                image = _draw_probe(ax, step, rec, w)
                if cax is None:
                    cax = fig.colorbar(image, ax=ax, label="attention weight").ax
                fig.suptitle(f"{run_name} · “{sentence}”", fontsize=9)
                writer.grab_frame()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path
