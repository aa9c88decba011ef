"""Attention maps as JSON: the one schema of the web page and of ``attnlab attention --json``.

An :class:`~attnlab.translator.AttentionResult` holds maps ``kind → (layers, heads, queries, keys)``
and the token labels of their axes. :func:`attention_payload` turns them into

    {kind: {"title", "queries", "keys", "outputs", "boundary", "layers", "heads", "layer", "head",
            "shape", "encoding", ["scale"], "weights", ["overview"], ["omitted"]}}

— what ``POST /api/translate`` sends as ``attention``; :func:`attention_json` is the same dict under
``"kinds"``, beside the sentence, its translation and its tokens (the file the CLI writes).

The axes (:func:`map_axes`): a query of the decoder is labelled by its input (``<bos> y1 …``) and
``outputs`` names the token it produced; the decoder-only ``self`` map runs over ``source <bos>
target`` and ``boundary`` is the index of its first target position. No matplotlib and no web
framework here: the figures (``attention_maps.py``) and the server (``web/``) both import it.
"""

from __future__ import annotations

import base64
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from attnlab.errors import AttnlabError

__all__ = [
    "KIND_TITLES",
    "OVERVIEW_SIZE",
    "SelectionError",
    "attention_json",
    "attention_payload",
    "encode_weights",
    "map_axes",
    "select_maps",
]

#: One set of titles for the figures and the page, with the notes' sections.
KIND_TITLES = {
    "enc_self": "encoder self-attention (§23)",
    "dec_self": "decoder masked self-attention (§24)",
    "cross": "encoder–decoder (cross) attention (§25)",
    "self": "decoder-only causal self-attention (§28)",
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
    raise AttnlabError(f"unknown attention kind {kind!r}; known: {', '.join(KIND_TITLES)}")


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
                f"layer {layer} is out of range: the {kind} maps have {n_layers} layer(s), "
                f"0…{n_layers - 1} (-1 is the last)",
            )
        w = w[layer % n_layers : layer % n_layers + 1]  # (1, H, Q, K)
    if head == "mean":
        w = w.mean(dim=1, keepdim=True)  # (L', 1, Q, K)
    elif head is not None:
        if not -n_heads <= head < n_heads:
            raise SelectionError(
                "head",
                f'head {head} is out of range: the {kind} maps have {n_heads} head(s), 0…{n_heads - 1}, or "mean"',
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
