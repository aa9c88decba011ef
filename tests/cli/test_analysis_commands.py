"""`attnlab sweep`, `heads` and `compare` on tiny runs of the offline numbers task."""

from __future__ import annotations

import json
import math
import shlex
import signal

import pytest
import torch

from attnlab import config as C
from attnlab.analysis import heads as Hd
from attnlab.analysis.experiments import sweep as Sw
from attnlab.attention.multi_head import MultiHeadAttention
from attnlab.cli import main
from attnlab.data.batching import collate
from attnlab.errors import AttnlabError
from attnlab.runs import read_run
from attnlab.viz.figure import save_figure

# ------------------------------------------------------------------------------------------- sweep


def test_parse_grid_and_points():
    axes = Sw.parse_grid(["train.lr=1e-3,3e-3", "model.num_layers=1,2,3"])
    assert axes == {"train.lr": ["1e-3", "3e-3"], "model.num_layers": ["1", "2", "3"]}
    pts = Sw.grid_points(axes)
    assert len(pts) == 6 and pts[0] == {"train.lr": "1e-3", "model.num_layers": "1"}
    some = Sw.grid_points(axes, random_n=4, seed=1)
    assert len(some) == 4 and len({tuple(p.values()) for p in some}) == 4 and all(p in pts for p in some)
    assert Sw.grid_points(axes, random_n=4, seed=1) == some  # reproducible
    for bad in (["lr=1"], ["train.lr="], ["train.lr=1", "train.lr=2"], []):
        with pytest.raises(C.ConfigError):
            Sw.parse_grid(bad)


