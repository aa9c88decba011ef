"""`attnlab evaluate`: sacreBLEU/chrF on a split with all references, by length, and the notes' examples;
or on test files of your own (``--src F --ref R [--ref R2 ...]``, :func:`evaluate_files`).

Tatoeba gives many English sentences several French translations; the split keeps every one of
them as a reference of its source, so a correct translation that differs from the first reference
is not punished. Single-reference figures are printed beside, for comparison with papers and peers.
BLEU's tokenizer follows the target language (:func:`attnlab.evaluation.bleu.bleu_tokenize`).
"""

from __future__ import annotations

import errno
import json
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attnlab.config import AUTO_DECODE_ROWS
from attnlab.data.pairs import pair_of
from attnlab.data.text import preprocess
from attnlab.decoding.sampling import Sampler
from attnlab.errors import AttnlabError
from attnlab.evaluation.bleu import bleu_by_length, bleu_tokenize, corpus_scores, d2l_bleu, length_buckets
from attnlab.files import atomic_write_json, atomic_write_text, read_input
from attnlab.i18n import N_, _, ljust, width
from attnlab.notes import ACCEPTED, REFERENCES, SENTENCES
from attnlab.progress import Progress
from attnlab.runs import MANIFEST, WEIGHTS
from attnlab.translator import Translator, decode_batches, decode_many

#: The notes' example sentences (§3, §4, §22) and D2L's reference translations (attnlab.notes).
NOTES_EXAMPLES: tuple[tuple[str, str], ...] = tuple((s, REFERENCES[s]) for s in SENTENCES)

#: The heading of the BLEU-by-length table, by the unit of the source's length (the pair's record).
BY_LENGTH_HEADINGS = {"words": N_("BLEU by source length (words):"),
                      "characters": N_("BLEU by source length (characters):")}

#: The heading of each set of examples :func:`notes_examples` gives (its rows' ``"set"``).
EXAMPLE_HEADINGS = {"notes": N_("the notes' examples (D2L BLEU, k=2):"),
                    "numbers": N_("the numbers task's examples (D2L BLEU, k=2):"),
                    "corpus": N_("the corpus's examples (D2L BLEU, k=2):")}


def checkpoint_identity(path: str | Path | None) -> dict[str, Any] | None:
    """Which weights a checkpoint folder holds: ``{"name", "step", "weights_sha256"}`` from its manifest.

    ``eval-<split>.json`` records it so a score is only shown beside the weights it scored (the web
    page compares ``weights_sha256``). Fields the manifest lacks are omitted; None without a path.
    """
    if path is None:
        return None
    path = Path(path)
    out: dict[str, Any] = {"name": path.name}
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return out
    if isinstance(manifest, dict):
        if isinstance(manifest.get("step"), int):
            out["step"] = manifest["step"]
        files = manifest.get("files")
        digest = files.get(WEIGHTS) if isinstance(files, dict) else None
        if isinstance(digest, str):
            out["weights_sha256"] = digest
    return out


def is_right(source: str, translation: str, reference: str = "") -> bool:
    """Whether ``translation`` of one of the notes' sentences is right: one of the accepted French translations
    of an English source (:data:`attnlab.notes.ACCEPTED`, Tatoeba's own), or, for a source it has none for (a
    French → English run reads the notes' French sentences), the ``reference`` itself."""
    norm = preprocess(translation)
    return any(norm == preprocess(ok) for ok in ACCEPTED.get(source, (reference,) if reference else ()))


def notes_examples(translator: Translator, beam_size: int = 1) -> list[dict[str, Any]]:
    """Translate the pair's example sentences (:func:`attnlab.data.pairs.pair_of`) and score each with D2L's BLEU
    (k = 2).

    fra-eng reads the notes' sentences (``"set": "notes"``, either way); the numbers task its own examples
    (``"numbers"``, its vocabulary holds no other words), another named corpus its record's (``"corpus"``), each
    scored in the run's target text rules (characters for Chinese or Japanese). Empty for a corpus of your own
    (no references)."""
    pair = pair_of(translator.cfg.data)
    pairs = tuple((src, ref) for src, ref in pair.examples if ref)
    if not pairs:
        return []
    kind = "numbers" if pair.generated else "notes" if pair.notes_table is not None else "corpus"
    words = preprocess if pair.notes_table is not None else translator.tgt_tok.preprocess
    outs = translator.translate_full([src for src, _ in pairs], beam_size=beam_size)
    rows = []
    for (src, ref), out in zip(pairs, outs):
        pred = out[0].text
        rows.append({"source": src, "reference": ref, "translation": pred, "set": kind,
                     "d2l_bleu": d2l_bleu(words(pred).split(), words(ref).split(), k=2)})
    return rows


