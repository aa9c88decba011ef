"""The corpora a run learns from: reading Tatoeba fra-eng (found by :mod:`attnlab.data.download`), a parallel
corpus of your own in any pair of languages (``data.dataset=file``, :func:`locate_parallel`), or generating the
offline ``numbers`` task (:mod:`attnlab.data.numbers`); splitting, tokenizing, encoding.

A corpus of your own (``--data``, with ``data.src_lang`` and ``data.tgt_lang``) is a TSV whose first column is
the source and second the target (a third, an attribution as in Tatoeba's files, is ignored), or two aligned
text files, one sentence a line: ``A,B`` (source, then target; or by their language suffixes, ``train.de,
train.en`` for ``de`` → ``en``), or a prefix ``P`` of ``P.<src_lang>`` and ``P.<tgt_lang>`` (JoeyNMT's way).
Its text is cut by its languages' rules (:mod:`attnlab.data.languages`: the lossless metaspace rule for space-separated
scripts, characters for Chinese and Japanese); fra-eng keeps D2L's.

``prepare(cfg)`` is the one entry point the trainer and the CLI use: it reads (or generates) the
pairs, splits them by English source, builds the tokenizers from the training split only, encodes,
truncates to ``num_steps - 1`` tokens (so ``<eos>`` fits, the notes' §4) and reports every
truncation and dropped pair in ``Prepared.stats`` — nothing is lost silently.

Where a named corpus is looked for: :func:`~attnlab.data.download.locate` (docs/explanations/data.md); a run
records its corpus by name and checksum, so run folders can move.

Neither a server nor an archive can make attnlab read without bound: a download stops past
:data:`MAX_DOWNLOAD_BYTES` or its total deadline (``$ATTNLAB_DOWNLOAD_TIMEOUT`` seconds, default
120, on top of the per-operation socket timeout), and a zip member or a plain ``fra.txt`` is refused
past :data:`MAX_MEMBER_BYTES` — declared (its size on disk) or actually read.
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

from attnlab.config import OWN_CORPUS, UNSEGMENTED, DataConfig
from attnlab.data.download import CHUNK, cache_dir, find_in, locate, mib
from attnlab.data.languages import METASPACE, SCRIPT_SAMPLE, text_rules, unspaced_share
from attnlab.data.numbers import NUMBERS_MAX, NUMBERS_SEED, numbers_pairs
from attnlab.data.pairs import CORPORA, LANGUAGE_NAMES, Corpus, corpus_of, pair_of
from attnlab.data.subword import BPETokenizer
from attnlab.data.text import preprocess
from attnlab.data.vocab import UNK, Tokenizer, Vocab
from attnlab.errors import CorpusError
from attnlab.files import (
    MAX_INPUT_BYTES,
    InputBudget,
    atomic_write_text,
    file_kind,
    read_input,
    wait_readable,
)
from attnlab.i18n import _

__all__ = ["MAX_MEMBER_BYTES", "Prepared", "Split", "check_same_corpus", "for_run", "require_same_corpus", "locate_parallel", "prepare",
           "read_pairs", "read_parallel", "split_by_source", "write_tsv"]

MAX_MEMBER_BYTES = MAX_INPUT_BYTES  # the one cap of every input (attnlab.files); its fra.txt is 11.7 MB
_SPLIT_SALT = b"attnlab-split-v1\x00"  # bump to re-draw every split (changes all test sets!)
SPLITS = ("train", "valid", "test")

# ----------------------------------------------------------------------------------------------
# Parsing


def _zip_member(zf: zipfile.ZipFile, path: Path, corpus: Corpus) -> str:
    names = zf.namelist()
    if corpus.member in names:
        return corpus.member
    for name in names:
        if name == corpus.file_name or name.endswith("/" + corpus.file_name):
            return name
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    raise CorpusError(_("{path}: the zip holds no {file} (members: {members}); use the corpus's own {zip}").format(
        path=path, file=corpus.file_name, members=shown or 'none', zip=corpus.zip_name))


def _read_member(zf: zipfile.ZipFile, member: str, path: Path) -> bytes:
    """The unpacked bytes of ``member``, refused past :data:`MAX_MEMBER_BYTES` (declared or real).

    The declared size comes from the archive and can lie, so the bytes are also counted as they
    are unpacked: a zip bomb never gets more than the cap into memory.
    """
    cap = MAX_MEMBER_BYTES
    declared = zf.getinfo(member).file_size
    fix = _("more than the {cap} a fra-eng corpus may have (D2L's fra.txt is 11.7 MB); use D2L's fra-eng.zip").format(
        cap=mib(cap))
    if declared > cap:
        raise CorpusError(_("{path}:{member} declares {declared} bytes unpacked, {fix}").format(path=path, member=member, declared=declared, fix=fix))
    refuse = _("{path}:{member} unpacks to {fix} (stopped reading)").format(path=path, member=member, fix=fix)
    out = bytearray()
    with zf.open(member) as f:
        while chunk := f.read(min(CHUNK * 16, cap + 1 - len(out))):
            out += chunk
            if len(out) > cap:
                raise CorpusError(refuse)
    return bytes(out)


def _read_text_file(f, path: Path, head: bytes, fix: str = "") -> bytes:
    """The rest of an open plain-text corpus after its first bytes ``head``, refused past
    :data:`MAX_MEMBER_BYTES` as any input is (:class:`attnlab.files.InputBudget`). ``fix``: what the refusal says."""
    fix = fix or _("D2L's fra.txt is 11.7 MB: use D2L's fra-eng.zip")
    return InputBudget(str(path), MAX_MEMBER_BYTES, fix, CorpusError).read_all(f, head)


def _read_bytes(path: Path, corpus: Corpus = CORPORA["fra-eng"]) -> tuple[bytes, str]:
    """The raw bytes of ``corpus``'s text file (``fra.txt``) and a display name (``archive.zip:member`` for a
    zip); either is refused past :data:`MAX_MEMBER_BYTES`."""
    try:
        with open(path, "rb", buffering=0) as f:  # unbuffered: read as every input is (attnlab.files)
            wait_readable(f.fileno())
            head = f.read(4)
            is_zip = head.startswith(b"PK") or path.suffix.lower() == ".zip"
            if not is_zip:
                return _read_text_file(f, path, head), str(path)
    except IsADirectoryError:
        found = find_in(path, corpus.candidates)
        if found is None:
            raise CorpusError(_("{path} is a folder without {choices}").format(path=path, choices=' or '.join(corpus.candidates))) from None
        return _read_bytes(found, corpus)
    except FileNotFoundError:
        raise CorpusError(_("{path} does not exist; pass --data a {zip} or {file}").format(
            path=path, zip=corpus.zip_name, file=corpus.file_name)) from None
    except OSError as e:
        raise CorpusError(_("{path} cannot be read: {why}").format(path=path, why=e.strerror or e)) from None
    try:
        with zipfile.ZipFile(path) as zf:
            member = _zip_member(zf, path, corpus)
            return _read_member(zf, member, path), f"{path}:{member}"
    except CorpusError:
        raise
    except Exception as e:  # BadZipFile, EOFError, zlib.error, a CRC mismatch: a corrupt or truncated archive
        raise CorpusError(
            _("{path} is not a readable zip (corrupt or truncated: {name}: {e}); delete it and "
              "download it again").format(path=path, name=type(e).__name__, e=e)
        ) from None


def read_pairs(path: str | os.PathLike[str], corpus: Corpus = CORPORA["fra-eng"]) -> list[tuple[str, str]]:
    """Raw pairs, in ``corpus``'s columns (fra-eng: ``(english, french)``), from its zip, its text file
    (``fra.txt``) or a folder holding one.

    Accepts D2L's two-column ``english<TAB>french`` lines and manythings' three-column lines (the
    third column, the attribution, is ignored). Blank lines are skipped; ``\\r\\n`` endings and a
    UTF-8 BOM are accepted. Raises :class:`CorpusError` naming the file and line for: a missing,
    corrupt or truncated file, bytes that are not UTF-8, a line with the wrong number of columns or
    an empty side, and a file with no pairs at all.
    """
    data, name = _read_bytes(Path(path), corpus)
    return _parse_pairs(data, name, _sides(corpus))


def _sides(corpus: Corpus) -> tuple[str, str]:
    """How errors call a named corpus's two columns: ``("English", "French")``."""
    return LANGUAGE_NAMES[corpus.columns[0]], LANGUAGE_NAMES[corpus.columns[1]]


