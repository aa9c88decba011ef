"""The runs one server serves: loaded once by name, their fixed-name files, and the caches over them.

- :func:`load_runs`: ``NAME=PATH`` or ``PATH`` → :class:`LoadedRun` (a Translator and its facts);
- :func:`read_test_scores` (``eval-test.json``) and :func:`read_probes` (``probes.jsonl``): the only
  files a request can reach, by run *name* and these fixed file names, never by a request's path;
- :class:`ResultCache` (the last translations' attention), :class:`ProbeCache` (each run's
  probe timeline as bytes, rebuilt when the file changes) and :class:`AlignmentCache` (each run's
  alignment quality against the gold), used from the model threads.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from attnlab.data.pairs import GOLD_LANGS, LANGUAGE_NAMES, gold_files, pair_of
from attnlab.data.specials import UNK
from attnlab.errors import AttnlabError
from attnlab.evaluation.evaluate import report_name
from attnlab.export.engine import load_translator
from attnlab.i18n import _
from attnlab.maps import display_labels
from attnlab.runs.probes import read_probes
from attnlab.web.deadline import check
from attnlab.web.payloads import run_facts
from attnlab.web.responses import GZIP_MIN, gzip_bytes, json_bytes

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class AttentionSource(Protocol):
    """What the server needs from a translator (the real one is :class:`attnlab.translator.Translator`)."""

    def attention(self, sentence: str, beam_size: int = 1, max_len: int | None = None) -> Any: ...


@dataclass
class LoadedRun:
    """One run served under ``name``: its Translator, its folder (for the fixed-name files) and facts."""

    name: str
    translator: AttentionSource
    run_dir: Path | None
    info: dict[str, Any] = field(default_factory=dict)
    which: str = "best"  # the checkpoint asked for (best, last, step-N): it names the test report read


# ------------------------------------------------------------------------------------------ loading


def parse_run_spec(spec: str | Path) -> tuple[str | None, Path]:
    """``NAME=PATH`` → (NAME, PATH); a bare ``PATH`` → (None, PATH) (named after its folder)."""
    s = str(spec)
    if "=" in s and not Path(s).exists():
        name, path = s.split("=", 1)
        return name.strip(), Path(path)
    return None, Path(s)


def _safe_name(raw: str) -> str:
    out = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "-" for c in raw).strip("-.")
    return (out or "run")[:64]


def load_runs(specs: Sequence[str | Path], which: str = "best", device: str = "cpu") -> dict[str, LoadedRun]:
    """Load each run folder once (``NAME=PATH`` or ``PATH``) with :func:`attnlab.export.engine.load_translator`
    (:meth:`~attnlab.translator.Translator.from_run`; an exported folder with a CTranslate2 model decodes with it).

    Raises :class:`AttnlabError` for a bad name, a duplicate name or an unusable folder.
    """
    if not specs:
        raise AttnlabError(
            _("no run given; pass one or more run folders, e.g. `attnlab serve runs/transformer`")
        )
    runs: dict[str, LoadedRun] = {}
    for spec in specs:
        name, path = parse_run_spec(spec)
        if name is None:
            base = _safe_name(path.resolve().name)
            name, k = base, 2
            while name in runs:
                name, k = f"{base}-{k}", k + 1
        elif not re.match(RUN_NAME_PATTERN, name):
            raise AttnlabError(
                _("run name {name!r} must be 1-64 letters, digits, '.', '_' or '-' (as in bahdanau=runs/b)").format(
                    name=name)
            )
        if name in runs:
            raise AttnlabError(_("run name {name!r} is given twice; name them apart, e.g. a={path} b=…").format(name=name, path=path))
        tr = load_translator(path, which=which, device=device, engine="auto")  # an export's CTranslate2 model
        facts = {**run_facts(tr, path), "engine": getattr(tr, "engine", "attnlab"), "pair": pair_facts(tr)}
        runs[name] = LoadedRun(name, tr, path, facts, which)
    return runs


def pair_facts(tr: Any) -> dict[str, Any]:
    """The run's language pair as ``/api/runs`` sends it (:func:`attnlab.data.pairs.pair_of`), so the page
    speaks each run's pair, both directions side by side on one server: ``src``/``tgt`` (ISO 639-1),
    ``src_name``/``tgt_name`` (English names, which the page translates through its catalogue), the
    ``examples`` its buttons offer (the record's sources and the run's probes that the run reads without an
    ``<unk>``: a corpus of your own may know none of the notes' sentences), the ``length_unit`` of a source,
    ``src_tokens``/``tgt_tokens`` (:func:`token_kinds`, the page's note on token labels) and ``gold``: whether
    the English–French gold alignments fit the pair (the alignment card)."""
    pair = pair_of(tr.cfg.data)
    offered = dict.fromkeys([s for s, _ in pair.examples] + list(pair.probes) + list(tr.cfg.train.probe_sentences))
    examples = [s for s in offered if (ids := tr.encode_source(s)[0]) and UNK not in ids]
    return {"src": pair.src, "tgt": pair.tgt, "src_name": LANGUAGE_NAMES.get(pair.src, pair.src),
            "tgt_name": LANGUAGE_NAMES.get(pair.tgt, pair.tgt), "examples": examples,
            "length_unit": pair.length_unit("src"), "gold": {pair.src, pair.tgt} == set(GOLD_LANGS),
            **dict(zip(("src_tokens", "tgt_tokens"), token_kinds(tr.cfg.data)))}


def token_kinds(cfg: Any) -> tuple[str, str]:
    """What one token of each side of a run with data config ``cfg`` is, so the page says what its labels are:
    ``bpe`` pieces (``data.tokenizer=bpe``, both sides), ``characters`` (the chars rule), ``metaspace`` (whole
    words and marks; one written with no space before it shows as ``·x``, :func:`attnlab.maps.display_tokens`)
    or ``words`` (D2L's or Moses' words, shown as they are: no note)."""
    if cfg.tokenizer == "bpe":
        return "bpe", "bpe"
    src, tgt = ({"chars": "characters", "metaspace": "metaspace"}.get(r, "words") for r in pair_of(cfg).rules)
    return src, tgt


# -------------------------------------------------------------------------------- fixed-name files


def read_test_scores(run_dir: Path | None, loaded: Mapping[str, Any] | None = None,
                     which: str = "best") -> dict[str, Any]:
    """BLEU/chrF from the run's ``eval-test.json`` (written by `attnlab evaluate`; ``eval-test-<which>.json``
    for a checkpoint other than ``best``, :func:`~attnlab.evaluation.evaluate.report_name`), for ``/api/runs``.

    Returns ``{"test": scores}`` only when the report records the checkpoint it scored and its
    weights' sha256 is the loaded one's (``loaded``: :func:`~attnlab.web.payloads.run_facts`); otherwise
    ``{"test": None}``, plus ``"test_other": {"checkpoint", "reason"}`` when a report exists that
    scored something else (or does not say what), so that a figure is never shown beside weights it
    did not measure.
    """
    none: dict[str, Any] = {"test": None}
    if run_dir is None:
        return none
    name = f"eval-{report_name('test', checkpoint=which)}.json"
    path = run_dir / name
    try:
        if path.stat().st_size > 4 * 2**20:
            return none
        rep = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return none
    if not isinstance(rep, dict):
        return none
    out = {
        k: rep[k]
        for k in ("bleu", "chrf", "sentences", "beam_size", "bleu_signature")
        if isinstance(rep.get(k), int | float | str)
    }
    if not out:
        return none
    scored = rep.get("checkpoint") if isinstance(rep.get("checkpoint"), dict) else {}
    scored_name = scored.get("name") if isinstance(scored.get("name"), str) else None
    scored_sha = scored.get("weights_sha256")
    loaded_sha = (loaded or {}).get("weights_sha256")
    loaded_name = (loaded or {}).get("checkpoint", "the loaded checkpoint")
    if isinstance(scored_sha, str) and scored_sha == loaded_sha:
        return {"test": {**out, "checkpoint": scored_name}}
    rerun = "attnlab evaluate RUN --split test" + ("" if which == "best" else f" --checkpoint {which}")
    if not isinstance(scored_sha, str):
        reason = (
            f"{name} does not record which checkpoint it scored; "
            f"re-run `{rerun}` to score the loaded one"
        )
    else:
        reason = (
            f"{name} scored {scored_name or 'another checkpoint'}, not the loaded {loaded_name}; "
            f"re-run `{rerun}` to score it"
        )
    return {
        "test": None,
        "test_other": {"checkpoint": scored_name, "bleu": out.get("bleu"), "reason": reason},
    }


# ------------------------------------------------------------------------------------------ caches


class ResultCache:
    """The last translations' attention results (LRU, at most ``max_bytes`` of maps), so that a page
    looking at another layer, head or kind of the same sentence does not run the model again."""

    def __init__(self, max_bytes: int = 64 * 2**20) -> None:
        self.max_bytes, self.used = max_bytes, 0
        self._items: OrderedDict[tuple, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def size(res: Any) -> int:
        maps = getattr(res, "attention", None) or {}
        return sum(int(w.numel()) * w.element_size() for w in maps.values() if hasattr(w, "numel")) + 1024

    def get(self, key: tuple) -> Any:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: tuple, res: Any) -> None:
        n = self.size(res)
        if n > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (res, n)
            self.used += n
            while self.used > self.max_bytes and self._items:
                _, (_, m) = self._items.popitem(last=False)
                self.used -= m


class ProbeCache:
    """Each run's ``/api/probes`` answer as bytes (and gzipped), rebuilt only when ``probes.jsonl``
    changes (its mtime, size or inode); its ``token_labels`` are :func:`attnlab.maps.display_labels`' of
    every recorded token, as ``/api/translate`` sends them."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: dict[str, list[Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, r: LoadedRun, gzip_ok: bool) -> tuple[bytes, bool]:
        """The body for run ``r`` and whether it is gzipped; runs in a worker thread."""
        with self._guard:
            lock = self._locks.setdefault(r.name, threading.Lock())
        with lock:  # two requests for one run: the second waits for the first's build, then shares it
            key = _file_key(r.run_dir / "probes.jsonl" if r.run_dir is not None else None)
            item = self._items.get(r.name)
            if item is None or item[0] != key:
                data = read_probes(r.run_dir, self.max_bytes)  # at most max_bytes of the file: a bounded parse
                check()  # a request past its deadline stops here (web/deadline.py)
                steps = [rec for sent in data["sentences"] for rec in sent["steps"]]
                labels = display_labels([rec["src_tokens"] for rec in steps] + [rec["tgt_tokens"] for rec in steps])
                payload = {"run": r.name, "model_kind": r.info.get("model_kind"), **data, "token_labels": labels}
                item = [key, json_bytes(payload), None]
                self._items[r.name] = item
            if gzip_ok and len(item[1]) >= GZIP_MIN:
                if item[2] is None:
                    item[2] = gzip_bytes(item[1])
                return item[2], True
            return item[1], False


class AlignmentCache:
    """``/api/alignment`` answers (JSON-ready dicts), so that the force-decoding of the gold sentences
    runs once per run, gold files (their mtime, size and inode), sentences and link method; at most
    ``max_items`` kept, the least recently used dropped first."""

    def __init__(self, max_items: int = 64) -> None:
        self.max_items = max_items
        self._items: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._locks: dict[tuple, threading.Lock] = {}
        self._guard = threading.Lock()

    @staticmethod
    def key(run: str, folder: Path, split: str, sentences: int, method: str) -> tuple:
        """The key of one answer: a gold file that changes (or appears) makes a new one."""
        files = tuple(_file_key(folder / name) for name in gold_files(split))
        return (run, str(folder), split, files, sentences, method)

    def get(self, key: tuple) -> dict[str, Any] | None:
        with self._guard:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def build(self, key: tuple, make: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], bool]:
        """The answer for ``key`` and whether it was cached; ``make()`` builds it (in a model thread).
        Two requests for one key: the second waits for the first's build, then shares it."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            item = self.get(key)
            if item is not None:
                return item, True
            item = make()
            with self._guard:
                self._items[key] = item
                while len(self._items) > self.max_items:
                    old, _ = self._items.popitem(last=False)
                    self._locks.pop(old, None)
            return item, False


def _file_key(path: Path | None) -> tuple[int, int, int] | None:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino) if st is not None else None
