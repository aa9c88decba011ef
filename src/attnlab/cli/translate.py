"""`attnlab translate` and `attnlab evaluate`: a run's model decodes sentences, or a split it is scored on."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

from attnlab.cli.common import (
    add_device_arg,
    add_run_data_arg,
    add_verbosity_args,
    load_translator,
    show_progress,
)
from attnlab.errors import AttnlabError
from attnlab.export import ENGINES
from attnlab.i18n import N_, _


def _check_translate_paths(args) -> None:
    """``--file`` is a readable file and ``--output`` is not the input (by name, link or stdin) nor a folder."""
    if args.file is not None:
        if not os.path.exists(args.file):
            raise AttnlabError(f"--file {args.file} does not exist; give a text file with one sentence per line")
        if os.path.isdir(args.file):
            raise AttnlabError(f"--file {args.file} is a folder; give a text file with one sentence per line")
    if not args.output:
        return
    if os.path.isdir(args.output):
        raise AttnlabError(f"--output {args.output} is a folder; give the file to write the translations to")
    if not os.path.exists(args.output):
        return
    out = os.stat(args.output)
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
        raise AttnlabError(f"--output {args.output} is the input file; writing it would destroy the sentences "
                           "before they are read. Choose another --output")


class _Output:
    """``--output``: translations go to a temporary file beside the target, renamed over it by
    :meth:`commit` only when every line is written, so a failure or Ctrl-C leaves the previous file
    whole. A symbolic link is written through (the link stays); a device or pipe (``/dev/null``)
    is written to directly, having no content to keep."""

    def __init__(self, path: str) -> None:
        import tempfile

        from attnlab.io import usual_mode

        self.target = os.path.realpath(path)
        self.tmp = None
        try:
            if os.path.exists(self.target) and not os.path.isfile(self.target):
                self.file = open(self.target, "w", encoding="utf-8")  # noqa: SIM115
                return
            fd, self.tmp = tempfile.mkstemp(prefix=f".{os.path.basename(self.target)}.", suffix=".tmp",
                                            dir=os.path.dirname(self.target))
            os.fchmod(fd, usual_mode())  # mkstemp makes 0600
            self.file = os.fdopen(fd, "w", encoding="utf-8")
        except OSError as e:
            raise AttnlabError(f"cannot write --output {path}: {e.strerror or e}; choose a file in a folder "
                               "you can write to") from None

    def commit(self) -> None:
        from attnlab.io import fsync_dir

        self.file.flush()
        if self.tmp is not None:
            os.fsync(self.file.fileno())
        self.file.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.target)
            self.tmp = None
            fsync_dir(os.path.dirname(self.target))

    def abandon(self) -> None:
        self.file.close()
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def _check_counts(args, *names: str) -> None:
    """``--beam`` / ``--nbest`` given as 0 or less are mistakes (0 once meant the run's default silently)."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise AttnlabError(f"--{name} {value} must be at least 1 (--beam 1 = greedy; leave --{name} out "
                               "for the default)")


def cmd_translate(args) -> int:
    _check_counts(args, "beam", "nbest")
    _check_translate_paths(args)  # before the model loads: a wrong path fails at once
    try:
        stream = open(args.file, encoding="utf-8", errors="replace", newline="\n") if args.file else None  # noqa: SIM115
    except OSError as e:
        raise AttnlabError(f"cannot read --file {args.file}: {e.strerror or e}") from None
    try:
        return _translate(args, stream)
    finally:
        if stream is not None:
            stream.close()


