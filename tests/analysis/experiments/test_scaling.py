"""`attnlab scaling` (§28.1): counted FLOPs → steps, the counter's conventions, cached == uncached
decoding, the ladder on the offline `numbers` task and the command end to end."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch import nn

from attnlab import config as C
from attnlab.analysis.experiments import scaling as S
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.cli import main
from attnlab.cli import scaling as CS
from attnlab.data import corpus
from attnlab.errors import AttnlabError
from attnlab.models import build_model
from attnlab.runs import read_run
from tests.conftest import tiny_config

NUMBERS = S.Where(dataset="numbers", threads=1)
#: a ladder that trains in seconds: two widths per family, 1-thread numbers runs
TINY = S.Ladder({"gru": (16, 32), "transformer": (16, 32)}, budget_flops=3e8, lengths=(8, 16), decode_steps=(4, 8),
                bench_tokens=256, reps=1, probe_batches=2, eval_max_pairs=100, numbers_size=600, batch_tokens=256)

# ------------------------------------------------------------------------------------ FLOPs → steps


def test_steps_for_budget_rounds_and_never_gives_zero():
    assert S.steps_for_budget(1e12, 1e9) == 1000
    assert S.steps_for_budget(1e12, 3e9) == 333  # 333.3 → 333
    assert S.steps_for_budget(1e12, 1.6e9) == 625
    assert S.steps_for_budget(1e12, 0.4e9 * 1.0001) == 2500  # rounding, not truncation (2499.75)
    assert S.steps_for_budget(1e6, 1e9) == 1  # a budget below one step still trains one
    with pytest.raises(AttnlabError, match="must cost FLOPs"):
        S.steps_for_budget(1e12, 0.0)


def test_budget_and_width_options_parse_or_say_why():
    assert CS.parse_budget("2e12") == 2e12
    assert CS.parse_budget("2T") == 2e12 and CS.parse_budget("500g") == 5e11 and CS.parse_budget("1P") == 1e15
    assert CS.parse_widths("64,128, 256") == (64, 128, 256)
    for bad in ("abc", "-1", "0", "2X", "inf"):
        with pytest.raises(AttnlabError, match="--budget"):
            CS.parse_budget(bad)
    with pytest.raises(AttnlabError, match="--widths"):
        CS.parse_widths("64,x")
    with pytest.raises(AttnlabError, match="multiple of 4"):
        dataclasses.replace(S.QUICK, widths={"gru": (10,)})
    with pytest.raises(AttnlabError, match="unknown families"):
        dataclasses.replace(S.QUICK, widths={"lstm": (16,)})


def test_counted_flops_follow_the_6n_rule_for_a_linear_layer():
    """forward 2·B·n·m, backward twice that (gradients of the input and of the weight): 6 per weight per row."""
    B, n, m = 8, 32, 24
    layer = nn.Linear(n, m)
    x = torch.randn(B, n, requires_grad=True)
    assert S.counted_flops(lambda: layer(x)) == 2 * B * n * m
    assert S.counted_flops(lambda: layer(x).sum().backward()) == 6 * B * n * m


def test_fused_attention_is_counted_like_the_explicit_products():
    """The CPU's fused SDPA kernel (unknown to torch's counter, counted by EXTRA_FLOP_FORMULAS) and the
    explicit Q Kᵀ, softmax, P V path count the same FLOPs, forward and backward, padded or causal."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(32, 4, 0.0)
    x = torch.randn(3, 7, 32, requires_grad=True)
    mask = torch.ones(3, 1, 7, dtype=torch.bool)
    mask[0, 0, 5:] = False
    for kwargs in ({"mask": mask}, {"is_causal": True}):
        explicit = S.counted_flops(lambda kw=kwargs: mha(x, need_weights=True, **kw)[0].sum().backward())
        fused = S.counted_flops(lambda kw=kwargs: mha(x, need_weights=False, **kw)[0].sum().backward())
        projections = S.counted_flops(lambda: (mha.in_proj(x).sum() + mha.out_proj(x).sum()).backward())
        assert fused == explicit
        assert fused > projections  # the attention products are counted, not only the projections


