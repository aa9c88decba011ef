"""Run folders: what a run writes and how it is read back (read by every front end alike).

Run folder layout::

    RUN/
      config.toml          resolved config (every default written out, no corpus path)
      tokenizers.json      source and target tokenizers (vocabularies or BPE models)
      meta.json            seed, versions, data statistics (the corpus by name and checksum), command line
      metrics.jsonl        one JSON object per log/validation event
      probes.jsonl         the probe sentences' attention maps at each validation (:mod:`attnlab.runs.probes`)
      checkpoints/         :mod:`attnlab.runs.checkpoint`

An exported folder (:mod:`attnlab.runs.exported`) holds one model and needs no run folder. Every JSON
file is read under a size cap, and a missing or damaged one is one :class:`CheckpointError` line.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from attnlab import config as config_mod
from attnlab.data.vocab import load_tokenizer
from attnlab.errors import CheckpointError
from attnlab.i18n import _

_FULL_DISK = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # what a full disk or a size limit raises

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
        raise CheckpointError(_("{corrupt} ({why})").format(corrupt=corrupt, why=e.strerror or e)) from None
    if len(data) > cap:
        raise CheckpointError(_("{corrupt} (larger than {mib})").format(corrupt=corrupt, mib=_mib(cap)))
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
        raise CheckpointError(_("{where} names {name!r}, which is not a path inside {folder}; the "
                                "folder was changed after attnlab wrote it: use the original").format(where=where, name=name, folder=folder))
    full = folder / pure
    try:
        inside = full.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        raise CheckpointError(_("{where} names {name!r}, which leads out of {folder} (a symbolic "
                                "link); the folder was changed after attnlab wrote it: use the original").format(where=where, name=name, folder=folder))
    return full


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
            _("run folder {run_dir} does not exist; give the --out folder of an `attnlab train` run").format(run_dir=run_dir)
        )
    if not (run_dir / CONFIG).is_file():  # not "check --config": the learner gave a folder, not a config
        raise CheckpointError(_("{run_dir} is not a run folder (it has no {config}); give the --out folder of an "
                                "`attnlab train` run").format(run_dir=run_dir, config=CONFIG))
    try:
        cfg = config_mod.load_toml(run_dir / CONFIG)
    except config_mod.ConfigError as e:
        raise CheckpointError(_("{run_dir} is not a usable run folder: {e}").format(run_dir=run_dir, e=e)) from None
    tpath = run_dir / TOKENIZERS
    corrupt = _("{path} is corrupt (not the JSON that attnlab writes)").format(path=tpath)
    toks = read_json(tpath, MAX_JSON_BYTES, _("{path} is missing; the run folder is incomplete").format(path=tpath),
                     corrupt)
    if not isinstance(toks, dict) or "src" not in toks or "tgt" not in toks:
        raise CheckpointError(corrupt)
    for side in ("src", "tgt"):
        try:
            load_tokenizer(toks[side])
        except ValueError as e:
            raise CheckpointError(_("{tpath} is corrupt: its {side} tokenizer: {e}").format(tpath=tpath, side=side, e=e)) from None
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


EXPORT_CONFIG = "config.json"
EXPORT_FORMAT = 1


def is_export(path: str | Path) -> bool:
    """True for a folder `attnlab export` wrote (``config.json`` and ``manifest.json``, no ``config.toml``)."""
    p = Path(path)
    return (p / EXPORT_CONFIG).is_file() and (p / MANIFEST).is_file() and not (p / CONFIG).exists()


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
            fix = _("; free some space") if e.errno in _FULL_DISK else ""
            print(_("warning: could not append to {path} ({why}); training goes on without these records{fix}")
                  .format(path=path, why=e.strerror or e, fix=fix), file=sys.stderr)
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
