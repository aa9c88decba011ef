"""The real `attnlab` command in a subprocess: exit codes, one-line errors, line-for-line translation."""

import os
import subprocess
import sys

import pytest


def attnlab(*args, input=None, env=None, timeout=300):
    e = {**os.environ, "ATTNLAB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "attnlab", *args], input=input, capture_output=True, text=True,
                          env=e, timeout=timeout)


def assert_one_line_error(proc, needle):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:") and needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_missing_run_folder(tmp_path):
    assert_one_line_error(attnlab("translate", str(tmp_path / "nope"), "hello ."), "does not exist")


def test_wrong_config_key(tmp_path):
    assert_one_line_error(attnlab("train", "--model", "transformer", "--dataset", "numbers", "--out",
                                  str(tmp_path / "r"), "model.num_layerz=2"), "valid keys in [model]")


def assert_usage_error(proc, prog, needle):
    """A command-line mistake: the (sub)command's usage, then one ``error:`` line naming its own --help."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"usage: {prog} ") and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {prog}: ") and needle in last and f"`{prog} --help`" in last, last


def test_unknown_model_kind(tmp_path):
    assert_usage_error(attnlab("train", "--model", "lstm", "--out", str(tmp_path / "r")), "attnlab train",
                       "invalid choice")


@pytest.mark.parametrize("content", [None, b"PK\x03\x04" + os.urandom(300), os.urandom(2000)])
def test_corpus_problems_are_one_line(tmp_path, content):
    d = tmp_path / "data"
    d.mkdir()
    if content is not None:
        (d / "fra-eng.zip").write_bytes(content)
    proc = attnlab("data", "--dataset", "fra-eng", env={"ATTNLAB_DATA_DIR": str(d), "XDG_CACHE_HOME": str(tmp_path),
                                                        "HOME": str(tmp_path)})
    assert_one_line_error(proc, "")


def test_data_numbers_walkthrough():
    proc = attnlab("data", "--dataset", "numbers", "--sentence", "twenty-one")
    assert proc.returncode == 0, proc.stderr
    assert "<eos>" in proc.stdout and "<pad>" in proc.stdout


@pytest.mark.slow
def test_translate_keeps_lines_and_order(tiny_runs, tmp_path):
    from num2words import num2words

    run = tiny_runs("transformer")
    lines = [("" if i % 97 == 0 else num2words(i)) for i in range(10_000)]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(lines) + "\n")
    proc = attnlab("translate", str(run), "--file", str(f), "--checkpoint", "last")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")[:-1]
    assert len(out) == 10_000
    assert all(out[i] == "" for i in range(0, 10_000, 97))
    # order kept: a few lines translated on their own give the same text as in the file run
    sample = [1, 500, 4321, 9999]
    alone = attnlab("translate", str(run), "--checkpoint", "last", *[lines[i] for i in sample])
    assert alone.stdout.split("\n")[:-1] == [out[i] for i in sample]
    # stdin works the same
    piped = attnlab("translate", str(run), "--checkpoint", "last", input="\n".join(lines[:50]) + "\n")
    assert piped.stdout.split("\n")[:-1] == out[:50]


def test_the_parser_is_built_without_importing_torch():
    """Why cli.py and the command modules import the library inside each command: `--help` stays instant."""
    code = ("import sys; from attnlab.cli import make_parser; make_parser(); "
            "print(sorted(m for m in ('torch', 'attnlab.data', 'attnlab.translator') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