def evaluate_split(translator: Translator, split, beam_size: int = 1, batch_size: int | None = None,
                   max_sentences: int = 0, progress: bool = False, name: str = "test") -> dict[str, Any]:
    """Translate each distinct source of ``split`` once and score it against all its references.

    A split holds one row per (source, translation) pair; Tatoeba gives many sources several
    translations, so scoring rows would count those sentences several times. Buckets of BLEU by
    length use the source's word count (independent of the tokenizer). ``progress``: progress on
    stderr (:class:`attnlab.progress.Progress`: a bar on a terminal, plain lines otherwise), one tick per sentence (the same batches and hypotheses as without it).
    Raises :class:`AttnlabError` naming the split (``name``) when it holds no sentence.
    """
    rows = split.unique_sources()
    if not rows:
        raise AttnlabError(_("the {split} split of this corpus holds no sentence (too few distinct sources for "
                             "its share of them); score your own files with --src FILE --ref FILE, or train on "
                             "more sentences").format(split=name))
    if max_sentences:
        rows = rows[:max_sentences]
    n = len(rows)
    src = [split.src[i][: translator.max_src_tokens] for i in rows]
    hyps, seconds = _decode(translator, src, beam_size, batch_size, progress)
    texts = [translator.tgt_tok.decode(h[0].tokens) for h in hyps]
    refs = [[translator.tgt_tok.detokenize(r.split()) for r in split.references[i]] for i in rows]
    tok = bleu_tokenize(translator.tgt_tok.lang)
    scores = corpus_scores(texts, refs, tokenize=tok)
    unit = pair_of(translator.cfg.data).length_unit("src")
    by_len = bleu_by_length(texts, refs, [len(split.src_text[i].split()) for i in rows], length_buckets(unit),
                            tokenize=tok)
    return {"sentences": n, "beam_size": beam_size, "seconds": seconds, "sentences_per_s": n / max(seconds, 1e-9),
            **scores, "by_length": by_len, "length_unit": unit,
            "hypotheses": texts, "checkpoint": checkpoint_identity(getattr(translator, "checkpoint", None)),
            "sources": [translator.src_tok.detokenize(split.src_text[i].split()) for i in rows]}


def read_lines(path: str | Path, what: str) -> list[str]:
    """The lines of a test file (UTF-8; a BOM and ``\\r\\n`` endings accepted), one sentence each, or one
    :class:`AttnlabError` line naming the file (``what``: the option that gave it)."""
    return read_test_file(path, what)[0]


def read_test_file(path: str | Path, what: str) -> tuple[list[str], str]:
    """:func:`read_lines` and the sha256 of the bytes read, from one read (a pipe cannot be read twice). The file
    is refused past :data:`attnlab.files.MAX_INPUT_BYTES`, counted as it is read (``/dev/zero`` too)."""
    import hashlib

    fix = _("score it in parts, one {what} file each").format(what=what)
    try:
        data = read_input(path, f"{what} {path}", fix=fix)
    except OSError as e:
        raise AttnlabError(_("{what} {path} cannot be read ({why}); give a text file, one sentence a line")
                           .format(what=what, path=path, why=e.strerror or e)) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise AttnlabError(_("{what} {path} line {line}: byte 0x{byte:02x} is not UTF-8; convert the file to UTF-8 "
                             "(iconv -t UTF-8)").format(what=what, path=path, line=line, byte=data[e.start])) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return [line[:-1] if line.endswith("\r") else line for line in lines], hashlib.sha256(data).hexdigest()