def _decode(data: bytes, name: str, what: str = "fra-eng") -> str:
    """``data`` as UTF-8 text without a BOM, or one line naming the line and column of the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise CorpusError(
            _("{name} line {line}: byte 0x{data:02x} at column {col} is not UTF-8; {what} must be "
              "UTF-8 text").format(name=name, line=line, data=data[e.start], col=col, what=what)
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def _parse_pairs(data: bytes, name: str, sides: tuple[str, str] = ("English", "French")) -> list[tuple[str, str]]:
    """:func:`read_pairs` on the bytes of a ``fra.txt`` or another TSV (``name``: how errors call it; ``sides``:
    how they call its two columns)."""
    fra_eng = sides == ("English", "French")
    text = _decode(data, name, "fra-eng" if fra_eng else "a corpus")
    columns = "english, french[, attribution]" if fra_eng else "source, target[, attribution]"
    lines = "english<TAB>french" if fra_eng else "source<TAB>target"
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
                _("{name} line {lineno}: expected 2 or 3 tab-separated columns ({columns}), got "
                  "{n_cols}: {preview!r}; fix or remove that line").format(name=name, lineno=lineno, columns=columns, n_cols=len(cols), preview=preview)
            )
        en, fr = cols[0].strip(), cols[1].strip()
        if not en or not fr:
            raise CorpusError(_("{name} line {lineno}: the {side} side is empty; fix or remove that "
                                "line").format(name=name, lineno=lineno, side=sides[0] if not en else sides[1]))
        append((en, fr))
    if not pairs:
        raise CorpusError(_("{name} holds no sentence pairs (empty file); expected {lines} lines").format(name=name, lines=lines))
    return pairs


# ----------------------------------------------------------------------------------------------
# A parallel corpus of your own


def locate_parallel(spec: str, src_lang: str, tgt_lang: str) -> tuple[Path, ...]:
    """The file(s) ``--data`` names for ``data.dataset=file``: ``(tsv,)`` or ``(source file, target file)``.

    ``spec`` is a TSV file; or ``A,B``: two aligned files, the source first, unless their suffixes are the
    two languages the other way round (``train.de,train.en`` with ``src_lang=en`` gives ``train.en`` first);
    or a prefix ``P`` with ``P.<src_lang>`` and ``P.<tgt_lang>`` beside it. Raises :class:`CorpusError`
    naming what is missing and the three forms.
    """
    forms = _("pass --data a TSV file, two aligned files A,B, or a prefix P of P.{src} and P.{tgt}").format(
        src=src_lang, tgt=tgt_lang)
    path = Path(spec).expanduser()
    if path.is_file():
        return (path,)
    if path.is_dir():
        raise CorpusError(_("{spec} is a folder, not a corpus; {forms}").format(spec=spec, forms=forms))
    _refuse_special(path, forms)
    if "," in spec:
        a, b = (Path(part.strip()).expanduser() for part in spec.split(",", 1))
        for f in (a, b):
            _refuse_special(f, forms)
            if not f.is_file():
                raise CorpusError(_("{f} does not exist or is not a file; {forms}").format(f=f, forms=forms))
        if a.suffix == f".{tgt_lang}" and b.suffix == f".{src_lang}":
            a, b = b, a  # named by their languages: the source is the one in data.src_lang
        return a, b
    pair = (Path(f"{path}.{src_lang}"), Path(f"{path}.{tgt_lang}"))
    if all(f.is_file() for f in pair):
        return pair
    raise CorpusError(_("{spec} does not exist (nor {name} and {name2} beside it); {forms}").format(spec=spec, name=pair[0].name, name2=pair[1].name, forms=forms))


def _refuse_special(path: Path, forms: str) -> None:
    """A FIFO or a device (``/dev/null``) is there but holds no corpus: say what it is, not that it is missing (a
    corpus is read again by later commands and recorded by its sha256, which a stream cannot give twice)."""
    kind = file_kind(path)
    if kind is not None:
        raise CorpusError(_("{path} is {kind}, not a file; save the corpus to a file first: {forms}").format(
            path=path, kind=kind, forms=forms))


def _read_corpus_file(path: Path) -> bytes:
    """The bytes of one file of a corpus of your own, under :data:`MAX_MEMBER_BYTES`."""
    try:
        return read_input(path, cap=MAX_MEMBER_BYTES, fix=_("split it or keep fewer lines"), error=CorpusError)
    except OSError as e:
        raise CorpusError(_("{path} cannot be read: {why}").format(path=path, why=e.strerror or e)) from None


def _lines(path: Path, data: bytes) -> list[str]:
    """The lines of a one-sentence-a-line file's ``data`` (UTF-8, BOM and ``\\r\\n`` accepted)."""
    text = _decode(data, str(path), "a corpus")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_parallel(spec: str, src_lang: str, tgt_lang: str) -> tuple[list[tuple[str, str]], str, dict[str, Any]]:
    """A corpus of your own (:func:`locate_parallel`): its raw ``(source, target)`` pairs, how to call it, and
    its identity ``{name, file, sha256, langs, files}`` (``sha256``: of the TSV's bytes, or of the two files'
    sha256 in source-target order; ``files``: each file's name and sha256).

    A TSV is read as fra-eng's ``fra.txt`` is (2 or 3 columns, no empty side). Two files must have as many
    lines; a line pair where both are blank is skipped, one where a single side is blank is an error.
    Raises :class:`CorpusError` naming the file, the line and the fix.
    """
    paths = locate_parallel(spec, src_lang, tgt_lang)
    src_side, tgt_side = _("source ({lang})").format(lang=src_lang), _("target ({lang})").format(lang=tgt_lang)
    if len(paths) == 1:
        (path,) = paths
        data = _read_corpus_file(path)
        digest = hashlib.sha256(data).hexdigest()
        files = [{"file": path.name, "sha256": digest}]
        pairs = _parse_pairs(data, str(path), (src_side, tgt_side))
    else:
        files, sides = [], []
        for path in paths:
            data = _read_corpus_file(path)
            files.append({"file": path.name, "sha256": hashlib.sha256(data).hexdigest()})
            sides.append(_lines(path, data))
        src, tgt = sides
        if len(src) != len(tgt):
            raise CorpusError(_("{first} has {n_src} lines but {second} has {n_tgt}; aligned files "
                                "hold one sentence a line, the same number each: check both come from "
                                "the same corpus").format(first=paths[0], n_src=len(src), second=paths[1], n_tgt=len(tgt)))
        pairs = []
        for lineno, (s, t) in enumerate(zip(src, tgt), start=1):
            s, t = s.strip(), t.strip()
            if not s and not t:
                continue
            if not s or not t:
                empty = paths[0] if not s else paths[1]
                raise CorpusError(_("{empty} line {lineno}: the {side} side is empty while the other "
                                    "is not; fix or remove that line in both files").format(empty=empty, lineno=lineno, side=src_side if not s else tgt_side))
            pairs.append((s, t))
        if not pairs:
            raise CorpusError(_("{first} and {second} hold no sentence pairs (empty files)").format(first=paths[0], second=paths[1]))
        digest = hashlib.sha256("".join(f["sha256"] for f in files).encode()).hexdigest()
    _check_scripts(pairs, (src_lang, tgt_lang), paths)
    name = ",".join(f["file"] for f in files)
    identity = {"name": name, "file": name, "sha256": digest, "langs": [src_lang, tgt_lang], "files": files}
    return pairs, ",".join(str(p) for p in paths), identity


