"""Attention maps as data: what a sentence's maps are, how their axes are labelled, and their JSON.

:class:`AttentionResult` is what :meth:`attnlab.translator.Translator.attention` returns for one sentence:
every map ``kind → (layers, heads, queries, keys)`` (``enc_self`` §23, ``dec_self`` §24, ``cross`` §25 and
Bahdanau's §1–3, ``self`` for the decoder-only model §28) with the token labels of its axes. Here it is
labelled (:func:`map_axes`, :func:`map_labels`, :func:`display_tokens`), cut into the panels a figure
shows (:meth:`AttentionResult.plot`, drawn by :mod:`attnlab.viz.attention`), written to files
(:meth:`AttentionResult.save`), and turned into JSON, the one schema of the web page and of
``attnlab attention --json`` (:func:`attention_payload`, :func:`attention_json`)::

    {kind: {"title", "queries", "keys", "outputs", "boundary", "layers", "heads", "layer", "head",
            "shape", "encoding", ["scale"], "weights", ["overview"], ["omitted"]}}

The axes: a query of the decoder is labelled by its input (``<bos> y1 …``) and ``outputs`` names the token
it produced; the decoder-only ``self`` map runs over ``source <bos> target`` and ``boundary`` is the index
of its first target position. The maps a run recorded while it trained (``probes.jsonl``) become the
frames of :func:`timeline_frames`. No matplotlib is imported until something is drawn.

Dimension key: L layers, H heads, Q queries, K keys, S source positions, T target positions.
"""

from __future__ import annotations

import base64
import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.data.specials import MASK_TOKEN, SPECIALS
from attnlab.data.text import preprocess
from attnlab.errors import AttnlabError
from attnlab.i18n import N_, _
from attnlab.runs.probes import PROBES_FILE, read_probes

__all__ = [
    "CONTINUES",
    "KIND_TITLES",
    "OVERVIEW_SIZE",
    "AttentionResult",
    "NoAttentionError",
    "SelectionError",
    "attention_json",
    "attention_payload",
    "continues_word",
    "display_labels",
    "display_tokens",
    "encode_weights",
    "map_axes",
    "map_labels",
    "marks_word_starts",
    "no_attention",
    "select_maps",
    "settings_suffix",
    "slug",
    "timeline_frames",
]

#: One set of titles for the figures and the page, with the notes' sections.
KIND_TITLES = {
    "enc_self": N_("encoder self-attention (§23)"),
    "dec_self": N_("decoder masked self-attention (§24)"),
    "cross": N_("encoder–decoder (cross) attention (§25)"),
    "self": N_("decoder-only causal self-attention (§28)"),
}
_SCALE = {"uint8": 255, "uint16": 65535}
_NUMPY_DTYPE = {"uint8": "u1", "uint16": "<u2"}
OVERVIEW_SIZE = 48  # thumbnails are max-pooled to at most this many rows and columns
# Budget order: the maps people look at first keep their weights when a response must shed some.
_PRIORITY = ("cross", "self", "dec_self", "enc_self")


class SelectionError(ValueError):
    """A ``layer``/``head`` outside the maps of this translation (422 naming the field)."""

    def __init__(self, field_name: str, msg: str) -> None:
        super().__init__(msg)
        self.field_name = field_name


def map_axes(result: Any, kind: str) -> tuple[list[str], list[str], list[str] | None]:
    """``(queries, keys, outputs)`` of map ``kind``: the labels of its rows and columns, and the
    token each query produced (``None`` for the encoder, whose queries produce no output;
    ``""`` for the source positions of the decoder-only sequence).

    Raises :class:`AttnlabError` for a kind that is none of :data:`KIND_TITLES`.
    """
    src, tgt, inputs = list(result.src_tokens), list(result.tgt_tokens), list(result.tgt_inputs)
    if kind == "enc_self":
        return src, src, None
    if kind == "cross":
        return inputs, src, tgt
    if kind == "dec_self":
        return inputs, inputs, tgt
    if kind == "self":
        return src + inputs, src + inputs, [""] * len(src) + tgt
    raise AttnlabError(_("unknown attention kind {kind!r}; known: {choices}").format(kind=kind, choices=', '.join(KIND_TITLES)))


def _bytes_per_weight(encoding: str, decimals: int) -> float:
    """An upper bound of the encoded bytes per weight: ``0.1234,`` as JSON, base64 of 1 or 2 bytes."""
    return {"uint8": 4 / 3, "uint16": 8 / 3}.get(encoding, decimals + 3.0)