def evaluate_files(translator: Translator, sources: Sequence[str], references: Sequence[Sequence[str]],
                   beam_size: int = 1, batch_size: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Translate ``sources`` (one sentence each) and score them with sacreBLEU and chrF against every stream
    of ``references`` (``references[j][i]``: the ``j``-th reference of sentence ``i``, as ``--ref`` files
    give them); the same figures, signatures and buckets as :func:`evaluate_split`.

    References are put through the run's target text rules and back (``tgt_tok.preprocess``, then
    ``detokenize``), as the split's references are, so a file holding the test split's own sentences scores
    as ``--split test`` does: a D2L run (fra-eng) is scored lowercase, the spelling it was trained on; a
    Moses or character run keeps case and script, and its references change at most in spacing
    (``reference_rules`` in the result says which). Sources are read as the run reads any input
    (:meth:`Translator.encode_source`); an empty source line gets an empty translation. Raises
    :class:`AttnlabError` when a stream's length differs from the sources' or there are none.
    """
    n = len(sources)
    if not n:
        raise AttnlabError(_("the --src file holds no sentences; give one sentence a line"))
    if not references:
        raise AttnlabError(_("no --ref file; give one or more, each one reference a line for each --src line"))
    tgt = translator.tgt_tok
    refs = [[tgt.detokenize(tgt.preprocess(stream[i]).split()) for stream in references] for i in range(n)]
    encoded = [translator.encode_source(s)[0] for s in sources]
    todo = [i for i, ids in enumerate(encoded) if ids]
    src = [encoded[i] for i in todo]
    hyps, seconds = _decode(translator, src, beam_size, batch_size, progress, empty=n - len(src))
    texts = [""] * n
    for i, h in zip(todo, hyps):
        texts[i] = tgt.decode(h[0].tokens)
    tok = bleu_tokenize(tgt.lang)
    scores = corpus_scores(texts, refs, tokenize=tok)
    lengths = [len(translator.src_tok.preprocess(s).split()) for s in sources]
    unit = pair_of(translator.cfg.data).length_unit("src")
    by_len = bleu_by_length(texts, refs, lengths, length_buckets(unit), tokenize=tok)
    return {"sentences": n, "beam_size": beam_size, "seconds": seconds, "sentences_per_s": n / max(seconds, 1e-9),
            **scores, "by_length": by_len, "length_unit": unit,
            "hypotheses": texts, "reference_rules": tgt.text,
            "checkpoint": checkpoint_identity(getattr(translator, "checkpoint", None)), "sources": list(sources)}


def report_name(what: str, beam_size: int | None = None, max_sentences: int = 0, checkpoint: str = "best",
                decode: str | None = None) -> str:
    """The name of one evaluation's report in the run folder (``eval-<name>.json``, ``hyps-<name>.txt``,
    ``src-<name>.txt``): ``what`` (a split, or :func:`file_report_name`) and each setting that is not the
    default: a beam other than the run's (``beam_size``; None = the run's), a cut (``-first<N>``), a
    checkpoint other than ``best``, other ``decode.*`` settings (``decode``, e.g. ``length_penalty0.6``).
    One name per distinct evaluation, so beam 1 and beam 4 keep a report each; the default names
    (``test``) are the ones the web page, ``compare`` and ``doctor`` read."""
    from attnlab.maps import settings_suffix

    return what + settings_suffix(beam=beam_size, first=max_sentences or None,
                                  checkpoint=None if checkpoint == "best" else checkpoint, decode=decode)


def file_report_name(src: str | Path, refs: Sequence[str | Path] = (), sha256s: Sequence[str] | None = None) -> str:
    """The name a ``--src`` file's report takes: ``file-<its name without the extension>-<hash>``, the hash 8 hex
    digits of the sha256 over the source file's and each ``--ref`` file's bytes, so two test files of one name
    (in two folders, or edited since) never share a report; never a split's name (``eval-test.json`` is the
    test split's, which the web page and ``compare`` read). ``sha256s``: the files' sha256 (hex, the source
    first) as :func:`read_test_file` gave them, so a pipe is not read twice; else the files are read (capped)."""
    import hashlib

    digest = hashlib.sha256()
    if sha256s is None:
        sha256s = [hashlib.sha256(read_input(path)).hexdigest() for path in (src, *refs)]
    for sha in sha256s:
        digest.update(bytes.fromhex(sha))
    stem = re.sub(r"[^\w.-]+", "_", Path(src).stem).strip("._") or "src"
    return f"file-{stem}-{digest.hexdigest()[:8]}"


def _decode(translator: Translator, src: list[list[int]], beam_size: int, batch_size: int,
            progress: bool, empty: int = 0) -> tuple[list, float]:
    """Every source decoded (with progress on stderr or without: the same batches and hypotheses), and the
    seconds it took. ``empty``: the sentences with no token, translated as empty without decoding, which the
    progress counts among the sentences (as the report does)."""
    t0 = time.perf_counter()
    if progress:
        hyps = decode_with_bar(translator, src, beam_size, batch_size, empty=empty)
    else:
        hyps = decode_many(translator.model, src, translator.cfg.decode, translator.device, beam_size=beam_size,
                           batch_size=batch_size, threads=translator.thread_tuner())
    return hyps, time.perf_counter() - t0


def decode_with_bar(translator: Translator, src: list[list[int]], beam_size: int | None,
                    batch_size: int | None, empty: int = 0) -> list[list[Any]]:
    """:func:`decode_many` of ``src``, one of its batches at a time, with progress on stderr (a bar on a
    terminal; off one, plain lines with no carriage return, :mod:`attnlab.progress`).

    The batches are the ones ``decode_many`` makes itself (sources sorted by length, stably, then cut
    every ``batch_size`` sentences, auto: ``AUTO_DECODE_ROWS`` decoder rows, and at ``decode.max_tokens``
    source tokens), and sampling draws from one generator throughout, so the hypotheses are the same as
    one call's; only the bar is added. ``empty``: sentences beside ``src`` that need no decoding
    (no token): counted in the bar's total and done at once, so it ends at the report's number of sentences.
    """
    dcfg = translator.cfg.decode
    beam = beam_size or dcfg.beam_size
    bs = batch_size or dcfg.batch_size or max(1, AUTO_DECODE_ROWS // beam)
    order = sorted(range(len(src)), key=lambda i: len(src[i]))
    sampler = (Sampler.seeded(dcfg.seed, translator.device, dcfg.sampling_topk, dcfg.temperature)
               if dcfg.sampling else None)
    hyps: list[list[Any]] = [[] for _ in src]
    bar = Progress(_("evaluate (beam {beam})").format(beam=beam), unit="sent", total=len(src) + empty)
    try:
        if empty:
            bar.update(empty)
        for idx in decode_batches(order, src, bs, dcfg.max_tokens):
            out = decode_many(translator.model, [src[i] for i in idx], dcfg, translator.device, beam_size=beam,
                              batch_size=len(idx), threads=translator.thread_tuner(), sampler=sampler)
            for i, h in zip(idx, out):
                hyps[i] = h
            bar.update(len(idx))
        bar.close(summary=True)  # off a terminal, a short evaluation still says how far it went
    finally:
        bar.close()
    return hyps


def check_report_folder(run_dir: Path) -> None:
    """Raise :class:`AttnlabError` at once when ``run_dir`` cannot take a report (a read-only folder, a full
    disk), so ``evaluate`` fails in one line before it decodes anything rather than after. The probe writes a
    byte to an unnamed temporary file: a full disk refuses the byte even where it still allows a new name."""
    try:
        with tempfile.TemporaryFile(dir=run_dir) as f:
            f.write(b"\n")
            f.flush()
    except OSError as e:
        fix = (_("free some space and run it again") if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT) else
               _("copy the run folder somewhere you can write (cp -r RUN DIR) and evaluate the copy"))
        raise AttnlabError(_("evaluate writes its report into the run folder, and {run} cannot be written to "
                             "({why}); {fix}").format(run=run_dir, why=e.strerror or e, fix=fix)) from None


def write_report(run_dir: Path, split_name: str, result: dict[str, Any], examples: list[dict[str, Any]],
                 name: str | None = None) -> Path:
    """Write eval-<name>.json (figures, signatures; ``name``: :func:`report_name`, default the split's) and
    the hypotheses, atomically. Raises :class:`~attnlab.errors.WriteError` (one line) when a file cannot be
    written."""
    name = name or split_name
    hyps = result.pop("hypotheses")
    sources = result.pop("sources")
    atomic_write_text(run_dir / f"hyps-{name}.txt", "\n".join(hyps) + "\n")
    atomic_write_text(run_dir / f"src-{name}.txt", "\n".join(sources) + "\n")
    report = {**result, "split": split_name, "report": name, "notes_examples": examples}
    path = run_dir / f"eval-{name}.json"
    atomic_write_json(path, report)
    result["hypotheses"], result["sources"] = hyps, sources
    return path


def format_report(result: dict[str, Any], examples: list[dict[str, Any]]) -> str:
    """The scores, signatures, BLEU by length and (when there are any) the notes' examples, as printed."""
    lines = [
        _("BLEU {bleu:.2f}  chrF {chrf:.2f}  (all references, {n} sentences, beam {beam}, {speed:.1f} sentences/s)")
        .format(bleu=result["bleu"], chrf=result["chrf"], n=result["sentences"], beam=result["beam_size"],
                speed=result["sentences_per_s"]),
        _("single-reference: BLEU {bleu:.2f}  chrF {chrf:.2f}").format(bleu=result["bleu_single"],
                                                                      chrf=result["chrf_single"]),
        _("signature: {signature}").format(signature=result["bleu_signature"]),
        " " * width(_("signature: ")) + result["chrf_signature"],
        _(BY_LENGTH_HEADINGS[result.get("length_unit", "words")]),
    ]
    for row in result["by_length"]:
        lines.append(f"  {row['bucket']:>8}  n={row['sentences']:<6d} BLEU {row['bleu']:.2f}")
    if result.get("reference_rules"):
        lines.append(_("references read through the run's target text rules ({rules}) and back, as the split's "
                       "are").format(rules=result["reference_rules"]))
    if examples:
        lines.append(_(EXAMPLE_HEADINGS[examples[0].get("set", "notes")]))
    for ex in examples:
        lines.append(f"  {ljust(ex['source'], 14)} => {ljust(ex['translation'], 24)} bleu {ex['d2l_bleu']:.3f}  "
                     + _("(ref: {reference})").format(reference=ex["reference"]))
    return "\n".join(lines)
