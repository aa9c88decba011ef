"""The three attention maps of a trained model, drawn and exported (notes §23–25).

- ``enc_self`` (Transformer encoder self-attention, §23): every source token attends to every
  source token; the source is drawn padded to a batch-like width so the ``<pad>`` columns are
  visibly empty — ``masked_softmax`` gives them exactly zero weight.
- ``dec_self`` (decoder masked self-attention, §24): lower-triangular, a query never sees a later
  target position.
- ``cross`` (encoder–decoder attention, §25; Bahdanau's attention over the decoding steps, §1–3):
  one row per generated token, one column per source token — the soft alignment.
- ``self`` (decoder-only model, §28): one causal map over ``source <pad>… <bos> target``, with the
  source/target boundary marked.

Maps are ``(layers, heads, queries, keys)`` tensors, as in :class:`attnlab.translator.AttentionResult`.
Figures use the matplotlib object API through :mod:`attnlab.inspection.plots` (Agg, no pyplot).
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from attnlab.data.batching import collate
from attnlab.data.text import preprocess
from attnlab.data.vocab import PAD
from attnlab.errors import AttnlabError
from attnlab.inspection.plots import new_figure, save_figure
from attnlab.io import atomic_write_json
from attnlab.translator import AttentionResult, Translator, decode_many

__all__ = [
    "KIND_TITLES",
    "attention_json",
    "attention_maps",
    "draw_attention",
    "draw_maps",
    "draw_timeline",
    "map_labels",
    "read_probes",
    "run_name",
    "slug",
    "write_attention_json",
]

KIND_TITLES = {
    "enc_self": "encoder self-attention (§23)",
    "dec_self": "decoder masked self-attention (§24)",
    "cross": "encoder–decoder (cross) attention (§25)",
    "self": "decoder-only causal self-attention (§28)",
}
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
    includes those ``<pad>`` labels, so every map's key axis matches its labels.

    Returns an :class:`AttentionResult` whose ``attention`` maps kind → ``(layers, heads, Q, K)``:
    ``enc_self (L, H, S, S)``, ``dec_self (L, H, T, T)``, ``cross (L, H, T, S)`` (Bahdanau: ``L = H = 1``),
    ``self (L, H, S + T, S + T)`` for the decoder-only model, where ``S`` counts the pads and
    ``T = len(tgt_tokens)``.

    Raises:
        NoAttentionError: for the seq2seq model. AttnlabError: if the sentence has no token.
    """
    if extra_pad < 0:
        raise AttnlabError(f"extra_pad={extra_pad} must be >= 0")
    model, kind = translator.model, translator.cfg.model.kind
    if kind == "seq2seq":
        raise _no_attention(kind)
    ids, truncated = translator.encode_source(sentence)
    if not ids:
        raise AttnlabError(f"{sentence!r} has no token after preprocessing; give an English sentence")
    hyp = decode_many(model, [ids], translator.cfg.decode, translator.device, beam_size=beam_size)[0][0]
    batch = collate([ids], [list(hyp.tokens)], [0])
    src = torch.cat(
        [batch.src, torch.full((1, extra_pad), PAD, dtype=batch.src.dtype)], dim=1
    )  # (1, S + pads)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = model(
                src.to(translator.device),
                batch.src_valid_lens.to(translator.device),
                batch.tgt_in.to(translator.device),
                need_weights=True,
            )
    finally:
        model.train(was_training)
    maps = {k: v[0].float().cpu() for k, v in out.attention.items()}  # (L, H, Q, K)
    tok = translator.tgt_tok
    src_tokens = [translator.src_tok.id_to_token(i) for i in ids] + ["<eos>"] + [PAD_TOKEN] * extra_pad
    tgt_tokens = [tok.id_to_token(i) for i in hyp.tokens] + (["<eos>"] if hyp.finished else [])
    tgt_inputs = ["<bos>"] + [tok.id_to_token(i) for i in hyp.tokens]
    n = len(tgt_tokens)
    # Without a final <eos>, the last decoder input predicted nothing that was kept: drop its query.
    tgt_inputs = tgt_inputs[:n]
    if "cross" in maps:
        maps["cross"] = maps["cross"][..., :n, :]  # (L, H, T, S)
    if "dec_self" in maps:
        maps["dec_self"] = maps["dec_self"][..., :n, :n]  # (L, H, T, T)
    if "self" in maps:
        m = len(src_tokens) + n
        maps["self"] = maps["self"][..., :m, :m]  # (L, H, S + T, S + T)
    return AttentionResult(
        sentence, tok.decode(hyp.tokens), src_tokens, tgt_tokens, tgt_inputs, maps, truncated
    )


