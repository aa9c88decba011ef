"""Run folders: the only checkpoint saver and loader, and the readers of everything a run wrote
(STYLE.md habit 13). Training writes them and inference reads them; neither imports the other for it.

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

The manifest also records what the weights were trained *with*: the model config (all but
``dropout``) and a fingerprint of each tokenizer's vocabulary. A checkpoint inside a run folder whose
``config.toml`` or ``tokenizers.json`` no longer match is refused — same-sized but different
vocabularies would otherwise load silently and translate nonsense. A save that fails (disk full, a
file-size limit, no permission) raises :class:`CheckpointError` naming the folder and the cause, and
leaves every earlier checkpoint untouched.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import hashlib
import io
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes
from torch import nn

from attnlab import config as config_mod
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import CheckpointError
from attnlab.export.tokenizers import from_hf
from attnlab.io import atomic_write_json, atomic_write_text, fsync_dir, usual_mode
from attnlab.models import build_model

WEIGHTS = "model.safetensors"
STATE = "state.pt"
MANIFEST = "manifest.json"
CONFIG = "config.toml"
TOKENIZERS = "tokenizers.json"
META = "meta.json"
METRICS = "metrics.jsonl"

# What a reader takes in at most: far above what attnlab writes (a manifest lists a few files, config.json
# and tokenizers.json hold a config and two vocabularies), so that no file of a folder someone handed over
# makes a loader read or parse without bound.
MAX_MANIFEST_BYTES = 4 * 2**20
MAX_JSON_BYTES = 256 * 2**20  # tokenizers.json, config.json, a tokenizer file of an export, meta.json
_MAX_POINTER_BYTES = 256  # LAST / BEST: one folder name


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def _read_capped(path: Path, cap: int, missing: str, corrupt: str) -> bytes:
    """The bytes of ``path``; :class:`CheckpointError` with ``missing`` or ``corrupt`` (one line each) for a
    file that is absent, unreadable (a folder in its place, no permission) or larger than ``cap`` bytes."""
    try:
        with open(path, "rb") as f:
            data = f.read(cap + 1)
    except FileNotFoundError:
        raise CheckpointError(missing) from None
    except OSError as e:
        raise CheckpointError(f"{corrupt} ({e.strerror or e})") from None
    if len(data) > cap:
        raise CheckpointError(f"{corrupt} (larger than {_mib(cap)})")
    return data


def read_json(path: Path, cap: int, missing: str, corrupt: str) -> Any:
    """``path`` parsed as JSON, with :func:`_read_capped`'s errors, and ``corrupt`` for bytes that are not
    UTF-8 JSON."""
    data = _read_capped(path, cap, missing, corrupt)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(corrupt) from None


def member_path(folder: Path, name: Any, where: Path) -> Path:
    """``folder / name`` for a file name that ``where`` (a manifest, a config.json) gives, refused with a
    :class:`CheckpointError` unless it is a relative path that stays inside ``folder``: no absolute path,
    no ``..``, no link that leads out. A folder's manifest covers its own files only, so a name that
    leaves it would have attnlab read (and hash, and load) a file nobody verified."""
    ok = isinstance(name, str) and name != "" and "\0" not in name and "\\" not in name
    pure = PurePosixPath(name) if ok else None
    if pure is None or pure.is_absolute() or ".." in pure.parts:
        raise CheckpointError(f"{where} names {name!r}, which is not a path inside {folder}; the folder was "
                              "changed after attnlab wrote it: use the original")
    full = folder / pure
    try:
        inside = full.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        raise CheckpointError(f"{where} names {name!r}, which leads out of {folder} (a symbolic link); "
                              "the folder was changed after attnlab wrote it: use the original")
    return full


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def model_state_for_saving(model: nn.Module) -> dict[str, torch.Tensor]:
    """CPU, contiguous, unshared copies (safetensors refuses tensors that share memory, e.g. tied W_o)."""
    module = getattr(model, "module", model)  # unwrap DDP
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}


_FULL_DISK = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def _save_failed(ckpt_root: Path, name: str, err: OSError) -> CheckpointError:
    cause = err.strerror or str(err) or type(err).__name__
    if err.errno in _FULL_DISK:
        fix = "free some space (or lift the file-size limit) or choose another --out"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = "make the folder writable or choose another --out"
    else:
        fix = "check the disk and the folder"
    return CheckpointError(
        f"could not save checkpoint {name} in {ckpt_root}: {cause}; {fix} "
        "(the earlier checkpoints are untouched)"
    )


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    state: dict[str, Any] | None,
    keep: int = 2,
    best: bool = False,
) -> Path:
    """Write ``checkpoints/step-N`` atomically, point ``LAST`` (and ``BEST`` if ``best``) at it, rotate.

    ``keep`` step folders are kept besides the ones ``LAST`` and ``BEST`` point to (as
    ``train.keep_checkpoints`` documents). An existing ``step-N`` folder is replaced, never reused.
    Returns the folder.
    Raises :class:`CheckpointError` when the disk refuses the write (full, size limit, permissions);
    the half-written folder is removed and ``LAST``/``BEST`` still name the previous checkpoint.
    """
    ckpt_root = Path(run_dir) / "checkpoints"
    name = f"step-{step:07d}"
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
        manifest: dict[str, Any] = {
            "step": step,
            "files": {f: hashlib.sha256(b).hexdigest() for f, b in blobs.items()},
        }
        manifest.update(_run_fingerprint(Path(run_dir)))
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=ckpt_root))
        try:
            os.chmod(
                tmp, usual_mode(is_dir=True)
            )  # mkdtemp makes 0700: readable like the run's other files
            for fname, data in blobs.items():
                _write_synced(tmp / fname, data)
            atomic_write_json(tmp / MANIFEST, manifest)
            fsync_dir(tmp)
            _swap_in(tmp, final)
            fsync_dir(ckpt_root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        atomic_write_text(ckpt_root / "LAST", name + "\n")
        if best:
            atomic_write_text(ckpt_root / "BEST", name + "\n")
    except OSError as e:
        raise _save_failed(ckpt_root, name, e) from None
    _rotate(ckpt_root, keep)
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


def _swap_in(tmp: Path, final: Path) -> None:
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
                f"{path} was trained with model.{k}={saved_model.get(k)!r} but {run_dir / CONFIG} says "
                f"{current.get(k)!r}; restore the run's config.toml or use the run folder the checkpoint came from"
            )
    saved_vocab = manifest.get("vocab")
    if isinstance(saved_vocab, dict):
        for side, lang in (("src", "source"), ("tgt", "target")):
            try:
                now = _vocab_fingerprint(files.tokenizers[side])
            except ValueError as e:
                raise CheckpointError(f"{run_dir / TOKENIZERS} is corrupt: {e}") from None
            was = saved_vocab.get(side)
            if isinstance(was, dict) and was != now:
                raise CheckpointError(
                    f"{path} was trained with another {lang} vocabulary ({was.get('size')} tokens) than "
                    f"{run_dir / TOKENIZERS} holds ({now['size']} tokens, different ids); use the run folder "
                    "the checkpoint came from"
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
        raise CheckpointError(f"{p} cannot be read ({e.strerror or e}); it should hold the name of a checkpoint "
                              "folder beside it") from None
    try:
        name = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        name = None
    if name == "":
        return None
    if (name is None or len(raw) > _MAX_POINTER_BYTES or not name.isprintable() or name in (".", "..")
            or "/" in name or "\\" in name):
        steps = sorted(q.name for q in ckpt_root.glob("step-*") if q.is_dir())
        fix = f"write the name of one of its checkpoints into it ({', '.join(steps[-3:])})" if steps else "delete it"
        raise CheckpointError(f"{p} is corrupt: it must hold the name of a checkpoint folder beside it, such as "
                              f"step-0000500; {fix}")
    return name


def _rotate(ckpt_root: Path, keep: int) -> None:
    try:
        protected = {_pointer(ckpt_root, "LAST"), _pointer(ckpt_root, "BEST")}
    except CheckpointError:
        return  # a pointer someone overwrote: remove nothing it might have named
    steps = sorted(p for p in ckpt_root.glob("step-*") if p.is_dir())
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
            f"run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run"
        )
    if not run_dir.is_dir():
        raise CheckpointError(f"{run_dir} is not a folder; give the --out folder of an `attnlab train` run")
    if is_export(run_dir):  # one model, at the folder's root: nothing to choose
        if which not in ("best", "last"):
            raise CheckpointError(f"{run_dir} is an exported folder holding one model; drop --checkpoint {which}")
        return run_dir
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
        raise CheckpointError(
            f"checkpoint {path} is missing; use best, last or one of: "
            + ", ".join(sorted(p.name for p in ckpt_root.glob("step-*")))
        )
    return path


def verify_checkpoint(path: Path) -> dict[str, Any]:
    """Check the manifest's sha256 of every file; raise CheckpointError naming the file otherwise.

    The manifest must be a JSON object whose ``files`` map names inside ``path`` (:func:`member_path`)
    to sha256 digests, ``model.safetensors`` among them. Returns the manifest."""
    mpath = path / MANIFEST
    corrupt = f"{mpath} is corrupt: not a checkpoint manifest"
    manifest = read_json(mpath, MAX_MANIFEST_BYTES, f"{mpath} is missing: the checkpoint is incomplete", corrupt)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(d, str) for d in files.values()):
        raise CheckpointError(corrupt)
    if WEIGHTS not in files:
        raise CheckpointError(f"{mpath} does not list {WEIGHTS}: the checkpoint is incomplete or was changed")
    paths = {fname: member_path(path, fname, mpath) for fname in files}  # every name checked before any read
    for fname, digest in files.items():
        fpath = paths[fname]
        if not fpath.is_file():
            raise CheckpointError(f"{fpath} is missing from the checkpoint")
        if sha256_file(fpath) != digest:
            raise CheckpointError(
                f"{fpath} does not match its sha256 in {MANIFEST}: the file is corrupt or was changed"
            )
    if path.parent.name == "checkpoints" and (path.parent.parent / CONFIG).is_file():
        check_run_matches(path, manifest, path.parent.parent)
    return manifest


def check_safetensors_header(wpath: Path) -> None:
    """Refuse a safetensors header that names a tensor twice (the library silently keeps the last one)."""
    try:
        with open(wpath, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"{wpath} is not a valid safetensors file (shorter than its 8-byte header "
                    "length); it was not loaded"
                )
            (n,) = struct.unpack("<Q", head)
            size = os.fstat(f.fileno()).st_size
            if n > min(size - 8, 100 * 2**20):
                raise CheckpointError(
                    f"{wpath} is not a valid safetensors file (its header claims {n} bytes, "
                    f"the file has {size}); it was not loaded"
                )
            raw = f.read(n)
    except OSError as e:
        raise CheckpointError(f"{wpath} cannot be read: {e.strerror or e}") from None

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in pairs:
            if k in seen:
                raise CheckpointError(
                    f"{wpath} is not a valid safetensors file (its header names the tensor "
                    f"{k!r} twice); it was not loaded"
                )
            seen[k] = v
        return seen

    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=no_duplicates)
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(
            f"{wpath} is not a valid safetensors file (its header is not JSON); it was not loaded"
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
            f"{wpath} is not a valid safetensors file ({reason}); it was not loaded"
        ) from None
    module = getattr(model, "module", model)
    own = module.state_dict()
    missing = sorted(set(own) - set(tensors))
    unexpected = sorted(set(tensors) - set(own))
    if missing or unexpected:
        raise CheckpointError(
            f"{wpath} does not fit this model: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    for k, v in tensors.items():
        if tuple(v.shape) != tuple(own[k].shape):
            raise CheckpointError(
                f"{wpath}: tensor {k} has shape {tuple(v.shape)}, the model expects "
                f"{tuple(own[k].shape)} (config or vocabulary mismatch)"
            )
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
    """Read a run folder's config, tokenizers and meta, with one clear line on any problem.

    The config is validated (its sizes bounded, config.py) and both tokenizers are parsed, so a caller
    can rebuild them without another check; nothing is built from them here."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CheckpointError(
            f"run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run"
        )
    try:
        cfg = config_mod.load_toml(run_dir / CONFIG)
    except config_mod.ConfigError as e:
        raise CheckpointError(f"{run_dir} is not a usable run folder: {e}") from None
    tpath = run_dir / TOKENIZERS
    corrupt = f"{tpath} is corrupt (not the JSON that attnlab writes)"
    toks = read_json(tpath, MAX_JSON_BYTES, f"{tpath} is missing; the run folder is incomplete", corrupt)
    if not isinstance(toks, dict) or "src" not in toks or "tgt" not in toks:
        raise CheckpointError(corrupt)
    for side in ("src", "tgt"):
        try:
            load_tokenizer(toks[side])
        except ValueError as e:
            raise CheckpointError(f"{tpath} is corrupt: its {side} tokenizer: {e}") from None
    try:
        meta = read_json(run_dir / META, MAX_JSON_BYTES, "", "")
    except CheckpointError:
        meta = {}  # informative only: a missing or broken meta.json costs the recorded facts, not the run
    return RunFiles(cfg, toks, meta if isinstance(meta, dict) else {})