def encode_weights(w: Tensor, encoding: str = "json", decimals: int = 4) -> Any:
    """``w`` (any shape, values in [0, 1]) as nested lists rounded to ``decimals``, or quantised.

    ``uint8``/``uint16``: ``round(w * scale)`` (scale 255 or 65535), row-major, little-endian, base64;
    a client divides by the scale again (the page does: ``atob`` and a ``DataView``).
    """
    w = torch.nan_to_num(w.detach().double(), nan=0.0)
    if encoding == "json":
        return torch.round(w, decimals=decimals).tolist()
    q = (
        torch.round(w.clamp(0.0, 1.0) * _SCALE[encoding])
        .to(torch.int32)
        .numpy()
        .astype(_NUMPY_DTYPE[encoding])
    )
    return base64.b64encode(q.tobytes()).decode("ascii")


def select_maps(w: Tensor, layer: int | None, head: int | str | None, kind: str) -> Tensor:
    """``(L, H, Q, K)`` → the selected layer(s) and head(s), still 4-D; raises :class:`SelectionError`."""
    n_layers, n_heads = int(w.shape[0]), int(w.shape[1])
    if layer is not None:
        if not -n_layers <= layer < n_layers:
            raise SelectionError(
                "layer",
                _("layer {layer} is out of range: the {kind} maps have {n} layer(s), "
                  "0…{last} (-1 is the last)").format(layer=layer, kind=kind, n=n_layers, last=n_layers - 1),
            )
        w = w[layer % n_layers : layer % n_layers + 1]  # (1, H, Q, K)
    if head == "mean":
        w = w.mean(dim=1, keepdim=True)  # (L', 1, Q, K)
    elif head is not None:
        if not -n_heads <= head < n_heads:
            raise SelectionError(
                "head",
                _('head {head} is out of range: the {kind} maps have {n} head(s), 0…{last}, or "mean"').format(
                    head=head, kind=kind, n=n_heads, last=n_heads - 1),
            )
        w = w[:, head % n_heads : head % n_heads + 1]  # (L', 1, Q, K)
    return w


def _overview(w: Tensor) -> dict[str, Any]:
    """Every layer × head of ``(L, H, Q, K)`` max-pooled to at most OVERVIEW_SIZE², uint8 base64."""
    n_layers, n_heads, nq, nk = (int(x) for x in w.shape)
    tq, tk = min(nq, OVERVIEW_SIZE), min(nk, OVERVIEW_SIZE)
    flat = w.reshape(n_layers * n_heads, 1, nq, nk)  # (L*H, 1, Q, K)
    pooled = F.adaptive_max_pool2d(flat, (tq, tk)) if (tq, tk) != (nq, nk) else flat
    return {
        "shape": [n_layers, n_heads, tq, tk],
        "encoding": "uint8",
        "scale": 255,
        "pooling": "max" if (tq, tk) != (nq, nk) else None,
        "data": encode_weights(pooled.reshape(n_layers, n_heads, tq, tk), "uint8"),
    }


