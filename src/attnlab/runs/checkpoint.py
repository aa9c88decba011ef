"""Checkpoints: the only saver, and the checks every load goes through.

A checkpoint folder (``RUN/checkpoints/step-N/``: ``model.safetensors``, ``state.pt``, ``manifest.json``)
is written under a temporary name, fsynced and renamed into place; the ``LAST``/``BEST`` pointers are then
replaced atomically. A crash or SIGKILL at any moment therefore leaves the previous ``LAST`` intact and
loadable. Weights are safetensors (no code execution on load); the training state is loaded with
``torch.load(weights_only=True)``; both are verified against the manifest's sha256 before anything is read.

The manifest also records what the weights were trained *with*: the model config (all but ``dropout``)
and a fingerprint of each tokenizer's vocabulary. A checkpoint inside a run folder whose ``config.toml``
or ``tokenizers.json`` no longer match is refused — same-sized but different vocabularies would otherwise
load silently and translate nonsense. A save that fails (disk full, a file-size limit, no permission)
raises :class:`CheckpointError` naming the folder and the cause, and leaves every earlier checkpoint
untouched.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import hashlib
import io
import json
import os
import re
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from attnlab import config as config_mod
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import CheckpointError
from attnlab.files import atomic_write_json, atomic_write_text, fsync_dir, usual_mode
from attnlab.i18n import _
from attnlab.runs.folder import (
    _FULL_DISK,
    _MAX_POINTER_BYTES,
    CONFIG,
    MANIFEST,
    MAX_MANIFEST_BYTES,
    STATE,
    TOKENIZERS,
    WEIGHTS,
    is_export,
    member_path,
    read_json,
    read_run,
    sha256_file,
)

# ------------------------------------------------------------------------------------------------
# Names: the only place that spells them (training, resume, doctor and `average` ask here)

CHECKPOINTS = "checkpoints"  # RUN/checkpoints/: step-N folders, the LAST and BEST pointers, named ones (averaged)
LAST, BEST = "LAST", "BEST"
_STEP_NAME = re.compile(r"step-(\d+)")


def checkpoint_root(run_dir: str | Path) -> Path:
    """``RUN/checkpoints``."""
    return Path(run_dir) / CHECKPOINTS


def step_name(step: int) -> str:
    """The folder name of the checkpoint saved after ``step`` updates: ``step-0000500``."""
    return f"step-{step:07d}"


def step_of(name: str) -> int | None:
    """The step a ``step-N`` folder name holds (None for any other name: ``averaged``, ``LAST``…)."""
    m = _STEP_NAME.fullmatch(name)
    return int(m[1]) if m else None


def step_checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's ``step-N`` checkpoint folders, oldest step first (by number, not by name)."""
    found = [(n, p) for p in checkpoint_root(run_dir).glob("step-*") if p.is_dir() and (n := step_of(p.name)) is not None]
    return [p for _, p in sorted(found)]


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether the run has saved a checkpoint to resume from (its ``LAST`` pointer exists)."""
    return (checkpoint_root(run_dir) / LAST).is_file()


def last_manifest(run_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of the checkpoint ``LAST`` names, unverified (None when it cannot be read: the loader
    says why with its own message)."""
    try:
        name = _pointer(checkpoint_root(run_dir), "last")
        manifest = json.loads((checkpoint_root(run_dir) / str(name) / MANIFEST).read_text(encoding="utf-8"))
    except (CheckpointError, OSError, ValueError, UnicodeDecodeError):
        return None
    return manifest if isinstance(manifest, dict) else None


def run_decay_start(run_dir: str | Path) -> int | None:
    """The updates a budgeted run had made when its lr began to decay, as its newest checkpoint's plan says
    (None: no budget, or a checkpoint written before the manifest recorded it)."""
    start = (last_manifest(run_dir) or {}).get("decay_start")
    return start if isinstance(start, int) and not isinstance(start, bool) else None