def _check_scripts(pairs: list[tuple[str, str]], langs: tuple[str, str], paths: tuple[Path, ...]) -> None:
    """Refuse a column whose script contradicts its declared language: mostly CJK (or Thai ...) characters under
    a space-separated language such as ``en``, or mostly none under ``zh`` or ``ja`` (judged on the first lines,
    :func:`~attnlab.data.languages.unspaced_share`). A wrong code would cut the text by the wrong rule and
    score it with the wrong BLEU tokenizer, silently."""
    shares = [unspaced_share([p[i] for p in pairs[:SCRIPT_SAMPLE]]) for i in (0, 1)]
    wrong = [(share > 0.5) != (lang in UNSEGMENTED) for share, lang in zip(shares, langs)]
    if not any(wrong):
        return
    swapped_fits = all((share > 0.5) == (lang in UNSEGMENTED) for share, lang in zip(shares, langs[::-1]))
    fix = (_("swap data.src_lang and data.tgt_lang") if swapped_fits
           else _("give that column's language code"))
    i = wrong.index(True)
    where = paths[i] if len(paths) == 2 else _("{path} column {n}").format(path=paths[0], n=i + 1)
    key = ("data.src_lang", "data.tgt_lang")[i]
    share = shares[i] if shares[i] > 0.5 else 1 - shares[i]
    raise CorpusError(_("{where} is declared {key}={lang}, but {share} of its first lines are written in {script}; "
                        "{fix}").format(where=where, key=key, lang=langs[i], share=f"{100 * share:.0f} %",
                                       script=_("a script without spaces (CJK, Thai ...)") if shares[i] > 0.5
                                       else _("a space-separated script"), fix=fix))


