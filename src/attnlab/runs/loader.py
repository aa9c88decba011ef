"""The one model loader: everything verified before anything is built."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from torch import nn

from attnlab import config as config_mod
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import CheckpointError
from attnlab.i18n import _
from attnlab.models import build_model
from attnlab.runs.checkpoint import (
    check_safetensors_header,
    load_weights,
    resolve_checkpoint,
    verify_checkpoint,
)
from attnlab.runs.exported import _read_export
from attnlab.runs.folder import WEIGHTS, RunFiles, is_export, read_run


def weights_shapes(wpath: Path) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor in a safetensors file, from its header alone (no tensor is read).

    The safetensors library refuses a header whose offsets do not cover the file exactly, so these
    shapes are what the file really ships. Raises :class:`CheckpointError` for a file that is not one.
    """
    check_safetensors_header(wpath)
    try:
        with safe_open(str(wpath), "pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(_("{path} is not a valid safetensors file ({reason}); it was not loaded").format(
            path=wpath, reason=reason)) from None


def model_shapes(model_cfg: config_mod.ModelConfig, src_vocab: int, tgt_vocab: int) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor the model ``model_cfg`` describes would save, computed by building it
    on PyTorch's ``meta`` device: shapes without storage, so nothing is allocated whatever the config says."""
    with torch.device("meta"):
        model = build_model(model_cfg, src_vocab, tgt_vocab)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def check_weights_fit(wpath: Path, model_cfg: config_mod.ModelConfig, src_vocab: int, tgt_vocab: int) -> None:
    """Refuse, before the model is built, a config whose tensors are not exactly the ones the weights
    file ships (same names, same shapes, so the same parameter count).

    A config is cheap to edit and a model is expensive to build: ``num_layers = 100000`` in a
    ``config.toml`` would allocate until memory runs out. Checked this way, a config can never ask
    for more than the file's own size. Raises :class:`CheckpointError` naming both counts.
    """
    want = model_shapes(model_cfg, src_vocab, tgt_vocab)
    have = weights_shapes(wpath)
    if want == have:
        return
    missing = sorted(set(want) - set(have))
    unexpected = sorted(set(have) - set(want))
    wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    if wrong:
        k = wrong[0]
        detail = _("tensor {k} has shape {have} in the file, {want} in the config").format(k=k, have=have[k], want=want[k])
    else:
        detail = _("missing {missing}, unexpected {unexpected}").format(missing=missing[:3], unexpected=unexpected[:3])
    n_want = sum(math.prod(v) for v in want.values())
    n_have = sum(math.prod(v) for v in have.values())
    raise CheckpointError(
        _("{wpath} does not fit the {kind} model its config describes ({n_want:,} parameters; the file "
          "ships {n_have:,}: {detail}); the config or a vocabulary was changed: restore it or use the folder "
          "the weights came from").format(wpath=wpath, kind=model_cfg.kind, n_want=n_want, n_have=n_have, detail=detail)
    )


@dataclass
class LoadedModel:
    """What :func:`load_model` returns: the run's files, the checkpoint folder, its manifest, the model
    with its weights (on the CPU, in train mode as built) and the two tokenizers."""

    files: RunFiles
    checkpoint: Path
    manifest: dict[str, Any]
    model: nn.Module
    src_tok: Any
    tgt_tok: Any


def load_model(run_dir: str | Path, which: str = "best") -> LoadedModel:
    """The model of a run folder (or an exported one) at checkpoint ``which``: the one loader of the CLI,
    the web server, notebooks and exports.

    Nothing is trusted before it is verified, in this order: the config is parsed (its sizes bounded)
    and the tokenizers too; the checkpoint's manifest and the sha256 of every file it lists are checked,
    and so are the model config and vocabularies it records against the run's files
    (:func:`verify_checkpoint`, :func:`read_export`); the weights file's header is compared with the
    tensors the config describes (:func:`check_weights_fit`); only then is the model built and loaded.
    Raises :class:`CheckpointError` (one line) at the first check that fails.
    """
    run_dir = Path(run_dir)
    if is_export(run_dir):
        files, manifest = _read_export(run_dir)
        path = resolve_checkpoint(run_dir, which)
    else:
        files = read_run(run_dir)
        path = resolve_checkpoint(run_dir, which)
        manifest = verify_checkpoint(path, run_dir)  # a --checkpoint PATH is checked against this run
    src_tok, tgt_tok = load_tokenizer(files.tokenizers["src"]), load_tokenizer(files.tokenizers["tgt"])
    check_weights_fit(path / WEIGHTS, files.config.model, len(src_tok), len(tgt_tok))
    model = build_model(files.config.model, len(src_tok), len(tgt_tok))
    load_weights(path, model, verify=False)
    return LoadedModel(files, path, manifest, model, src_tok, tgt_tok)

