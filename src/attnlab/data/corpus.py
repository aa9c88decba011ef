"""The corpora a run learns from: reading Tatoeba fra-eng (found by :mod:`attnlab.data.download`) or
generating the offline ``numbers`` task (:mod:`attnlab.data.numbers`), splitting, tokenizing, encoding.

``prepare(cfg)`` is the one entry point the trainer and the CLI use: it reads (or generates) the
pairs, splits them by English source, builds the tokenizers from the training split only, encodes,
truncates to ``num_steps - 1`` tokens (so ``<eos>`` fits, the notes' §4) and reports every
truncation and dropped pair in ``Prepared.stats`` — nothing is lost silently.

Where the corpus is looked for (first hit wins), see :func:`locate_fra_eng`:
``--data PATH`` (a zip, a ``fra.txt`` or a folder holding one), ``$ATTNLAB_DATA_DIR``, the user
cache ``$XDG_CACHE_HOME/attnlab`` (default ``~/.cache/attnlab``), and finally a download of D2L's
copy into that cache, kept only if its sha256 matches. ``ATTNLAB_OFFLINE=1`` forbids the download.
A trained run records its corpus by name and checksum, not by path, and the commands that read it
again locate it the same way at use time (:func:`for_run`), so run folders can move.

Neither a server nor an archive can make attnlab read without bound: a download stops past
:data:`MAX_DOWNLOAD_BYTES` or its total deadline (``$ATTNLAB_DOWNLOAD_TIMEOUT`` seconds, default
120, on top of the per-operation socket timeout), and a zip member or a plain ``fra.txt`` is refused
past :data:`MAX_MEMBER_BYTES` — declared (its size on disk) or actually read (D2L's zip is 3.4 MB, its
``fra.txt`` 11.7 MB).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnlab.config import DataConfig
from attnlab.data.download import CANDIDATES, CHUNK, cache_dir, find_in, locate_fra_eng, mib
from attnlab.data.numbers import NUMBERS_MAX, NUMBERS_SEED, numbers_pairs
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import preprocess
from attnlab.data.vocab import UNK, Tokenizer, Vocab
from attnlab.errors import CorpusError

__all__ = ["MAX_MEMBER_BYTES", "Prepared", "Split", "check_same_corpus", "for_run", "prepare", "read_pairs",
           "split_by_source"]

MAX_MEMBER_BYTES = 128 * 2**20  # its fra.txt is 11.7 MB
_SPLIT_SALT = b"attnlab-split-v1\x00"  # bump to re-draw every split (changes all test sets!)
SPLITS = ("train", "valid", "test")

# ----------------------------------------------------------------------------------------------
# Parsing


def _zip_member(zf: zipfile.ZipFile, path: Path) -> str:
    names = zf.namelist()
    if "fra-eng/fra.txt" in names:
        return "fra-eng/fra.txt"
    for name in names:
        if name == "fra.txt" or name.endswith("/fra.txt"):
            return name
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    raise CorpusError(f"{path}: the zip holds no fra.txt (members: {shown or 'none'}); use D2L's fra-eng.zip")


def _read_member(zf: zipfile.ZipFile, member: str, path: Path) -> bytes:
    """The unpacked bytes of ``member``, refused past :data:`MAX_MEMBER_BYTES` (declared or real).

    The declared size comes from the archive and can lie, so the bytes are also counted as they
    are unpacked: a zip bomb never gets more than the cap into memory.
    """
    cap = MAX_MEMBER_BYTES
    declared = zf.getinfo(member).file_size
    fix = f"more than the {mib(cap)} a fra-eng corpus may have (D2L's fra.txt is 11.7 MB); use D2L's fra-eng.zip"
    if declared > cap:
        raise CorpusError(f"{path}:{member} declares {declared} bytes unpacked, {fix}")
    refuse = f"{path}:{member} unpacks to {fix} (stopped reading)"
    out = bytearray()
    with zf.open(member) as f:
        while chunk := f.read(min(CHUNK * 16, cap + 1 - len(out))):
            out += chunk
            if len(out) > cap:
                raise CorpusError(refuse)
    return bytes(out)


def _read_text_file(f, path: Path, head: bytes) -> bytes:
    """The rest of an open plain-text corpus after its first bytes ``head``, refused past
    :data:`MAX_MEMBER_BYTES` as a zip member is: by its size on disk first, and by the bytes actually
    read (a pipe, a device or a file that grows has no size to trust)."""
    cap = MAX_MEMBER_BYTES
    fix = f"more than the {mib(cap)} a fra-eng corpus may have (D2L's fra.txt is 11.7 MB); use D2L's fra-eng.zip"
    size = os.fstat(f.fileno()).st_size
    if size > cap:
        raise CorpusError(f"{path} holds {size} bytes, {fix}")
    out = bytearray(head)
    while chunk := f.read(min(CHUNK * 16, cap + 1 - len(out))):
        out += chunk
        if len(out) > cap:
            raise CorpusError(f"{path} holds {fix} (stopped reading)")
    return bytes(out)


def _read_bytes(path: Path) -> tuple[bytes, str]:
    """The raw bytes of ``fra.txt`` and a display name (``archive.zip:member`` for a zip); either is
    refused past :data:`MAX_MEMBER_BYTES`."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            is_zip = head.startswith(b"PK") or path.suffix.lower() == ".zip"
            if not is_zip:
                return _read_text_file(f, path, head), str(path)
    except IsADirectoryError:
        found = find_in(path)
        if found is None:
            raise CorpusError(f"{path} is a folder without {' or '.join(CANDIDATES)}") from None
        return _read_bytes(found)
    except FileNotFoundError:
        raise CorpusError(f"{path} does not exist; pass --data a fra-eng.zip or fra.txt") from None
    except OSError as e:
        raise CorpusError(f"{path} cannot be read: {e.strerror or e}") from None
    try:
        with zipfile.ZipFile(path) as zf:
            member = _zip_member(zf, path)
            return _read_member(zf, member, path), f"{path}:{member}"
    except CorpusError:
        raise
    except Exception as e:  # BadZipFile, EOFError, zlib.error, a CRC mismatch: a corrupt or truncated archive
        raise CorpusError(
            f"{path} is not a readable zip (corrupt or truncated: {type(e).__name__}: {e}); "
            "delete it and download it again"
        ) from None


