"""The only checkpoint saver and loader (STYLE.md habit 13).

Run folder layout::

    RUN/
      config.toml          resolved config (every default written out)
      tokenizers.json      source and target tokenizers (vocabularies or BPE models)
      meta.json            seed, versions, data statistics, command line
      metrics.jsonl        one JSON object per log/validation event
      checkpoints/
        step-0000500/      model.safetensors, state.pt, manifest.json (sha256 of both)
        LAST               name of the newest complete checkpoint folder
        BEST               name of the best one by validation BLEU

A checkpoint folder is written under a temporary name, fsynced and renamed into place; the
``LAST``/``BEST`` pointers are then replaced atomically. A crash or SIGKILL at any moment therefore
leaves the previous ``LAST`` intact and loadable. Weights are safetensors (no code execution on
load); the training state is loaded with ``torch.load(weights_only=True)``; both are verified
against the manifest's sha256 before anything is read.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from attnlab import config as config_mod
from attnlab.errors import CheckpointError
from attnlab.io import atomic_write_json, atomic_write_text, fsync_dir

WEIGHTS = "model.safetensors"
STATE = "state.pt"
MANIFEST = "manifest.json"
CONFIG = "config.toml"
TOKENIZERS = "tokenizers.json"
META = "meta.json"
METRICS = "metrics.jsonl"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def model_state_for_saving(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU, contiguous, unshared copies (safetensors refuses tensors that share memory, e.g. tied W_o)."""
    module = getattr(model, "module", model)  # unwrap DDP
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}


def save_checkpoint(run_dir: str | Path, step: int, model: nn.Module, state: dict[str, Any] | None,
                    keep: int = 2, best: bool = False) -> Path:
    """Write ``checkpoints/step-N`` atomically, point ``LAST`` (and ``BEST`` if ``best``) at it, rotate.

    ``keep`` step folders are kept besides the one ``BEST`` points to. Returns the folder.
    """
    ckpt_root = Path(run_dir) / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:07d}"
    final = ckpt_root / name
    if not final.exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=ckpt_root))
        try:
            save_file(model_state_for_saving(model), str(tmp / WEIGHTS), metadata={"step": str(step)})
            files = [WEIGHTS]
            if state is not None:
                torch.save(state, tmp / STATE)
                files.append(STATE)
            for f in files:
                _fsync_file(tmp / f)
            manifest = {"step": step, "files": {f: sha256_file(tmp / f) for f in files}}
            atomic_write_json(tmp / MANIFEST, manifest)
            fsync_dir(tmp)
            os.replace(tmp, final)
            fsync_dir(ckpt_root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    atomic_write_text(ckpt_root / "LAST", name + "\n")
    if best:
        atomic_write_text(ckpt_root / "BEST", name + "\n")
    _rotate(ckpt_root, keep)
    return final


def _pointer(ckpt_root: Path, which: str) -> str | None:
    p = ckpt_root / which.upper()
    try:
        return p.read_text().strip() or None
    except OSError:
        return None


def _rotate(ckpt_root: Path, keep: int) -> None:
    protected = {_pointer(ckpt_root, "LAST"), _pointer(ckpt_root, "BEST")}
    steps = sorted(p for p in ckpt_root.glob("step-*") if p.is_dir())
    removable = [p for p in steps if p.name not in protected]
    # keep the newest `keep` step folders besides the protected ones
    excess = len(removable) - max(keep - 1, 0)
    for p in removable[:max(excess, 0)]:
        shutil.rmtree(p, ignore_errors=True)
    for p in ckpt_root.glob(".step-*"):  # leftovers of a save that was killed
        shutil.rmtree(p, ignore_errors=True)


def resolve_checkpoint(run_dir: str | Path, which: str = "best") -> Path:
    """Map ``best``/``last``/``step-N``/a folder path to a checkpoint folder, with clear errors."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise CheckpointError(f"run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run")
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is not a folder; give the --out folder of an `attnlab train` run")
    ckpt_root = run_dir / "checkpoints"
    if which in ("best", "last"):
        name = _pointer(ckpt_root, which)
        if name is None and which == "best":
            name = _pointer(ckpt_root, "last")
        if name is None:
            raise CheckpointError(f"{run_dir} holds no checkpoint yet (no {ckpt_root / 'LAST'}); train first")
        path = ckpt_root / name
    else:
        path = ckpt_root / which if (ckpt_root / which).is_dir() else Path(which)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} is missing; use best, last or one of: "
                              + ", ".join(sorted(p.name for p in ckpt_root.glob("step-*"))))
    return path


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check the manifest's sha256 of every file; raise CheckpointError naming the file otherwise."""
    mpath = path / MANIFEST
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
        files = manifest["files"]
    except FileNotFoundError:
        raise CheckpointError(f"{mpath} is missing: the checkpoint is incomplete") from None
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise CheckpointError(f"{mpath} is corrupt: not a checkpoint manifest") from None
    for fname, digest in files.items():
        fpath = path / fname
        if not fpath.is_file():
            raise CheckpointError(f"{fpath} is missing from the checkpoint")
        if sha256_file(fpath) != digest:
            raise CheckpointError(f"{fpath} does not match its sha256 in {MANIFEST}: the file is corrupt or was changed")
    return manifest


def load_weights(path: Path, model: nn.Module, verify: bool = True) -> None:
    """Load ``model.safetensors`` into ``model`` (strict: names and shapes must match)."""
    if verify:
        verify_checkpoint(path)
    wpath = path / WEIGHTS
    try:
        tensors = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(f"{wpath} is not a valid safetensors file ({reason}); it was not loaded") from None
    module = getattr(model, "module", model)
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if missing or unexpected:
        raise CheckpointError(f"{wpath} does not fit this model: missing {missing[:3]}, unexpected {unexpected[:3]}")
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise CheckpointError(f"{wpath}: tensor {k} has shape {tuple(v.shape)}, the model expects "
                                  f"{tuple(own[k].shape)} (config or vocabulary mismatch)")
    module.load_state_dict(tensors, strict=True)


def load_state(path: Path) -> dict[str, Any]:
    spath = path / STATE
    if not spath.is_file():
        raise CheckpointError(f"{spath} is missing: this checkpoint cannot resume training")
    try:
        return torch.load(spath, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle refusals come as several exception types
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(f"{spath} was refused: {reason}") from None


@dataclass
class RunFiles:
    config: config_mod.Config
    tokenizers: dict[str, Any]
    meta: dict[str, Any]


def read_run(run_dir: str | Path) -> RunFiles:
    """Read a run folder's config, tokenizers and meta, with one clear line on any problem."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(f"run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run")
    try:
        cfg = config_mod.load_toml(run_dir / CONFIG)
    except config_mod.ConfigError as e:
        raise CheckpointError(f"{run_dir} is not a usable run folder: {e}") from None
    tpath = run_dir / TOKENIZERS
    try:
        toks = json.loads(tpath.read_text(encoding="utf-8"))
        if not isinstance(toks, dict) or "src" not in toks or "tgt" not in toks:
            raise ValueError
    except FileNotFoundError:
        raise CheckpointError(f"{tpath} is missing; the run folder is incomplete") from None
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{tpath} is corrupt (not the JSON that attnlab writes)") from None
    try:
        meta = json.loads((run_dir / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    return RunFiles(cfg, toks, meta)


def append_metrics(run_dir: str | Path, record: dict[str, Any]) -> None:
    # Appends are line-sized and flushed; a torn last line is skipped by read_metrics.
    with open(Path(run_dir) / METRICS, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / METRICS
    out = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
