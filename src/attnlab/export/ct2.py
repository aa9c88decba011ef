"""attnlab's Transformer and decoder-only models as CTranslate2 models, through its Python spec API.

The weights are set on ``ctranslate2.specs`` objects one by one, so every attnlab detail is stated
here rather than guessed by a converter:

- pre-norm or post-norm (``model.norm_first``): the spec's ``pre_norm``; pre-norm's final LayerNorm
  per stack is the spec's ``layer_norm``; the LayerNorm epsilon is PyTorch's (1e-5), written into
  the model's config;
- positions: the table the model adds (sinusoidal or learned, ``max_positions × D``) is written out
  as ``position_encodings.encodings``, so CTranslate2 adds the same vectors as attnlab;
- embeddings are multiplied by √D (the spec's ``scale_embeddings``, on by default), as in ``_embed``;
- attention: attnlab's fused ``in_proj`` rows ``[W_q; W_k; W_v]`` are the spec's fused self-attention
  ``linear[0]``; encoder–decoder attention splits them into ``linear[0]`` (W_q) and ``linear[1]``
  (fused ``[W_k; W_v]``); ``out_proj`` is the last linear;
- a tied W_o is written as the projection's own weight (CTranslate2 aliases equal tensors);
- the special tokens ``<unk>=0 <pad>=1 <bos>=2 <eos>=3`` are named in the config (the decoder
  starts from ``<bos>``) and the source's ``<eos>`` is appended by CTranslate2 (``add_source_eos``),
  as attnlab's batching appends it.

The decoder-only model's two embedding tables become one vocabulary (the source under a ``<src>`` prefix,
never generated); int8 weights are rounded here (:func:`int8_weights`) so every x86 processor gives the
same outputs; GRU models are refused. Why: docs/explanations/export.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnlab.data.specials import BOS, EOS, SPECIALS, UNK
from attnlab.errors import AttnlabError
from attnlab.export import QUANTIZATIONS
from attnlab.i18n import _
from attnlab.models import traits
from attnlab.models.decoder_only import DecoderOnly
from attnlab.models.transformer import Transformer

SOURCE_PREFIX = "<src>"  # decoder-only: source tokens in the one CTranslate2 vocabulary
NEVER = -65504.0  # output bias of the decoder-only model's source rows
INT8_PAIR_BOUND = 128  # |q[2i]| + |q[2i+1]| of an int8 weight row; 255 · 128 fits an int16


def require_ctranslate2():
    """The ``ctranslate2`` module, or a one-line error saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise AttnlabError(
            _("the CTranslate2 engine is not installed; install attnlab's ct2 extra: pip install -e "
              "'.[ct2]' in the attnlab checkout (or pip install ctranslate2)")
        ) from None
    return ctranslate2


def check_convertible(model: nn.Module) -> None:
    """Refuse, in one line, a model CTranslate2 has no spec for (the GRU models)."""
    if isinstance(model, Transformer | DecoderOnly):
        return
    what = "a GRU model" if traits(model.config).recurrent else f"a {model.config.kind} model"
    raise AttnlabError(
        _("this run is {what}; CTranslate2 export covers the Transformer and the decoder-only model "
          "(export without --format ctranslate2 to keep it for attnlab's own engine)").format(what=what)
    )


def _np(t: torch.Tensor):
    return t.detach().to("cpu", torch.float32).contiguous().numpy()


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _np(weight)
    if bias is not None:
        spec.bias = _np(bias)


