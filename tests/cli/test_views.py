"""The "see it" commands on real tiny trained models: attention maps (and their invariants), explain,
params (against closed-form counts), positional (rotation check) and selfcheck."""

from __future__ import annotations

import json
import re

import pytest
import torch

from attnlab import cli
from attnlab import config as C
from attnlab.analysis.diagnose import selfcheck
from attnlab.analysis.explain import params
from attnlab.maps import attention_json, map_labels
from attnlab.models import build_model
from attnlab.translator import Translator
from tests.conftest import tiny_config

ATTN_KINDS = ("transformer", "bahdanau", "decoder-only")
SENTENCE = "three hundred and forty two"


def _nonempty(paths) -> None:
    assert paths
    for p in paths:
        assert p.is_file() and p.stat().st_size > 200, p


def _printed_paths(out: str, suffix: str):
    from pathlib import Path

    # attention prints each path; the reports shown through cli.present say "wrote PATH"
    return [Path(line.removeprefix("wrote ")) for line in out.splitlines() if line.endswith(suffix)]


# ------------------------------------------------------------------------------------- attention maps


@pytest.mark.parametrize("kind", ATTN_KINDS)
def test_attention_map_invariants(tiny_runs, kind):
    tr = Translator.from_run(tiny_runs(kind))
    res = tr.attention(SENTENCE, extra_pad=3)
    n_src = len(tr.src_tok.encode(SENTENCE)) + 1  # real source keys, <eos> included
    assert res.src_tokens[-3:] == ["<pad>"] * 3 and len(res.src_tokens) == n_src + 3
    assert len(res.tgt_inputs) == len(res.tgt_tokens) >= 1
    assert res.attention
    for name, w in res.attention.items():
        queries, keys = map_labels(res, name)
        assert w.shape[-2:] == (len(queries), len(keys)), name  # shapes match the token labels
        assert torch.allclose(w.sum(-1), torch.ones(w.shape[:-1]), atol=1e-5), name  # rows sum to 1
        assert (w >= 0).all()
        pad_cols = [j for j, t in enumerate(keys) if t == "<pad>"]
        assert bool(pad_cols) == (name != "dec_self"), name  # every map keyed by the source shows the pads
        assert (w[..., pad_cols] == 0).all(), f"{name}: padding columns must be exactly 0"
    if kind == "transformer":
        assert set(res.attention) == {"enc_self", "dec_self", "cross"}
        dec = res.attention["dec_self"]
        T = dec.shape[-1]
        upper = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        assert (dec[..., upper] == 0).all(), "decoder self-attention must be lower-triangular"
    if kind == "bahdanau":
        assert res.attention["cross"].shape[:2] == (1, 1)
    if kind == "decoder-only":
        w = res.attention["self"]
        N = w.shape[-1]
        upper = torch.triu(torch.ones(N, N, dtype=torch.bool), diagonal=1)
        assert (w[..., upper] == 0).all(), "the decoder-only map must be causal"
    # extra padding does not move the real part of the maps (§23)
    bare = tr.attention(SENTENCE, extra_pad=0)
    for name, w in bare.attention.items():
        q, k = w.shape[-2:]
        if name == "self":  # the pads sit between source and target: compare the source block and target rows
            s = n_src
            full = res.attention[name]
            torch.testing.assert_close(full[..., :s, :s], w[..., :s, :s], atol=1e-5, rtol=0)
            torch.testing.assert_close(full[..., s + 3 :, :s], w[..., s:, :s], atol=1e-5, rtol=0)
            torch.testing.assert_close(full[..., s + 3 :, s + 3 :], w[..., s:, s:], atol=1e-5, rtol=0)
        else:
            torch.testing.assert_close(res.attention[name][..., :q, :k], w, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", ATTN_KINDS)
def test_attention_json_matches_labels(tiny_runs, kind):
    tr = Translator.from_run(tiny_runs(kind))
    for res in (tr.attention(SENTENCE, extra_pad=3), tr.attention(SENTENCE)):
        data = json.loads(json.dumps(attention_json(res)))
        assert data["source"] == SENTENCE and data["kinds"]
        for name, k in data["kinds"].items():
            w = k["weights"]
            assert len(w) == k["layers"] and len(w[0]) == k["heads"]
            assert len(w[0][0]) == len(k["queries"]) and len(w[0][0][0]) == len(k["keys"])
            assert abs(sum(w[-1][-1][0]) - 1) < 1e-3
            assert (k["boundary"] is not None) == (name == "self")


@pytest.mark.parametrize("kind", ATTN_KINDS)
def test_attention_command_writes_images(tiny_runs, kind, tmp_path, capsys):
    run = tiny_runs(kind)
    assert cli.main(["attention", str(run), SENTENCE, "--out", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    pngs, svgs = _printed_paths(out, ".png"), _printed_paths(out, ".svg")
    expected = {"transformer": 3, "bahdanau": 1, "decoder-only": 1}[kind]
    assert len(pngs) == len(svgs) == expected
    _nonempty(pngs + svgs)
    assert b"<svg" in svgs[0].read_bytes()[:500]
    (js,) = _printed_paths(out, ".json")
    assert json.loads(js.read_text())["kinds"]


def test_attention_default_out_is_inside_the_run(tiny_runs, capsys):
    run = tiny_runs("bahdanau")
    assert cli.main(["attention", str(run), "twenty one", "--formats", "png"]) == 0
    (png,) = _printed_paths(capsys.readouterr().out, ".png")
    assert png.parent == run / "figures"
    _nonempty([png])


def test_attention_seq2seq_is_a_clear_error(tiny_runs, tmp_path, capsys):
    assert cli.main(["attention", str(tiny_runs("seq2seq")), SENTENCE, "--out", str(tmp_path)]) == 2
    assert "has no attention" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------- timeline


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bahdanau", "decoder-only"])
def test_timeline_end_to_end(tmp_path, kind, capsys):
    from PIL import Image

    from attnlab.training.loop import train

    run = tmp_path / "run"
    train(
        tiny_config(
            kind,
            "train.max_steps=10",
            "train.eval_every=5",
            "train.eval_max_sentences=4",
            "train.probe_sentences=twenty one,three hundred",
        ),
        run,
        progress=False,
    )
    steps = sorted({json.loads(line)["step"] for line in (run / "probes.jsonl").read_text().splitlines()})
    assert steps == [0, 5, 10]
    assert cli.main(["attention", str(run), "twenty one", "--timeline", "--out", str(tmp_path / "f")]) == 0
    out = capsys.readouterr().out
    (png,), (gif,) = _printed_paths(out, ".png"), _printed_paths(out, ".gif")
    _nonempty([png, gif])
    with Image.open(gif) as im:
        assert im.n_frames == len(steps)
    assert cli.main(["attention", str(run), "nine", "--timeline", "--out", str(tmp_path / "f")]) == 2
    assert "twenty one" in capsys.readouterr().err  # lists the probes


# ----------------------------------------------------------------------------------------------- params


def _mha(D):
    return 4 * D * D + 4 * D  # W_q, W_k, W_v, W_o with biases (§11)


def _ffn(D, F):
    return 2 * D * F + D + F  # §19


def _ln(D):
    return 2 * D  # gain and bias (§20)


def _gru(I, D, L):  # noqa: E741 - 3 gates, input and hidden weights, two biases per layer (§7)
    return sum(3 * D * ((I if k == 0 else D) + D) + 6 * D for k in range(L))


def _expected(cfg: C.ModelConfig, Vs: int, Vt: int) -> int:
    D, F, L, E = cfg.num_hiddens, cfg.ffn_num_hiddens, cfg.num_layers, cfg.embed_size
    out = Vt + (0 if cfg.tie_embeddings else Vt * D)  # b_o, and W_o unless tied to the target embedding
    pos = cfg.max_positions * D if cfg.positional == "learned" else 0
    if cfg.kind == "transformer":
        enc = L * (_mha(D) + _ffn(D, F) + 2 * _ln(D))
        dec = L * (2 * _mha(D) + _ffn(D, F) + 3 * _ln(D))
        final = 2 * _ln(D) if cfg.norm_first else 0
        return Vs * D + Vt * D + pos + enc + dec + final + out
    if cfg.kind == "decoder-only":
        return (
            Vs * D
            + Vt * D
            + pos
            + L * (_mha(D) + _ffn(D, F) + 2 * _ln(D))
            + (_ln(D) if cfg.norm_first else 0)
            + out
        )
    if cfg.bidirectional:  # two GRUs (layers above the first read 2D), a bridge 2D -> D, 2D-wide memory
        enc = Vs * E + 2 * (_gru(E, D, 1) + (L - 1) * _gru(2 * D, D, 1)) + 2 * D * D + D
        M = 2 * D
    else:
        enc, M = Vs * E + _gru(E, D, L), D
    after = cfg.kind == "bahdanau" and cfg.attention_query == "current"  # the GRU reads the embedding alone
    dec = Vt * E + _gru(E + (0 if after else M if cfg.kind == "bahdanau" else D), D, L)
    att = M * D + D * D + D if cfg.kind == "bahdanau" else 0  # W_k (M×D), W_q (D×D), w_v (D), no biases (§2)
    combine = (D + M) * D + D if after else 0  # W_c of tanh(W_c [s; c]) and its bias (Luong et al. 2015)
    return enc + dec + att + combine + out


@pytest.mark.parametrize(
    "kind,extra",
    [
        ("transformer", []),
        ("transformer", ["model.tie_embeddings=false", "model.norm_first=false", "model.num_layers=2"]),
        ("transformer", ["model.positional=learned", "model.max_positions=64"]),
        ("decoder-only", []),
        ("decoder-only", ["model.tie_embeddings=false", "model.num_layers=3"]),
        ("bahdanau", []),
        ("bahdanau", ["model.embed_size=16", "model.tie_embeddings=false", "model.num_layers=2"]),
        ("bahdanau", ["model.bidirectional=true", "model.num_layers=2"]),
        ("bahdanau", ["model.attention_query=previous"]),  # D2L §10.4's order: the GRU reads emb ⊕ c
        ("bahdanau", ["model.attention_query=previous", "model.bidirectional=true"]),
        ("seq2seq", []),
        ("seq2seq", ["model.num_layers=2"]),
        ("seq2seq", ["model.bidirectional=true"]),
    ],
)
def test_param_counts_equal_formulas(kind, extra):
    cfg = tiny_config(kind, *extra).model
    Vs, Vt = 37, 53
    model = build_model(cfg, Vs, Vt)
    report = params.run(model)
    assert report.total == _expected(cfg, Vs, Vt)
    assert report.total == sum(p.numel() for p in model.parameters())
    D = cfg.num_hiddens
    assert report.count("source embedding") == Vs * (cfg.embed_size if kind in ("seq2seq", "bahdanau") else D)
    assert report.count("output layer W_o, b_o") == Vt + (0 if cfg.tie_embeddings else Vt * D)
    assert report.count("other") == 0
    if kind == "transformer":
        L = cfg.num_layers
        assert (
            report.count("encoder self-attention") == report.count("encoder–decoder attention") == L * _mha(D)
        )
        assert report.count("FFN") == 2 * L * _ffn(D, cfg.ffn_num_hiddens)
    if kind == "bahdanau":
        assert report.count("additive attention") == (3 if cfg.bidirectional else 2) * D * D + D
        M = (2 if cfg.bidirectional else 1) * D
        assert report.count("attentional layer W_c") == ((D + M) * D + D if cfg.attention_query == "current" else 0)
    output = next(g for g in report.groups if g.name.startswith("output"))
    assert bool(output.tied) == cfg.tie_embeddings


def test_params_command_run_and_model(tiny_runs, tmp_path, capsys):
    run = tiny_runs("transformer")
    assert cli.main(["params", str(run), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    tr = Translator.from_run(run)
    assert f"{params.run(tr.model).total:,}" in out and "tied" in out and "LayerNorm" in out
    _nonempty(_printed_paths(out, ".png") + _printed_paths(out, ".svg"))

    args = [
        "params",
        "--model",
        "transformer",
        "--src-vocab",
        "100",
        "--tgt-vocab",
        "120",
        "--out",
        str(tmp_path),
        "model.num_hiddens=64",
        "model.num_layers=2",
        "model.ffn_num_hiddens=128",
    ]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    cfg = C.apply_overrides(
        C.preset("transformer"), ["model.num_hiddens=64", "model.num_layers=2", "model.ffn_num_hiddens=128"]
    ).model
    assert f"{_expected(cfg, 100, 120):,}" in out
    _nonempty(_printed_paths(out, ".png"))
    assert cli.main(["params"]) == 2
    assert cli.main(["params", "--model", "transformer", "--src-vocab", "100"]) == 2


@pytest.mark.parametrize("kind", ["bahdanau", "transformer"])
def test_params_with_a_named_size_counts_the_model_train_would_build(kind, tmp_path, capsys):
    """`train.size=notes` is the notes' 32-wide model, as `attnlab train` builds it, not the 256-wide preset;
    a key typed beside it still wins over the size's."""
    from attnlab.training import sizing

    for extra in ([], ["model.num_layers=2"]):
        argv = ["params", "--model", kind, "--src-vocab", "100", "--tgt-vocab", "120", "--out", str(tmp_path),
                "--formats", "png", "train.size=notes", *extra]
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        cfg = sizing.resolve(C.apply_overrides(C.preset(kind), ["train.size=notes", *extra]),
                             frozenset(e.split("=")[0] for e in extra))[0].model
        assert cfg.num_hiddens == 32 and (not extra or cfg.num_layers == 2)
        assert f"{_expected(cfg, 100, 120):,}" in out and "train.size=notes" in out
        assert f"{_expected(C.preset(kind).model, 100, 120):,}" not in out


# ------------------------------------------------------------------------------------------- positional


def test_positional_command(tmp_path, capsys):
    assert cli.main(["positional", "--dim", "32", "--positions", "60", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if "error" in x]
    err = float(re.search(r"max error ([0-9.e+-]+)", line).group(1))
    assert err < 1e-12
    _nonempty(_printed_paths(out, ".png") + _printed_paths(out, ".svg"))
    assert cli.main(["positional", "--dim", "1", "--out", str(tmp_path)]) == 2
    assert cli.main(["positional", "--dim", "8", "--columns", "0,9", "--out", str(tmp_path)]) == 2


# ---------------------------------------------------------------------------------------------- explain


@pytest.mark.parametrize("kind", ["bahdanau", "transformer", "decoder-only", "seq2seq"])
def test_explain_walks_through_the_notes(tiny_runs, kind, capsys):
    run = tiny_runs(kind)
    assert cli.main(["explain", str(run), "twenty one", "--reference", "vingt et un"]) == 0
    out = capsys.readouterr().out
    for heading in (
        "tokens → ids",
        "embedding (§5)",
        "through the network",
        "greedy decoding",
        "loss against",
        "what is a parameter",
    ):
        assert heading in out, heading
    assert re.search(r"ids +X +: \[\d+, \d+, 3\]", out)  # ... <eos> = 3 (D2L's ids)
    assert out.count("    top: ") >= 1 and "loss = " in out and "perplexity" in out
    tops = re.findall(r"    top: (.*)", out)[0].split("  ")
    assert len(tops) == 5
    probs = [float(t.rsplit(" ", 1)[1]) for t in tops]
    assert probs == sorted(probs, reverse=True) and sum(probs) <= 1.0 + 1e-6
    if kind in ("seq2seq", "bahdanau"):
        assert "GRU gates" in out and "mean z" in out
        gap = float(re.search(r"max \|Δ\| = ([0-9.e+-]+)", out).group(1))
        assert gap < 1e-5  # the scratch GRU with the trained weights is the same function
    else:
        assert "MultiHeadAttention" in out and "GRU gates" not in out
    if kind != "seq2seq":
        assert "attention weights" in out


def test_explain_a_bidirectional_bahdanau_run(tmp_path, capsys):
    from attnlab.training.loop import train

    run = tmp_path / "bi"
    train(tiny_config("bahdanau", "model.bidirectional=true", "train.max_steps=5"), run, progress=False)
    assert cli.main(["explain", str(run), "twenty one"]) == 0
    out = capsys.readouterr().out
    assert "encoder (forward direction):" in out and "mean z" in out
    assert float(re.search(r"max \|Δ\| = ([0-9.e+-]+)", out).group(1)) < 1e-5


# -------------------------------------------------------------------------------------------- selfcheck


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "decoder-only", "seq2seq"])
def test_selfcheck_passes_on_trained_models(tiny_runs, kind, capsys):
    assert cli.main(["selfcheck", str(tiny_runs(kind)), "--sentences", "5"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 5 and "FAIL" not in out


def test_selfcheck_catches_a_padding_bug(tiny_runs, monkeypatch):
    """A mask that lets queries see padding must fail the padding check (the check can fail)."""
    import attnlab.models.transformer as T

    tr = Translator.from_run(tiny_runs("transformer"))
    sentences = ["twenty one", "three hundred and forty two"]
    assert all(r.passed for r in selfcheck.run(tr, sentences).results)
    monkeypatch.setattr(
        T, "padding_mask", lambda valid_lens, n: torch.ones(len(valid_lens), n, dtype=torch.bool)
    )
    results = {r.name: r for r in selfcheck.run(tr, sentences).results}
    bad = results["padding does not change outputs"]
    assert not bad.passed and bad.max_deviation > bad.tolerance


def test_selfcheck_exit_code_1_on_failure(tiny_runs, monkeypatch, capsys):
    import attnlab.models.transformer as T

    monkeypatch.setattr(
        T, "padding_mask", lambda valid_lens, n: torch.ones(len(valid_lens), n, dtype=torch.bool)
    )
    assert cli.main(["selfcheck", str(tiny_runs("transformer")), "twenty one", "nine hundred"]) == 1
    assert "FAIL" in capsys.readouterr().out
