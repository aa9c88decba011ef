"""Exported folders (`attnlab export`, :mod:`attnlab.export`): one model that needs no run folder.

    OUT/config.json            {"attnlab_export": 1, "model_type", "config": the resolved config, "tokenizers":
                               side -> {"file", "kind", "lang", "min_freq"[, "text": its text rules when not
                               D2L's]}, "fingerprint", "source" (no local path, command line or machine), "engines"}
    OUT/model.safetensors      the weights; metadata "attnlab_config" and "attnlab_fingerprint" (JSON)
    OUT/tokenizer.<lang>.json  Hugging Face `tokenizers` JSON, one per language
    OUT/ctranslate2/           optional: the same model for the CTranslate2 engine, with decode.json
    OUT/manifest.json          sha256 of every file above, as in a checkpoint folder
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from attnlab import config as config_mod
from attnlab.data.tokenizer_files import from_hf
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import CheckpointError
from attnlab.i18n import _
from attnlab.runs.checkpoint import _model_fingerprint, _vocab_fingerprint, verify_checkpoint
from attnlab.runs.folder import (
    EXPORT_CONFIG,
    EXPORT_FORMAT,
    MANIFEST,
    MAX_JSON_BYTES,
    WEIGHTS,
    RunFiles,
    _read_capped,
    member_path,
    read_json,
)


def fingerprint(cfg: config_mod.Config, tokenizers: dict[str, Any]) -> dict[str, Any]:
    """What weights were trained with, as JSON: the model config (all but dropout) and each
    vocabulary's size and sha256 (``tokenizers``: side -> attnlab tokenizer JSON)."""
    fp = {"model": _model_fingerprint(cfg), "vocab": {side: _vocab_fingerprint(tokenizers[side]) for side in ("src", "tgt")}}
    return json.loads(json.dumps(fp))


def _weights_fingerprint(wpath: Path) -> Any:
    try:
        with safe_open(str(wpath), "pt") as f:
            return json.loads((f.metadata() or {}).get("attnlab_fingerprint", "null"))
    except (SafetensorError, OSError, ValueError, RecursionError) as e:
        raise CheckpointError(_("{wpath} is not a valid safetensors file ({e}); it was not loaded").format(wpath=wpath, e=e)) from None


def _export_tokenizers(path: Path, entries: Any, listed: dict[str, str]) -> dict[str, Any]:
    toks = {}
    for side in ("src", "tgt"):
        try:
            e = entries[side]
            name, kind, lang, min_freq = e["file"], e["kind"], e["lang"], int(e.get("min_freq", 1))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError(_("{value} does not describe the {side} tokenizer").format(value=path / EXPORT_CONFIG, side=side)) from None
        if not isinstance(name, str) or name not in listed:
            raise CheckpointError(_("{value} names the {side} tokenizer {name!r}, not a file of its "
                                    "manifest").format(value=path / EXPORT_CONFIG, side=side, name=name))
        fpath = member_path(path, name, path / EXPORT_CONFIG)
        bad = f"{fpath} is not a usable tokenizer"
        data = _read_capped(fpath, MAX_JSON_BYTES, f"{fpath} is missing", bad)
        try:
            toks[side] = from_hf(data.decode("utf-8"), kind, lang, min_freq, e.get("text", "d2l"))
            if e.get("text", "d2l") != "d2l":  # a corpus of your own: its text rules (data/languages.py)
                toks[side]["text"] = e["text"]
            load_tokenizer(toks[side])
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as err:  # UnicodeDecodeError too
            reason = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
            raise CheckpointError(f"{bad}: {reason}") from None
    return toks


