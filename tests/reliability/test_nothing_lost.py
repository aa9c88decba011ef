"""Nothing lost: evaluation does not depend on the batch size, and its BLEU is the sacrebleu tool's.

Translating a 10,000-line file line for line is tests/cli/test_cli.py::test_translate_keeps_lines_and_order.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from attnlab.data import corpus
from attnlab.data.text import detokenize
from attnlab.evaluation.bleu import reference_streams
from attnlab.evaluation.evaluate import evaluate_split
from attnlab.translator import Translator
from tests.cli.test_cli import attnlab
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow  # one module-wide training run of ~20 s on one core


@pytest.fixture(scope="module")
def scoring_run(tmp_path_factory):
    """A tiny Transformer trained long enough on `numbers` to score BLEU well above 0 (~13 at step 300)."""
    from attnlab.training.loop import train

    run = tmp_path_factory.mktemp("scoring") / "run"
    train(tiny_config("transformer", "train.max_steps=300", "data.numbers_size=1000"), run, progress=False)
    return run


def test_evaluation_is_identical_at_batch_sizes_1_16_64(scoring_run):
    """Pass: on >64 test sentences, evaluate_split gives the same hypotheses, BLEU, chrF and BLEU by
    length at batch sizes 1, 16 and 64, for greedy and beam search."""
    tr = Translator.from_run(scoring_run, "last")
    dcfg = dataclasses.replace(tr.cfg.data, numbers_size=4000)  # more sentences, same tokenizers
    split = corpus.prepare(dcfg, tokenizers=(tr.src_tok, tr.tgt_tok)).splits["test"]
    assert len(split.src) > 64
    for beam in (1, 3):
        results = [evaluate_split(tr, split, beam_size=beam, batch_size=b) for b in (1, 16, 64)]
        for r in results:
            for timing in ("seconds", "sentences_per_s"):
                r.pop(timing)
        assert results[0]["bleu"] > 0 and len(set(results[0]["hypotheses"])) > 10  # not a trivial model
        assert results[1] == results[0]
        assert results[2] == results[0]


def test_bleu_equals_the_sacrebleu_command_line(scoring_run, tmp_path):
    """Pass: BLEU and chrF in eval-test-last.json written by `attnlab evaluate` equal the sacrebleu command
    line run on the hyps-test-last.txt it wrote and the split's references (all and first-only), to 1e-6."""
    proc = attnlab("evaluate", str(scoring_run), "--checkpoint", "last", "--split", "test")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((scoring_run / "eval-test-last.json").read_text())  # the checkpoint names the report
    hyps = (scoring_run / "hyps-test-last.txt").read_text(encoding="utf-8").split("\n")[:-1]
    tr = Translator.from_run(scoring_run, "last")
    split = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok)).splits["test"]
    refs = [[detokenize(r.split(), "fr") for r in rs] for rs in split.references]
    assert len(hyps) == len(refs) == report["sentences"]
    assert report["bleu"] > 0

    def cli(streams, name):
        files = []
        for j, stream in enumerate(streams):
            f = tmp_path / f"{name}{j}.txt"
            f.write_text("".join((r or "") + "\n" for r in stream), encoding="utf-8")
            files.append(str(f))
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "sacrebleu",
                *files,
                "-i",
                str(scoring_run / "hyps-test-last.txt"),
                "-m",
                "bleu",
                "chrf",
                "-w",
                "6",
                "-f",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        return {m["name"]: m["score"] for m in json.loads(out)}

    single = cli([[r[0] for r in refs]], "ref")
    assert report["bleu_single"] == pytest.approx(single["BLEU"], abs=1e-6)
    assert report["chrf_single"] == pytest.approx(single["chrF2"], abs=1e-6)
    streams = reference_streams(refs)
    if all(len(r) == len(streams) for r in refs):  # the tool needs as many references for every line
        every = cli(streams, "refs")
        assert report["bleu"] == pytest.approx(every["BLEU"], abs=1e-6)
        assert report["chrf"] == pytest.approx(every["chrF2"], abs=1e-6)
