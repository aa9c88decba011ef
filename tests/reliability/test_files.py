"""Files and streams (issue 40, round 4): one size cap on every input, counted as it is read; reading and BPE
training linear in the input; ``translate --output`` clean on a full or read-only disk and direct into a pipe;
corpus errors that say what a path is.

Properties, never times: what the reader holds (bytes, traced memory), what the BPE trainer is shown, what
is left on disk, and the one `error:` line.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest

from attnlab import files as aio
from attnlab.cli import main
from attnlab.cli.translate import _Output, read_chunks
from attnlab.data.corpus import locate_parallel, read_parallel
from attnlab.data.download import locate_fra_eng
from attnlab.data.subword import MAX_TRAIN_WORD, BPETokenizer
from attnlab.errors import AttnlabError, CorpusError
from attnlab.evaluation.evaluate import read_test_file
from tests.cli.test_cli import attnlab

MiB = 2**20
needs_dev_zero = pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")


def _one_line_error(capsys, needle: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error:") and needle in err, err
    assert "Traceback" not in err
    return err


def _fifo_fed(tmp_path: Path, data: bytes) -> Path:
    """A FIFO a thread writes ``data`` into (and closes); a reader that stops early ends the writer quietly."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with open(fifo, "wb") as f:
                f.write(data)
        except BrokenPipeError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    return fifo


# ------------------------------------------------------------------------------------ one size cap