def run_config(cfg: config_mod.Config) -> config_mod.Config:
    """``cfg`` as a run folder (``config.toml``) or an export (``config.json``) records it: without
    ``data.data_path``. A path names the working folder or the machine the run was trained from, and
    folders move; the corpus is recorded by name and checksum in ``meta.json`` instead
    (``data_stats.corpus``) and located again when it is needed (:func:`attnlab.data.corpus.for_run`)."""
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, data_path=None))


def recorded_corpus(meta: Any) -> dict[str, Any] | None:
    """The corpus a run was trained on (``{name, file, sha256}``) from its ``meta.json``, or from an
    export's ``source`` facts (which hold the run's meta); None when none was recorded."""
    for m in (meta, meta.get("meta") if isinstance(meta, dict) else None):
        stats = m.get("data_stats") if isinstance(m, dict) else None
        corpus = stats.get("corpus") if isinstance(stats, dict) else None
        if isinstance(corpus, dict):
            return corpus
    return None


# ------------------------------------------------------------------------------------------------
# Exported folders (`attnlab export`, attnlab/export/): one model that needs no run folder
#
#   OUT/config.json          {"attnlab_export": 1, "config": the resolved config, "tokenizers": side ->
#                            {"file", "kind", "lang", "min_freq"}, "fingerprint", "source", "engines"}
#   OUT/model.safetensors    the weights; metadata "attnlab_config" and "attnlab_fingerprint" (JSON)
#   OUT/tokenizer.<lang>.json  Hugging Face `tokenizers` JSON, one per language
#   OUT/ctranslate2/         optional: the same model for the CTranslate2 engine
#   OUT/manifest.json        sha256 of every file above, as in a checkpoint folder

