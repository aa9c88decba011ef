"""Attention as it forms: reading the probe sentences' records of a run (``probes.jsonl``).

Training writes one record per probe sentence at step 0 and at every validation
(:func:`attnlab.training.validation.record_probes`): ``step``, ``sentence``, ``translation``,
``src_tokens``, ``tgt_tokens``, ``attention`` (``kind → (layers, T_out, keys)``, heads averaged) and, for
the notes' example, ``alignment``: the verdict of :func:`attnlab.evaluation.alignment.check_result` on it.
:func:`read_probes` is the one reader, used by the timeline figure (``attnlab attention
--timeline``) and by the web page (``GET /api/probes``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["PROBES_FILE", "read_probes"]

PROBES_FILE = "probes.jsonl"


def read_probes(run_dir: str | Path | None, max_bytes: int | None = None) -> dict[str, Any]:
    """The probe timeline: ``{"sentences": [{"sentence", "steps": [record…]}…], "truncated"}``, steps ascending.

    Each record: ``step``, ``translation``, ``src_tokens``, ``tgt_tokens`` and ``attention``
    (``kind -> (layers, T_out, keys)``, heads averaged, as ``record_probes`` writes it), and ``alignment``
    (the alignment verdict) where training recorded one. A file over
    ``max_bytes`` is read from its end: the *newest* records are kept, the line cut by the window is
    dropped and ``truncated`` is true. A torn last line (a crash mid-write) or a malformed line is
    skipped; a resumed run that re-recorded a step keeps the latest record of it. No file (or no
    ``run_dir``): no sentences.
    """
    path = Path(run_dir) / PROBES_FILE if run_dir is not None else None
    data, truncated = _read_tail(path, max_bytes) if path is not None and path.is_file() else (b"", False)
    by_sentence: dict[str, dict[int, dict[str, Any]]] = {}
    for raw in data.splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("sentence"), str)
            and isinstance(rec.get("step"), int)
            and isinstance(rec.get("attention"), dict)
        ):
            continue
        src = rec.get("src_tokens") if isinstance(rec.get("src_tokens"), list) else []
        by_sentence.setdefault(rec["sentence"], {})[rec["step"]] = {
            "step": rec["step"],
            "translation": rec.get("translation", ""),
            "src_tokens": src,
            "tgt_tokens": rec.get("tgt_tokens", []),
            "attention": {k: _unpad_probe(k, v, len(src)) for k, v in rec["attention"].items()},
            **({"alignment": rec["alignment"]} if isinstance(rec.get("alignment"), dict) else {}),
        }
    return {
        "sentences": [
            {"sentence": s, "steps": [steps[k] for k in sorted(steps)]} for s, steps in by_sentence.items()
        ],
        "truncated": truncated,
    }


def _read_tail(path: Path, max_bytes: int | None) -> tuple[bytes, bool]:
    """The file's whole lines within its last ``max_bytes`` bytes (all of it for ``None``), and
    whether anything was cut."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is None or size <= max_bytes:
            return f.read(), False
        f.seek(size - max_bytes - 1)
        data = f.read(max_bytes + 1)
    # Drop the partial line at the window's start (none when the byte before it is "\n").
    return (data[data.index(b"\n") + 1 :] if b"\n" in data else b""), True


def _unpad_probe(kind: str, maps: Any, n_src: int) -> Any:
    """Drop the batch's source-padding columns from a recorded ``(layers, T_out, keys)`` map.

    Probes recorded as one batch have keys spanning the batch's padded source (zero weight past this
    sentence's ``n_src``); decoder-only ``self`` keys are then ``padded source + <bos> y1 …``, the
    padding in the middle. Without it, column ``j`` lines up with ``src_tokens[j]`` (and then
    ``<bos> y1 …``). Records of one sentence alone have no padding: they come back unchanged.
    """
    try:
        t_out = len(maps[0])
        n_keys = len(maps[0][0])
    except (TypeError, IndexError):
        return maps
    if kind == "self":
        pad_end = n_keys - t_out  # the padded source length
        if not n_src <= pad_end <= n_keys:
            return maps
        return [[row[:n_src] + row[pad_end:] for row in layer] for layer in maps]
    if kind == "cross" and n_src <= n_keys:
        return [[row[:n_src] for row in layer] for layer in maps]
    return maps