# ------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_cached_decoding_equals_rerunning_the_prefix(kind):
    """The KV cache (the GRU's state) changes the cost, never the tokens (STYLE.md habit 8)."""
    cfg = tiny_config(kind)
    torch.manual_seed(0)
    model = build_model(cfg.model, 50, 60).eval()
    batch = S.random_batch(3, 6, 2, 50, 60, torch.Generator().manual_seed(0))
    cached, cached_logits = S.decode_fixed(model, batch.src, batch.src_valid_lens, 7, cache=True)
    rerun, rerun_logits = S.decode_fixed(model, batch.src, batch.src_valid_lens, 7, cache=False)
    assert cached.shape == (3, 7)
    assert torch.equal(cached, rerun)
    torch.testing.assert_close(cached_logits, rerun_logits, atol=1e-5, rtol=1e-4)
    flops = {n: S.counted_flops(lambda n=n: S.decode_fixed(model, batch.src, batch.src_valid_lens, n, True))
             for n in (4, 8)}
    flops_rerun = {n: S.counted_flops(lambda n=n: S.decode_fixed(model, batch.src, batch.src_valid_lens, n, False))
                   for n in (4, 8)}
    # without a cache the work per token grows with the prefix; with it, it does not
    assert flops_rerun[8] / 8 > flops_rerun[4] / 4
    assert flops[8] / 8 <= flops[4] / 4
    assert flops_rerun[8] > 2 * flops[8]


# ------------------------------------------------------------------------------------ planning


def test_plan_turns_the_budget_into_steps_of_counted_flops():
    ladder = dataclasses.replace(TINY, budget_flops=2e8)
    cfg = S.rung_config(ladder, S.FAMILIES["transformer"], 16, NUMBERS)
    assert (cfg.train.max_minutes, cfg.train.size, cfg.data.dataset) == (0, "base", "numbers")
    assert S.rung_config(ladder, S.FAMILIES["gru"], 16, NUMBERS).data == cfg.data  # one corpus, the same batches
    prepared = corpus.prepare(cfg.data)
    rungs = {(f, w): S.plan_rung(ladder, S.FAMILIES[f], w, NUMBERS, prepared, torch.device("cpu"))
             for f in ("gru", "transformer") for w in (16, 32)}
    for r in rungs.values():
        assert math.isclose(r.flops_per_step, r.flops_per_token * r.tokens_per_step)
        assert r.steps == S.steps_for_budget(2e8, r.flops_per_step)
        assert abs(r.steps * r.flops_per_step - 2e8) <= r.flops_per_step / 2 + 1
        assert r.est_seconds > 0 and r.sec_per_step > 0
    for f in ("gru", "transformer"):  # a wider model costs more per token and so gets fewer steps
        assert rungs[f, 32].flops_per_token > 2 * rungs[f, 16].flops_per_token
        assert rungs[f, 32].steps < rungs[f, 16].steps
        assert rungs[f, 32].params > rungs[f, 16].params


