"""The doctor on tiny runs trained here, one per §10 symptom, each made so that only that symptom can show.

Each run gets exactly its symptom; every other check answers ✓ with the numbers it compared, or "not enough
evidence" with what it needs, never a ✓ on too little (the synthetic curves of test_doctor.py test each rule).
"""

from __future__ import annotations

import random

import pytest

from attnlab import config as C
from attnlab.analysis.diagnose import doctor as D
from tests.conftest import tiny_config

pytestmark = pytest.mark.slow


def _random_pairs(path, n=180, seed=0):
    """``n`` pairs of random words (fra.txt's format): nothing to generalise, everything to memorise, so the
    validation loss can only rise once the training pairs are learnt (Zhang et al. 2017, random labels)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        src = " ".join(f"w{rng.randrange(40)}" for _ in range(rng.randint(2, 4)))
        tgt = " ".join(f"m{rng.randrange(40)}" for _ in range(rng.randint(2, 4)))
        lines.append(f"{src.capitalize()}.\t{tgt.capitalize()}.\tCC-BY")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _config(symptom, tmp_path):
    if symptom == "overfitting":  # no regulariser, a model big enough to memorise 140 random pairs
        data = _random_pairs(tmp_path / "fra.txt")
        return C.apply_overrides(C.preset("bahdanau"), [
            "data.dataset=fra-eng", f"data.data_path={data}", "data.tokenizer=word", "data.min_freq=1",
            "data.batch_tokens=400", "data.num_steps=8", "data.valid_frac=0.2", "data.test_frac=0.05",
            "model.num_hiddens=64", "model.embed_size=64", "model.num_layers=1", "model.dropout=0.0",
            "train.weight_decay=0", "train.label_smoothing=0", "train.lr=1e-2", "train.warmup_steps=5",
            "train.max_steps=100", "train.eval_every=25", "train.eval_frac=0", "train.save_every=0",
            "train.log_every=10", "train.threads=1", "decode.max_len_b=8", "train.probe_sentences=[]"])
    extra = {
        # Adam's steps 300× the working 3e-3, unclipped: the loss climbs back and jumps
        "lr_too_high": ("train.lr=1.0", "train.clip_grad_norm=0", "train.warmup_steps=0", "train.max_steps=40"),
        # 100× below the working lr, constant: 200 updates (the rule's horizon) of a slow, steady fall
        "lr_too_low": ("train.lr=3e-5", "train.warmup_steps=0", "train.schedule=constant", "train.max_steps=200",
                       "train.log_every=25"),
        # "three hundred and five" is 4 words + <eos>: num_steps=4 cuts most pairs; too short to judge the rest
        "num_steps_too_small": ("data.num_steps=4", "train.max_steps=20"),
        # stopped while the validation loss still falls fast
        "undertrained": ("train.max_steps=60", "train.eval_every=30"),
    }[symptom]
    return tiny_config("bahdanau", *extra)


@pytest.mark.parametrize("symptom", ["lr_too_high", "lr_too_low", "overfitting", "num_steps_too_small",
                                     "undertrained"])
def test_a_tiny_run_with_one_bad_setting_gets_exactly_that_symptom(symptom, tmp_path):
    from attnlab.training.loop import train

    train(_config(symptom, tmp_path), tmp_path / "run", progress=False)
    report = D.run(tmp_path / "run")
    assert {f.symptom for f in report.detected} == {symptom}, report.format()
    for f in report.findings:
        if f.detected:
            assert f.evidence and f.suggestion, f
        elif f.checked:  # a ✓ shows the numbers it compared and the threshold
            assert f.evidence and ("symptom" in f.evidence[-1] or "threshold" in f.evidence[-1]), f
        else:
            assert f.need and f.have, f
            assert f"not enough evidence: need {f.need}, have {f.have}" in report.format()
