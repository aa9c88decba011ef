"""Bad inputs never crash attnlab, never run code, and every refusal is one line naming the file and why.

Pass criteria are stated in each test's docstring; see README.md for the full table (cases covered
elsewhere are referenced there, not repeated here).
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from attnlab import runs
from attnlab.errors import CheckpointError
from attnlab.translator import Translator
from tests.cli.test_cli import assert_one_line_error, attnlab
from tests.reliability._helpers import assert_no_specials, copy_run, last_checkpoint, rehash

ODD_TEXT = [
    "",
    "   \t ",
    "😀😀 🚀 go .",
    "你好世界。",
    "שלום עולם",
    "مرحبا بالعالم",
    "\u202eevil\u202c and \u200fmarks\u200e",
    "nul\x00 bell\x07 esc\x1b[31m del\x7f",
    "lone \ud800 high and \udfff low",
    "\ud83d",
    "<unk> <pad> <bos> <eos>",
    "twenty\u00a0one\u202f!",
    "e\u0301t\u00e9 ﬁ ß İ",
    "\ufeffbom \ufffe nonchar",
]


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_odd_text_through_the_translator(tiny_runs, kind):
    """Pass: one translation per input, in order; valid UTF-8; no special token spelled in any text;
    empty/whitespace/invisible-only input gives ""; nothing is flagged truncated."""
    tr = Translator.from_run(tiny_runs(kind), "last")
    for beam in (1, 3):
        out = tr.translate_full(ODD_TEXT, beam_size=beam)
        assert len(out) == len(ODD_TEXT)
        for src, hyps in zip(ODD_TEXT, out):
            text = hyps[0].text
            text.encode("utf-8")  # no lone surrogate made it through
            assert_no_specials(text)
            assert not hyps[0].truncated
            if not src.strip() or src == "\ud83d":
                assert text == "", (src, text)
    # the same sentence alone and inside the odd batch gives the same translation (nothing leaks)
    assert tr.translate_full(["twenty one"])[0][0].text == tr.translate_full([*ODD_TEXT, "twenty one"])[-1][0].text


def test_over_long_input_is_truncated_and_flagged(tiny_runs):
    """Pass: a source over max_src_tokens is cut to it and flagged ``truncated``; short ones are not;
    the attention view flags it too."""
    tr = Translator.from_run(tiny_runs("transformer"), "last")
    n = tr.max_src_tokens
    long_text = " ".join(["one"] * (n + 50))
    exact = " ".join(["one"] * n)
    res = tr.translate_full([long_text, exact, "two"])
    assert [r[0].truncated for r in res] == [True, False, False]
    assert tr.encode_source(long_text)[0] == tr.encode_source(exact)[0]
    assert res[0][0].text == res[1][0].text  # the long one was translated as its first n tokens
    assert tr.attention(long_text).truncated and not tr.attention("two").truncated
    huge = "one " * 200_000  # a megabyte on one line: bounded work, no crash
    assert tr.translate_full([huge])[0][0].truncated


def _write_lines(path, lines: list[str]) -> None:
    path.write_bytes("".join(x + "\n" for x in lines).encode("utf-8", "surrogatepass"))


@pytest.mark.slow
def test_cli_file_mode_keeps_empty_lines_and_odd_text(tiny_runs, tmp_path):
    """Pass: exit 0; exactly one output line per input line, in order; empty and whitespace-only lines
    give empty lines; no special token in the output; invalid UTF-8 and surrogate bytes do not crash."""
    lines = [x for x in ODD_TEXT if "\n" not in x] + [
        "twenty one",
        "",
        "  ",
        "three\x0bfour\x0c\x1c\x85\u2028x",
    ]
    f = tmp_path / "in.txt"
    _write_lines(f, lines)
    with open(f, "ab") as fh:
        fh.write(b"bad \xff\xfe utf-8 \xed\xa0\x80 surrogate\n")  # not UTF-8 at all
    proc = attnlab("translate", str(tiny_runs("transformer")), "--checkpoint", "last", "--file", str(f))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines) + 1, out
    for src, got in zip(lines, out):
        assert_no_specials(got)
        if not src.strip() or src == "\ud83d":
            assert got == "", (src, got)
    assert (
        out[lines.index("twenty one")]
        == attnlab(
            "translate", str(tiny_runs("transformer")), "--checkpoint", "last", "twenty one"
        ).stdout.strip()
    )


@pytest.mark.slow
def test_cli_bare_carriage_return_stays_in_its_line(tiny_runs, tmp_path):
    """Pass: a line holding a bare CR (old Mac line end, pasted text) still gives exactly one output line."""
    f = tmp_path / "in.txt"
    f.write_bytes(b"twenty one\rtwo\nthree\n")
    proc = attnlab("translate", str(tiny_runs("transformer")), "--checkpoint", "last", "--file", str(f))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.split("\n")) - 1 == 2, proc.stdout


@pytest.mark.slow
def test_cli_arguments_with_undecodable_bytes(tiny_runs):
    """Pass: argv bytes that are not UTF-8 (Python hands them over as lone surrogates) translate, exit 0."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnlab",
            "translate",
            str(tiny_runs("transformer")),
            "--checkpoint",
            "last",
            b"twenty \xff one",
            b"\xed\xa0\x80",
        ],
        capture_output=True,
        env={**os.environ, "ATTNLAB_OFFLINE": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode("utf-8").split("\n")
    assert len(out) == 3 and out[1] == "" and out[2] == ""
    assert_no_specials(out[0])


# ------------------------------------------------------------------------------------ checkpoints


class Evil:
    """Unpickling this runs ``touch MARKER``: what a malicious checkpoint would do."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _plant_pickles(run, marker) -> None:
    path = last_checkpoint(run)
    (path / runs.WEIGHTS).write_bytes(pickle.dumps({"w": Evil(marker)}))
    torch.save({"optimizer": Evil(marker), "step": 1}, path / runs.STATE)  # torch's own (zip) pickle format
    rehash(path)  # the checksums now match: the loaders themselves must refuse


def test_malicious_pickle_is_refused_and_never_runs(tiny_runs, tmp_path):
    """Pass: Translator.from_run and load_state raise CheckpointError naming the file; the marker file
    the pickle would create never appears."""
    marker = tmp_path / "pwned"
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    _plant_pickles(run, marker)
    with pytest.raises(CheckpointError, match="model.safetensors is not a valid safetensors file"):
        Translator.from_run(run, "last")
    with pytest.raises(CheckpointError, match="state.pt was refused"):
        runs.load_state(last_checkpoint(run))
    assert not marker.exists()


@pytest.mark.slow
def test_malicious_pickle_through_the_cli(tiny_runs, tmp_path):
    """Pass: `translate` and `train --resume` exit 2 with one line naming the file; no marker file."""
    marker = tmp_path / "pwned"
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    _plant_pickles(run, marker)
    assert_one_line_error(attnlab("translate", str(run), "--checkpoint", "last", "go ."), "model.safetensors")
    # weights pass only when genuine: put real ones back, keep the evil training state
    good = last_checkpoint(tiny_runs("transformer"))
    (last_checkpoint(run) / runs.WEIGHTS).write_bytes((good / runs.WEIGHTS).read_bytes())
    rehash(last_checkpoint(run))
    assert_one_line_error(
        attnlab("train", "--resume", "--out", str(run), "--max-steps", "50", "--quiet"),
        "state.pt was refused",
    )
    assert not marker.exists()


def _duplicate_key_file(src, dst) -> str:
    """Copy safetensors ``src`` to ``dst`` with its first tensor named twice in a hand-written header."""
    data = src.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    name = next(k for k in header if k != "__metadata__")
    entries = [f"{json.dumps(k)}:{json.dumps(v)}" for k, v in header.items()]
    entries.append(f"{json.dumps(name)}:{json.dumps(header[name])}")  # the same name again
    raw = ("{" + ",".join(entries) + "}").encode()
    raw += b" " * (-len(raw) % 8)
    dst.write_bytes(struct.pack("<Q", len(raw)) + raw + body)
    return name


def test_duplicate_key_safetensors_is_refused(tiny_runs, tmp_path):
    """Pass: a header naming a tensor twice (which the safetensors library would load silently, the
    last entry winning) is refused with one line naming the file, the tensor and the reason."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    path = last_checkpoint(run)
    name = _duplicate_key_file(last_checkpoint(tiny_runs("transformer")) / runs.WEIGHTS, path / runs.WEIGHTS)
    rehash(path)
    with pytest.raises(CheckpointError) as e:
        Translator.from_run(run, "last")
    msg = str(e.value)
    assert "\n" not in msg and str(path / runs.WEIGHTS) in msg and f"{name!r} twice" in msg


@pytest.mark.parametrize("damage", ["short", "header_len", "header_json"])
def test_damaged_safetensors_headers(tiny_runs, tmp_path, damage):
    """Pass: a file too short for its header, a header length past the end, a header that is not JSON —
    each one line naming the file (checked with and without the manifest check)."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    path = last_checkpoint(run)
    w = path / runs.WEIGHTS
    data = w.read_bytes()
    w.write_bytes(
        {
            "short": data[:5],
            "header_len": struct.pack("<Q", 10**12) + data[8:],
            "header_json": data[:8] + b"\xff" * (len(data) - 8),
        }[damage]
    )
    rehash(path)
    tr = Translator.from_run(tiny_runs("transformer"), "last")
    with pytest.raises(CheckpointError, match="model.safetensors is not a valid safetensors file") as e:
        runs.load_weights(path, tr.model)
    assert "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["flip", "truncate", "shape", "duplicate"])
def test_damaged_checkpoints_through_the_cli(tiny_runs, tmp_path, damage):
    """Pass: exit 2 and one line naming model.safetensors and the reason (checksum, validity, shape,
    duplicate name); the library-level cases are in tests/training/test_checkpoint.py."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    path = last_checkpoint(run)
    w = path / runs.WEIGHTS
    if damage == "flip":
        data = bytearray(w.read_bytes())
        data[len(data) // 2] ^= 0x01
        w.write_bytes(bytes(data))
        needle = "does not match its sha256"
    elif damage == "truncate":
        w.write_bytes(w.read_bytes()[: len(w.read_bytes()) // 2])
        rehash(path)
        needle = "not a valid safetensors file"
    elif damage == "shape":
        from safetensors.torch import load_file

        tensors = load_file(str(w))
        k = next(iter(tensors))
        tensors[k] = torch.zeros(*(d + 1 for d in tensors[k].shape))
        save_file(tensors, str(w))
        rehash(path)
        needle = "has shape"
    else:
        _duplicate_key_file(last_checkpoint(tiny_runs("transformer")) / runs.WEIGHTS, w)
        rehash(path)
        needle = "twice"
    proc = attnlab("translate", str(run), "--checkpoint", "last", "go .")
    assert_one_line_error(proc, needle)
    assert str(w) in proc.stderr


# --------------------------------------------------------------------- checkpoint vs. its run folder


def _swap_two_target_tokens(run) -> None:
    tpath = run / runs.TOKENIZERS
    toks = json.loads(tpath.read_text())
    table = toks["tgt"]["idx_to_token"]
    table[4], table[5] = table[5], table[4]  # same size, different meaning of two embedding rows
    tpath.write_text(json.dumps(toks))


def test_vocabulary_mismatch_is_refused(tiny_runs, tmp_path):
    """Pass: same-sized but different target vocabulary → CheckpointError naming tokenizers.json;
    a bigger vocabulary → refused as well (before any shape error)."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    _swap_two_target_tokens(run)
    with pytest.raises(CheckpointError, match="another target vocabulary .*tokenizers.json"):
        Translator.from_run(run, "last")
    run2 = copy_run(tiny_runs("transformer"), tmp_path / "run2")
    toks = json.loads((run2 / runs.TOKENIZERS).read_text())
    toks["src"]["idx_to_token"].append("zzz-new-word")
    (run2 / runs.TOKENIZERS).write_text(json.dumps(toks))
    with pytest.raises(CheckpointError, match="another source vocabulary"):
        Translator.from_run(run2, "last")


def test_config_mismatch_is_refused(tiny_runs, tmp_path):
    """Pass: config.toml edited after training (a field that changes no tensor shape, num_heads) →
    CheckpointError naming the field and both values; dropout and scratch_gru may change."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    cfg = run / runs.CONFIG
    text = cfg.read_text()
    assert "dropout = 0.1" in text and "scratch_gru = false" in text
    cfg.write_text(
        text.replace("dropout = 0.1", "dropout = 0.3").replace("scratch_gru = false", "scratch_gru = true")
    )
    Translator.from_run(run, "last")  # fine: neither changes what the weights compute
    assert "num_heads = 2" in text
    cfg.write_text(text.replace("num_heads = 2", "num_heads = 1"))
    with pytest.raises(CheckpointError, match=r"model.num_heads=2 but .*config.toml says 1"):
        Translator.from_run(run, "last")


@pytest.mark.slow
def test_mismatch_through_the_cli(tiny_runs, tmp_path):
    """Pass: `translate` on a run whose vocabulary was swapped exits 2 with one line."""
    run = copy_run(tiny_runs("transformer"), tmp_path / "run")
    _swap_two_target_tokens(run)
    assert_one_line_error(attnlab("translate", str(run), "--checkpoint", "last", "go ."), "target vocabulary")


# ------------------------------------------------------------------------------------ config files


CONFIG_FILES = {
    "unknown_key": ("[train]\nlearning_rate = 0.1\n", "unknown key train.learning_rate"),
    "unknown_section": ("[optim]\nlr = 0.1\n", "unknown config section [optim]"),
    "wrong_type": ("[model]\nnum_layers = 'two'\n", "model.num_layers expects an integer"),
    "wrong_type_list": ("[train]\nbetas = 0.9\n", "train.betas expects a list"),
    "bad_value": ("[model]\ndropout = 1.5\n", "model.dropout=1.5 must lie in [0, 1)"),
    "bad_syntax": ("[train\nlr = 1\n", "is not valid TOML"),
    "not_a_table": ("train = 3\n", "must be a table"),
    "not_utf8": (b"[train]\nlr = '\xff'\n", "cannot be read"),
}


@pytest.mark.parametrize("case", sorted(CONFIG_FILES))
def test_config_files_library(tmp_path, case):
    """Pass: ConfigError whose one-line message names the file and the problem."""
    from attnlab import config as C

    content, needle = CONFIG_FILES[case]
    f = tmp_path / "bad.toml"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(C.ConfigError) as e:
        C.load_toml(f)
    assert needle in str(e.value) and str(f) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["unknown_key", "wrong_type", "bad_syntax", "not_utf8"])
def test_config_files_through_the_cli(tmp_path, case):
    """Pass: `attnlab train --config BAD` exits 2 with one line naming the problem; no run folder made."""
    content, needle = CONFIG_FILES[case]
    f = tmp_path / "bad.toml"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "run"
    assert_one_line_error(
        attnlab(
            "train", "--model", "transformer", "--dataset", "numbers", "--out", str(out), "--config", str(f)
        ),
        needle,
    )
    assert not out.exists()
