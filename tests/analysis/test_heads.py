"""`attnlab heads`: head importance by masking, with its noise (paired bootstrap over sentences)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from attnlab.analysis import heads as Hd
from attnlab.cli import main
from attnlab.data import corpus
from attnlab.data.batching import collate
from attnlab.evaluation.bleu import bleu_from_stats, corpus_scores, sentence_stats
from attnlab.training.losses import sequence_loss
from attnlab.translator import Translator

HYPS = ["le chat est sur le tapis .", "il fait beau", "je suis chez moi .", "elle lit un livre ."]
REFS = [
    ["le chat est sur le tapis .", "un chat est là ."],
    ["il fait beau ."],
    ["je suis à la maison .", "je suis chez moi ."],
    ["elle lit un roman ."],
]


def test_bleu_from_sentence_stats_is_sacrebleus_corpus_bleu():
    stats = np.array(sentence_stats(HYPS, REFS))
    assert bleu_from_stats(stats.sum(0)) == pytest.approx(corpus_scores(HYPS, REFS)["bleu"])
    # a resample (sentence 2 twice, sentence 0 dropped) scored from counts == scored from the texts
    scores = Hd.SampleScores(stats, np.ones(4), np.ones(4))
    counts = np.array([[0.0, 1.0, 2.0, 1.0]])
    picked = [1, 2, 2, 3]
    expect = corpus_scores([HYPS[i] for i in picked], [REFS[i] for i in picked])["bleu"]
    assert scores.bleu(counts)[0] == pytest.approx(expect)


def test_bootstrap_counts_and_intervals():
    counts = Hd.bootstrap_counts(7, resamples=50, seed=3)
    assert counts.shape == (50, 7) and (counts.sum(1) == 7).all()
    assert (counts == Hd.bootstrap_counts(7, resamples=50, seed=3)).all()  # reproducible
    same = np.linspace(10, 20, 50)
    assert Hd.paired_interval(same, same) == (0.0, 0.0)  # paired: identical systems differ by exactly 0
    lo, hi = Hd.paired_interval(same + 1.0, same)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.0)


def test_effect_follows_the_interval():
    def head(lo, hi):
        return Hd.HeadStats(
            "cross", 0, 0, {"bleu_drop": (lo + hi) / 2, "bleu_drop_lo": lo, "bleu_drop_hi": hi}
        )

    assert head(0.5, 2.0).effect == "hurts"
    assert head(-2.0, -0.1).effect == "helps"
    assert head(-1.0, 1.5).effect == "noise"
    assert Hd.HeadStats("cross", 0, 0, {"bleu_drop": math.nan}).effect == ""


def _sample(tr, n=8):
    prepared = corpus.prepare(tr.cfg.data, tokenizers=(tr.src_tok, tr.tgt_tok))
    return Hd._sample(prepared, n)


def test_sample_loss_is_the_training_loss(tiny_runs):
    tr = Translator.from_run(tiny_runs("transformer"))
    src, tgt, refs = _sample(tr)
    scores = Hd.score_sample(tr.model.eval(), tr, src, tgt, refs)
    with torch.inference_mode():
        out = sequence_loss(tr.model, collate(src, tgt, list(range(len(src)))), 0.0)
    assert scores.loss() == pytest.approx(float(out.nll_sum) / out.num_tokens, rel=1e-5)
    assert scores.tokens.sum() == out.num_tokens and len(scores.hypotheses) == len(src)


def test_a_chinese_target_is_scored_with_sacrebleus_zh_tokenizer(tiny_runs, monkeypatch):
    """heads' BLEU uses the tokenizer evaluate uses for the target language (bleu_tokenize): `zh` for Chinese,
    where 13a would see a whole unspaced sentence as one word."""
    tr = Translator.from_run(tiny_runs("transformer"))
    src, tgt, refs = _sample(tr, n=3)
    seen = []

    def stats(hyps, refs, tokenize="13a"):
        seen.append(tokenize)
        return sentence_stats(hyps, refs, tokenize=tokenize)

    monkeypatch.setattr(Hd, "sentence_stats", stats)
    assert Hd.score_sample(tr.model.eval(), tr, src, tgt, refs).tokenize == "13a" and seen == ["13a"]
    monkeypatch.setattr(tr.tgt_tok, "lang", "zh")
    assert Hd.score_sample(tr.model.eval(), tr, src, tgt, refs).tokenize == "zh" and seen[-1] == "zh"
    zh = np.array(sentence_stats(["我在家里。"], [["我在家。"]], tokenize="zh"))
    assert Hd.SampleScores(zh, np.ones(1), np.ones(1), tokenize="zh").bleu() == pytest.approx(
        corpus_scores(["我在家里。"], [["我在家。"]], tokenize="zh")["bleu"])


def test_silencing_a_head_that_does_nothing_is_within_the_noise(tiny_runs):
    # zero head 0's columns of W_o in the cross-attention: silencing it then changes nothing at all
    tr = Translator.from_run(tiny_runs("transformer"))
    model = tr.model.eval()
    mha = Hd.attention_modules(model)["cross"][0]
    with torch.no_grad():
        mha.out_proj.weight[:, : mha.head_size] = 0
    sample = _sample(tr)
    base = Hd.score_sample(model, tr, *sample)
    counts = Hd.bootstrap_counts(len(sample[0]), resamples=200)
    vals = Hd._importance(mha, 0, model, tr, sample, base, (counts, base.bleu(counts), base.loss(counts)))
    assert vals["bleu_drop"] == 0 and (vals["bleu_drop_lo"], vals["bleu_drop_hi"]) == (0.0, 0.0)
    assert abs(vals["loss_increase"]) < 1e-9
    assert Hd.HeadStats("cross", 0, 0, vals).effect == "noise"


def test_importance_intervals_and_progress_bar(tiny_runs, capsys):
    report = Hd.run(tiny_runs("transformer"), sentences=8, resamples=200, progress=True)
    assert "heads (masking)" in capsys.readouterr().err  # tqdm's bar, on stderr
    assert report.resamples == 200 and len(report.heads) == 6
    for h in report.heads:
        lo, hi = h.values["bleu_drop_lo"], h.values["bleu_drop_hi"]
        assert lo <= hi and h.values["loss_increase_lo"] <= h.values["loss_increase_hi"]
        assert h.effect == ("hurts" if lo > 0 else "helps" if hi < 0 else "noise")
    table = report.format()
    assert "paired bootstrap interval over the 8 sentences, 200 resamples" in table
    assert Hd.run(tiny_runs("transformer"), sentences=4, importance=False).resamples == 0
    assert "heads (masking)" not in capsys.readouterr().err  # nothing to mask: no bar


@pytest.mark.slow
def test_heads_cli_reports_intervals_quietly(tiny_runs, tmp_path, capsys):
    run = tiny_runs("transformer")
    out = tmp_path / "heads"
    assert main(["heads", str(run), "--sentences", "8", "--save-dir", str(out), "--quiet"]) == 0
    assert "heads (masking)" not in capsys.readouterr().err  # --quiet: no bar
    report = json.loads((out / "heads-sentences8.json").read_text())
    assert report["bootstrap"] == {"resamples": Hd.BOOTSTRAP_RESAMPLES, "confidence": Hd.CONFIDENCE}
    assert all(h["effect"] in ("hurts", "helps", "noise") for h in report["heads"])
    md = (out / "heads-sentences8.md").read_text()
    assert "paired bootstrap interval over the 8 sentences" in md and "[" in md


def test_run_answers_through_the_report_protocol(tiny_runs):
    from attnlab.analysis.report import Report

    report = Hd.run(tiny_runs("transformer"), sentences=4, importance=False)
    assert isinstance(report, Report)
    assert "| cross (enc-dec) | 1 | 2 |" in report.format() and report.format("en") == str(report)
    figures = report.figures()
    assert list(figures) == list(report.shape)
    assert {fig.get_suptitle().split(" heads of ")[0] for fig in figures.values()} == {
        Hd.KIND_NAMES[k] for k in report.shape}
    assert report.figure().get_suptitle() == figures["enc_self"].get_suptitle()  # the first kind
    data = json.loads(json.dumps(report.to_json()))
    assert data["sentences"] == 4 and len(data["heads"]) == 6


def test_the_answer_names_what_heads_do_and_which_are_noise():
    """§28.5's plain answer: a head matters when silencing it moves BLEU or the loss beyond the noise; it is
    noise only when its attention is also near-uniform (focus below NOISE_FOCUS); otherwise it has a pattern."""
    ln4 = math.log(4)

    def head(h, entropy, bleu_lo, bleu_hi, loss_lo=-1.0, loss_hi=1.0, **extra):
        return Hd.HeadStats("enc_self", 0, h, {"entropy": entropy, "uniform_entropy": ln4, "bleu_drop": 0.0,
                                               "bleu_drop_lo": bleu_lo, "bleu_drop_hi": bleu_hi,
                                               "loss_increase_lo": loss_lo, "loss_increase_hi": loss_hi, **extra})

    heads = [head(0, 0.2, 0.5, 2.0, prev=0.8),  # previous-token, BLEU falls when silenced
             head(1, 0.98 * ln4, -1.0, 1.0),  # uniform, nothing when silenced: noise
             head(2, 0.5, -1.0, 1.0),  # picks keys, nothing when silenced
             head(3, 0.98 * ln4, -1.0, 1.0, loss_lo=0.01, loss_hi=0.2)]  # uniform, yet the loss rises: matters
    assert heads[1].focus == pytest.approx(0.02) and heads[1].matters is False and heads[3].matters is True
    report = Hd.HeadsReport("run", 50, 20.0, 2.0, heads, {"enc_self": (1, 4)}, resamples=200)
    text = Hd.answer(report)
    lines = text.splitlines()
    does = next(x for x in lines if x.startswith("- does something"))
    assert "head 1 (previous-token)" in does and "head 4" in does
    assert "head 3" in next(x for x in lines if x.startswith("- has a pattern"))
    assert next(x for x in lines if x.startswith("- indistinguishable from noise")).endswith("head 2 (focus 0.02)")
    assert lines[-1] == ("In short, of 4 heads: doing a measurable job 2; attending in a pattern the model can spare 1; "
                         "noise 1.")
    assert report.format().endswith(text)


def test_the_answer_without_importance_says_what_it_cannot_tell(tiny_runs):
    report = Hd.run(tiny_runs("transformer"), sentences=4, importance=False)
    text = report.format()
    assert "## The answer to §28.5" in text and "was not measured (--no-importance)" in text
    assert all(0.0 <= h.focus <= 1.0 for h in report.heads if math.isfinite(h.focus))


def test_the_plain_answer_speaks_chinese_whole():
    """§28.5's answer under zh: head names and roles translated too, not "encoder self layer 1 head 1
    (previous-token)" inside a Chinese line."""
    from attnlab import i18n
    from attnlab.analysis import heads as Hd
    from tests.viz.test_figures import _report

    report = _report({"enc_self": (1, 2), "cross": (1, 2)})
    for h in report.heads:  # every role named: one dominating statistic each
        h.values.update(prev=0.0, same=0.0, next=0.0, eos=0.0, diag_agreement=0.0)
        h.values["prev" if h.head == 0 else "same"] = 0.9
    roles = {h.role for h in report.heads}
    assert roles == {"previous-token", "same-token", "diagonal-position"}
    with i18n.using("zh"):
        text = Hd.answer(report)
    listed = [line for line in text.splitlines() if line.startswith("- ")]
    assert listed and not any(w in text for w in ("encoder self", "cross (enc-dec)", "layer", "-token", "position"))


def test_sentence_nll_sums_to_the_training_loss_per_sentence(tiny_runs):
    from attnlab.evaluation.loss import sentence_nll

    tr = Translator.from_run(tiny_runs("transformer"))
    src, tgt, _refs = _sample(tr, n=6)
    nll, tokens = sentence_nll(tr.model, src, tgt, tr.device, batch_size=4)  # two batches
    for i in range(len(src)):  # each sentence alone, through the training loss
        with torch.inference_mode():
            out = sequence_loss(tr.model.eval(), collate([src[i]], [tgt[i]], [0]), 0.0)
        assert nll[i] == pytest.approx(float(out.nll_sum), rel=1e-5) and tokens[i] == out.num_tokens