def map_labels(result: AttentionResult, kind: str) -> tuple[list[str], list[str]]:
    """``(query labels, key labels)`` of map ``kind``: rows and columns of the drawn grid.

    Decoder self-attention rows and columns are the decoder inputs ``<bos> y1 …``; cross-attention
    rows are the tokens each query predicted (the alignment reads "this output looked at that
    input"); the decoder-only map runs over ``source <bos> target``.
    """
    if kind == "enc_self":
        return list(result.src_tokens), list(result.src_tokens)
    if kind == "dec_self":
        return list(result.tgt_inputs), list(result.tgt_inputs)
    if kind == "cross":
        return list(result.tgt_tokens), list(result.src_tokens)
    if kind == "self":
        seq = list(result.src_tokens) + list(result.tgt_inputs)
        return seq, seq
    raise AttnlabError(f"unknown attention kind {kind!r}; known: {', '.join(KIND_TITLES)}")


def _fit(weights: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Trim a map to its labels (Translator.attention leaves the decoder-only map untrimmed when no
    ``<eos>`` was produced; the extra query/key is the input that predicted nothing kept)."""
    if weights.shape[-2] < rows or weights.shape[-1] < cols:
        raise ValueError(f"attention map {tuple(weights.shape)} is smaller than its labels ({rows}, {cols})")
    return weights[..., :rows, :cols]


def attention_json(result: AttentionResult, decimals: int = 4) -> dict[str, Any]:
    """The maps as plain JSON for the web page.

    ``{"source", "translation", "truncated", "src_tokens", "tgt_tokens", "tgt_inputs",
    "kinds": {kind: {"title", "queries", "keys", "layers", "heads", "boundary",
    "weights": [layer][head][query][key]}}}``; ``boundary`` is the index of the first target
    position of the decoder-only map (``null`` for the other kinds). Weights are rounded.
    """
    kinds: dict[str, Any] = {}
    for kind, w in result.attention.items():
        queries, keys = map_labels(result, kind)
        w = _fit(w.detach().float().cpu(), len(queries), len(keys))
        kinds[kind] = {
            "title": KIND_TITLES.get(kind, kind),
            "queries": queries,
            "keys": keys,
            "layers": int(w.shape[0]),
            "heads": int(w.shape[1]),
            "boundary": len(result.src_tokens) if kind == "self" else None,
            "weights": torch.round(w, decimals=decimals).tolist(),
        }
    return {
        "source": result.source,
        "translation": result.translation,
        "truncated": result.truncated,
        "src_tokens": list(result.src_tokens),
        "tgt_tokens": list(result.tgt_tokens),
        "tgt_inputs": list(result.tgt_inputs),
        "kinds": kinds,
    }


def slug(sentence: str, limit: int = 40) -> str:
    """A file-name-safe form of a sentence: ``"i'm home ."`` → ``"i-m-home"``."""
    s = re.sub(r"[^0-9a-zA-Z]+", "-", preprocess(sentence)).strip("-").lower()
    return s[:limit].strip("-") or "sentence"


def _style_tick_labels(labels, texts) -> None:
    for label, text in zip(labels, texts):
        if text in (PAD_TOKEN, "<bos>", "<eos>"):
            label.set_color("tab:gray" if text == PAD_TOKEN else "tab:blue")


def _draw_grid(result: AttentionResult, kind: str, run_name: str, out_dir: Path, formats) -> list[Path]:
    queries, keys = map_labels(result, kind)
    w = _fit(result.attention[kind].detach().float().cpu(), len(queries), len(keys))  # (L, H, Q, K)
    L, H = int(w.shape[0]), int(w.shape[1])
    cell = 0.28  # inches per token: labels stay legible, big grids stay bounded
    panel_w = max(2.2, cell * len(keys) + 0.8)
    panel_h = max(2.0, cell * len(queries) + 0.8)
    fig = new_figure((min(4 + panel_w * H, 40), min(1.6 + panel_h * L, 40)))
    axes = fig.subplots(L, H, squeeze=False)
    vmax = float(w.max()) or 1.0  # one colour scale for the whole figure
    image = None
    for layer in range(L):
        for head in range(H):
            ax = axes[layer][head]
            image = ax.imshow(
                w[layer, head].numpy(),
                cmap="viridis",
                vmin=0.0,
                vmax=vmax,
                aspect="auto",
                interpolation="nearest",
            )
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
            if kind == "cross" and L == H == 1:
                ax.set_title("one row per decoding step", fontsize=9)
            else:
                ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            if head == 0:
                ax.set_ylabel(
                    {
                        "cross": "query → predicted token",
                        "enc_self": "query (source token)",
                        "dec_self": "query (decoder input)",
                        "self": "query position",
                    }[kind],
                    fontsize=8,
                )
            if layer == L - 1:
                ax.set_xlabel(
                    {
                        "cross": "key (source token)",
                        "enc_self": "key (source token)",
                        "dec_self": "key (decoder input)",
                        "self": "key: source ┆ target",
                    }[kind],
                    fontsize=8,
                )
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    title = KIND_TITLES[kind]
    if kind == "cross" and L == H == 1:
        title = "Bahdanau attention over the decoding steps (§1–3)"
    shown = f"“{result.translation}”" if result.translation else "(empty translation)"
    fig.suptitle(f"{run_name} · {title}\n“{result.source}” → {shown}", fontsize=10)
    return save_figure(fig, out_dir / f"{slug(result.source)}_{kind}", formats=formats)


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
    one colour scale and colour bar per figure; titled with the run and the translation.

    Raises:
        NoAttentionError: for the seq2seq model (it has no attention).
    """
    result = attention_maps(translator, sentence, beam_size=beam_size, extra_pad=extra_pad)
    return draw_maps(result, out_dir, run_name(translator), formats)


def draw_maps(result: AttentionResult, out_dir: str | Path, title: str, formats=("png", "svg")) -> list[Path]:
    """Draw every map of ``result`` (see :func:`draw_attention`); ``title`` names the run."""
    written: list[Path] = []
    for kind in ("enc_self", "dec_self", "cross", "self"):
        if kind in result.attention:
            written += _draw_grid(result, kind, title, Path(out_dir), formats)
    return written


def write_attention_json(
    translator: Translator, sentence: str, out_dir: str | Path, beam_size: int = 1, extra_pad: int = 3
) -> Path:
    """``out_dir/<slug>_attention.json`` holding :func:`attention_json` of the padded maps."""
    result = attention_maps(translator, sentence, beam_size=beam_size, extra_pad=extra_pad)
    path = Path(out_dir) / f"{slug(sentence)}_attention.json"
    atomic_write_json(path, attention_json(result))
    return path


# ---------------------------------------------------------------------------------------------
# Attention as it forms: the probes recorded during training (issue 5, item 10)


def read_probes(run_dir: str | Path) -> list[dict[str, Any]]:
    """Records of ``run_dir/probes.jsonl`` (written by the training loop at step 0 and at every
    validation); a torn last line is skipped. Raises AttnlabError when the file is missing."""
    path = Path(run_dir) / "probes.jsonl"
    if not path.is_file():
        raise AttnlabError(
            f"{path} does not exist: the run recorded no probe attention (it needs "
            "train.probe_sentences and at least one validation); train again or resume it"
        )
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and "step" in rec and "attention" in rec:
            records.append(rec)
    return records


def _probe_cross(rec: dict[str, Any]) -> torch.Tensor | None:
    """The record's cross-attention ``(T_out, S)``: averaged over heads (already) and layers.

    Probes store, per kind, ``(layers, T_out, keys)`` with the keys of the probe *batch*: the source
    is padded to the longest probe, and the decoder-only ``self`` keys run over ``source + targets``.
    Both start with the source positions, so the first ``len(src_tokens)`` columns are this sentence's.
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


def draw_timeline(
    run_dir: str | Path, sentence: str, out_dir: str | Path, max_panels: int = 8, formats=("png",)
) -> list[Path]:
    """How the cross-attention of a probe sentence sharpens during training.

    Reads ``run_dir/probes.jsonl`` and draws a strip of cross-attention maps (heads and layers
    averaged; rows: generated tokens, columns: source tokens) at up to ``max_panels`` recorded steps,
    first and last included, on one 0–1 colour scale, as ``out_dir/<slug>_timeline.png``; plus an
    animated ``<slug>_timeline.gif`` over every recorded step when Pillow is installed.

    Raises:
        AttnlabError: no probes file, the sentence was not a probe (the message lists the probes),
        or the model records no cross-attention (seq2seq).
    """
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    records = read_probes(run_dir)
    want = preprocess(sentence)
    mine = [r for r in records if preprocess(r.get("sentence", "")) == want]
    if not mine:
        probes = sorted({r.get("sentence", "") for r in records})
        raise AttnlabError(
            f"{sentence!r} is not one of the run's probe sentences ({', '.join(map(repr, probes))}); "
            "pick one of them, or set train.probe_sentences before training"
        )
    by_step: dict[int, dict[str, Any]] = {}
    for r in mine:
        by_step[int(r["step"])] = r  # a resumed run may re-record a step: keep the latest
    frames = []
    for step in sorted(by_step):
        w = _probe_cross(by_step[step])
        if w is not None:
            frames.append((step, by_step[step], w))
    if not frames:
        raise _no_attention("seq2seq")
    run_name = run_dir.resolve().name
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
        f"{run_name} · cross-attention during training\n“{mine[0]['sentence']}” "
        f"(layers and heads averaged; one colour scale, 0–1)",
        fontsize=10,
    )
    stem = out_dir / f"{slug(sentence)}_timeline"
    written = save_figure(fig, stem, formats=formats)
    gif = _animate(frames, stem.with_suffix(".gif"), run_name, mine[0]["sentence"])
    if gif is not None:
        written.append(gif)
    return written


def _draw_probe(ax, step: int, rec: dict[str, Any], w: torch.Tensor):
    src, tgt = rec["src_tokens"], rec["tgt_tokens"]
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
    try:
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