def export_engine_folder(path: Path, entry: Any, listed: dict[str, str]) -> Path:
    """The CTranslate2 model folder an export's ``engines.ctranslate2`` entry names, checked: a folder
    inside the export (:func:`member_path`) whose every file the manifest lists (so verified it), a
    ``model.bin`` among them, and no link. Raises :class:`CheckpointError` otherwise: the engine
    must never read a file the manifest did not cover."""
    cpath = path / EXPORT_CONFIG
    rel = entry.get("path") if isinstance(entry, dict) else None
    folder = member_path(path, rel, cpath)
    if folder == path or not folder.is_dir() or folder.is_symlink():
        raise CheckpointError(_("{cpath} names the CTranslate2 model {rel!r}, which is not a folder "
                                "inside {path}; export the run again").format(cpath=cpath, rel=rel, path=path))
    prefix = folder.relative_to(path).as_posix()
    if f"{prefix}/model.bin" not in listed:
        raise CheckpointError(_("{value} does not list {prefix}/model.bin: the CTranslate2 model is "
                                "not covered by the manifest; export the run again").format(value=path / MANIFEST, prefix=prefix))
    for root, dirs, names in os.walk(folder):
        for n in [*dirs, *names]:
            p = Path(root) / n
            rel_p = p.relative_to(path).as_posix()
            if p.is_symlink() or (n in names and (not p.is_file() or rel_p not in listed)):
                raise CheckpointError(_("{p} is not a file {value} lists and verified; the CTranslate2 "
                                        "model holds a file attnlab did not write: export the run again").format(p=p, value=path / MANIFEST))
    return folder


def _read_export(path: Path) -> tuple[RunFiles, dict[str, Any]]:
    """:func:`read_export`, and the verified manifest."""
    manifest = verify_checkpoint(path)
    listed = manifest["files"]
    cpath = path / EXPORT_CONFIG
    for name in (EXPORT_CONFIG, WEIGHTS):
        if name not in listed:
            raise CheckpointError(_("{value} does not list {name}: the export is incomplete").format(value=path / MANIFEST, name=name))
    corrupt = f"{cpath} is not the config.json of an `attnlab export` folder"
    spec = read_json(cpath, MAX_JSON_BYTES, f"{cpath} is missing", corrupt)
    if not isinstance(spec, dict) or "attnlab_export" not in spec or not isinstance(spec.get("config"), dict):
        raise CheckpointError(corrupt)
    version = spec["attnlab_export"]
    if type(version) is not int or version != EXPORT_FORMAT:
        raise CheckpointError(_("{cpath} has export format {version!r}, this attnlab reads "
                                "{EXPORT_FORMAT}; export the run again with this version").format(cpath=cpath, version=version, EXPORT_FORMAT=EXPORT_FORMAT))
    try:
        cfg = config_mod.from_dict(spec["config"])
    except config_mod.ConfigError as e:
        raise CheckpointError(f"{cpath}: {e}") from None
    toks = _export_tokenizers(path, spec.get("tokenizers"), listed)
    engines = spec.get("engines")
    if engines not in (None, {}):
        if not isinstance(engines, dict):
            raise CheckpointError(corrupt)
        if "ctranslate2" in engines:
            export_engine_folder(path, engines["ctranslate2"], listed)
    now = fingerprint(cfg, toks)
    for where, recorded in ((cpath, spec.get("fingerprint")), (path / WEIGHTS, _weights_fingerprint(path / WEIGHTS))):
        if recorded != now:
            raise CheckpointError(_("{where} records another model config or vocabulary than the "
                                    "folder holds; export the run again").format(where=where))
    source = spec.get("source")
    return RunFiles(cfg, toks, dict(source) if isinstance(source, dict) else {}), manifest


def read_export(path: str | Path) -> RunFiles:
    """Read an exported folder as a run: its config, tokenizers (attnlab JSON) and ``source`` facts as meta.

    Checked before anything is used, each failure a :class:`CheckpointError` naming the file: every
    file's sha256 against ``manifest.json`` (as for a checkpoint; every name inside the folder),
    ``config.json`` is an export of a format this version reads, the tokenizer files are HF tokenizers
    JSON, a CTranslate2 model lies inside the folder with every file covered by the manifest
    (:func:`export_engine_folder`), and the fingerprint of config and tokenizers equals the one
    recorded in ``config.json`` and in the weights' metadata.
    """
    return _read_export(Path(path))[0]