EXPORT_CONFIG = "config.json"
EXPORT_FORMAT = 1


def is_export(path: str | Path) -> bool:
    """True for a folder `attnlab export` wrote (``config.json`` and ``manifest.json``, no ``config.toml``)."""
    p = Path(path)
    return (p / EXPORT_CONFIG).is_file() and (p / MANIFEST).is_file() and not (p / CONFIG).exists()


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
        raise CheckpointError(f"{wpath} is not a valid safetensors file ({e}); it was not loaded") from None


def _export_tokenizers(path: Path, entries: Any, listed: dict[str, str]) -> dict[str, Any]:
    toks = {}
    for side in ("src", "tgt"):
        try:
            e = entries[side]
            name, kind, lang, min_freq = e["file"], e["kind"], e["lang"], int(e.get("min_freq", 1))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError(f"{path / EXPORT_CONFIG} does not describe the {side} tokenizer") from None
        if not isinstance(name, str) or name not in listed:
            raise CheckpointError(f"{path / EXPORT_CONFIG} names the {side} tokenizer {name!r}, not a file of its manifest")
        fpath = member_path(path, name, path / EXPORT_CONFIG)
        bad = f"{fpath} is not a usable tokenizer"
        data = _read_capped(fpath, MAX_JSON_BYTES, f"{fpath} is missing", bad)
        try:
            toks[side] = from_hf(data.decode("utf-8"), kind, lang, min_freq)
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
        raise CheckpointError(f"{cpath} names the CTranslate2 model {rel!r}, which is not a folder inside {path}; "
                              "export the run again")
    prefix = folder.relative_to(path).as_posix()
    if f"{prefix}/model.bin" not in listed:
        raise CheckpointError(f"{path / MANIFEST} does not list {prefix}/model.bin: the CTranslate2 model is not "
                              "covered by the manifest; export the run again")
    for root, dirs, names in os.walk(folder):
        for n in [*dirs, *names]:
            p = Path(root) / n
            rel_p = p.relative_to(path).as_posix()
            if p.is_symlink() or (n in names and (not p.is_file() or rel_p not in listed)):
                raise CheckpointError(f"{p} is not a file {path / MANIFEST} lists and verified; the CTranslate2 "
                                      "model holds a file attnlab did not write: export the run again")
    return folder


