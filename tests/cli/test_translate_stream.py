"""`attnlab translate` reading a pipe answers each line as it arrives (a program can hold a
conversation with it), batching only what has already arrived; --beam and --nbest are checked."""

from __future__ import annotations

import io
import os
import select
import subprocess
import sys

import pytest

from attnlab.cli.translate import read_chunks
from tests.cli.test_cli import assert_one_line_error, attnlab


def read_line(proc, timeout: float = 120.0) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no translation came back while stdin was still open"
    return proc.stdout.readline()


@pytest.mark.slow
def test_a_pipe_gets_one_line_out_per_line_in(tiny_runs):
    run = tiny_runs("transformer")
    expected = attnlab("translate", str(run), "twenty one", "three hundred", "seven").stdout.splitlines()
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "translate", str(run), "-q"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            env={**os.environ, "ATTNLAB_OFFLINE": "1"})
    try:
        got = []
        for sentence in ("twenty one", "three hundred", "seven"):
            proc.stdin.write(sentence + "\n")
            proc.stdin.flush()
            got.append(read_line(proc).rstrip("\n"))  # before the next line is written, stdin still open
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
    finally:
        proc.kill()
    assert got == expected


class Pipe:
    """A pipe whose writer has written ``parts`` so far (the reader sees what has arrived)."""

    def __init__(self) -> None:
        self.r, self.w = os.pipe()
        self.file = os.fdopen(self.r, "rb", buffering=0)

    def write(self, data: bytes) -> None:
        os.write(self.w, data)

    def close(self) -> None:
        os.close(self.w)


def test_chunks_hold_what_has_arrived():
    pipe = Pipe()
    chunks = read_chunks(pipe.file, limit=3)
    pipe.write(b"a\nb\nc\nd\npartial")
    assert next(chunks) == ["a", "b", "c"]  # at most the limit
    assert next(chunks) == ["d"]  # what has arrived, without waiting for more
    pipe.write(b" line\r\nx\xff\n")
    assert next(chunks) == ["partial line", "x\ufffd"]  # \r\n ends a line; bad bytes become U+FFFD
    pipe.write(b"last")
    pipe.close()
    assert list(chunks) == [["last"]]


def test_chunks_of_a_text_stream_without_a_descriptor():
    assert list(read_chunks(io.StringIO("a\nb\r\nc"), limit=2)) == [["a", "b"], ["c"]]


@pytest.mark.parametrize(("args", "needle"), [
    (["--beam", "0"], "--beam 0 must be at least 1"),
    (["--nbest", "0"], "--nbest 0 must be at least 1"),
    (["--beam", "100000"], "is larger than the target vocabulary"),
    (["--beam", "2", "--nbest", "3"], "--nbest 3 is larger than --beam 2"),
    (["--nbest", "2"], "larger than the run's beam size (decode.beam_size=1)"),
])
def test_beam_and_nbest_are_checked(tiny_runs, args, needle):
    assert_one_line_error(attnlab("translate", str(tiny_runs("transformer")), "seven", *args), needle)