def test_a_stream_past_the_cap_is_refused_as_it_is_read(tmp_path, monkeypatch):
    """A FIFO has no size to check first: evaluate's --src reader counts its bytes and stops past the cap,
    naming the option, the path, the cap and the fix (it once read any stream whole)."""
    monkeypatch.setattr(aio, "MAX_INPUT_BYTES", 1 * MiB)
    fifo = _fifo_fed(tmp_path, b"a sentence .\n" * (2 * MiB // 13))
    with pytest.raises(AttnlabError) as err:
        read_test_file(fifo, "--src")
    msg = str(err.value)
    assert "\n" not in msg and f"--src {fifo}" in msg and "more than the 1 MiB" in msg and "stopped reading" in msg
    assert "score it in parts" in msg


@needs_dev_zero
def test_dev_zero_as_src_is_the_cap_error(tmp_path, monkeypatch, capsys):
    """`evaluate --src /dev/zero` (which grew without bound) ends in the one cap line, before any model loads."""
    monkeypatch.setattr(aio, "MAX_INPUT_BYTES", 1 * MiB)
    assert main(["evaluate", str(tmp_path / "no-run"), "--src", "/dev/zero", "--ref", "/dev/zero"]) == 2
    _one_line_error(capsys, "--src /dev/zero holds more than the 1 MiB attnlab reads from one file or stream")


def test_a_regular_file_past_the_cap_is_refused_by_its_size(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(aio, "MAX_INPUT_BYTES", 1024)
    big = tmp_path / "ref.txt"
    big.write_bytes(b"x\n" * 1000)
    assert main(["evaluate", str(tmp_path / "no-run"), "--src", str(big), "--ref", str(big)]) == 2
    _one_line_error(capsys, f"--src {big} holds 2000 bytes, more than the")
    config = tmp_path / "c.toml"
    config.write_bytes(b"#" * 2000)
    assert main(["config", "--model", "transformer", "--config", str(config)]) == 2
    _one_line_error(capsys, f"config file {config} holds 2000 bytes, more than the")


@needs_dev_zero
def test_dev_zero_as_config_is_the_cap_error(monkeypatch, capsys):
    monkeypatch.setattr(aio, "MAX_INPUT_BYTES", 1 * MiB)
    assert main(["config", "--model", "transformer", "--config", "/dev/zero"]) == 2
    _one_line_error(capsys, "config file /dev/zero holds more than the 1 MiB")


def test_a_src_fifo_is_read_once(tmp_path):
    """--src and its sha256 come from one read: a pipe cannot be read a second time."""
    lines, sha = read_test_file(_fifo_fed(tmp_path, b"one\r\ntwo\n"), "--src")
    assert lines == ["one", "two"] and len(sha) == 64


# ------------------------------------------------------------------------- streaming translate


@needs_dev_zero
def test_a_line_that_never_ends_is_cut_then_stopped_by_the_cap():
    """/dev/zero is one endless line: its first MAX_LINE_BYTES are kept, the rest dropped, and the stream is
    refused past the cap (it was buffered whole, for ever)."""
    cuts = []
    with open("/dev/zero", "rb") as f, pytest.raises(AttnlabError, match="stdin holds more than the 1 MiB"):
        list(read_chunks(f, budget=aio.InputBudget("stdin", cap=1 * MiB), on_cut=cuts.append))
    assert cuts == [1]


def test_a_long_unterminated_line_is_truncated_without_holding_it(tmp_path):
    """20 MB without a newline through a pipe: one line of at most MAX_LINE_BYTES comes out, the cut is
    reported once, and the reader never holds more than a few of its reads (it held all 20 MB, and split
    them again after every read)."""
    size = 20 * MiB
    r, w = os.pipe()

    def feed() -> None:
        block = b"a" * MiB
        with os.fdopen(w, "wb") as f:
            for _ in range(size // MiB):
                f.write(block)
            f.write(b"\nnext line\n")

    cuts = []
    tracemalloc.start()
    threading.Thread(target=feed, daemon=True).start()
    try:
        with os.fdopen(r, "rb", buffering=0) as f:
            lines = [line for chunk in read_chunks(f, on_cut=cuts.append) for line in chunk]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(lines) == 2 and len(lines[0]) == aio.MAX_LINE_BYTES and lines[1] == "next line"
    assert cuts == [1]
    assert peak < 2 * MiB + 8 * aio.MAX_LINE_BYTES, peak  # the feeder's 1 MiB block, not the 20 MB line


def test_line_cut_on_a_stream_without_a_descriptor_and_at_a_character():
    import io

    cuts = []
    text = io.StringIO("short\n" + "b" * 100 + "\nlast")
    assert list(read_chunks(text, line_cap=10, on_cut=cuts.append)) == [["short", "b" * 10, "last"]]
    assert cuts == [2]
    r, w = os.pipe()
    os.write(w, ("é" * 10 + "\n").encode())  # 20 bytes; a 9-byte cut falls inside the fifth é
    os.close(w)
    with os.fdopen(r, "rb", buffering=0) as f:
        assert list(read_chunks(f, line_cap=9)) == [["éééé"]]


def test_translate_says_once_that_it_cut_lines(tiny_runs, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("attnlab.cli.translate.MAX_LINE_BYTES", 16)
    src = tmp_path / "in.txt"
    src.write_text("twenty one\n" + "seven " * 10 + "\n" + "three " * 10 + "\n", encoding="utf-8")
    assert main(["translate", str(tiny_runs("transformer")), "--file", str(src), "-q"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3
    said = [line for line in err.splitlines() if "bytes were read" in line]
    assert len(said) == 1 and "input line 2 is longer than 16 bytes" in said[0], err


# ----------------------------------------------------------------------------------- BPE training


def test_bpe_trainer_sees_each_word_capped():
    """A long unspaced line made training quadratic (each merge rescans the word). The trainer is shown each
    word cut to MAX_TRAIN_WORD characters: what it learns from a 60,000-character word is what it learns from
    that word's first MAX_TRAIN_WORD characters."""
    rng = random.Random(0)
    word = "".join(rng.choice("abcdefghij") for _ in range(60_000))
    common = ["the cat sat on the mat", "a dog ran in the park"] * 5
    long = BPETokenizer.train([*common, word], 120, "en", preprocessed=True)
    short = BPETokenizer.train([*common, word[:MAX_TRAIN_WORD]], 120, "en", preprocessed=True)
    assert long.to_json() == short.to_json()


# ------------------------------------------------------------------------------ translate --output


def test_output_to_a_descriptor_path_writes_into_the_pipe():
    """`--output /dev/stdout` into a pipe: /dev/fd/N and /dev/stdout are written directly (realpath named a
    `pipe:[…]` that does not exist, and the temporary file could not be made beside it)."""
    r, w = os.pipe()
    try:
        out = _Output(f"/dev/fd/{w}")
        out.file.write("une phrase\n")
        out.commit()
        assert os.read(r, 100) == b"une phrase\n"
    finally:
        os.close(r)
        os.close(w)


def test_output_to_a_descriptor_appends_where_the_shell_opened_it(tmp_path):
    """`--output /dev/stdout >> log`: written through the open descriptor, so the log keeps what it held (a
    temporary file renamed over the path, or reopening it, would drop it)."""
    log = tmp_path / "log.txt"
    log.write_text("before\n", encoding="utf-8")
    fd = os.open(log, os.O_WRONLY | os.O_APPEND)
    try:
        out = _Output(f"/dev/fd/{fd}")
        out.file.write("after\n")
        out.commit()
    finally:
        os.close(fd)
    assert log.read_text(encoding="utf-8") == "before\nafter\n"


@pytest.mark.slow
def test_output_dev_stdout_into_a_pipe(tiny_runs):
    proc = attnlab("translate", str(tiny_runs("transformer")), "twenty one", "--output", "/dev/stdout")
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stderr


@pytest.fixture
def full_disk():
    """Every file this process writes is limited to 1 byte (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG), as a full
    disk fails its writes (ENOSPC); the limit is lifted afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    def fill() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))

    yield fill
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    signal.signal(signal.SIGXFSZ, old)


def test_full_disk_output_is_one_line_and_leaves_no_tmp(tiny_runs, tmp_path, full_disk, capsys):
    """The translations cannot be flushed: one line, the previous file unchanged, no `.out.txt.*.tmp` (the
    close in the clean-up failed again, raised over the error and kept the temporary file)."""
    run = tiny_runs("transformer")
    target = tmp_path / "out" / "out.txt"
    target.parent.mkdir()
    target.write_text("before\n", encoding="utf-8")
    full_disk()
    code = main(["translate", str(run), "twenty one", "--output", str(target)])
    assert code == 2
    _one_line_error(capsys, f"could not write --output {target}")
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]
    assert target.read_text(encoding="utf-8") == "before\n"


def test_read_only_output_folder_is_one_line_and_leaves_nothing(tiny_runs, tmp_path, monkeypatch, capsys):
    """EACCES/EROFS when the temporary file is made (root ignores permissions: the refusal is faked at
    ``mkstemp``). A guard: this path was already one line."""
    import errno
    import tempfile

    def refused(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "mkstemp", refused)
    assert main(["translate", str(tiny_runs("transformer")), "twenty one", "--output", str(folder / "o.txt")]) == 2
    _one_line_error(capsys, "Read-only file system")
    assert list(folder.iterdir()) == []


# ------------------------------------------------------------------------------------ corpus errors


@pytest.mark.parametrize("kind", ["fifo", "devnull"])
def test_a_fifo_or_dev_null_corpus_says_what_it_is(tmp_path, kind):
    if kind == "fifo":
        path = tmp_path / "corpus.tsv"
        os.mkfifo(path)
        what = "is a named pipe (FIFO), not a file"
    else:
        path = Path("/dev/null")
        what = "is a character device, not a file"
    for call in (lambda: locate_parallel(str(path), "en", "de"), lambda: read_parallel(str(path), "en", "de"),
                 lambda: locate_fra_eng(path)):
        with pytest.raises(CorpusError) as err:
            call()
        msg = str(err.value)
        assert "\n" not in msg and str(path) in msg and what in msg and "does not exist" not in msg, msg


def test_a_folder_given_languages_is_a_folder_not_fra_eng(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    assert main(["data", "--data", str(folder), "data.src_lang=en", "data.tgt_lang=de"]) == 2
    err = _one_line_error(capsys, f"{folder} is a folder, not a corpus")
    assert "fra-eng" not in err


@pytest.mark.slow
def test_signal_stops_a_capped_read(tmp_path):
    """Reading an endless stream stays interruptible: SIGTERM ends `evaluate --src` reading a FIFO nobody
    finishes with 143, at once (no byte cap is reached; the reads are short and the handler runs between)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess.Popen([sys.executable, "-m", "attnlab", "evaluate", str(tmp_path), "--src", str(fifo),
                             "--ref", str(fifo)], stderr=subprocess.PIPE, env={**os.environ, "ATTNLAB_OFFLINE": "1"})
    with open(fifo, "wb") as f:
        f.write(b"a sentence .\n")
        f.flush()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143
    assert "Traceback" not in proc.stderr.read().decode()


def test_a_signal_another_thread_receives_still_stops_a_silent_read(tmp_path):
    """The kernel may hand SIGTERM to any thread of the process (a native library's); the main thread, blocked
    reading a pipe nobody writes to, must still run the handler. The writer holds the pipe open and silent until
    the read ends, or gives up and closes it (then the main thread never woke: the old blocking read)."""
    from attnlab.interrupts import Interrupted, sigterm_interrupts

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    woke, gave_up = threading.Event(), []

    main_stat = Path(f"/proc/self/task/{threading.main_thread().native_id}/stat")

    def writer() -> None:
        with open(fifo, "wb"):
            while main_stat.exists() and main_stat.read_text().rsplit(")", 1)[1].split()[0] != "S":
                pass  # until the main thread sleeps in its read (Linux; elsewhere the signal comes at once)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # delivered to this thread, not the main one
            if not woke.wait(60):
                gave_up.append(True)

    thread = threading.Thread(target=writer, daemon=True)
    with sigterm_interrupts(), pytest.raises(Interrupted):
        thread.start()
        try:
            aio.read_input(fifo)
        finally:
            woke.set()
    thread.join()
    assert not gave_up, "the main thread slept through the signal until the pipe closed"


def test_translate_file_dev_zero_is_one_line_through_the_cli(tiny_runs, monkeypatch, capsys):
    monkeypatch.setattr(aio, "MAX_INPUT_BYTES", 1 * MiB)
    if not Path("/dev/zero").exists():
        pytest.skip("needs /dev/zero")
    assert main(["translate", str(tiny_runs("transformer")), "--file", "/dev/zero", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --file /dev/zero holds more than the 1 MiB"), err