def test_cli_plan_only_prints_steps_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ladder"
    assert main(["scaling", "--quick", "--dataset", "numbers", "--widths", "16", "--budget", "1e8", "--threads", "1",
                 "--plan-only", "--runs-dir", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "gru-d16:" in text and "transformer-d16:" in text and "nothing trained" in text
    assert not out.exists()
    assert main(["scaling", "--budget", "lots", "--runs-dir", str(out)]) == 2
    assert "--budget 'lots'" in capsys.readouterr().err


def test_a_plan_answers_through_the_report_protocol(tmp_path):
    from attnlab.analysis.report import Report

    ladder = dataclasses.replace(TINY, widths={"gru": (16,), "transformer": (16,)}, budget_flops=1e8)
    report = S.run(ladder, tmp_path / "ladder", NUMBERS, plan_only=True)
    assert isinstance(report, Report) and report.figure() is None  # nothing measured yet
    assert report.format().startswith("planned 2 rungs") and "transformer-d16:" in report.format()
    data = json.loads(json.dumps(report.to_json()))
    assert data["plan_only"] and [r["name"] for r in data["rungs"]] == ["gru-d16", "transformer-d16"]
    assert data["machine"]["peak_gflops"] > 0 and data["machine"]["peak_dtype"] == "float32"  # the one probe
    assert not (tmp_path / "ladder").exists()


# ------------------------------------------------------------------------------------ the ladder


@pytest.mark.slow
def test_ladder_on_numbers_trains_every_rung_for_its_budget(tmp_path):
    out = tmp_path / "ladder"
    report = S.run(TINY, out, NUMBERS)
    saved = json.loads((out / "scaling.json").read_text())
    assert saved["rungs"] == report.to_json()["rungs"] and (out / "scaling.png").stat().st_size > 10_000
    assert "greedy decoding" in report.format() and len(report.figure().axes) == 6
    assert [r["name"] for r in saved["rungs"]] == ["gru-d16", "gru-d32", "transformer-d16", "transformer-d32"]
    for r in saved["rungs"]:
        assert read_run(r["run"]).meta["steps"] == r["steps"]  # trained by steps, exactly the plan
        assert read_run(r["run"]).config.train.max_minutes == 0
        assert math.isclose(r["realised_flops"], r["flops_per_token"] * r["tokens_seen"])
        if r["steps"] >= 10:  # over a few steps the batches' sizes scatter around the epoch's mean
            assert abs(r["realised_flops"] / TINY.budget_flops - 1) < 0.15
        assert len(r["valid"]) >= 2 and all(math.isfinite(v["valid_loss"]) for v in r["valid"])
        assert r["valid"][-1]["step"] == r["steps"] and r["final_valid_loss"] == r["valid"][-1]["valid_loss"]
    for name in ("gru", "transformer"):
        assert [x["length"] for x in saved["throughput"][name]] == [8, 16]
        assert all(x["tokens_per_s"] > 0 for x in saved["throughput"][name])
        dec = saved["decoding"][name]
        assert [x["steps"] for x in dec] == [4, 8]
        assert all(x["no_cache"]["flops_per_token"] > x["cache"]["flops_per_token"] for x in dec)
    with pytest.raises(AttnlabError, match="already holds"):
        S.run(TINY, out, NUMBERS)


@pytest.mark.slow
def test_cli_end_to_end_on_the_tiniest_ladder(tmp_path, capsys):
    out = tmp_path / "ladder"
    assert main(["scaling", "--quick", "--dataset", "numbers", "--widths", "16", "--budget", "1e8", "--threads", "1",
                 "--runs-dir", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "gru-d16" in text and "transformer-d16" in text and "greedy decoding" in text
    assert f"wrote {out / 'scaling.json'}" in text
    saved = json.loads((out / "scaling.json").read_text())
    assert {r["name"] for r in saved["rungs"]} == {"gru-d16", "transformer-d16"}
    assert C.load_toml(out / "runs" / "gru-d16" / "config.toml").train.max_steps == saved["rungs"][0]["steps"]
    assert (out / "scaling.png").is_file()
    assert main(["scaling", "--quick", "--dataset", "numbers", "--runs-dir", str(out), "-q"]) == 2  # never mixes ladders
    assert "already holds" in capsys.readouterr().err


@pytest.mark.slow
def test_the_ladder_says_its_estimate_first_and_its_time_against_it_last(tmp_path):
    # §28.1 in the notebook: the estimate is said before any training, from the steps this process timed, and
    # the time taken after planning is said at the end beside it, with their ratio (no timing is asserted)
    ladder = dataclasses.replace(TINY, widths={"gru": (16,), "transformer": (16,)}, budget_flops=5e7,
                                 lengths=(8,), decode_steps=(4,))
    said: list[str] = []
    report = S.run(ladder, tmp_path / "ladder", NUMBERS, log=said.append)
    estimate = next(i for i, line in enumerate(said) if line.startswith("estimated "))
    assert "from the steps this process timed" in said[estimate]
    assert estimate < next(i for i, line in enumerate(said) if line.startswith("training "))
    data = report.to_json()
    ratio = (data["elapsed_s"] - data["plan_s"]) / data["estimate_s"]
    assert 0 < data["plan_s"] < data["elapsed_s"]
    assert said[-1].startswith("took ") and f"{ratio:.2f}× the estimate" in said[-1]
    assert report.format().splitlines()[-1] == said[-1]  # the printed report ends on the same line