# ----------------------------------------------------------------------------------------------
# Splitting by source


def _bucket(source: str) -> float:
    """A uniform number in [0, 1) fixed by the (preprocessed) source text alone."""
    digest = hashlib.sha256(_SPLIT_SALT + source.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _split_of(source: str, valid_frac: float, test_frac: float) -> str:
    u = _bucket(source)
    return "test" if u < test_frac else "valid" if u < test_frac + valid_frac else "train"


def _split_key(source: str) -> str:
    """The text a source is split by: its tokens without the metaspace rule's word-start marks (``▁I ▁like .``
    is split as ``I like .``, as Moses' tokens of the same sentence are). The marks say how the words are
    joined, not which sentence it is; hashed with them, the metaspace rule re-drew every test set of a corpus
    of your own, and a small one could end up with none."""
    return " ".join(source.replace(METASPACE, " ").split()) if METASPACE in source else source


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
    sizes are the fractions in expectation, not exactly (a small corpus may have no test source). The hashed
    text is the same whichever rule marked the word boundaries (:func:`_split_key`). Indices keep the input order.
    ``preprocessed=True`` skips re-normalising sources that are already preprocessed.
    """
    if not (0 <= valid_frac and 0 <= test_frac and valid_frac + test_frac < 1):
        raise ValueError(f"valid_frac={valid_frac} and test_frac={test_frac} must be >= 0 with a sum below 1")
    memo: dict[str, str] = {}
    out: dict[str, list[int]] = {name: [] for name in SPLITS}
    for i, (src, _tgt) in enumerate(pairs):
        key = _split_key(src if preprocessed else preprocess(src))
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
    kind, the pair's record each one's language and how its text is cut, :func:`attnlab.data.pairs.pair_of`)."""
    src_texts = [s for s, _ in train]
    tgt_texts = [t for _, t in train]
    pair = pair_of(cfg)
    (src_lang, tgt_lang), (src_text, tgt_text) = pair.langs, pair.rules
    if cfg.tokenizer == BPETokenizer.kind:
        return (
            BPETokenizer.train(src_texts, cfg.bpe_vocab_size, lang=src_lang, preprocessed=True, text=src_text),
            BPETokenizer.train(tgt_texts, cfg.bpe_vocab_size, lang=tgt_lang, preprocessed=True, text=tgt_text),
        )
    return (
        Vocab.build((t.split() for t in src_texts), lang=src_lang, min_freq=cfg.min_freq, text=src_text),
        Vocab.build((t.split() for t in tgt_texts), lang=tgt_lang, min_freq=cfg.min_freq, text=tgt_text),
    )


def prepare(cfg: DataConfig, tokenizers: tuple[Tokenizer, Tokenizer] | None = None) -> Prepared:
    """Read or generate ``cfg.dataset``, split it, build or reuse tokenizers, encode and truncate.

    * a named corpus (fra-eng, cmn-eng): :func:`~attnlab.data.download.locate` + :func:`read_pairs`;
      ``numbers``: :func:`numbers_pairs` with ``cfg.numbers_size`` pairs into the target language and the fixed seed :data:`NUMBERS_SEED`;
      ``file``: :func:`read_parallel` of ``cfg.data_path``.
    * ``cfg.max_pairs > 0`` keeps the first ``max_pairs`` pairs of the file.
    * Each side is preprocessed by its language's rules (the pair's record, :mod:`attnlab.data.languages`).
    * A direction against the corpus's columns (``fr-en``, ``zh-en``) swaps every pair's sides.
    * Pairs whose source or target preprocesses to nothing are dropped and counted.
    * Tokenizers are built from the **training split only** unless ``tokenizers=(src_tok, tgt_tok)``
      is given (a trained run passes its saved ones so ids match the model).
    * Sequences longer than ``cfg.num_steps - 1`` tokens are cut to that length so ``<eos>`` fits
      in ``num_steps``; every cut is counted per split in ``stats``.

    ``stats`` (JSON-serialisable): ``dataset``, ``source``, ``tokenizer``, ``num_steps``,
    ``pairs_read``, ``pairs_used`` (after ``max_pairs``), ``dropped_empty``, ``distinct_sources``,
    ``splits[name]`` = ``{pairs, sources, truncated, truncated_src, truncated_tgt, unk_src, unk_tgt}``,
    ``vocab`` = ``{src, tgt}`` sizes and ``length_histogram`` = ``{src, tgt}`` lists where entry
    ``k`` counts sentences of ``k`` tokens (all pairs, before truncation), ``langs`` and ``text_rules`` =
    ``{src, tgt}`` (ISO 639-1 codes; d2l, moses, chars or metaspace); for fra-eng and a file also ``corpus`` =
    ``{name, file, sha256}`` (the file's name, the sha256 of its ``fra.txt`` text; a file's also ``langs``
    and ``files``): how a run folder records its corpus, by name and checksum rather than by path
    (:func:`for_run`).
    Raises :class:`CorpusError` when the corpus cannot be found or parsed.
    """
    raw, source, identity = _read_raw(cfg)
    pairs_read = len(raw)
    if cfg.max_pairs:
        raw = raw[: cfg.max_pairs]
    # The file's columns are the source and the target, except a named corpus's: its columns whatever the direction.
    pair = pair_of(cfg)
    swapped = _swapped(cfg)
    rules = [text_rules(name, lang) for name, lang in zip(pair.rules, pair.langs)]
    first, second = (rules[1], rules[0]) if swapped else rules
    preprocessed = ((first.preprocess(a), second.preprocess(b)) for a, b in raw)
    pairs = [(en, fr) for en, fr in preprocessed if en and fr]  # a side with nothing left drops the pair
    if swapped:
        pairs = [(fr, en) for en, fr in pairs]  # French sources: split, references and tokenizers follow them
    by_split = split_by_source(pairs, cfg.valid_frac, cfg.test_frac, preprocessed=True)
    if tokenizers is None:
        if not by_split["train"]:
            raise CorpusError(
                _("{source}: the training split is empty ({n_pairs} usable pairs); use more data").format(source=source, n_pairs=len(pairs))
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
        "langs": {"src": src_tok.lang, "tgt": tgt_tok.lang},
        "text_rules": {"src": getattr(src_tok, "text", "d2l"), "tgt": getattr(tgt_tok, "text", "d2l")},
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
                _("data.numbers_size={numbers_size} exceeds the {count} distinct numbers "
                  "0..{top}; lower it").format(numbers_size=cfg.numbers_size, count=NUMBERS_MAX + 1, top=NUMBERS_MAX)
            )
        lang = pair_of(cfg).tgt
        raw = numbers_pairs(cfg.numbers_size, NUMBERS_SEED, lang=lang)
        return raw, f"numbers (num2words, en-{lang}, n={cfg.numbers_size}, seed={NUMBERS_SEED})", None
    if cfg.dataset == OWN_CORPUS:
        if not cfg.data_path:
            raise CorpusError(_("data.dataset=file reads a corpus of your own: pass --data FILE (a "
                                "TSV, two aligned files A,B or a prefix)"))
        return read_parallel(cfg.data_path, *pair_of(cfg).langs)
    corpus = CORPORA[cfg.dataset]
    path = locate(corpus.name, corpus.candidates, corpus.urls, corpus.sha256, cfg.data_path)
    data, name = _read_bytes(path, corpus)
    # The text's digest, not the file's: D2L's zip and the fra.txt unpacked from it are the same corpus.
    identity = {"name": cfg.dataset, "file": path.name, "sha256": hashlib.sha256(data).hexdigest()}
    return _parse_pairs(data, name, _sides(corpus)), str(path), identity


def locate_recorded(recorded: dict[str, Any] | None) -> str | None:
    """Where a corpus of your own that a run recorded (:func:`read_parallel`'s identity: each file's name and
    sha256) is now, when it is where a resume looks without ``--data``: the current folder, then
    ``$ATTNLAB_DATA_DIR``. Every file must be there with its recorded sha256 (a same-named file with other
    bytes is another corpus). Returns the ``--data`` value (``A`` or ``A,B``) or None."""
    files = (recorded or {}).get("files")
    if not isinstance(files, list) or not files:
        return None
    folders = [Path.cwd()] + ([Path(os.environ["ATTNLAB_DATA_DIR"]).expanduser()] if os.environ.get("ATTNLAB_DATA_DIR")
                              else [])
    for folder in folders:
        paths = [folder / str(f.get("file", "")) for f in files if isinstance(f, dict)]
        if len(paths) == len(files) and all(
                p.is_file() and hashlib.sha256(p.read_bytes()).hexdigest() == f.get("sha256")
                for p, f in zip(paths, files)):
            return ",".join(str(p) for p in paths)
    return None


def _swapped(cfg: DataConfig) -> bool:
    """Whether ``cfg`` reads a named corpus against its columns (fra-eng's English, French read fr-en)."""
    corpus = corpus_of(cfg.dataset)
    return corpus is not None and not corpus.generated and pair_of(cfg).langs != corpus.columns


def write_tsv(cfg: DataConfig, path: str | os.PathLike[str]) -> int:
    """Write ``cfg.dataset``'s pairs (the first ``cfg.max_pairs`` when set) as a ``source<TAB>target`` TSV that
    ``--data`` reads back, as read or generated (not preprocessed: each side keeps its own script's spacing);
    returns the number of pairs. E.g. the numbers task into Japanese, to train on it as a corpus of your own."""
    raw = _read_raw(cfg)[0]
    if cfg.max_pairs:
        raw = raw[: cfg.max_pairs]
    if _swapped(cfg):
        raw = [(b, a) for a, b in raw]
    try:
        atomic_write_text(path, "".join(f"{a}\t{b}\n" for a, b in raw))
    except OSError as e:
        raise CorpusError(_("could not write {path}: {why}; choose another file").format(path=path, why=e.strerror or e)) from None
    return len(raw)


def for_run(cfg: DataConfig, data: str | os.PathLike[str] | None = None) -> DataConfig:
    """A trained run's data config with its corpus located now, for the commands that read a run's corpus
    again (evaluate, heads, compare, selfcheck, data --run, align).

    A run folder records its corpus by name and checksum, never by path (a path is relative to a working
    folder, or names a machine, and the run may move). So the corpus is looked for at use time: ``data``
    (``--data``), else ``$ATTNLAB_DATA_DIR``, else the cache (:func:`~attnlab.data.download.locate`). A run written by an
    older attnlab may hold a ``data.data_path``; it is tried last, only while it still exists. A corpus of
    your own (``data.dataset=file``) has no default place: ``data`` names it, and the run's recorded sha256
    tells whether it is the same (:func:`check_same_corpus`).
    """
    if data is not None and str(data) != "":
        return dataclasses.replace(cfg, data_path=str(data))
    recorded = cfg.data_path
    cfg = dataclasses.replace(cfg, data_path=None)
    corpus = corpus_of(cfg.dataset)
    if corpus is None or not corpus.zip_name or not recorded or _local_copy(corpus) is not None:
        return cfg
    return dataclasses.replace(cfg, data_path=recorded) if Path(recorded).expanduser().exists() else cfg


def _local_copy(corpus: Corpus) -> Path | None:
    """The corpus in ``$ATTNLAB_DATA_DIR`` or the cache, without downloading (None when neither has it)."""
    env = os.environ.get("ATTNLAB_DATA_DIR")
    if env:
        p = Path(env).expanduser()
        found = p if p.is_file() else find_in(p, corpus.candidates)
        if found:
            return found
    return find_in(cache_dir(), corpus.candidates)


def _other_corpus(prepared: Prepared, trained_on: Any) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(now, was)``, the identities of the corpus ``prepared`` read and of the one recorded
    (``trained_on``: a run's ``stats["corpus"]``), when their sha256 differ; None when they agree or
    either side has no record (the numbers task, a run from an older attnlab): nothing to compare."""
    now = prepared.stats.get("corpus")
    was = trained_on if isinstance(trained_on, dict) else None
    if not isinstance(now, dict) or was is None or not was.get("sha256") or was.get("sha256") == now.get("sha256"):
        return None
    return now, was


def check_same_corpus(prepared: Prepared, trained_on: Any, run: str | os.PathLike[str]) -> bool:
    """Whether ``prepared`` read the corpus ``run`` was trained on (``trained_on``: its recorded
    ``stats["corpus"]``); when not, one warning line on stderr. True when either side has no record
    (the numbers task, a run from an older attnlab): nothing to compare.

    Another corpus splits differently, so its test sentences may include the run's training ones.
    """
    other = _other_corpus(prepared, trained_on)
    if other is None:
        return True
    now, was = other
    print(_("warning: {source} (sha256 {now}...) is not the corpus {run} was trained on ({file}, sha256 {was}...); "
            "its splits differ, so scores on it are not comparable: pass --data the run's corpus").format(
        source=prepared.stats.get("source"), now=str(now.get("sha256"))[:12], run=run, file=was.get("file"),
        was=str(was.get("sha256"))[:12]), file=sys.stderr)
    return False


def require_same_corpus(prepared: Prepared, trained_on: Any, run: str | os.PathLike[str]) -> None:
    """Refuse to continue training ``run`` on another corpus than the one it recorded (the same
    comparison as :func:`check_same_corpus`): another corpus splits differently, so its training pairs
    would include the run's validation and test pairs, and ``meta.json`` would record the new corpus
    as if the run had been trained on it alone. Raises :class:`CorpusError` with one line."""
    other = _other_corpus(prepared, trained_on)
    if other is None:
        return
    now, was = other
    raise CorpusError(_("--resume: {source} (sha256 {now}...) is not the corpus {run} was trained on ({file}, "
                        "sha256 {was}...); a resumed run keeps its corpus, whose split it continues: pass --data "
                        "the run's corpus, or drop --resume and choose another --out for a run on this one").format(
        source=prepared.stats.get("source"), now=str(now.get("sha256"))[:12], run=run, file=was.get("file"),
        was=str(was.get("sha256"))[:12]))


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
    from attnlab.i18n import ljust, rjust

    st = prepared.stats
    langs = st.get("langs") or {"src": "en", "tgt": "fr"}  # recorded by runs trained before other languages
    rules = st.get("text_rules") or {"src": "d2l", "tgt": "d2l"}
    lines = [
        (_("dataset {dataset} from {source}") if st.get("source") else _("dataset {dataset}")).format(
            dataset=st["dataset"], source=st.get("source")),
        _("languages {src} → {tgt} (text rules: {src_rules}, {tgt_rules})").format(
            src=langs["src"], tgt=langs["tgt"], src_rules=rules["src"], tgt_rules=rules["tgt"]),
        _("pairs read {read:,}, used {used:,} (empty dropped {dropped:,}), distinct sources {distinct:,}").format(
            read=st["pairs_read"], used=st["pairs_used"], dropped=st.get("dropped_empty", 0),
            distinct=st["distinct_sources"]),
        _("tokenizer {tokenizer}; vocabulary: source {src:,}, target {tgt:,} (incl. <unk> <pad> <bos> <eos>)").format(
            tokenizer=st["tokenizer"], src=st["vocab"]["src"], tgt=st["vocab"]["tgt"]),
        " ".join([ljust(_("split"), 6), rjust(_("pairs"), 8), rjust(_("sources"), 8), rjust(_("truncated"), 10),
                  _("(num_steps={num_steps}, <eos> included)").format(num_steps=st["num_steps"])]),
    ]
    for name, s in st["splits"].items():
        lines.append(f"{name:<6} {s['pairs']:>8,} {s['sources']:>8,} {s['truncated']:>10,}")
    for side, label in (("src", _("source ({lang}) length (tokens, without <eos>):").format(lang=langs["src"])),
                        ("tgt", _("target ({lang}) length (tokens, without <eos>):").format(lang=langs["tgt"]))):
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