def _translate(args, stream) -> int:
    tr = load_translator(args)
    beam = args.beam or tr.cfg.decode.beam_size
    nbest = args.nbest or 1
    if nbest > beam:
        raise AttnlabError(f"--nbest {nbest} is larger than --beam {beam}; raise --beam or lower --nbest")
    output = _Output(args.output) if args.output else None
    out = output.file if output else sys.stdout  # stdout is streamed: each chunk as it is translated
    emitted = [0]  # lines handled so far, for warnings that name the input line

    def emit(lines: list[str]) -> None:
        results = tr.translate_full(lines, beam_size=beam, nbest=nbest)
        for n, res in enumerate(results):
            if res and getattr(res[0], "truncated", False):
                print(f"warning: input line {emitted[0] + n + 1} is longer than {tr.max_src_tokens} tokens; "
                      "only its beginning was translated", file=sys.stderr)
        emitted[0] += len(lines)
        try:
            for res in results:
                if nbest == 1:
                    out.write(res[0].text + "\n")
                else:
                    out.write(" ||| ".join(t.text for t in res) + "\n")
            out.flush()
        except OSError as e:
            if output is None or isinstance(e, BrokenPipeError):
                raise  # stdout: a closed pipe ends the command quietly (main)
            raise AttnlabError(f"could not write --output {args.output}: {e.strerror or e}; the previous file "
                               "is unchanged") from None

    bar = None
    try:
        if args.text:
            emit(list(args.text))
        else:
            # Only "\n" ends a line (a stray "\r" inside a line must not split it); "\r\n" is stripped below.
            if stream is not None:
                if show_progress(args):  # a file has a known length: a bar on stderr, ticked per chunk
                    from tqdm.auto import tqdm

                    total, last = 0, b"\n"  # lines as the loop below counts them: a last unended one too
                    with open(args.file, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            total, last = total + block.count(b"\n"), block[-1:]
                    bar = tqdm(total=total + (last != b"\n"), desc="translate", unit="line", dynamic_ncols=True,
                               file=sys.stderr)
            else:
                stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
            chunk: list[str] = []
            for line in stream:
                chunk.append(line.rstrip("\n").rstrip("\r"))
                if len(chunk) >= 2000:  # bounded memory, sorted-by-length batches inside each chunk
                    emit(chunk)
                    if bar is not None:
                        bar.update(len(chunk))
                    chunk = []
            if chunk:
                emit(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        if output is not None:
            try:
                output.commit()
            except OSError as e:
                raise AttnlabError(f"could not write --output {args.output}: {e.strerror or e}; the previous file "
                                   "is unchanged") from None
    finally:
        if bar is not None:
            bar.close()
        if output is not None:
            output.abandon()
    return 0


# ------------------------------------------------------------------------------------------ evaluate

def cmd_evaluate(args) -> int:
    from attnlab.evaluation.evaluate import evaluate_split, format_report, notes_examples, write_report

    _check_counts(args, "beam")
    if args.src is not None or args.ref:
        return _evaluate_files(args)
    args.split = args.split or "test"
    tr = load_translator(args)
    tr.check_translates()  # a fill model is refused before the corpus is read
    prepared = tr.prepare_corpus(args.data)  # --data, else $ATTNLAB_DATA_DIR, else the cache
    if args.split not in prepared.splits:
        raise AttnlabError(f"--split {args.split} is unknown; choose one of: {', '.join(prepared.splits)}")
    beam = args.beam or tr.cfg.decode.beam_size
    result = evaluate_split(tr, prepared.splits[args.split], beam_size=beam, max_sentences=args.max_sentences,
                            progress=show_progress(args))
    examples = notes_examples(tr, beam_size=beam)
    path = write_report(Path(args.run), args.split, result, examples)
    print(format_report(result, examples))
    print(f"wrote {path}")
    return 0


def _evaluate_files(args) -> int:
    """`evaluate RUN --src F --ref R [--ref R2 ...]`: your own test files, scored as a split is."""
    from attnlab.evaluation.evaluate import (
        evaluate_files,
        file_report_name,
        format_report,
        read_lines,
        write_report,
    )

    if args.src is None or not args.ref:
        raise AttnlabError("--src and --ref go together: give the source file and one or more reference files, "
                           "one sentence a line")
    if args.split is not None or args.data is not None or args.max_sentences:
        raise AttnlabError("--src/--ref score your own files; --split, --data and --max-sentences choose a split of "
                           "the run's corpus: drop one or the other")
    sources = read_lines(args.src, "--src")
    refs = [read_lines(r, "--ref") for r in args.ref]
    for path, stream in zip(args.ref, refs):
        if len(stream) != len(sources):
            raise AttnlabError(f"--ref {path} has {len(stream)} lines but --src {args.src} has {len(sources)}; give "
                               "one reference line for each source line")
    tr = load_translator(args)
    tr.check_translates()
    beam = args.beam or tr.cfg.decode.beam_size
    result = evaluate_files(tr, sources, refs, beam_size=beam, progress=show_progress(args))
    result["files"] = {"src": _file_fact(args.src), "ref": [_file_fact(r) for r in args.ref]}  # names, not paths
    path = write_report(Path(args.run), file_report_name(args.src), result, [])
    print(format_report(result, []))
    print(f"wrote {path}")
    return 0


def _file_fact(path: str) -> dict[str, str]:
    """A test file as a report records it: its name and sha256 (a path would name this machine's folders)."""
    import hashlib

    return {"file": Path(path).name, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}


def register(sub) -> None:
    """`translate` and `evaluate`: both read a run, decode with a beam, and report on stderr."""
    for name, func, helptext in (("translate", cmd_translate, N_("translate sentences with a trained run")),
                                 ("evaluate", cmd_evaluate, N_("BLEU/chrF (sacreBLEU, all references) on a split"))):
        helptext = _(helptext)
        q = sub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".")
        q.add_argument("run", metavar="RUN", help="run folder (the --out of `attnlab train`)")
        q.add_argument("--checkpoint", default="best", help="best, last or step-N")
        q.add_argument("--beam", type=int, help="beam size, 1 = greedy (default: the run's decode.beam_size)")
        add_device_arg(q)
        if name == "translate":
            q.add_argument("text", nargs="*", default=[], metavar="TEXT",
                           help="sentences to translate (default: lines from --file, else from stdin)")
            q.add_argument("--file", metavar="FILE",
                           help="read sentences from this file, one per line (default: none: TEXT, else stdin)")
            q.add_argument("--output", metavar="FILE", help="write translations to this file (default: stdout)")
            q.add_argument("--nbest", type=int,
                           help="print the n best translations, separated by ' ||| ' (default: 1)")
            q.add_argument("--engine", choices=ENGINES, default="attnlab",
                           help="ctranslate2: decode with CTranslate2 (RUN: a folder from `attnlab export "
                                "--format ctranslate2`) (default: attnlab)")
        else:
            q.add_argument("--split", default=None,
                           help="which split of the run's corpus: train, valid or test (default: test)")
            q.add_argument("--max-sentences", type=int, default=0, dest="max_sentences",
                           help="score at most this many sentences of the split (0 = all)")
            add_run_data_arg(q)
            q.add_argument("--src", metavar="FILE",
                           help="score your own test file instead of a split: its sentences, one a line, are "
                                "translated and scored against --ref (writes RUN/eval-file-<name>.json and the "
                                "hypotheses) (default: none, a split)")
            q.add_argument("--ref", metavar="FILE", action="append", default=[],
                           help="a reference file for --src, line for line; repeat it for several references "
                                "per sentence (default: none)")
        add_verbosity_args(q)
        q.set_defaults(func=func)