def _read_export(path: Path) -> tuple[RunFiles, dict[str, Any]]:
    """:func:`read_export`, and the verified manifest."""
    manifest = verify_checkpoint(path)
    listed = manifest["files"]
    cpath = path / EXPORT_CONFIG
    for name in (EXPORT_CONFIG, WEIGHTS):
        if name not in listed:
            raise CheckpointError(f"{path / MANIFEST} does not list {name}: the export is incomplete")
    corrupt = f"{cpath} is not the config.json of an `attnlab export` folder"
    spec = read_json(cpath, MAX_JSON_BYTES, f"{cpath} is missing", corrupt)
    if not isinstance(spec, dict) or "attnlab_export" not in spec or not isinstance(spec.get("config"), dict):
        raise CheckpointError(corrupt)
    version = spec["attnlab_export"]
    if type(version) is not int or version != EXPORT_FORMAT:
        raise CheckpointError(f"{cpath} has export format {version!r}, this attnlab reads {EXPORT_FORMAT}; "
                              "export the run again with this version")
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
            raise CheckpointError(f"{where} records another model config or vocabulary than the folder holds; "
                                  "export the run again")
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


# ------------------------------------------------------------------------------------------------
# The one model loader: everything verified before anything is built


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
        raise CheckpointError(f"{wpath} is not a valid safetensors file ({reason}); it was not loaded") from None


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
        detail = f"tensor {k} has shape {have[k]} in the file, {want[k]} in the config"
    else:
        detail = f"missing {missing[:3]}, unexpected {unexpected[:3]}"
    n_want = sum(math.prod(v) for v in want.values())
    n_have = sum(math.prod(v) for v in have.values())
    raise CheckpointError(
        f"{wpath} does not fit the {model_cfg.kind} model its config describes ({n_want:,} parameters; the file "
        f"ships {n_have:,}: {detail}); the config or a vocabulary was changed: restore it or use the folder "
        "the weights came from"
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
        manifest = verify_checkpoint(path)
    src_tok, tgt_tok = load_tokenizer(files.tokenizers["src"]), load_tokenizer(files.tokenizers["tgt"])
    check_weights_fit(path / WEIGHTS, files.config.model, len(src_tok), len(tgt_tok))
    model = build_model(files.config.model, len(src_tok), len(tgt_tok))
    load_weights(path, model, verify=False)
    return LoadedModel(files, path, manifest, model, src_tok, tgt_tok)


_APPEND_FAILING: set[str] = set()  # files whose last append failed (warned once until one works again)


def append_jsonl(path: str | Path, records: list[dict[str, Any]]) -> bool:
    """Append ``records`` to ``path`` as JSON lines; True when written.

    These logs are for inspection: a disk that refuses the append (full, a size limit) prints one
    warning line on stderr and loses these records, not the run; the checkpoint save that follows
    reports its own failure. A partly written line is cut off again, so the next record starts clean.
    """
    path = Path(path)
    data = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8", "replace")
    try:
        with open(path, "ab", buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            try:
                view = memoryview(data)
                while view:
                    n = f.write(view)
                    if not n:  # nothing taken (never for a regular file with room): do not spin
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                    view = view[n:]
            except OSError:
                try:
                    f.truncate(start)
                except OSError:
                    pass  # read_metrics skips a torn line
                raise
    except OSError as e:
        if str(path) not in _APPEND_FAILING:
            _APPEND_FAILING.add(str(path))
            fix = "; free some space" if e.errno in _FULL_DISK else ""
            print(f"warning: could not append to {path} ({e.strerror or e}); training goes on without these "
                  f"records{fix}", file=sys.stderr)
        return False
    _APPEND_FAILING.discard(str(path))
    return True


def append_metrics(run_dir: str | Path, record: dict[str, Any]) -> None:
    # Appends are line-sized; a torn last line is skipped by read_metrics. A failing disk only warns.
    append_jsonl(Path(run_dir) / METRICS, [record])


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