def test_bad_grid_value_fails_before_training(tmp_path):
    base = C.apply_overrides(C.preset("transformer"), ["data.dataset=numbers"])
    with pytest.raises(C.ConfigError, match="model.num_layers"):
        Sw.run(base, {"model.num_layers": ["1", "two"]}, tmp_path / "s", 0.1)
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_sweep_cli_two_trials(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--model",
        "transformer",
        "--dataset",
        "numbers",
        "--max-steps",
        "12",
        "--quiet",
        "data.numbers_size=300",
        "data.batch_tokens=600",
        "data.num_steps=16",
        "model.num_hiddens=32",
        "model.num_layers=1",
        "model.num_heads=2",
        "model.ffn_num_hiddens=64",
        "train.warmup_steps=2",
        "train.eval_every=0",
        "train.save_every=0",
        "train.log_every=4",
        "train.eval_max_sentences=8",
        "train.threads=1",
        "decode.max_len_b=6",
        "--grid",
        "train.lr=3e-3,1e-5",
        "--minutes-per-trial",
        "1",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    result = json.loads((out / "sweep.json").read_text())
    assert [t["name"] for t in result["trials"]] == ["trial-00", "trial-01"]
    assert all(t["status"] == "ok" and t["steps"] == 12 for t in result["trials"])
    # lr 1e-5 barely moves the weights in 12 steps: the healthy lr must win on loss at least.
    losses = [t["valid_loss"] for t in result["trials"]]
    assert losses[0] < losses[1]
    best = result["trials"][result["best"]]
    assert best["name"] == "trial-00"
    cfg = C.load_toml(out / "best.toml")
    assert cfg.train.lr == 3e-3 and cfg.model.num_hiddens == 32 and cfg.train.max_minutes == 1.0
    assert (out / "trial-00" / "checkpoints").is_dir()
    assert (out / "sweep.png").stat().st_size > 0 and (out / "sweep.svg").stat().st_size > 0
    assert "trial-00 ★" in (out / "sweep.md").read_text() and "best: trial-00" in text
    with pytest.raises(AttnlabError, match="already holds a sweep"):
        Sw.run(cfg, {"train.lr": ["1e-3"]}, out, 0.1)


TINY_SWEEP = ["--dataset", "numbers", "--max-steps", "6", "--quiet", "data.numbers_size=300", "data.batch_tokens=600",
              "data.num_steps=16", "model.num_hiddens=32", "model.embed_size=32", "model.num_layers=1",
              "model.num_heads=2", "model.ffn_num_hiddens=64", "train.warmup_steps=2", "train.eval_every=0",
              "train.save_every=0", "train.log_every=3", "train.eval_max_sentences=8", "train.threads=1",
              "decode.max_len_b=6"]


@pytest.mark.slow
def test_the_printed_train_command_reproduces_the_best_trial_of_a_kind_axis(tmp_path, capsys):
    """A model.kind axis: the follow-up command said `--model` of the sweep (transformer), and `--model`
    overrode best.toml's kind, so it trained a Transformer where the best trial was a GRU seq2seq."""
    out = tmp_path / "sweep"
    assert main(["sweep", "--model", "transformer", *TINY_SWEEP, "--grid", "model.kind=seq2seq",
                 "--runs-dir", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "attnlab train " in x)
    command = shlex.split(line.split("attnlab train ", 1)[1].split(" (", 1)[0])
    i = command.index("--out")
    assert main(["config", *command[:i], *command[i + 2:]]) == 0  # what `train` would run with that line
    would_train = tmp_path / "would.toml"
    would_train.write_text(capsys.readouterr().out)
    trained = read_run(out / "trial-00").config
    assert trained.model.kind == "seq2seq" and C.to_dict(C.load_toml(would_train)) == C.to_dict(trained)


def test_model_that_contradicts_the_config_files_kind_is_an_error(tmp_path, capsys):
    """`--model` silently replaced the --config file's model.kind (sweep, train and config alike)."""
    f = tmp_path / "t.toml"
    f.write_text(C.dumps_toml(C.preset("transformer")))
    for argv in (["sweep", "--model", "bahdanau", "--config", str(f), "--grid", "train.lr=1e-3",
                  "--runs-dir", str(tmp_path / "s")],
                 ["train", "--model", "bahdanau", "--config", str(f), "--out", str(tmp_path / "r")],
                 ["config", "--model", "bahdanau", "--config", str(f)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--model bahdanau contradicts model.kind" in err[0], err
    assert not (tmp_path / "s").exists() and not (tmp_path / "r").exists()
    assert main(["config", "--model", "transformer", "--config", str(f)]) == 0  # the same kind is fine


def test_a_signal_stops_the_sweep_not_only_its_trial(tmp_path, monkeypatch):
    """A Ctrl-C stopped one trial's training and the sweep went on to the next."""
    from attnlab.interrupts import Interrupted
    from attnlab.training.loop import TrainResult

    trained = []

    def fake_train(cfg, run_dir, **kw):  # the trainer's answer to a SIGTERM: stopped, saved
        trained.append(run_dir)
        return TrainResult(run_dir, 3, 0, "signal", -1.0, signal=signal.SIGTERM)

    monkeypatch.setattr(Sw, "train", fake_train)
    base = C.apply_overrides(C.preset("transformer"), ["data.dataset=numbers", "data.numbers_size=300"])
    with pytest.raises(Interrupted) as info:
        Sw.run(base, {"train.lr": ["1e-3", "3e-3"]}, tmp_path / "s", 0.1, log=lambda *a: None)
    assert info.value.signum == signal.SIGTERM and len(trained) == 1
    record = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert [t["status"] for t in record["trials"]] == ["interrupted"]


def test_run_answers_through_the_report_protocol(tmp_path, monkeypatch):
    """Two trials scored by a stand-in trainer (it logs one validation): the sweep's report and its files."""
    from attnlab.analysis.report import Report
    from attnlab.training.loop import TrainResult

    def fake_train(cfg, run_dir, **kw):
        run_dir.mkdir(parents=True)
        bleu = 10.0 if cfg.train.lr == 3e-3 else 2.0
        (run_dir / "metrics.jsonl").write_text(json.dumps({"event": "valid", "step": 3, "valid_loss": 2.0,
                                                           "valid_bleu": bleu}) + "\n")
        return TrainResult(run_dir, 3, 0, "max_steps", bleu)

    monkeypatch.setattr(Sw, "train", fake_train)
    base = C.apply_overrides(C.preset("transformer"), ["data.dataset=numbers", "data.numbers_size=300"])
    result = Sw.run(base, {"train.lr": ["1e-3", "3e-3"]}, tmp_path / "s", 0.1, log=lambda *a: None)
    assert isinstance(result, Report) and result.trials[result.best].name == "trial-01"
    assert "trial-01 ★" in result.format() and result.format() + "\n" == (tmp_path / "s" / "sweep.md").read_text()
    assert result.figure().get_suptitle() == "sweep s: 2 trials, best trial-01 (red)"
    assert json.loads(json.dumps(result.to_json())) == json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert "--config" in result.train_command() and (tmp_path / "s" / "sweep.png").is_file()


# ------------------------------------------------------------------------------------------- heads


class _B:  # the fields of a Batch that _positions reads
    def __init__(self, src, src_valid_lens, tgt_valid_lens):
        self.src, self.src_valid_lens, self.tgt_valid_lens = src, src_valid_lens, tgt_valid_lens


def test_head_statistics_on_known_patterns():
    # one sentence of 4 real source tokens (last = <eos>) and 1 pad; two heads in one layer:
    # head 0 attends to itself, head 1 to the previous token (the first query to itself).
    from attnlab.data.vocab import EOS, PAD

    S = 5
    batch = _B(torch.tensor([[7, 8, 9, EOS, PAD]]), torch.tensor([4]), torch.tensor([3]))
    w = torch.zeros(1, 1, 2, S, S)  # (B, L, H, Q, K)
    for q in range(4):
        w[0, 0, 0, q, q] = 1.0
        w[0, 0, 1, q, max(q - 1, 0)] = 1.0
    sums = Hd._head_sums(w, Hd._positions("enc_self", batch, S, 3))
    n = sums["count"][0, 0]
    assert n == 4  # the padding query does not count
    mean = {k: v[0] / n for k, v in sums.items() if k != "count"}
    assert mean["same"].tolist() == [1.0, 0.25] and mean["prev"].tolist() == [0.0, 0.75]
    assert mean["distance"].tolist() == [0.0, 0.75]
    assert mean["eos"].tolist() == [0.25, 0.0]  # only head 0's <eos> query looks at <eos>
    assert torch.allclose(mean["entropy"], torch.zeros(2))


def test_cross_diagonal_agreement():
    S, T = 4, 4  # 3 source tokens + <eos>; target: <bos> y1 y2 y3
    batch = _B(torch.tensor([[5, 6, 7, 3]]), torch.tensor([4]), torch.tensor([4]))
    w = torch.zeros(1, 1, 2, T, S)
    for t in range(T):
        w[0, 0, 0, t, t] = 1.0  # the diagonal
        w[0, 0, 1, t, S - 1 - t] = 1.0  # the anti-diagonal
    sums = Hd._head_sums(w, Hd._positions("cross", batch, S, T))
    agree = (sums["diag_agreement"][0] / sums["count"][0]).tolist()
    assert agree == [1.0, 0.5]  # the anti-diagonal crosses the diagonal band in the middle only


def test_silence_head_zeroes_exactly_one_head():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 3, 8)
    full, _ = mha(x)
    with Hd.silence_head(mha, 1):
        masked, _ = mha(x)
    with torch.no_grad():  # by hand: the concatenation with head 1's columns zeroed, through W_o
        q, k, v = mha._heads(mha.in_proj(x), 3)
        heads = torch.softmax(q @ k.transpose(-1, -2) / 2.0, -1) @ v  # (B, H, Q, Dh)
        heads[:, 1] = 0
        expect = mha.out_proj(heads.transpose(1, 2).reshape(2, 3, 8))
    assert torch.allclose(masked, expect, atol=1e-5) and not torch.allclose(masked, full)
    again, _ = mha(x)
    assert torch.equal(again, full)  # the hook is gone


@pytest.mark.slow
def test_heads_cli_on_tiny_transformer(tiny_runs, tmp_path, capsys):
    run = tiny_runs("transformer")
    out = tmp_path / "heads"
    assert main(["heads", str(run), "--sentences", "8", "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    report = json.loads((out / "heads-sentences8.json").read_text())  # not the default 100: its own name
    kinds = {(h["kind"], h["layer"], h["head"]) for h in report["heads"]}
    assert kinds == {(k, 0, h) for k in ("enc_self", "dec_self", "cross") for h in range(2)}
    for h in report["heads"]:
        assert 0 <= h["prev"] + h["same"] + h["next"] <= 1 + 1e-5
        assert h["bleu_drop"] is not None and h["loss_increase"] is not None
        if h["kind"] == "dec_self":
            assert h["next"] == 0.0  # the causal mask: no weight on the next (future) token
        if h["kind"] == "cross":
            assert 0 <= h["diag_agreement"] <= 1
        else:
            assert h["diag_agreement"] is None
    # silencing every head's contribution is not free on average (the model uses its attention)
    assert sum(h["loss_increase"] for h in report["heads"]) > 0
    figures = [f"heads-sentences8_{k}.{ext}" for k in ("enc_self", "dec_self", "cross") for ext in ("png", "svg")]
    for name in ("heads-sentences8.md", *figures):  # one figure per attention kind, each path printed
        assert (out / name).stat().st_size > 0 and f"wrote {out / name}" in text
    assert "| cross (enc-dec) | 1 | 2 |" in (out / "heads-sentences8.md").read_text()  # layer 1, head 2: counted from 1


@pytest.mark.slow
def test_heads_on_decoder_only_and_refusal_for_bahdanau(tiny_runs, tmp_path):
    report = Hd.run(tiny_runs("decoder-only"), sentences=6, importance=False)
    assert report.shape == {"self": (1, 2)}
    for h in report.heads:
        assert h.values["next"] == 0.0 and math.isnan(h.values["bleu_drop"])
        assert 0 <= h.values["entropy"] <= math.log(40)
    assert save_figure(report.figure(), tmp_path / "heads_self")[0].stat().st_size > 0
    with pytest.raises(AttnlabError, match="multi-head"):
        Hd.run(tiny_runs("bahdanau"), sentences=4)


def test_teacher_forced_sample_is_what_the_model_sees(tiny_runs):
    # the statistics come from the same forward pass the loss uses: weights rows sum to 1 on real queries
    from attnlab.translator import Translator

    tr = Translator.from_run(tiny_runs("transformer"))
    batch = collate([[5, 6, 7], [8]], [[4, 5], [6, 7, 8]], [0, 1])
    with torch.inference_mode():
        att = tr.model(batch.src, batch.src_valid_lens, batch.tgt_in, need_weights=True).attention
    p = Hd._positions("cross", batch, batch.src.shape[1], batch.tgt_in.shape[1])
    rows = att["cross"].sum(-1)  # (B, L, H, T)
    assert torch.allclose(rows[p["qok"][:, None, None, :].expand_as(rows)], torch.tensor(1.0))


# compare: tests/analysis/diagnose/test_compare.py
