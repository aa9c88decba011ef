"""Shared fixtures: tiny configs and tiny trained runs (trained once per session, on the `numbers` task)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from attnlab import config as C

# A shell starts a job it puts in the background (`pytest … &`, a script's `( … &)`) with SIGINT ignored,
# and an ignored signal stays ignored across exec: every `attnlab` the tests start would then ignore the
# Ctrl-C the signal tests send it, and those tests would test the shell instead. The tests' children start
# as from a terminal: SIGINT at its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

torch.set_num_threads(1)  # tests run under pytest-xdist on 2 cores: one thread per worker
os.environ.setdefault("ATTNLAB_OFFLINE", "1")

SHARED_DATA = Path(os.environ.get("ATTNLAB_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))


def tiny_config(kind: str = "transformer", *extra: str) -> C.Config:
    """A model small enough to train in seconds on the `numbers` task."""
    return C.apply_overrides(C.preset(kind), [
        "data.dataset=numbers", "data.tokenizer=word", "data.numbers_size=400", "data.batch_tokens=600", "data.num_steps=16",
        "model.num_hiddens=32", "model.embed_size=32", "model.num_layers=1", "model.num_heads=2",
        "model.ffn_num_hiddens=64", "model.dropout=0.1", "model.attention_dropout=0.1", "train.lr=3e-3", "train.warmup_steps=5",
        "train.eval_every=0", "train.eval_frac=0", "train.save_every=0", "train.log_every=5", "train.eval_max_sentences=16",
        "train.label_smoothing=0.1",
        "train.threads=1", "decode.max_len_b=6", *extra])


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory):
    """Trained tiny runs of every model kind, built lazily: tiny_runs('bahdanau') -> Path."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, Path] = {}

    def get(kind: str = "transformer") -> Path:
        if kind not in cache:
            run = root / kind
            train(tiny_config(kind, "train.max_steps=40"), run, progress=False)
            cache[kind] = run
        return cache[kind]

    return get


#: A corpus small enough to learn in seconds that holds the notes' example (`i'm home .` → `je suis chez moi .`):
#: six subjects × eleven predicates in fra.txt's format, so the alignment verdict has a table to judge by.
_SUBJECTS = {"i'm": ("je suis", "moi"), "he's": ("il est", "lui"), "she's": ("elle est", "elle"),
             "we're": ("nous sommes", "nous"), "you're": ("tu es", "toi"), "they're": ("ils sont", "eux")}
_PREDICATES = {"calm": "calme", "here": "ici", "tired": "fatigué", "late": "en retard", "ready": "prêt",
               "sick": "malade", "busy": "occupé", "happy": "heureux", "lost": "perdu", "wrong": "dans l'erreur"}


def write_notes_corpus(path: Path) -> Path:
    """Write the small corpus above as ``path`` (a ``fra.txt``): 66 pairs, the notes' example among them."""
    lines = []
    for en, (fr, pronoun) in _SUBJECTS.items():
        for pred, french in [*_PREDICATES.items(), ("home", None)]:
            text = f"{fr} chez {pronoun}" if french is None else f"{fr} {french}"
            lines.append(f"{en.capitalize()} {pred}.\t{text[0].upper()}{text[1:]}.\tCC-BY")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def notes_run(tmp_path_factory):
    """A GRU + Bahdanau run trained for seconds on :func:`write_notes_corpus`, validated twice (probes of the
    notes' example recorded at steps 0, 75 and 150): it translates `i'm home .` as `je suis chez moi .`."""
    from attnlab.training.loop import train

    root = tmp_path_factory.mktemp("notes")
    data = write_notes_corpus(root / "fra.txt")
    cfg = C.apply_overrides(C.preset("bahdanau"), [
        "data.dataset=fra-eng", f"data.data_path={data}", "data.tokenizer=word", "data.min_freq=1",
        "data.batch_tokens=400", "data.num_steps=10", "data.valid_frac=0.05", "data.test_frac=0.05",
        "model.num_hiddens=32", "model.embed_size=32", "model.num_layers=1", "model.dropout=0.0",
        "train.lr=1e-2", "train.warmup_steps=5", "train.max_steps=150", "train.eval_every=0", "train.eval_frac=0.5",
        "train.save_every=0", "train.log_every=10", "train.threads=1", "decode.max_len_b=8"])
    train(cfg, root / "run", progress=False)
    return root / "run"


@pytest.fixture(scope="session")
def fra_eng_zip() -> Path:
    path = (SHARED_DATA / "fra-eng.zip").resolve()  # absolute: tests change folder, CI names it relatively
    if not path.is_file():
        pytest.skip(f"fra-eng corpus not found at {path} (set ATTNLAB_DATA_DIR)")
    return path


@pytest.fixture
def english_only(monkeypatch):
    """The test starts and ends in English, whatever ATTNLAB_LANG the machine has (the i18n tests)."""
    from attnlab import i18n

    monkeypatch.delenv(i18n.ENV_VAR, raising=False)
    i18n.set_language("en")
    yield
    i18n.set_language("en")


@pytest.fixture(autouse=True)
def _one_thread_and_english_after_each_test():
    """An in-process `attnlab train` with train.threads=0 leaves the count where its thread tuner settled, and
    an in-process command run with --lang zh leaves Chinese on: the next test starts from one thread and in
    English again, so no test depends on the order the suite runs in."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    from attnlab import i18n

    if i18n.language() != "en":
        i18n.set_language("en")