def read_pairs(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Raw ``(english, french)`` pairs from a fra-eng zip, a ``fra.txt`` or a folder holding one.

    Accepts D2L's two-column ``english<TAB>french`` lines and manythings' three-column lines (the
    third column, the attribution, is ignored). Blank lines are skipped; ``\\r\\n`` endings and a
    UTF-8 BOM are accepted. Raises :class:`CorpusError` naming the file and line for: a missing,
    corrupt or truncated file, bytes that are not UTF-8, a line with the wrong number of columns or
    an empty side, and a file with no pairs at all.
    """
    data, name = _read_bytes(Path(path))
    return _parse_pairs(data, name)


def _parse_pairs(data: bytes, name: str) -> list[tuple[str, str]]:
    """:func:`read_pairs` on the bytes of a ``fra.txt`` (``name``: how errors call it)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CorpusError(
            f"{name} line {line}: byte 0x{data[e.start]:02x} at column {col} is not UTF-8; fra-eng must be UTF-8 text"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    pairs: list[tuple[str, str]] = []
    append = pairs.append
    for lineno, line in enumerate(text.split("\n"), start=1):
        if line.endswith("\r"):
            line = line[:-1]
        if not line or (line.isspace() and "\t" not in line):  # blank lines are harmless
            continue
        cols = line.split("\t")
        if not 2 <= len(cols) <= 3:
            preview = line if len(line) <= 60 else line[:57] + "..."
            raise CorpusError(
                f"{name} line {lineno}: expected 2 or 3 tab-separated columns (english, french[, attribution]), "
                f"got {len(cols)}: {preview!r}"
            )
        en, fr = cols[0].strip(), cols[1].strip()
        if not en or not fr:
            raise CorpusError(f"{name} line {lineno}: the {'English' if not en else 'French'} side is empty")
        append((en, fr))
    if not pairs:
        raise CorpusError(f"{name} holds no sentence pairs (empty file); expected english<TAB>french lines")
    return pairs


# ----------------------------------------------------------------------------------------------
# Splitting by source


def _bucket(source: str) -> float:
    """A uniform number in [0, 1) fixed by the (preprocessed) source text alone."""
    digest = hashlib.sha256(_SPLIT_SALT + source.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _split_of(source: str, valid_frac: float, test_frac: float) -> str:
    u = _bucket(source)
    return "test" if u < test_frac else "valid" if u < test_frac + valid_frac else "train"


def split_by_source(
    pairs: list[tuple[str, str]], valid_frac: float, test_frac: float, preprocessed: bool = False
) -> dict[str, list[int]]:
    """Indices of ``pairs`` per split (``train``, ``valid``, ``test``), grouped by source (English unless
    ``data.direction=fr-en`` put French first).

    Each distinct preprocessed source is hashed (sha256 of a fixed salt + the text, read
    as a number ``u`` in [0, 1)): ``u < test_frac`` → test, ``u < test_frac + valid_frac`` → valid,
    else train. So every translation of a source lands in the same split (no English sentence is
    in two splits; each test source keeps all its references), and a source's split never depends
    on the other sentences, the file order, ``max_pairs``, the Python process or the machine. Split
    sizes are the fractions in expectation, not exactly. Indices keep the input order.
    ``preprocessed=True`` skips re-normalising sources that are already preprocessed.
    """
    if not (0 <= valid_frac and 0 <= test_frac and valid_frac + test_frac < 1):
        raise ValueError(f"valid_frac={valid_frac} and test_frac={test_frac} must be >= 0 with a sum below 1")
    memo: dict[str, str] = {}
    out: dict[str, list[int]] = {name: [] for name in SPLITS}
    for i, (src, _) in enumerate(pairs):
        key = src if preprocessed else preprocess(src)
        name = memo.get(key)
        if name is None:
            name = memo[key] = _split_of(key, valid_frac, test_frac)
        out[name].append(i)
    return out


# ----------------------------------------------------------------------------------------------
# Prepared data


@dataclass
class Split:
    """One split, all lists aligned: ``src[i]``/``tgt[i]`` are the ids (no ``<eos>``, at most
    ``num_steps - 1`` tokens) of ``src_text[i]``/``tgt_text[i]`` (preprocessed, untruncated), and
    ``references[i]`` holds every distinct preprocessed French translation of ``src_text[i]`` in
    the corpus (its own ``tgt_text[i]`` included), for multi-reference BLEU."""

    src: list[list[int]] = field(default_factory=list)
    tgt: list[list[int]] = field(default_factory=list)
    src_text: list[str] = field(default_factory=list)
    tgt_text: list[str] = field(default_factory=list)
    references: list[list[str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.src)

    def unique_sources(self) -> list[int]:
        """Index of the first pair of each distinct source, in order (evaluate each source once)."""
        seen: set[str] = set()
        out = []
        for i, s in enumerate(self.src_text):
            if s not in seen:
                seen.add(s)
                out.append(i)
        return out


@dataclass
class Prepared:
    """What :func:`prepare` returns: the two tokenizers, the splits and the statistics."""

    src_tok: Tokenizer
    tgt_tok: Tokenizer
    splits: dict[str, Split]
    stats: dict[str, Any]


def _histogram(lengths: list[int]) -> list[int]:
    counts = Counter(lengths)
    return [counts.get(k, 0) for k in range(max(counts, default=-1) + 1)]


def _build_tokenizers(cfg: DataConfig, train: list[tuple[str, str]]) -> tuple[Tokenizer, Tokenizer]:
    """Source and target tokenizers learnt from the **training** pairs only (``cfg.tokenizer`` decides the
    kind, ``cfg.direction`` each one's language)."""
    src_texts = [s for s, _ in train]
    tgt_texts = [t for _, t in train]
    src_lang, tgt_lang = cfg.langs
    if cfg.tokenizer == BPETokenizer.kind:
        return (
            BPETokenizer.train(src_texts, cfg.bpe_vocab_size, lang=src_lang, preprocessed=True),
            BPETokenizer.train(tgt_texts, cfg.bpe_vocab_size, lang=tgt_lang, preprocessed=True),
        )
    return (
        Vocab.build((t.split() for t in src_texts), lang=src_lang, min_freq=cfg.min_freq),
        Vocab.build((t.split() for t in tgt_texts), lang=tgt_lang, min_freq=cfg.min_freq),
    )


def prepare(cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer] | None = None) -> Prepared:
    """Read or generate ``cfg.dataset``, split it, build or reuse tokenizers, encode and truncate.

    * ``fra-eng``: :func:`locate_fra_eng` + :func:`read_pairs`; ``numbers``: :func:`numbers_pairs`
      with ``cfg.numbers_size`` pairs and the fixed seed :data:`NUMBERS_SEED`.
    * ``cfg.max_pairs > 0`` keeps the first ``max_pairs`` pairs of the file.
    * ``cfg.direction == "fr-en"`` swaps every pair's sides: French sources, English targets.
    * Pairs whose source or target preprocesses to nothing are dropped and counted.
    * Tokenizers are built from the **training split only** unless ``tokenizers=(src_tok, tgt_tok)``
      is given (a trained run passes its saved ones so ids match the model).
    * Sequences longer than ``cfg.num_steps - 1`` tokens are cut to that length so ``<eos>`` fits
      in ``num_steps``; every cut is counted per split in ``stats``.

    ``stats`` (JSON-serialisable): ``dataset``, ``source``, ``tokenizer``, ``num_steps``,
    ``pairs_read``, ``pairs_used`` (after ``max_pairs``), ``dropped_empty``, ``distinct_sources``,
    ``splits[name]`` = ``{pairs, sources, truncated, truncated_src, truncated_tgt, unk_src, unk_tgt}``,
    ``vocab`` = ``{src, tgt}`` sizes and ``length_histogram`` = ``{src, tgt}`` lists where entry
    ``k`` counts sentences of ``k`` tokens (all pairs, before truncation); for fra-eng also ``corpus`` =
    ``{name, file, sha256}`` (the file's name, the sha256 of its ``fra.txt`` text): how a run folder
    records its corpus, by name and checksum rather than by path (:func:`for_run`).
    Raises :class:`CorpusError` when the corpus cannot be found or parsed.
    """
    raw, source, identity = _read_raw(cfg)
    pairs_read = len(raw)
    if cfg.max_pairs:
        raw = raw[: cfg.max_pairs]
    preprocessed = ((preprocess(en), preprocess(fr)) for en, fr in raw)
    pairs = [(en, fr) for en, fr in preprocessed if en and fr]  # a side with nothing left drops the pair
    if cfg.direction == "fr-en":
        pairs = [(fr, en) for en, fr in pairs]  # French sources: split, references and tokenizers follow them
    by_split = split_by_source(pairs, cfg.valid_frac, cfg.test_frac, preprocessed=True)
    if tokenizers is None:
        if not by_split["train"]:
            raise CorpusError(
                f"{source}: the training split is empty ({len(pairs)} usable pairs); use more data"
            )
        tokenizers = _build_tokenizers(cfg, [pairs[i] for i in by_split["train"]])
    src_tok, tgt_tok = tokenizers
    refs = _references(pairs)
    splits: dict[str, Split] = {}
    split_stats: dict[str, dict[str, int]] = {}
    src_lengths: list[int] = []
    tgt_lengths: list[int] = []
    for name in SPLITS:
        split, split_stats[name], src_lens, tgt_lens = _encode_split(
            [pairs[i] for i in by_split[name]], refs, src_tok, tgt_tok, cfg.num_steps - 1
        )
        splits[name] = split
        src_lengths += src_lens
        tgt_lengths += tgt_lens
    stats: dict[str, Any] = {
        "dataset": cfg.dataset,
        "source": source,
        "tokenizer": getattr(src_tok, "kind", type(src_tok).__name__),
        "num_steps": cfg.num_steps,
        "pairs_read": pairs_read,
        "pairs_used": len(pairs),
        "dropped_empty": len(raw) - len(pairs),
        "distinct_sources": len(refs),
        "splits": split_stats,
        "vocab": {"src": len(src_tok), "tgt": len(tgt_tok)},
        "length_histogram": {"src": _histogram(src_lengths), "tgt": _histogram(tgt_lengths)},
    }
    if identity is not None:
        stats["corpus"] = identity
    return Prepared(src_tok, tgt_tok, splits, stats)


def _read_raw(cfg: DataConfig) -> tuple[list[tuple[str, str]], str, dict[str, str] | None]:
    """``cfg.dataset``'s pairs as read or generated (not yet preprocessed), where they came from, and
    the corpus's identity (:func:`prepare`'s ``stats["corpus"]``; None for the generated numbers)."""
    if cfg.dataset == "numbers":
        if cfg.numbers_size > NUMBERS_MAX + 1:
            raise CorpusError(
                f"data.numbers_size={cfg.numbers_size} exceeds the {NUMBERS_MAX + 1} distinct numbers 0..{NUMBERS_MAX}; "
                "lower it"
            )
        raw = numbers_pairs(cfg.numbers_size, NUMBERS_SEED)
        return raw, f"numbers (num2words, n={cfg.numbers_size}, seed={NUMBERS_SEED})", None
    path = locate_fra_eng(cfg.data_path)
    data, name = _read_bytes(path)
    # The text's digest, not the file's: D2L's zip and the fra.txt unpacked from it are the same corpus.
    identity = {"name": cfg.dataset, "file": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    return _parse_pairs(data, name), str(path), identity


def for_run(cfg: DataConfig, data: str | os.PathLike[str] | None = None) -> DataConfig:
    """A trained run's data config with its corpus located now, for the commands that read a run's corpus
    again (evaluate, heads, compare, selfcheck, data --run, align).

    A run folder records its corpus by name and checksum, never by path (a path is relative to a working
    folder, or names a machine, and the run may move). So the corpus is looked for at use time: ``data``
    (``--data``), else ``$ATTNLAB_DATA_DIR``, else the cache (:func:`locate_fra_eng`). A run written by an
    older attnlab may hold a ``data.data_path``; it is tried last, only while it still exists.
    """
    if data is not None and str(data) != "":
        return dataclasses.replace(cfg, data_path=str(data))
    recorded = cfg.data_path
    cfg = dataclasses.replace(cfg, data_path=None)
    if cfg.dataset != "fra-eng" or not recorded or _local_copy() is not None:
        return cfg
    return dataclasses.replace(cfg, data_path=recorded) if Path(recorded).expanduser().exists() else cfg


def _local_copy() -> Path | None:
    """The corpus in ``$ATTNLAB_DATA_DIR`` or the cache, without downloading (None when neither has it)."""
    env = os.environ.get("ATTNLAB_DATA_DIR")
    if env:
        p = Path(env).expanduser()
        found = p if p.is_file() else find_in(p)
        if found:
            return found
    return find_in(cache_dir())


def check_same_corpus(prepared: Prepared, trained_on: Any, run: str | os.PathLike[str]) -> bool:
    """Whether ``prepared`` read the corpus ``run`` was trained on (``trained_on``: its recorded
    ``stats["corpus"]``); when not, one warning line on stderr. True when either side has no record
    (the numbers task, a run from an older attnlab): nothing to compare.

    Another corpus splits differently, so its test sentences may include the run's training ones.
    """
    now = prepared.stats.get("corpus")
    was = trained_on if isinstance(trained_on, dict) else None
    if not isinstance(now, dict) or was is None or not was.get("sha256") or was.get("sha256") == now.get("sha256"):
        return True
    print(f"warning: {prepared.stats.get('source')} (sha256 {str(now.get('sha256'))[:12]}...) is not the corpus {run} "
          f"was trained on ({was.get('file')}, sha256 {str(was.get('sha256'))[:12]}...); its splits differ, so "
          "scores on it are not comparable: pass --data the run's corpus", file=sys.stderr)
    return False


def _references(pairs: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Every distinct translation of each source, in corpus order (multi-reference BLEU)."""
    refs: dict[str, list[str]] = {}
    for en, fr in pairs:
        group = refs.setdefault(en, [])
        if fr not in group:
            group.append(fr)
    return refs


def _encode_split(
    pairs: list[tuple[str, str]],
    refs: dict[str, list[str]],
    src_tok: Tokenizer,
    tgt_tok: Tokenizer,
    limit: int,
) -> tuple[Split, dict[str, int], list[int], list[int]]:
    """Encode one split's preprocessed ``pairs`` and cut them to ``limit`` tokens (room for ``<eos>``,
    the notes' §4: "... <eos> <pad> ...").

    Returns the :class:`Split`, its statistics and the source and target lengths before the cut.
    """
    src_text = [en for en, _ in pairs]
    tgt_text = [fr for _, fr in pairs]
    src_ids = src_tok.encode_batch(src_text, preprocessed=True)
    tgt_ids = tgt_tok.encode_batch(tgt_text, preprocessed=True)
    src_lens = [len(x) for x in src_ids]
    tgt_lens = [len(x) for x in tgt_ids]
    cut_src = sum(n > limit for n in src_lens)
    cut_tgt = sum(n > limit for n in tgt_lens)
    if cut_src:
        src_ids = [x[:limit] for x in src_ids]
    if cut_tgt:
        tgt_ids = [x[:limit] for x in tgt_ids]
    stats = {
        "pairs": len(pairs),
        "sources": len(set(src_text)),
        "truncated": sum(s > limit or t > limit for s, t in zip(src_lens, tgt_lens)),
        "truncated_src": cut_src,
        "truncated_tgt": cut_tgt,
        "unk_src": sum(x.count(UNK) for x in src_ids),
        "unk_tgt": sum(x.count(UNK) for x in tgt_ids),
    }
    return Split(src_ids, tgt_ids, src_text, tgt_text, [refs[s] for s in src_text]), stats, src_lens, tgt_lens


def format_stats(prepared: Prepared) -> str:
    """Human-readable corpus statistics for `attnlab data` (pairs read/kept/truncated, vocabularies, lengths)."""
    from attnlab.i18n import _, ljust, rjust

    st = prepared.stats
    lines = [
        (_("dataset {dataset} from {source}") if st.get("source") else _("dataset {dataset}")).format(
            dataset=st["dataset"], source=st.get("source")),
        _("pairs read {read:,}, used {used:,} (empty dropped {dropped:,}), distinct English sources {distinct:,}").format(
            read=st["pairs_read"], used=st["pairs_used"], dropped=st.get("dropped_empty", 0),
            distinct=st["distinct_sources"]),
        _("tokenizer {tokenizer}; vocabulary: source {src:,}, target {tgt:,} (incl. <unk> <pad> <bos> <eos>)").format(
            tokenizer=st["tokenizer"], src=st["vocab"]["src"], tgt=st["vocab"]["tgt"]),
        " ".join([ljust(_("split"), 6), rjust(_("pairs"), 8), rjust(_("sources"), 8), rjust(_("truncated"), 10),
                  _("(num_steps={num_steps}, <eos> included)").format(num_steps=st["num_steps"])]),
    ]
    for name, s in st["splits"].items():
        lines.append(f"{name:<6} {s['pairs']:>8,} {s['sources']:>8,} {s['truncated']:>10,}")
    for side, label in (("src", _("English length (tokens, without <eos>):")),
                        ("tgt", _("French length (tokens, without <eos>):"))):
        hist = st["length_histogram"][side]
        total = sum(hist) or 1
        # Compact histogram in buckets of 4 tokens, bars scaled to the largest bucket.
        buckets = [sum(hist[i:i + 4]) for i in range(0, len(hist), 4)]
        top = max(buckets) or 1
        lines.append(label)
        for i, n in enumerate(buckets):
            if n:
                lines.append(f"  {4 * i:>3}-{4 * i + 3:<3} {n:>8,} {100 * n / total:5.1f}% {'#' * max(1, round(30 * n / top))}")
    return "\n".join(lines)