def attention_payload(
    result: Any,
    decimals: int = 4,
    *,
    kind: str | None = None,
    layer: int | None = None,
    head: int | str | None = None,
    encoding: str = "json",
    overview: bool = False,
    max_bytes: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Token labels and weights of the attention kinds in a :class:`~attnlab.translator.AttentionResult`.

    Returns ``{kind: {...}}`` (the keys in the module docstring). ``layers``/``heads`` count the
    model's maps; ``weights`` holds the selection, ``shape`` ``(layers', heads', len(queries),
    len(keys))``: every layer and head by default, one ``layer`` (negative counts from the end)
    and/or one ``head`` (``"mean"`` averages them). ``json``: nested lists rounded to ``decimals``;
    ``uint8``/``uint16``: base64 with a ``scale``. ``overview`` adds pooled thumbnails of every
    layer × head. When ``max_bytes`` is given, a kind whose weights would push the response past it
    gets ``weights: None`` and an ``omitted`` note (cross/self keep theirs first). Row ``t`` of
    ``cross`` is the query (decoder input ``queries[t]``) that produced ``outputs[t]``. A map larger
    than its labels is cut to them. Raises :class:`SelectionError` for a layer or head out of range.
    """
    out: dict[str, dict[str, Any]] = {}
    picked: dict[str, tuple[Tensor, Tensor]] = {}  # kind -> (all maps, selection)
    for k, w in result.attention.items():
        if (kind is not None and k != kind) or k not in KIND_TITLES or w.dim() != 4:
            continue
        queries, keys, outputs = map_axes(result, k)
        nq, nk = min(len(queries), w.shape[2]), min(len(keys), w.shape[3])
        w = w.float()[:, :, :nq, :nk]  # (L, H, nq, nk)
        sel = select_maps(w, layer, head, k)  # (L', H', nq, nk)
        picked[k] = (w, sel)
        out[k] = {
            "title": KIND_TITLES[k],
            "queries": queries[:nq],
            "keys": keys[:nk],
            "outputs": outputs[:nq] if outputs is not None else None,
            "boundary": len(result.src_tokens) if k == "self" else None,  # first target position
            "layers": int(w.shape[0]),
            "heads": int(w.shape[1]),
            "layer": None if layer is None else layer % int(w.shape[0]),
            "head": head if head in (None, "mean") else int(head) % int(w.shape[1]),
            "shape": [int(x) for x in sel.shape],
            "encoding": encoding,
        }
        if encoding in _SCALE:
            out[k]["scale"] = _SCALE[encoding]
    _add_weights(out, picked, decimals, encoding, overview, max_bytes)
    return out


def _add_weights(
    out: dict[str, dict[str, Any]],
    picked: dict[str, tuple[Tensor, Tensor]],
    decimals: int,
    encoding: str,
    overview: bool,
    max_bytes: int | None,
) -> None:
    """Fill each kind's ``weights`` (and ``overview``) in :data:`_PRIORITY` order while the estimated
    size stays within ``max_bytes``; a kind past it gets ``weights: None`` and an ``omitted`` note."""
    used = 0.0
    per = _bytes_per_weight(encoding, decimals)
    for k in sorted(picked, key=lambda x: _PRIORITY.index(x) if x in _PRIORITY else len(_PRIORITY)):
        w, sel = picked[k]
        n_labels = len(out[k]["queries"]) + 2 * len(out[k]["keys"])
        cost = sel.numel() * per + 24 * n_labels
        thumb = (
            w.shape[0] * w.shape[1] * min(w.shape[2], OVERVIEW_SIZE) * min(w.shape[3], OVERVIEW_SIZE) * 4 / 3
        )
        cost += thumb if overview else 0.0
        if max_bytes is not None and used + cost > max_bytes:
            out[k]["weights"] = None
            out[k]["omitted"] = (
                f"the {k} maps selected hold {sel.numel():,} weights (about {sel.numel() * per / 1e6:.1f} MB "
                f"as {encoding}), more than this response's limit of {max_bytes / 1e6:.1f} MB leaves: ask for "
                'one "kind", one "layer" and "head" (e.g. "mean"), or "encoding": "uint8"'
            )
            continue
        used += cost
        out[k]["weights"] = encode_weights(sel, encoding, decimals)
        if overview:
            out[k]["overview"] = _overview(w)


def attention_json(result: Any, decimals: int = 4) -> dict[str, Any]:
    """The file ``attnlab attention --json`` writes: the sentence and its tokens, and every map of
    every kind as :func:`attention_payload` gives it (the web page's schema) under ``"kinds"``.

    ``{"source", "translation", "truncated", "src_tokens", "tgt_tokens", "tgt_inputs", "kinds"}``.
    """
    return {
        "source": result.source,
        "translation": result.translation,
        "truncated": result.truncated,
        "src_tokens": list(result.src_tokens),
        "tgt_tokens": list(result.tgt_tokens),
        "tgt_inputs": list(result.tgt_inputs),
        "kinds": attention_payload(result, decimals),
    }

PAD_TOKEN = "<pad>"


class NoAttentionError(AttnlabError):
    """The model has no attention weights to show (the fixed-context seq2seq baseline)."""


def no_attention(kind: str) -> NoAttentionError:
    return NoAttentionError(
        _("model.kind={kind} has no attention: its decoder sees one fixed context vector (notes §1); "
          "train a bahdanau, transformer or decoder-only model to see attention maps").format(kind=kind)
    )


#: BPE's word-start mark (SentencePiece's U+2581, :mod:`attnlab.data.subword`), and the mark a
#: displayed piece that continues the word before it carries instead.
WORD_START, CONTINUES = "\u2581", "·"
_SPECIAL_LABELS = (*SPECIALS, MASK_TOKEN)


def display_tokens(tokens, marked: bool | None = None) -> list[str]:
    """Token labels as a reader should see them: no ``▁`` word-start marks. The one display rule of every
    front end (figures, the text tables of ``explain`` and ``attribute``, the web page's ``token_labels``).

    BPE pieces and the metaspace rule's words (:mod:`attnlab.data.languages`) mark a word start with ``▁``:
    ``▁mai`` shows as ``mai`` and a token that continues the word before it, ``son`` (or the ``.`` of
    ``▁tea .``), as ``·son``, so the columns stay one per token and ``maison`` reads ``mai ·son``; a lone
    ``▁`` stays, the one visible mark of a space. Specials (``<eos>``, ``<pad>``, ``[MASK]``, …) are
    unchanged, and so is a word vocabulary's sequence. ``marked``: whether the tokens come from a vocabulary
    that marks word starts (:func:`marks_word_starts`); None reads it off the sequence (one ``▁`` token),
    which a short list such as the top candidates of one step cannot show.
    """
    tokens = list(tokens)
    if marked is None:
        marked = any(t.startswith(WORD_START) for t in tokens)
    if not marked:
        return tokens
    return [
        t if t in _SPECIAL_LABELS
        else (t[len(WORD_START):] or WORD_START) if t.startswith(WORD_START)
        else CONTINUES + t
        for t in tokens
    ]


def display_labels(sequences) -> dict[str, str]:
    """``{token: label}`` for each token of ``sequences`` whose :func:`display_tokens` label differs from it
    (each sequence read on its own; empty for a word vocabulary): what the web page is sent beside raw
    tokens, so that it shows every token by this module's one rule and holds no copy of it."""
    labels: dict[str, str] = {}
    for seq in sequences:
        seq = list(seq)
        labels.update({t: d for t, d in zip(seq, display_tokens(seq)) if d != t})
    return labels


def marks_word_starts(tok) -> bool:
    """Whether tokenizer ``tok``'s tokens mark a word start with ``▁``: BPE pieces, and the words of the
    metaspace rule (both cut by ``tokenizers``' Metaspace, :mod:`attnlab.data.subword`)."""
    return getattr(tok, "kind", None) == "bpe" or getattr(tok, "text", None) == "metaspace"


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
    """A file-name-safe name of ``sentence``, one per sentence in any script: its letters and digits
    (Chinese, Cyrillic, accented letters kept), lowercased, runs of anything else as one ``-``, at most
    ``limit`` characters; when that loses something (punctuation, case, a longer sentence), ``-`` and
    8 hex digits of the sentence's sha256 (its spaces collapsed) follow, so two sentences never share
    a name: ``"go"`` → ``go``, ``"i'm home ."`` → ``i-m-home-<hash>``, ``"我回家了"`` → ``我回家了``.
    """
    text = unicodedata.normalize("NFC", " ".join(sentence.split()))
    s = re.sub(r"[\W_]+", "-", text.lower()).strip("-")
    short = s[:limit].strip("-")
    if short and short.replace("-", " ") == text:
        return short
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{short or 'sentence'}-{digest}"


def settings_suffix(**settings: Any) -> str:
    """What makes one file of a sentence differ from another of it, in order: ``-name<number>`` for each
    number given, ``-<text>`` for each text (file-name-safe), nothing for None: ``beam=4, pad=0,
    checkpoint="step-12"`` → ``-beam4-pad0-step-12``."""
    return "".join(f"-{k}{v}" if isinstance(v, int) else "-" + re.sub(r"[^0-9A-Za-z.]+", "-", str(v)).strip("-.")
                   for k, v in settings.items() if v is not None)


def _pick_kind(result: AttentionResult, kind: str | None) -> str:
    """``kind``, or the map people look at first (cross, else the decoder-only self); checked against the result."""
    if not result.attention:
        raise no_attention("seq2seq")  # the only model without attention maps
    if kind is None:
        return next(k for k in ("cross", "self", "dec_self", "enc_self") if k in result.attention)
    if kind not in result.attention:
        raise AttnlabError(_("no {kind!r} attention in this model; its kinds are {choices}").format(kind=kind, choices=', '.join(result.attention)))
    return kind


def _one_based(value: int | None, count: int, what: str, kind: str) -> list[int]:
    """The 0-based indices picked by a 1-based ``value`` (``None``: all ``count`` of them)."""
    if value is None:
        return list(range(count))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= count:
        raise AttnlabError(
            _("{what}={value!r} is out of range: the {kind} maps have {count} {what}(s), counted from "
              "1 as in the figure titles (1…{count}); None for all").format(what=what, value=value, kind=kind, count=count)
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
        return [[(_("one row per decoding step"), w[0, 0])]]
    mean = [(_("layer {layer}, mean of {heads} heads").format(layer=i + 1, heads=n_heads), w[i].mean(dim=0))
            for i in layers]  # (Q, K) each
    if head is None and n_heads > 1:
        return [[m] for m in mean]
    grid = [[(_("layer {layer}, head {head}").format(layer=i + 1, head=h + 1), w[i, h]) for h in heads] for i in layers]
    # The heads' mean beside the heads: what the layer passes on is their sum through W_o (§11), and
    # the mean is the map a reader compares each head against.
    return [row + [m] for row, m in zip(grid, mean)] if n_heads > 1 else grid




@dataclass(repr=False)
class AttentionResult:
    """Everything needed to draw one sentence's attention maps (notes §23–25).

    ``attention[kind]`` is ``(layers, heads, queries, keys)``; :meth:`labels` names its rows and
    columns; :meth:`plot` draws it as a matplotlib ``Figure``. In Jupyter the result shows itself
    (:meth:`_repr_html_`): the sentence, the translation and every kind, heads averaged.
    """

    source: str
    translation: str
    src_tokens: list[str]  # keys of enc_self / cross (with <eos>, then any <pad> added)
    tgt_tokens: list[str]  # generated tokens (with the final <eos> when finished)
    tgt_inputs: list[str]  # decoder inputs: <bos> y1 … (queries of dec_self / cross), one per tgt_token
    attention: dict[str, Tensor] = field(default_factory=dict)  # kind -> (layers, heads, queries, keys)
    truncated: bool = False

    @property
    def kinds(self) -> list[str]:
        """The kinds of map this model has: ``enc_self``, ``dec_self``, ``cross``, ``self``."""
        return list(self.attention)

    def labels(self, kind: str) -> tuple[list[str], list[str]]:
        """``(queries, keys)``: the tokens of the rows and columns of ``attention[kind]``."""
        queries, keys, _outputs = map_axes(self, kind)
        return queries, keys

    def plot(self, kind: str | None = None, layer: int | None = None, head: int | str | None = None):
        """A matplotlib ``Figure`` of map ``kind`` (default: ``cross``, or ``self`` for a decoder-only model).

        ``layer`` / ``head`` count from 1, as the figure titles do; ``layer=None`` draws every layer,
        ``head=None`` averages the heads, ``head="all"`` draws every head. One panel per layer × head
        shown, plus the colour bar. Raises :class:`AttnlabError` for a kind, layer or head the model lacks.
        """
        return attention_figure(self, kind, layer=layer, head=head)

    def __repr__(self) -> str:
        maps = ", ".join(f"{k} {tuple(v.shape)}" for k, v in self.attention.items()) or "no attention"
        return f"AttentionResult({self.source!r} → {self.translation!r}; {maps})"

    def _repr_html_(self) -> str:
        """Jupyter's view: the sentence, its translation and each map, heads averaged, as inline PNGs."""
        return attention_html(self)

    def save(self, out_dir: str | Path, title: str, formats=("png", "svg"), stem: str | None = None) -> list[Path]:
        """Write every map as :func:`attention_figure`'s layers × heads grid, ``out_dir/<stem>_<kind>.<fmt>``
        (``title`` names the run; ``stem``: default :func:`slug` of the sentence, one name per sentence;
        a caller that draws one sentence with other settings adds them, :func:`settings_suffix`); returns
        the written paths."""
        from attnlab.viz.figure import save_figure

        stem = stem or slug(self.source)
        written: list[Path] = []
        for kind in ("enc_self", "dec_self", "cross", "self"):
            if kind in self.attention:
                fig = attention_figure(self, kind, head="all", title=title)
                written += save_figure(fig, Path(out_dir) / f"{stem}_{kind}", formats=formats)
        return written

    def to_json(self, decimals: int = 4) -> dict[str, Any]:
        """:func:`attention_json`: the file ``attnlab attention --json`` writes."""
        return attention_json(self, decimals)


_AXIS_NAMES = {  # kind -> (row axis, column axis)
    "cross": (N_("query → predicted token"), N_("key (source token)")),
    "enc_self": (N_("query (source token)"), N_("key (source token)")),
    "dec_self": (N_("query (decoder input)"), N_("key (decoder input)")),
    "self": (N_("query position"), N_("key: source ┆ target")),
}


def attention_figure(result: AttentionResult, kind: str | None = None, layer: int | None = None,
                     head: int | str | None = None, title: str | None = None):
    """Map ``kind`` of ``result`` as a Figure: one token-labelled panel per layer (× head) and a colour bar.

    ``kind``: default ``cross`` (or ``self``, decoder-only). ``layer``, ``head`` count from 1 like the
    panel titles; ``layer=None``: every layer; ``head=None``: heads averaged; ``head="all"``: every head
    (the layers × heads grid that ``attnlab attention`` writes). With several heads, every row of panels
    ends with the layer's heads averaged. Queries are rows, keys columns, ``<bos> <eos> <pad>`` included;
    darker is larger on one scale, 0 to 1, in every figure (:mod:`attnlab.viz.attention`). ``title`` (e.g.
    the run) heads the suptitle. Raises :class:`NoAttentionError` (seq2seq) or :class:`AttnlabError` for a
    kind, layer or head the model does not have.
    """
    from attnlab.viz.attention import Panel, grid_figure  # matplotlib: loaded to draw

    kind = _pick_kind(result, kind)
    queries, keys = map_labels(result, kind)
    grid = [[Panel(name, w) for name, w in row] for row in _panels(result, kind, layer, head)]
    heading = _(KIND_TITLES[kind])
    if kind == "cross" and tuple(result.attention[kind].shape[:2]) == (1, 1):
        heading = _("Bahdanau attention over the decoding steps (§1–3)")
    shown = f"“{result.translation}”" if result.translation else _("(empty translation)")
    note = ""
    if any(t.startswith(CONTINUES) for t in (*queries, *keys)):
        note = "\n" + _("BPE pieces, one per row/column: {mark}x continues the word before it").format(mark=CONTINUES)
    axis = tuple(_(a) for a in _AXIS_NAMES[kind])
    boundary = len(result.src_tokens) if kind == "self" else None
    return grid_figure(grid, queries, keys, axis, f"{title + ' · ' if title else ''}{heading}\n"
                       f"“{result.source}” → {shown}{note}", boundary)


def attention_html(result: AttentionResult) -> str:
    """An HTML summary of ``result`` for Jupyter: sentence, translation, and each kind's figure
    (every layer, heads averaged) as an inline PNG."""
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


# ---------------------------------------------------------------------------------------------
# The maps as they formed: the probes a run recorded during training


def _probe_steps(run_dir: Path, sentence: str) -> tuple[str, list[dict[str, Any]]]:
    """The probe as training spelled it and its records, one per step in step order (a step
    recorded twice by a resumed run: the latest). Raises :class:`AttnlabError` when the run has no
    probes file or ``sentence`` (compared preprocessed) is not one of its probes."""
    if not (run_dir / PROBES_FILE).is_file():
        raise AttnlabError(
            _("{value} does not exist: the run recorded no probe attention (it needs "
              "train.probe_sentences and at least one validation); train again or resume it").format(value=run_dir / PROBES_FILE)
        )
    timeline = read_probes(run_dir)["sentences"]
    want = preprocess(sentence)
    mine = [s for s in timeline if preprocess(s["sentence"]) == want]
    if not mine:
        probes = sorted(s["sentence"] for s in timeline)
        raise AttnlabError(
            _("{sentence!r} is not one of the run's probe sentences ({choices}); pick one of them, or "
              "set train.probe_sentences before training").format(sentence=sentence, choices=', '.join(map(repr, probes)))
        )
    by_step = {r["step"]: r for s in mine for r in s["steps"]}
    return mine[0]["sentence"], [by_step[k] for k in sorted(by_step)]


def _probe_cross(rec: dict[str, Any]) -> torch.Tensor | None:
    """The record's cross-attention ``(T_out, S)``: its last layer, heads averaged (already), the one map
    every alignment verdict reads (:func:`attnlab.evaluation.alignment.verdict_map`), so the frame shows what
    its mark judges.

    Probes store, per kind, ``(layers, T_out, keys)``; the decoder-only ``self`` keys run over
    ``source <bos> targets``. Both start with the source positions, so the first ``len(src_tokens)``
    columns are the source's.
    """
    att = rec.get("attention") or {}
    raw = att.get("cross", att.get("self"))
    if not raw:
        return None
    w = torch.tensor(raw, dtype=torch.float32)  # (layers, T_out, keys)
    return w[-1][:, : len(rec["src_tokens"])]  # (T_out, S)


def _probe_layers(steps: list[dict[str, Any]]) -> int:
    """How many layers the probes' map has (the timeline draws the last)."""
    att = next((r.get("attention") for r in steps if r.get("attention")), None) or {}
    raw = att.get("cross", att.get("self"))
    return len(raw) if raw else 0


def _verdict_mark(rec: dict[str, Any]) -> str:
    """The alignment verdict training recorded with a probe of the notes' example (``alignment``, written
    by :func:`attnlab.evaluation.alignment.check_result`), as a short mark; empty for other probes."""
    verdict = rec.get("alignment") or {}
    formed = verdict.get("formed")
    if formed is None:
        missing = verdict.get("missing")
        return "\n? " + _("can't judge: no {missing}").format(missing=missing) if missing else ""
    return "\n" + ("✓ " + _("aligned as the notes' table") if formed else "✗ " + _("not aligned as the notes' table"))


def _pick(n: int, k: int) -> list[int]:
    """``k`` indices spread evenly over ``range(n)``, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def timeline_frames(run_dir: str | Path, sentence: str, max_frames: int | None = None) -> tuple[str, list]:
    """The probe ``sentence`` as training spelled it and its cross-attention at each recorded step, as
    :class:`~attnlab.viz.attention.Frame` s (the last layer, heads averaged: the map the verdict judges; rows:
    generated tokens, columns:
    source tokens), at most ``max_frames`` spread evenly, first and last included. A frame of the notes'
    example carries the alignment verdict recorded with it (formed or not, as every other command says).

    Raises :class:`AttnlabError`: no probes file, the sentence was not a probe (the message lists the
    probes), or the model records no cross-attention (seq2seq).
    """
    from attnlab.viz.attention import Frame

    name, steps = _probe_steps(Path(run_dir), sentence)
    frames = [Frame(r["step"], display_tokens(r["src_tokens"]), display_tokens(r["tgt_tokens"]),
                    f"→ {r.get('translation', '')}" + _verdict_mark(r), w)
              for r in steps if (w := _probe_cross(r)) is not None]
    if not frames:
        raise no_attention("seq2seq")
    if max_frames is not None:
        frames = [frames[i] for i in _pick(len(frames), max_frames)]
    return name, frames


def timeline_figure(run_dir: str | Path, sentence: str, max_panels: int = 8):
    """How the cross-attention of a probe sentence formed during training, as a Figure: up to
    ``max_panels`` recorded steps side by side (:func:`timeline_frames`)."""
    from attnlab.viz.attention import strip_figure

    name, frames = timeline_frames(run_dir, sentence, max_panels)
    layers = _probe_layers(_probe_steps(Path(run_dir), sentence)[1])
    heading = _("{run} · cross-attention during training\n“{sentence}” (layer {layer} of {layers}, heads "
                "averaged: the map the §1 verdict judges)").format(
        run=Path(run_dir).resolve().name, sentence=name, layer=layers, layers=layers)
    return strip_figure(frames, heading)


def draw_timeline(run_dir: str | Path, sentence: str, out_dir: str | Path, max_panels: int = 8,
                  formats=("png",)) -> list[Path]:
    """Write :func:`timeline_figure` as ``out_dir/<slug>_timeline.png``, plus an animated
    ``<slug>_timeline.gif`` over every recorded step when Pillow is installed; returns the paths."""
    from attnlab.viz.attention import animate
    from attnlab.viz.figure import save_figure

    run_dir, out_dir = Path(run_dir), Path(out_dir)
    stem = out_dir / f"{slug(sentence)}_timeline"
    written = save_figure(timeline_figure(run_dir, sentence, max_panels), stem, formats=formats)
    name, frames = timeline_frames(run_dir, sentence)
    layers = _probe_layers(_probe_steps(run_dir, sentence)[1])
    gif = animate(frames, stem.with_suffix(".gif"), f"{run_dir.resolve().name} · “{name}” · "
                  + _("layer {layer} of {layers}, heads averaged").format(layer=layers, layers=layers))
    if gif is not None:
        written.append(gif)
    return written