def decay_checkpoints(run_dir: str | Path) -> list[Path]:
    """The ``step-N`` folders written in the decay phase (N > :func:`run_decay_start`), oldest first."""
    start = run_decay_start(run_dir)
    if start is None:
        return []
    return [p for p in step_checkpoints(run_dir) if (step_of(p.name) or 0) > start]


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def model_state_for_saving(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU, contiguous, unshared copies (safetensors refuses tensors that share memory, e.g. tied W_o)."""
    module = getattr(model, "module", model)  # unwrap DDP
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}


def _save_failed(ckpt_root: Path, name: str, err: OSError) -> CheckpointError:
    cause = err.strerror or str(err) or type(err).__name__
    if err.errno in _FULL_DISK:
        fix = "free some space (or lift the file-size limit) or choose another --out"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the folder writable or choose another --out"
    else:
        fix = "check the disk and the folder"
    return CheckpointError(
        _("could not save checkpoint {name} in {ckpt_root}: {cause}; {fix} (the earlier checkpoints "
          "are untouched)").format(name=name, ckpt_root=ckpt_root, cause=cause, fix=fix)
    )


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    state: dict[str, Any] | None,
    keep: int = 2,
    best: bool = False,
    decay_start: int | None = None,
    keep_decay: bool = False,
) -> Path:
    """Write ``checkpoints/step-N`` atomically, point ``LAST`` (and ``BEST`` if ``best``) at it, rotate.

    ``keep`` step folders are kept besides the ones ``LAST`` and ``BEST`` point to (as
    ``train.keep_checkpoints`` documents) and, with ``keep_decay``, besides every one written after
    ``decay_start`` updates (the decay phase, kept for averaging: ``train.average_last``). ``decay_start`` is
    recorded in the manifest (:func:`run_decay_start`). An existing ``step-N`` folder is replaced, never reused.
    Returns the folder.
    Raises :class:`CheckpointError` when the disk refuses the write (full, size limit, permissions);
    the half-written folder is removed and ``LAST``/``BEST`` still name the previous checkpoint.
    """
    ckpt_root = checkpoint_root(run_dir)
    name = step_name(step)
    final = ckpt_root / name
    try:
        ckpt_root.mkdir(parents=True, exist_ok=True)
        # Always written afresh, even when step-N exists: such a folder is the leftover of a save that
        # died before LAST named it (or of the run before a resume), never these weights.
        # Serialise in memory first: the writes below are then plain file writes, whose failures
        # are OSErrors with an errno (safetensors/torch writers report a full disk less clearly).
        blobs = {WEIGHTS: safetensors_bytes(model_state_for_saving(model), metadata={"step": str(step)})}
        if state is not None:
            buf = io.BytesIO()
            torch.save(state, buf)
            blobs[STATE] = buf.getvalue()
        recorded = {"step": step} if decay_start is None else {"step": step, "decay_start": decay_start}
        write_checkpoint_folder(ckpt_root, name, blobs, recorded, Path(run_dir))
        atomic_write_text(ckpt_root / LAST, name + "\n")
        if best:
            atomic_write_text(ckpt_root / BEST, name + "\n")
    except OSError as e:
        raise _save_failed(ckpt_root, name, e) from None
    _rotate(ckpt_root, keep, decay_start if keep_decay else None)
    return final


def write_checkpoint_folder(root: Path, name: str, blobs: dict[str, bytes], manifest: dict[str, Any],
                            run_dir: Path) -> Path:
    """Write ``root/name``: the files ``blobs`` plus a manifest (``manifest``, their sha256 and the run's
    fingerprints), built in a temporary folder, synced and swapped in whole; a failure leaves no trace.
    The one writer of a checkpoint folder (``save_checkpoint``, ``runs.average``). Raises ``OSError``."""
    manifest = {**manifest, "files": {f: hashlib.sha256(b).hexdigest() for f, b in blobs.items()},
                **_run_fingerprint(run_dir)}
    final = root / name
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        os.chmod(tmp, usual_mode(is_dir=True))  # mkdtemp makes 0700: readable like the run's other files
        for fname, data in blobs.items():
            _write_synced(tmp / fname, data)
        atomic_write_json(tmp / MANIFEST, manifest)
        fsync_dir(tmp)
        swap_in(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where that is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    return fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0


def swap_in(tmp: Path, final: Path) -> None:
    """Rename folder ``tmp`` to ``final``, replacing a stale ``final`` (its content is removed)."""
    try:
        os.replace(tmp, final)  # no final (or an empty one): done
        return
    except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
    if _exchange(tmp, final):  # final is never absent: the stale folder is now at tmp
        shutil.rmtree(tmp, ignore_errors=True)
        return
    # Elsewhere: two renames. The stale one keeps a ".step-" name, which _rotate sweeps if we die here.
    stale = Path(tempfile.mkdtemp(prefix=f".{final.name}.stale.", dir=final.parent))
    os.replace(final, stale / final.name)
    os.replace(tmp, final)
    shutil.rmtree(stale, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# What a checkpoint was trained with: the model config and the vocabularies


# Model fields that do not change what the weights compute: dropout (off at inference; a resumed run
# may change it) and scratch_gru (the same GRU, written out cell by cell, loads the same weights).
_NOT_FINGERPRINTED = frozenset({"dropout", "attention_dropout", "scratch_gru"})  # same weights, same function


def _model_fingerprint(cfg: config_mod.Config) -> dict[str, Any]:
    return {
        k: (list(v) if isinstance(v, tuple) else v)
        for k, v in dataclasses.asdict(cfg.model).items()
        if k not in _NOT_FINGERPRINTED
    }


def _vocab_fingerprint(tok_json: Any) -> dict[str, Any]:
    """Size and sha256 of a tokenizer's id -> token table (what the embedding rows mean)."""
    tok = load_tokenizer(tok_json)
    table = [tok.id_to_token(i) for i in range(len(tok))]
    digest = hashlib.sha256(
        json.dumps(table, ensure_ascii=False).encode("utf-8", "surrogatepass")
    ).hexdigest()
    return {"size": len(tok), "sha256": digest}


_FP_CACHE: dict[tuple[str, int, int], dict[str, Any]] = {}


def _tokenizers_fingerprint(tpath: Path) -> dict[str, Any]:
    st = tpath.stat()
    key = (str(tpath.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _FP_CACHE:
        toks = json.loads(tpath.read_text(encoding="utf-8"))
        _FP_CACHE.clear()
        _FP_CACHE[key] = {side: _vocab_fingerprint(toks[side]) for side in ("src", "tgt")}
    return _FP_CACHE[key]


def _run_fingerprint(run_dir: Path) -> dict[str, Any]:
    """Manifest entries tying a checkpoint to its run's config and tokenizers (empty outside a run folder)."""
    out: dict[str, Any] = {}
    try:
        out["model"] = _model_fingerprint(config_mod.load_toml(run_dir / CONFIG))
    except config_mod.ConfigError:
        pass  # a bare folder (tests, tools): nothing to tie the weights to
    try:
        out["vocab"] = _tokenizers_fingerprint(run_dir / TOKENIZERS)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return out


def check_run_matches(path: Path, manifest: dict[str, Any], run_dir: Path) -> None:
    """Refuse a checkpoint whose recorded model config or vocabularies differ from ``run_dir``'s files.

    Checkpoints written before these were recorded (no ``model``/``vocab`` in the manifest) pass.
    """
    files = read_run(run_dir)
    saved_model = manifest.get("model")
    if isinstance(saved_model, dict):
        current = _model_fingerprint(files.config)
        # Only fields both sides know: a field added to ModelConfig later (absent from older manifests)
        # or one no longer fingerprinted never refuses a checkpoint on its own.
        common = (set(saved_model) & set(current)) - _NOT_FINGERPRINTED
        diff = sorted(k for k in common if saved_model[k] != current[k])
        if diff:
            k = diff[0]
            raise CheckpointError(
                _("{path} was trained with model.{k}={value!r} but {value2} says {value3!r}; restore "
                  "the run's config.toml or use the run folder the checkpoint came from").format(path=path, k=k, value=saved_model.get(k), value2=run_dir / CONFIG, value3=current.get(k))
            )
    saved_vocab = manifest.get("vocab")
    if isinstance(saved_vocab, dict):
        for side, lang in (("src", "source"), ("tgt", "target")):
            try:
                now = _vocab_fingerprint(files.tokenizers[side])
            except ValueError as e:
                raise CheckpointError(_("{value} is corrupt: {e}").format(value=run_dir / TOKENIZERS, e=e)) from None
            was = saved_vocab.get(side)
            if isinstance(was, dict) and was != now:
                raise CheckpointError(
                    _("{path} was trained with another {lang} vocabulary ({value} tokens) than "
                      "{value2} holds ({size} tokens, different ids); use the run folder the "
                      "checkpoint came from").format(path=path, lang=lang, value=was.get('size'), value2=run_dir / TOKENIZERS, size=now['size'])
                )


def _pointer(ckpt_root: Path, which: str) -> str | None:
    """The checkpoint folder that ``LAST`` or ``BEST`` names (None when the file is absent or empty).

    Raises :class:`CheckpointError` when the file holds anything but one folder name beside it (binary
    bytes, a path, several lines): attnlab only ever writes a name such as ``step-0000500``.
    """
    p = ckpt_root / which.upper()
    try:
        with open(p, "rb") as f:
            raw = f.read(_MAX_POINTER_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError(_("{p} cannot be read ({why}); it should hold the name of a checkpoint "
                                "folder beside it").format(p=p, why=e.strerror or e)) from None
    try:
        name = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        name = None
    if name == "":
        return None
    if (name is None or len(raw) > _MAX_POINTER_BYTES or not name.isprintable() or name in (".", "..")
            or "/" in name or "\\" in name):
        steps = [q.name for q in step_checkpoints(ckpt_root.parent)]
        fix = f"write the name of one of its checkpoints into it ({', '.join(steps[-3:])})" if steps else "delete it"
        raise CheckpointError(_("{p} is corrupt: it must hold the name of a checkpoint folder beside "
                                "it, such as step-0000500; {fix}").format(p=p, fix=fix))
    return name


def _rotate(ckpt_root: Path, keep: int, keep_after: int | None = None) -> None:
    try:
        protected = {_pointer(ckpt_root, LAST), _pointer(ckpt_root, BEST)}
    except CheckpointError:
        return  # a pointer someone overwrote: remove nothing it might have named
    steps = step_checkpoints(ckpt_root.parent)
    if keep_after is not None:  # the decay phase's checkpoints, kept for averaging
        protected |= {p.name for p in steps if (step_of(p.name) or 0) > keep_after}
    removable = [p for p in steps if p.name not in protected]
    # keep the newest `keep` step folders besides the protected ones
    excess = len(removable) - max(keep, 0)
    for p in removable[: max(excess, 0)]:
        shutil.rmtree(p, ignore_errors=True)
    for p in ckpt_root.glob(".step-*"):  # leftovers of a save that was killed
        shutil.rmtree(p, ignore_errors=True)


def resolve_checkpoint(run_dir: str | Path, which: str = "best") -> Path:
    """Map ``best``/``last``/``step-N``/a folder path to a checkpoint folder, with clear errors."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise CheckpointError(
            _("run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run").format(run_dir=run_dir)
        )
    if not run_dir.is_dir():
        raise CheckpointError(_("{run_dir} is not a folder; give the --out folder of an `attnlab "
                                "train` run").format(run_dir=run_dir))
    if is_export(run_dir):  # one model, at the folder's root: nothing to choose
        if which not in ("best", "last"):
            raise CheckpointError(_("{run_dir} is an exported folder holding one model; drop "
                                    "--checkpoint {which}").format(run_dir=run_dir, which=which))
        return run_dir
    ckpt_root = checkpoint_root(run_dir)
    if which in ("best", "last"):
        name = _pointer(ckpt_root, which)
        if name is None and which == "best":
            name = _pointer(ckpt_root, "last")
        if name is None:
            raise CheckpointError(_("{run_dir} holds no checkpoint yet (no {value}); train first").format(run_dir=run_dir, value=ckpt_root / 'LAST'))
        path = ckpt_root / name
    else:
        path = ckpt_root / which if (ckpt_root / which).is_dir() else Path(which)
    if not path.is_dir():
        raise CheckpointError(
            _("checkpoint {path} is missing; use best, last or one of: {names}").format(
                path=path, names=", ".join(p.name for p in step_checkpoints(run_dir)))
        )
    return path


def verify_checkpoint(path: Path, run_dir: Path | None = None) -> dict[str, Any]:
    """Check the manifest's sha256 of every file; raise CheckpointError naming the file otherwise.

    The manifest must be a JSON object whose ``files`` map names inside ``path`` (:func:`member_path`)
    to sha256 digests, ``model.safetensors`` among them. ``run_dir``: the run folder whose config and
    tokenizers the weights will be read with (:func:`check_run_matches`); by default the run folder
    that holds ``path``. A checkpoint given by path may come from another run: checking it against its
    own folder would let a same-sized, different vocabulary through. Returns the manifest."""
    mpath = path / MANIFEST
    corrupt = f"{mpath} is corrupt: not a checkpoint manifest"
    manifest = read_json(mpath, MAX_MANIFEST_BYTES, f"{mpath} is missing: the checkpoint is incomplete", corrupt)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        raise CheckpointError(corrupt)
    if WEIGHTS not in files:
        raise CheckpointError(_("{mpath} does not list {WEIGHTS}: the checkpoint is incomplete or was "
                                "changed").format(mpath=mpath, WEIGHTS=WEIGHTS))
    paths = {fname: member_path(path, fname, mpath) for fname in files}  # every name checked before any read
    for fname, digest in files.items():
        fpath = paths[fname]
        if not fpath.is_file():
            raise CheckpointError(_("{fpath} is missing from the checkpoint").format(fpath=fpath))
        if sha256_file(fpath) != digest:
            raise CheckpointError(
                _("{fpath} does not match its sha256 in {MANIFEST}: the file is corrupt or was changed").format(fpath=fpath, MANIFEST=MANIFEST)
            )
    if run_dir is None and path.parent.name == CHECKPOINTS:
        run_dir = path.parent.parent
    if run_dir is not None and (run_dir / CONFIG).is_file():
        check_run_matches(path, manifest, run_dir)
    return manifest


def check_safetensors_header(wpath: Path) -> None:
    """Refuse a safetensors header that names a tensor twice (the library silently keeps the last one)."""
    try:
        with open(wpath, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    _("{wpath} is not a valid safetensors file (shorter than its 8-byte header "
                      "length); it was not loaded").format(wpath=wpath)
                )
            (n,) = struct.unpack("<Q", head)
            size = os.fstat(f.fileno()).st_size
            if n > min(size - 8, 100 * 2**20):
                raise CheckpointError(
                    _("{wpath} is not a valid safetensors file (its header claims {n} bytes, the file "
                      "has {size}); it was not loaded").format(wpath=wpath, n=n, size=size)
                )
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(_("{wpath} cannot be read: {why}").format(wpath=wpath, why=e.strerror or e)) from None

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in pairs:
            if k in seen:
                raise CheckpointError(
                    _("{wpath} is not a valid safetensors file (its header names the tensor {k!r} "
                      "twice); it was not loaded").format(wpath=wpath, k=k)
                )
            seen[k] = v
        return seen

    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(
            _("{wpath} is not a valid safetensors file (its header is not JSON); it was not loaded").format(wpath=wpath)
        ) from None


def load_weights(path: Path, model: nn.Module, verify: bool = True) -> None:
    """Load ``model.safetensors`` into ``model`` (strict: names and shapes must match)."""
    if verify:
        verify_checkpoint(path)
    wpath = path / WEIGHTS
    check_safetensors_header(wpath)
    try:
        tensors = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CheckpointError(
            _("{wpath} is not a valid safetensors file ({reason}); it was not loaded").format(wpath=wpath, reason=reason)
        ) from None
    module = getattr(model, "module", model)
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if missing or unexpected:
        raise CheckpointError(
            _("{wpath} does not fit this model: missing {missing}, unexpected {unexpected}").format(wpath=wpath, missing=missing[:3], unexpected=unexpected[:3])
        )
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise CheckpointError(
                _("{wpath}: tensor {k} has shape {tuple}, the model expects {tuple2} (config or "
                  "vocabulary mismatch)").format(wpath=wpath, k=k, tuple=tuple(v.shape), tuple2=tuple(own[k].shape))
            )
    module.load_state_dict(tensors, strict=True)


def load_state(path: Path) -> dict[str, Any]:
    spath = path / STATE
    if not spath.is_file():
        raise CheckpointError(_("{spath} is missing: this checkpoint cannot resume training").format(spath=spath))
    try:
        return torch.load(spath, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickle refusals come as several exception types
        reason = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise CheckpointError(_("{spath} was refused: {reason}").format(spath=spath, reason=reason)) from None