def _norm(spec, ln: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(ln.weight), _np(ln.bias)


def _self_attention(spec, mha, ln: nn.LayerNorm) -> None:
    _linear(spec.linear[0], mha.in_proj.weight, mha.in_proj.bias)  # fused [W_q; W_k; W_v]: (3D, D)
    _linear(spec.linear[1], mha.out_proj.weight, mha.out_proj.bias)
    _norm(spec.layer_norm, ln)


def _cross_attention(spec, mha, ln: nn.LayerNorm) -> None:
    D = mha.num_hiddens
    w, b = mha.in_proj.weight, mha.in_proj.bias
    _linear(spec.linear[0], w[:D], None if b is None else b[:D])  # W_q: (D, D)
    _linear(spec.linear[1], w[D:], None if b is None else b[D:])  # fused [W_k; W_v]: (2D, D)
    _linear(spec.linear[2], mha.out_proj.weight, mha.out_proj.bias)
    _norm(spec.layer_norm, ln)


def _ffn(spec, ffn, ln: nn.LayerNorm) -> None:
    _linear(spec.linear_0, ffn.dense1.weight, ffn.dense1.bias)
    _linear(spec.linear_1, ffn.dense2.weight, ffn.dense2.bias)
    _norm(spec.layer_norm, ln)


def _position_table(model: nn.Module) -> torch.Tensor:
    """The vectors the model adds at positions ``0 … max_positions-1``: ``(max_positions, D)``."""
    return model.positional(torch.arange(model.config.max_positions))


def _tokens(tok) -> list[str]:
    return [tok.id_to_token(i) for i in range(len(tok))]


def _name_specials(config, eps: float) -> None:
    config.unk_token, config.bos_token, config.eos_token = SPECIALS[UNK], SPECIALS[BOS], SPECIALS[EOS]
    config.layer_norm_epsilon = eps


def _transformer_spec(specs, model: Transformer, src_tok, tgt_tok):
    cfg = model.config
    spec = specs.TransformerSpec.from_config(cfg.num_layers, cfg.num_heads, pre_norm=cfg.norm_first)
    enc, dec = spec.encoder, spec.decoder
    table = _np(_position_table(model))
    enc.embeddings[0].weight = _np(model.src_embedding.weight)
    dec.embeddings.weight = _np(model.tgt_embedding.weight)
    enc.position_encodings.encodings = table
    dec.position_encodings.encodings = table
    if cfg.norm_first:
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    for layer, block in zip(enc.layer, model.encoder_blocks):
        _self_attention(layer.self_attention, block.attention, block.norm1)
        _ffn(layer.ffn, block.ffn, block.norm2)
    for layer, block in zip(dec.layer, model.decoder_blocks):
        _self_attention(layer.self_attention, block.self_attention, block.norm1)
        _cross_attention(layer.attention, block.cross_attention, block.norm2)
        _ffn(layer.ffn, block.ffn, block.norm3)
    _linear(dec.projection, model.output.weight, model.output.bias)
    _name_specials(spec.config, model.encoder_blocks[0].norm1.eps)
    spec.config.decoder_start_token = SPECIALS[BOS]
    spec.config.add_source_eos = True  # attnlab's batching ends every source with <eos>
    spec.register_source_vocabulary(_tokens(src_tok))
    spec.register_target_vocabulary(_tokens(tgt_tok))
    return spec


def decoder_only_vocabulary(src_tok, tgt_tok) -> list[str]:
    """The one vocabulary of the decoder-only CTranslate2 model: target ids first, then prefixed source tokens."""
    vocab = _tokens(tgt_tok) + [SOURCE_PREFIX + t for t in _tokens(src_tok)]
    if len(set(vocab)) != len(vocab):
        raise AttnlabError(_("a target token starts with {SOURCE_PREFIX!r}, which marks source tokens "
                             "in the CTranslate2 vocabulary; this vocabulary cannot be converted").format(SOURCE_PREFIX=SOURCE_PREFIX))
    return vocab


def vocabulary_files(src_tok, tgt_tok, one_sequence: bool) -> dict[str, list[str]]:
    """The vocabulary files :func:`convert` writes into the CTranslate2 folder, by name, with their tokens:
    what the engine checks a folder against before CTranslate2 reads it."""
    if one_sequence:
        return {"vocabulary.json": decoder_only_vocabulary(src_tok, tgt_tok)}
    return {"source_vocabulary.json": _tokens(src_tok), "target_vocabulary.json": _tokens(tgt_tok)}


def _decoder_only_spec(specs, model: DecoderOnly, src_tok, tgt_tok):
    cfg = model.config
    spec = specs.TransformerDecoderModelSpec.from_config(cfg.num_layers, cfg.num_heads, pre_norm=cfg.norm_first)
    dec = spec.decoder
    emb_t, emb_s = model.tgt_embedding.weight, model.src_embedding.weight
    dec.embeddings.weight = _np(torch.cat([emb_t, emb_s]))  # (V_t + V_s, D)
    dec.position_encodings.encodings = _np(_position_table(model))
    if cfg.norm_first:
        _norm(dec.layer_norm, model.norm)
    for layer, block in zip(dec.layer, model.blocks):
        _self_attention(layer.self_attention, block.attention, block.norm1)
        _ffn(layer.ffn, block.ffn, block.norm2)
    w, b = model.output.weight, model.output.bias
    never = torch.full((emb_s.shape[0],), NEVER, dtype=b.dtype)
    _linear(dec.projection, torch.cat([w, torch.zeros_like(emb_s)]), torch.cat([b, never]))  # source rows: never
    _name_specials(spec.config, model.blocks[0].norm1.eps)
    spec.register_vocabulary(decoder_only_vocabulary(src_tok, tgt_tok))
    return spec


def int8_weights(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: ``w`` (rows × inputs, float) as int8 rows with one float32 scale per row, ``w ≈ q / scale``.

    CTranslate2 computes an int8 layer on x86 as a u8·s8 GEMM (MKL's or oneDNN's): the activations
    are shifted to ``0…255``. On processors without VNNI the kernels multiply with ``vpmaddubsw``, which
    adds two neighbouring products ``a[2i]·q[2i] + a[2i+1]·q[2i+1]`` into a *saturating* int16 (oneDNN,
    "Nuances of int8 computations"). CTranslate2's own rounding (``scale = 127 / max|w|``) lets such a
    pair reach 255 · 254, so those processors compute other numbers than VNNI ones and greedy outputs
    part from the float model's far more often (bench/RESULTS.md, "CTranslate2 int8 on every x86
    processor"). Here ``scale = 127 / max_i (|w[2i]| + |w[2i+1]|)``: after rounding every pair sums to
    at most :data:`INT8_PAIR_BOUND` (128), so ``255 · 128 ≤ 32767`` never saturates and every kernel
    computes the same exact integer products. That costs about half a bit on the rows with a large
    pair; a row of zeros keeps scale 1.
    """
    w = np.asarray(w, dtype=np.float32)
    a = np.abs(w)
    if a.shape[1] % 2:
        a = np.pad(a, ((0, 0), (0, 1)))
    pair = a.reshape(a.shape[0], -1, 2).sum(axis=2).max(axis=1)
    pair[pair == 0] = 127.0
    scale = (np.float32(127.0) / np.maximum(pair, np.float32(127.0) / np.finfo(np.float32).max)).astype(np.float32)
    return np.rint(w * scale[:, None]).astype(np.int8), scale


def _quantize_int8(layer, layer_type) -> None:
    """Replace, in place, every float weight of ``layer`` and its sub-layers that CTranslate2 stores as int8."""
    for value in vars(layer).values():
        for sub in value if isinstance(value, list) else [value]:
            if isinstance(sub, layer_type):
                _quantize_int8(sub, layer_type)
    weight = getattr(layer, "weight", None)
    if isinstance(weight, np.ndarray) and weight.ndim == 2 and hasattr(layer, "weight_scale"):
        layer.weight, layer.weight_scale = int8_weights(weight)


def convert(model: nn.Module, src_tok, tgt_tok, out_dir: Path, quantization: str = "float32") -> dict[str, Any]:
    """Write ``model`` as a CTranslate2 model into the new folder ``out_dir``; returns what a loader needs.

    ``quantization``: ``float32`` or ``int8`` (weights of every linear layer and embedding as int8
    with one float scale per row, rounded by :func:`int8_weights`; CTranslate2 computes in int8 on
    the CPU).
    Raises :class:`AttnlabError` for a GRU model, an unknown quantization or a missing ``ctranslate2``.
    """
    if quantization not in QUANTIZATIONS:
        raise AttnlabError(_("--quantization {quantization} is not supported; choose one of: {choices}").format(quantization=quantization, choices=', '.join(QUANTIZATIONS)))
    check_convertible(model)
    ct2 = require_ctranslate2()
    model = model.eval()
    with torch.no_grad():
        if isinstance(model, Transformer):
            spec = _transformer_spec(ct2.specs, model, src_tok, tgt_tok)
        else:
            spec = _decoder_only_spec(ct2.specs, model, src_tok, tgt_tok)
        if quantization == "int8":
            _quantize_int8(spec, ct2.specs.LayerSpec)
        spec.validate()
        spec.optimize(quantization="float32" if quantization == "float32" else None)  # None: keep our int8
        out_dir.mkdir(parents=True)
        spec.save(str(out_dir))
    entry = {"spec": spec.name, "quantization": quantization, "ctranslate2_version": ct2.__version__,
             "one_sequence": isinstance(model, DecoderOnly)}
    if quantization == "int8":
        entry["int8_pair_bound"] = INT8_PAIR_BOUND  # the engine trusts such int8 weights on every processor
    return entry
