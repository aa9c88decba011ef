"""`attnlab translate` and `attnlab evaluate`: a run's model decodes sentences, or a split it is scored on."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from attnlab.cli.common import (
    add_decode_args,
    add_device_arg,
    add_run_data_arg,
    add_verbosity_args,
    apply_decode_settings,
    load_translator,
    show_progress,
    split_settings,
)
from attnlab.errors import AttnlabError
from attnlab.export import ENGINES
from attnlab.files import MAX_LINE_BYTES, InputBudget, wait_readable
from attnlab.i18n import N_, _


def _check_translate_paths(args) -> None:
    """``--file`` is a readable file and ``--output`` is not the input (by name, link or stdin) nor a folder."""
    if args.file is not None:
        if not os.path.exists(args.file):
            raise AttnlabError(_("--file {path} does not exist; give a text file with one sentence per line")
                               .format(path=args.file))
        if os.path.isdir(args.file):
            raise AttnlabError(_("--file {path} is a folder; give a text file with one sentence per line")
                               .format(path=args.file))
    if not args.output:
        return
    if os.path.isdir(args.output):
        raise AttnlabError(_("--output {path} is a folder; give the file to write the translations to")
                           .format(path=args.output))
    if not os.path.exists(args.output):
        return
    out = os.stat(args.output)
    if not stat.S_ISREG(out.st_mode):
        return  # a terminal, a pipe, /dev/null: writing there destroys no input (and stdin may share the terminal)
    if args.file is not None:
        same = os.path.samestat(os.stat(args.file), out)
    elif not args.text:
        try:
            same = os.path.samestat(os.fstat(sys.stdin.fileno()), out)
        except (OSError, ValueError, io.UnsupportedOperation):  # no real stdin (a test's, a closed one)
            same = False
    else:
        same = False
    if same:
        raise AttnlabError(_("--output {path} is the input file; writing it would destroy the sentences before "
                             "they are read. Choose another --output").format(path=args.output))


class _Output:
    """``--output``: translations go to a temporary file beside the target, renamed over it by
    :meth:`commit` only when every line is written, so a failure or Ctrl-C leaves the previous file
    whole and no temporary file behind. A symbolic link to a file is written through (the link stays).
    Anything that is not a regular file (``/dev/null``, a pipe, a FIFO) and a path naming a descriptor
    already open (``/dev/stdout``, ``/dev/fd/N``) is written to directly: it has no content to keep,
    and renaming over it would replace what the shell opened rather than write to it."""

    def __init__(self, path: str) -> None:
        import tempfile

        from attnlab.files import usual_mode

        self.path, self.tmp = path, None
        try:
            fd = _named_descriptor(path)
            if fd is not None:  # written through a copy of it: no reopening, which would truncate a `>>` file
                self.file = os.fdopen(os.dup(fd), "w", encoding="utf-8")
                return
            mode = os.stat(path).st_mode if os.path.exists(path) else None
            if mode is not None and not stat.S_ISREG(mode):
                self.file = open(path, "w", encoding="utf-8")  # noqa: SIM115
                return
            self.target = os.path.realpath(path)
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self.target)}.", suffix=".tmp",
                                            dir=os.path.dirname(self.target))
            os.fchmod(fd, usual_mode())  # mkstemp makes 0600
            self.file = os.fdopen(fd, "w", encoding="utf-8")
        except OSError as e:
            self.abandon()
            raise AttnlabError(_("cannot write --output {path}: {why}; choose a file in a folder you can write "
                                 "to").format(path=path, why=e.strerror or e)) from None

    def commit(self) -> None:
        from attnlab.files import fsync_dir

        self.file.flush()
        if self.tmp is not None:
            os.fsync(self.file.fileno())
        self.file.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.target)
            self.tmp = None
            fsync_dir(os.path.dirname(self.target))

    def abandon(self) -> None:
        """Close and remove the temporary file; never raises (it runs while another error is on its way: a
        full disk fails the close's flush again, and that must not hide the error nor keep the file)."""
        file = getattr(self, "file", None)
        if file is not None:
            try:
                file.close()
            except OSError:
                with contextlib.suppress(OSError, ValueError):
                    file.close()  # the buffer could not be flushed: close the descriptor all the same
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            self.tmp = None


def _named_descriptor(path: str) -> int | None:
    """The descriptor this process already holds that ``path`` names (``/dev/stdout``, ``/dev/fd/1``,
    ``/proc/self/fd/1``), else None: it is written as it is, whatever it is open on."""
    named = {"/dev/stdin": 0, "/dev/stdout": 1, "/dev/stderr": 2}
    if path in named:
        return named[path]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if path.startswith(prefix) and path[len(prefix):].isdigit():
            return int(path[len(prefix):])
    return None


def _check_counts(args, *names: str) -> None:
    """``--beam`` / ``--nbest`` given as 0 or less are mistakes (0 once meant the run's default silently)."""
    why = {"beam": N_("--beam 1 = greedy"), "nbest": N_("--nbest 1 = the best translation alone")}
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise AttnlabError(_("--{name} {value} must be at least 1 ({why}; leave --{name} out for the default)")
                               .format(name=name, value=value, why=_(why[name])))


def _decode_settings(args, tr, settings: list[str]) -> tuple[int, int]:
    """Apply the decoding options and ``decode.key=value`` settings to ``tr`` (cli/common.py), and return the
    beam and n-best to decode with, checked against each other and the model: a beam wider than the target
    vocabulary has nothing to fill it with, and n-best lists come out of the beam (unless sampled)."""
    beam = args.beam or tr.cfg.decode.beam_size
    said = (f"--beam {beam}" if args.beam
            else _("the run's beam size (decode.beam_size={beam})").format(beam=beam))
    nbest = getattr(args, "nbest", None)
    searched = not args.sampling and not any(
        item.split("=", 1)[0].strip() in ("decode.beam_size", "decode.sampling") for item in settings)
    if nbest and nbest > beam and searched:
        raise AttnlabError(_("--nbest {nbest} is larger than {said}; n-best lists come out of the beam: raise "
                             "--beam to at least {nbest} or lower --nbest").format(nbest=nbest, said=said))
    dcfg = apply_decode_settings(tr, args, settings)
    beam = dcfg.beam_size
    vocab = len(tr.tgt_tok)
    if beam > vocab:
        said = f"--beam {beam}" if args.beam else _("decode.beam_size={beam}").format(beam=beam)
        raise AttnlabError(_("{said} is larger than the target vocabulary ({vocab} tokens); a beam holds at most "
                             "one hypothesis per token: use --beam {vocab} or less").format(said=said, vocab=vocab))
    return beam, dcfg.nbest


def cmd_translate(args) -> int:
    args.settings, args.text = split_settings(args.text)  # decode.beam_size=4 is a setting, not a sentence
    _check_counts(args, "beam", "nbest")
    _check_translate_paths(args)  # before the model loads: a wrong path fails at once
    try:
        stream = open(args.file, "rb") if args.file else None  # noqa: SIM115
    except OSError as e:
        raise AttnlabError(_("cannot read --file {path}: {why}").format(path=args.file, why=e.strerror or e)) from None
    try:
        budget = _input_budget(args, stream)
        return _translate(args, stream, budget)
    finally:
        if stream is not None:
            stream.close()


def _input_budget(args, stream) -> InputBudget:
    """The cap of what ``translate`` reads (:data:`attnlab.files.MAX_INPUT_BYTES`, as for every input), checked now
    against a regular file's size so that a file too large is refused before the model loads."""
    name = _("--file {path}").format(path=args.file) if stream is not None else _("stdin")
    budget = InputBudget(name, fix=_("translate it in parts (split -l)"))
    if not args.text:
        try:
            budget.check_size((stream if stream is not None else _stdin_bytes()).fileno())
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            pass  # no descriptor (a test's stdin): counted as it is read
    return budget


#: most lines translated together: bounded memory, sorted-by-length batches inside each chunk
CHUNK_LINES = 2000


def _count_lines(path: str) -> int | None:
    """Lines of a file as :func:`read_chunks` counts them (a last line without its newline too); None for
    a pipe or device (``--file /dev/stdin``), which counting would consume."""
    if not os.path.isfile(path):
        return None
    total, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            total, last = total + block.count(b"\n"), block[-1:]
    return total + (last != b"\n")


def _stdin_bytes():
    """stdin as a binary stream (a test may have replaced ``sys.stdin`` by a text stream without one)."""
    return getattr(sys.stdin, "buffer", sys.stdin)


def read_chunks(source, limit: int = CHUNK_LINES, budget: InputBudget | None = None,
                line_cap: int | None = None, on_cut: Callable[[int], None] | None = None) -> Iterator[list[str]]:
    """The lines of ``source`` (a binary stream: a file, a pipe, a terminal) in chunks of at most
    ``limit``, each chunk every line that has *already arrived*: a chunk is handed on as soon as one
    line is complete and nothing more is waiting, so a program writing a line into the pipe reads
    its translation before it writes the next. Only ``\\n`` ends a line (a stray ``\\r`` inside a
    line must not split it); a final ``\\r`` is stripped, so ``\\r\\n`` files read the same.
    Bytes that are not UTF-8 become U+FFFD.

    Reading is linear in the input and holds at most ``line_cap`` bytes of a line (characters, for a stream
    without a descriptor): the rest of a longer line is read and dropped, and ``on_cut`` is called with its
    line number. ``budget`` counts every byte read and stops the stream past its cap (:mod:`attnlab.files`), so a
    line that never ends (``/dev/zero``) is refused rather than read for ever. ``line_cap``: by default
    :data:`attnlab.files.MAX_LINE_BYTES`."""
    budget = budget or InputBudget(_("the input"))
    line_cap = MAX_LINE_BYTES if line_cap is None else line_cap
    try:
        fd = source.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None:  # no file descriptor to ask what is waiting: read it as lines
        yield from _read_stream_lines(source, limit, budget, line_cap, on_cut)
        return
    part, cut, done = bytearray(), False, 0  # the line being read, whether it was cut, lines completed

    def add(piece: bytes) -> None:
        nonlocal cut
        if cut:
            return  # the rest of a cut line: read, not kept
        room = line_cap - len(part)
        if len(piece) > room:
            part.extend(_whole_characters(piece[:room]))
            cut = True
            if on_cut is not None:
                on_cut(done + 1)
        else:
            part.extend(piece)

    def finish(lines: list[bytes]) -> None:
        nonlocal cut, done
        lines.append(bytes(part))
        part.clear()
        cut, done = False, done + 1

    eof = False
    while not eof:
        lines: list[bytes] = []
        while not eof and len(lines) < limit and (not lines or _waiting(fd)):
            if not lines:
                wait_readable(fd)  # blocks only while no complete line is at hand, still hearing signals
            data = os.read(fd, 1 << 16)
            if not data:
                eof = True
                if part or cut:
                    finish(lines)  # a last line without its newline
                break
            budget.count(len(data))
            first, *rest = data.split(b"\n")  # only the new bytes are scanned: linear in the input
            add(first)
            for piece in rest:
                finish(lines)
                add(piece)
        for start in range(0, len(lines), limit):
            yield [_text(x) for x in lines[start:start + limit]]


def _read_stream_lines(source, limit: int, budget: InputBudget, line_cap: int,
                       on_cut: Callable[[int], None] | None) -> Iterator[list[str]]:
    """:func:`read_chunks` for a stream without a descriptor (text or bytes): ``readline`` with a size, so a
    line is never held past ``line_cap`` (+1 for its newline)."""
    chunk: list[str] = []
    lineno = 0
    while line := source.readline(line_cap + 1):
        budget.count(len(line))
        lineno += 1
        nl = "\n" if isinstance(line, str) else b"\n"
        ended = line.endswith(nl)
        if len(line) - ended > line_cap:
            line = line[:line_cap]
            if on_cut is not None:
                on_cut(lineno)
            while not ended and (rest := source.readline(line_cap + 1)):  # drop the rest of the line
                budget.count(len(rest))
                ended = rest.endswith(nl)
        chunk.append(_text(line))
        if len(chunk) >= limit:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _whole_characters(data: bytes) -> bytes:
    """``data`` without a UTF-8 character its end cuts in two (a cut line must not end in U+FFFD)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the lead byte (or ASCII) of the last character
            size = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if size > back else data
    return data


def _waiting(fd: int) -> bool:
    """Whether more input can be read from ``fd`` at once (a regular file always can)."""
    import select

    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _text(line: bytes | str) -> str:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    return line.rstrip("\n").rstrip("\r")


#: ``--format``: plain (the best translation a line; n-best joined by ``|||``), or one scored line a hypothesis
FORMATS = ("plain", "tsv", "jsonl")


def _scored_lines(fmt: str, line: int, hyps) -> str:
    """One sentence's hypotheses, one line each, as fairseq's ``H-`` lines or CTranslate2's
    ``return_scores`` give them: the input line (from 1), the rank (from 1), the score the list is ranked
    by (log-probability under GNMT's length penalty), the output length in tokens (``<eos>`` not counted)
    and the text; jsonl adds the plain log-probability, whether ``<eos>`` ended it, and the tokens."""
    import json

    out = []
    for rank, t in enumerate(hyps, 1):
        if fmt == "tsv":
            text = t.text.replace("\t", " ")
            out.append(f"{line}\t{rank}\t{t.normalized_score:.4f}\t{len(t.tokens)}\t{text}\n")
        else:
            out.append(json.dumps({"line": line, **t.record(rank)}, ensure_ascii=False) + "\n")
    return "".join(out)


def _translate(args, stream, budget: InputBudget) -> int:
    tr = load_translator(args)
    beam, nbest = _decode_settings(args, tr, args.settings)
    output = _Output(args.output) if args.output else None
    out = output.file if output else sys.stdout  # stdout is streamed: each chunk as it is translated
    emitted = [0]  # lines handled so far, for warnings that name the input line

    def emit(lines: list[str]) -> None:
        results = tr.translate_full(lines, beam_size=beam, nbest=nbest)
        for n, res in enumerate(results):
            if res and getattr(res[0], "truncated", False):
                print(_("warning: input line {line} is longer than {limit} tokens; only its beginning was "
                        "translated").format(line=emitted[0] + n + 1, limit=tr.max_src_tokens), file=sys.stderr)
        emitted[0] += len(lines)
        try:
            for n, res in enumerate(results):
                out.write(_scored_lines(args.format, emitted[0] - len(lines) + n + 1, res) if args.format != "plain"
                          else (" ||| ".join(t.text for t in res) + "\n"))
            out.flush()
        except OSError as e:
            if output is None or isinstance(e, BrokenPipeError):
                raise  # stdout: a closed pipe ends the command quietly (main)
            raise AttnlabError(_("could not write --output {path}: {why}; the previous file is unchanged")
                               .format(path=args.output, why=e.strerror or e)) from None

    bar = None
    try:
        if args.text:
            emit(list(args.text))
        else:
            if stream is not None and show_progress(args):  # a file: its lines counted, progress on stderr
                from attnlab.progress import Progress

                bar = Progress(_("translate"), unit="line", total=_count_lines(args.file))
            source = stream if stream is not None else _stdin_bytes()
            cut: list[int] = []

            def said_once(line: int) -> None:  # a warning per cut line would flood stderr for a long file
                if not cut:
                    print(_("warning: input line {line} is longer than {cap} bytes; only its first {cap} bytes were "
                            "read (any later line that long is cut the same way)").format(line=line, cap=MAX_LINE_BYTES),
                          file=sys.stderr)
                cut.append(line)

            for chunk in read_chunks(source, budget=budget, on_cut=said_once):
                emit(chunk)
                if bar is not None:
                    bar.update(len(chunk))
            if bar is not None:
                bar.close(summary=True)  # off a terminal, a short file still says how far it went
        if output is not None:
            try:
                output.commit()
            except OSError as e:
                raise AttnlabError(_("could not write --output {path}: {why}; the previous file is unchanged")
                                   .format(path=args.output, why=e.strerror or e)) from None
    finally:
        if bar is not None:
            bar.close()
        if output is not None:
            output.abandon()
    return 0


# ------------------------------------------------------------------------------------------ evaluate

def cmd_evaluate(args) -> int:
    from attnlab.evaluation.evaluate import (
        check_report_folder,
        evaluate_split,
        format_report,
        notes_examples,
        report_name,
        write_report,
    )

    _check_counts(args, "beam")
    _check_settings(args)
    if args.src is not None or args.ref:
        return _evaluate_files(args)
    args.split = args.split or "test"
    _check_output(args.output, [])
    tr = load_translator(args)
    tr.check_translates()  # a fill model is refused before the corpus is read
    check_report_folder(Path(args.run))  # a read-only or full run folder fails now, not after the decoding
    run_decode = tr.cfg.decode
    _decode_settings(args, tr, args.overrides)
    prepared = tr.prepare_corpus(args.data)  # --data, else $ATTNLAB_DATA_DIR, else the cache
    if args.split not in prepared.splits:
        raise AttnlabError(_("--split {split} is unknown; choose one of: {choices}")
                           .format(split=args.split, choices=", ".join(prepared.splits)))
    beam = tr.cfg.decode.beam_size
    result = evaluate_split(tr, prepared.splits[args.split], beam_size=beam, max_sentences=args.max_sentences,
                            progress=show_progress(args), name=args.split)
    examples = notes_examples(tr, beam_size=beam)
    name = report_name(args.split, max_sentences=args.max_sentences, checkpoint=args.checkpoint,
                       **_report_settings(run_decode, tr.cfg.decode))
    print(format_report(result, examples))  # first: the scores are seen even when the disk fills now
    _write_hypotheses(args.output, result["hypotheses"])
    path = write_report(Path(args.run), args.split, result, examples, name)
    for written in (path, args.output):
        if written:
            print(_("wrote {path}").format(path=written))
    return 0


def _evaluate_files(args) -> int:
    """`evaluate RUN --src F --ref R [--ref R2 ...]`: your own test files, scored as a split is."""
    from attnlab.evaluation.evaluate import (
        check_report_folder,
        evaluate_files,
        file_report_name,
        format_report,
        read_test_file,
        report_name,
        write_report,
    )

    if args.src is None or not args.ref:
        raise AttnlabError(_("--src and --ref go together: give the source file and one or more reference files, "
                             "one sentence a line"))
    if args.split is not None or args.data is not None or args.max_sentences:
        raise AttnlabError(_("--src/--ref score your own files; --split, --data and --max-sentences choose a split "
                             "of the run's corpus: drop one or the other"))
    sources, src_sha = read_test_file(args.src, "--src")  # read once: --src or --ref may be a pipe
    refs, ref_shas = [], []
    for r in args.ref:
        lines, sha = read_test_file(r, "--ref")
        refs.append(lines)
        ref_shas.append(sha)
    for path, stream in zip(args.ref, refs):
        if len(stream) != len(sources):
            raise AttnlabError(_("--ref {ref} has {n_ref} lines but --src {src} has {n_src}; give one reference "
                                 "line for each source line").format(ref=path, n_ref=len(stream), src=args.src,
                                                                     n_src=len(sources)))
    _check_output(args.output, [args.src, *args.ref])
    tr = load_translator(args)
    tr.check_translates()
    check_report_folder(Path(args.run))  # a read-only or full run folder fails now, not after the decoding
    run_decode = tr.cfg.decode
    _decode_settings(args, tr, args.overrides)
    beam = tr.cfg.decode.beam_size
    result = evaluate_files(tr, sources, refs, beam_size=beam, progress=show_progress(args))
    result["files"] = {"src": _file_fact(args.src, src_sha),  # names, not paths
                       "ref": [_file_fact(r, sha) for r, sha in zip(args.ref, ref_shas)]}
    what = file_report_name(args.src, args.ref, [src_sha, *ref_shas])  # same-named files never collide
    name = report_name(what, checkpoint=args.checkpoint, **_report_settings(run_decode, tr.cfg.decode))
    print(format_report(result, []))  # first: the scores are seen even when the disk fills now
    _write_hypotheses(args.output, result["hypotheses"])
    path = write_report(Path(args.run), what, result, [], name)
    for written in (path, args.output):
        if written:
            print(_("wrote {path}").format(path=written))
    return 0


def _report_settings(run, now) -> dict:
    """What an evaluation's report name says of its decoding (:func:`~attnlab.evaluation.evaluate.report_name`):
    a beam other than the run's, and every other ``decode.*`` setting that changes the hypotheses and differs
    from the run's, so a report of other settings never replaces the default one that ``compare`` reads."""
    import dataclasses

    same = ("beam_size", "nbest", "batch_size", "max_tokens")  # the beam is named apart; batching changes nothing
    changed = [f"{f.name}{getattr(now, f.name)}" for f in dataclasses.fields(now)
               if f.name not in same and getattr(now, f.name) != getattr(run, f.name)]
    return {"beam_size": None if now.beam_size == run.beam_size else now.beam_size,
            "decode": "-".join(changed) or None}


def _check_settings(args) -> None:
    """``evaluate RUN [decode.key=value ...]``: every trailing word must be such a setting."""
    args.overrides, rest = split_settings(args.overrides)
    if rest:
        raise AttnlabError(_("{word!r} is not a setting; after RUN, evaluate takes decode.key=value settings "
                             "(e.g. decode.beam_size=4)").format(word=rest[0]))


def _check_output(output: str | None, inputs: list[str]) -> None:
    """``evaluate --output F``, checked before anything is decoded: not a folder, and none of the files read."""
    if output is None:
        return
    if os.path.isdir(output):
        raise AttnlabError(_("--output {path} is a folder; give the file to write the hypotheses to")
                           .format(path=output))
    if os.path.exists(output) and any(os.path.exists(f) and os.path.samefile(f, output) for f in inputs):
        raise AttnlabError(_("--output {path} is one of the files read; writing it would destroy them. Choose "
                             "another --output").format(path=output))


def _write_hypotheses(output: str | None, hypotheses: list[str]) -> None:
    """``--output``: the hypotheses one a line, in the order of the sources, written atomically (a file
    sacreBLEU or COMET reads beside the report)."""
    if output is None:
        return
    from attnlab.files import atomic_write_text

    try:
        atomic_write_text(output, "".join(h.replace("\n", " ") + "\n" for h in hypotheses))
    except OSError as e:
        raise AttnlabError(_("could not write --output {path}: {why}; choose a file in a folder you can write to")
                           .format(path=output, why=e.strerror or e)) from None


def _file_fact(path: str, sha256: str) -> dict[str, str]:
    """A test file as a report records it: its name and sha256 (a path would name this machine's folders)."""
    return {"file": Path(path).name, "sha256": sha256}


def register(sub) -> None:
    """`translate` and `evaluate`: both read a run, decode with a beam, and report on stderr."""
    for name, func, helptext in (("translate", cmd_translate, N_("translate sentences with a trained run")),
                                 ("evaluate", cmd_evaluate, N_("BLEU/chrF (sacreBLEU, all references) on a split"))):
        helptext = _(helptext)
        q = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        q.add_argument("run", metavar="RUN", help=_("run folder (the --out of `attnlab train`)"))
        q.add_argument("--checkpoint", default="best", help=_("best, last, step-N or averaged (`attnlab average`)"))
        add_decode_args(q, nbest=name == "translate")
        add_device_arg(q)
        if name == "translate":
            q.add_argument("text", nargs="*", default=[], metavar="TEXT",
                           help=_("sentences to translate (default: lines from --file, else from stdin); a "
                                  "decode.key=value among them is a setting, e.g. decode.length_penalty=0.6"))
            q.add_argument("--file", metavar="FILE",
                           help=_("read sentences from this file, one per line (default: none: TEXT, "
                                  "else stdin)"))
            q.add_argument("--output", metavar="FILE", help=_("write translations to this file "
                                                              "(default: stdout)"))
            q.add_argument("--format", choices=FORMATS, default="plain",
                           help=_("plain: the translation (n-best: joined by ' ||| '); tsv: one hypothesis a line, "
                                  "line<TAB>rank<TAB>score<TAB>length<TAB>text; jsonl: the same with the "
                                  "log-probability and the tokens"))
            q.add_argument("--engine", choices=ENGINES, default="attnlab",
                           help=_("ctranslate2: decode with CTranslate2 (RUN: a folder from `attnlab "
                                  "export --format ctranslate2`) (default: attnlab)"))
        else:
            q.add_argument("overrides", nargs="*", default=[], metavar="decode.key=value",
                           help=_("decode settings, applied after the options, e.g. decode.beam_size=4"))
            q.add_argument("--output", metavar="FILE",
                           help=_("also write the hypotheses to FILE, one a line in the order of the sources "
                                  "(for sacreBLEU or COMET) (default: none)"))
            q.add_argument("--split", default=None,
                           help=_("which split of the run's corpus: train, valid or test (default: "
                                  "test)"))
            q.add_argument("--max-sentences", type=int, default=0, dest="max_sentences",
                           help=_("score at most this many sentences of the split (0 = all)"))
            add_run_data_arg(q)
            q.add_argument("--src", metavar="FILE",
                           help=_("score your own test file instead of a split: its sentences, one a "
                                  "line, are translated and scored against --ref (writes "
                                  "RUN/eval-file-<name>-<hash of the files>.json and the hypotheses) "
                                  "(default: none, a split)"))
            q.add_argument("--ref", metavar="FILE", action="append", default=[],
                           help=_("a reference file for --src, line for line; repeat it for several "
                                  "references per sentence (default: none)"))
        add_verbosity_args(q)
        q.set_defaults(func=func)
