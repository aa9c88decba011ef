"""`attnlab export RUN OUT`: one checkpoint as a self-contained folder (the layout is in :mod:`attnlab.runs`).

The folder is written under a temporary name beside ``OUT`` and swapped into place, so ``OUT`` is
either the previous folder or the complete new one; ``--force`` replaces only an earlier export that
holds nothing but its own files. Reading it back (``runs.read_export``) checks
every file's sha256 and the fingerprint recorded in ``config.json`` and the weights' metadata.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from safetensors.torch import save as safetensors_bytes

from attnlab import config as config_mod
from attnlab import runs
from attnlab._version import __version__
from attnlab.errors import AttnlabError
from attnlab.export import FORMATS, ct2
from attnlab.export.standalone import DECODE_SETTINGS, decode_settings, text_rule_record, tokenizer_json
from attnlab.files import atomic_write_json, atomic_write_text, fsync_dir, usual_mode
from attnlab.i18n import _

CT2_DIR = "ctranslate2"


def pair_entry(data) -> dict:
    """The language pair as ``config.json`` says it to an outside reader (:func:`attnlab.data.pairs.pair_of`):
    ``src``/``tgt`` (ISO 639-1), their English names, the corpus, each side's text rule and an ``example``
    source sentence (the record's first; "" when it has none)."""
    from attnlab.data.pairs import LANGUAGE_NAMES, pair_of

    pair = pair_of(data)
    example = next(iter([s for s, _ in pair.examples] or pair.probes), "")
    return {"src": pair.src, "tgt": pair.tgt, "src_name": LANGUAGE_NAMES.get(pair.src, pair.src),
            "tgt_name": LANGUAGE_NAMES.get(pair.tgt, pair.tgt), "corpus": pair.corpus,
            "text_rules": {"src": pair.src_rules, "tgt": pair.tgt_rules}, "example": example}


def _tokenizer_files(src_lang: str, tgt_lang: str) -> dict[str, str]:
    if src_lang != tgt_lang:
        return {"src": f"tokenizer.{src_lang}.json", "tgt": f"tokenizer.{tgt_lang}.json"}
    return {"src": f"tokenizer.src.{src_lang}.json", "tgt": f"tokenizer.tgt.{tgt_lang}.json"}


def _load(run: Path, which: str):
    """(run files, checkpoint folder, its step, the model with its weights, src_tok, tgt_tok), all verified."""
    loaded = runs.load_model(run, which)  # every file verified before the model is built
    return (loaded.files, loaded.checkpoint, loaded.manifest.get("step"), loaded.model.eval(), loaded.src_tok,
            loaded.tgt_tok)


def _write_tree(tmp: Path, run: Path, which: str, fmt: str, quantization: str, decode: list[str]) -> None:
    files, path, step, model, src_tok, tgt_tok = _load(run, which)
    if fmt == "ctranslate2":
        ct2.check_convertible(model)  # before any work: a GRU run is refused in one line
        ct2.require_ctranslate2()
    cfg = config_mod.apply_decode_overrides(files.config, decode)  # the export's own decode defaults
    fp = runs.fingerprint(cfg, files.tokenizers)
    names = _tokenizer_files(src_tok.lang, tgt_tok.lang)
    entries: dict[str, Any] = {}
    for side, tok in (("src", src_tok), ("tgt", tgt_tok)):
        atomic_write_text(tmp / names[side], tokenizer_json(tok))
        entries[side] = {"file": names[side], "kind": tok.kind, "lang": tok.lang, "size": len(tok),
                         "min_freq": int(files.tokenizers[side].get("min_freq", 1)),
                         **({"text": tok.text, "text_rule": text_rule_record(tok)} if tok.text != "d2l" else {})}  # the text rules, when not D2L's
    cfg_dict = config_mod.to_dict(runs.run_config(cfg))  # no corpus path: the export may move
    metadata = {"step": str(step), "attnlab_config": json.dumps(cfg_dict), "attnlab_fingerprint": json.dumps(fp)}
    (tmp / runs.WEIGHTS).write_bytes(safetensors_bytes(runs.model_state_for_saving(model), metadata=metadata))
    engines = {}
    if fmt == "ctranslate2":
        engines["ctranslate2"] = {"path": CT2_DIR, **ct2.convert(model, src_tok, tgt_tok, tmp / CT2_DIR, quantization),
                                  "decode_settings": DECODE_SETTINGS}
        from attnlab.translator import Translator  # the longest source attnlab accepts for this config

        atomic_write_json(tmp / CT2_DIR / DECODE_SETTINGS, decode_settings(
            model, cfg, src_tok, tgt_tok, names, Translator(model, src_tok, tgt_tok, cfg).max_src_tokens,
            engines["ctranslate2"]["one_sequence"], ct2.SOURCE_PREFIX))
    # Where it came from, by name: no local path, command line or machine (the export travels).
    source = {"run": run.resolve().name, "checkpoint": path.name, "step": step, "meta": portable_meta(files.meta)}
    atomic_write_json(tmp / runs.EXPORT_CONFIG, {
        "attnlab_export": runs.EXPORT_FORMAT, "attnlab_version": __version__,
        "model_type": f"attnlab-{cfg.model.kind}", "model_kind": cfg.model.kind,
        "config": cfg_dict, "pair": pair_entry(cfg.data),
        "vocab_sizes": {"src": len(src_tok), "tgt": len(tgt_tok)}, "tokenizers": entries, "fingerprint": fp, "source": source, "engines": engines,
    })
    listed = sorted(p for p in tmp.rglob("*") if p.is_file())
    digests = {p.relative_to(tmp).as_posix(): runs.sha256_file(p) for p in listed}
    atomic_write_json(tmp / runs.MANIFEST, {"step": step, "files": digests, **fp})


_ABSOLUTE = re.compile(r"(?<![^\s(=:'\"])(?:~|[A-Za-z]:)?[\\/](?:[^\s,;()\\/]+[\\/])*([^\s,;()\\/]*)")
_MACHINE_KEYS = ("argv", "platform", "hostname", "host", "cwd", "data_path")


def portable_meta(meta: Any) -> Any:
    """A run's ``meta.json`` as an export may carry it: no command line, platform string or host name,
    and every absolute path cut to its last part (``/home/me/fra-eng.zip`` → ``fra-eng.zip``); the
    corpus's name, checksum and statistics stay."""
    if isinstance(meta, dict):
        return {k: portable_meta(v) for k, v in meta.items() if k not in _MACHINE_KEYS}
    if isinstance(meta, list):
        return [portable_meta(v) for v in meta]
    if isinstance(meta, str) and ("/" in meta or "\\" in meta):
        return _ABSOLUTE.sub(lambda m: m.group(1), meta)
    return meta


def _foreign_files(out: Path) -> list[str]:
    """The paths under ``out`` that an earlier `attnlab export` did not write (relative, sorted).

    ``out`` is an earlier export when its ``config.json`` says so and its ``manifest.json`` lists
    files: those files, the manifest and the folders holding them are its own. Anything else (a file
    the user added, a symbolic link, a run, the whole content of a folder that is no export) is not.
    """
    ours: set[str] = set()
    try:
        spec = json.loads((out / runs.EXPORT_CONFIG).read_text(encoding="utf-8"))
        listed = json.loads((out / runs.MANIFEST).read_text(encoding="utf-8"))["files"]
        if isinstance(spec, dict) and "attnlab_export" in spec and isinstance(listed, dict):
            ours = {f for f in listed if isinstance(f, str)} | {runs.MANIFEST}
    except (OSError, ValueError, UnicodeDecodeError, KeyError, TypeError):
        pass
    folders = {parent.as_posix() for f in ours for parent in Path(f).parents}
    foreign = []

    def walk(folder: Path) -> None:
        with os.scandir(folder) as it:
            for entry in it:
                rel = Path(entry.path).relative_to(out).as_posix()
                if entry.is_dir(follow_symlinks=False) and rel in folders:
                    walk(Path(entry.path))
                elif rel not in ours or not entry.is_file(follow_symlinks=False):
                    foreign.append(rel)

    try:
        walk(out)
    except OSError as e:
        raise AttnlabError(_("could not read {out} to check what --force would replace: {why}").format(out=out, why=e.strerror or e)) from None
    return sorted(foreign)


def _check_out(run: Path, out: Path, force: bool) -> None:
    """Refuse an ``out`` whose replacement would lose anything: see :func:`export_run`."""
    if out.exists() and not out.is_dir():
        raise AttnlabError(_("{out} exists and is not a folder; choose another OUT").format(out=out))
    run_r, out_r = run.resolve(), out.resolve()
    if out_r == run_r or run_r in out_r.parents:
        raise AttnlabError(_("OUT {out} lies inside RUN {run}; export to another folder").format(out=out, run=run))
    if out_r in run_r.parents:
        raise AttnlabError(_("OUT {out} contains RUN {run}; --force would delete the run with it. "
                             "Export to a new folder").format(out=out, run=run))
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not force:
        raise AttnlabError(_("{out} exists and is not empty; choose another OUT or pass --force to "
                             "replace it").format(out=out))
    foreign = _foreign_files(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise AttnlabError(_("{out} holds files `attnlab export` did not write ({shown}); --force "
                             "replaces only an earlier export. Choose a new or empty OUT, or move "
                             "those files away").format(out=out, shown=shown))


def export_run(run: str | Path, out: str | Path, which: str = "best", fmt: str = "safetensors",
               quantization: str = "float32", force: bool = False, decode: list[str] | tuple[str, ...] = ()) -> Path:
    """Export checkpoint ``which`` of ``run`` (a run folder or an exported one) into the folder ``out``.

    ``fmt="ctranslate2"`` adds ``out/ctranslate2/``, the model converted with ``quantization``.
    ``out`` must be new or empty; with ``force`` it may also be an earlier export holding nothing but
    its own files (its manifest says which), never a folder with other files or one that contains
    ``run``. ``decode``: ``decode.key=value`` settings that replace the run's as the export's defaults
    (``config.json`` and ``ctranslate2/decode.json``); another section is refused. The new folder is built beside ``out`` and swapped in at once, then the old one is
    removed; ``out`` may be the current folder. Returns the folder written (resolved). Raises
    :class:`AttnlabError` (or :class:`~attnlab.errors.CheckpointError`) with one line on any
    problem; ``out`` is then untouched.
    """
    run = Path(run)
    if fmt not in FORMATS:
        raise AttnlabError(_("--format {fmt} is unknown; choose one of: {choices}").format(fmt=fmt, choices=', '.join(FORMATS)))
    _check_out(run, Path(out), force)
    out = Path(out).resolve()  # "." has no name to build a sibling from
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as e:
        raise AttnlabError(_("could not write {out}: {why}; choose another OUT").format(out=out, why=e.strerror or e)) from None
    try:
        os.chmod(tmp, usual_mode(is_dir=True))  # mkdtemp makes 0700
        _write_tree(tmp, run, which, fmt, quantization, list(decode))
        fsync_dir(tmp)
        runs.swap_in(tmp, out)  # the checkpoint saver's swap: renameat2 exchange, else two renames
        fsync_dir(out.parent)
    except OSError as e:
        raise AttnlabError(_("could not write {out}: {why}").format(out=out, why=e.strerror or e)) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
