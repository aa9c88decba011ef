"""§13–16 on a model (attnlab.analysis.explain.positional): order-blindness without the positional encoding,
the sizes of what is added, the cost of concatenating, the worked δ = 2 example, and `positional RUN`."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from attnlab import cli
from attnlab.analysis.explain import positional as P
from attnlab.analysis.report import Report
from attnlab.attention.positional import sinusoidal_table
from attnlab.data.specials import EOS
from attnlab.data.vocab import Vocab
from attnlab.models import build_model
from attnlab.translator import Translator
from tests.conftest import tiny_config

WORDS = ["twenty", "one", "thirty", "two", "hundred"]


def tiny(kind: str, *extra: str):
    """An untrained tiny model (the properties hold for any weights), in float64, with a word vocabulary."""
    torch.manual_seed(0)
    cfg = tiny_config(kind, *extra)
    vocab = Vocab.build([WORDS], "en")
    model = build_model(cfg.model, len(vocab), len(vocab)).double().eval()
    return model, vocab, cfg


def ids_of(vocab: Vocab, text: str) -> tuple[list[int], list[str]]:
    ids = vocab.encode(text) + [EOS]
    return ids, [vocab.id_to_token(i) for i in ids]


@pytest.mark.parametrize("kind, extra", [("transformer", ()), ("transformer", ("model.norm_first=false",)),
                                         ("transformer", ("model.positional=learned", "model.max_positions=64")),
                                         ("encoder-only", ())])
def test_self_attention_is_order_blind_without_the_encoding_only(kind, extra):
    """§13: f(πX) = π f(X) for the first self-attention layer and the whole encoder once p is removed,
    to rounding; with p the outputs no longer just move, and a weight between two tokens changes."""
    model, vocab, _ = tiny(kind, *extra)
    ids, labels = ids_of(vocab, "twenty one hundred thirty")
    o = P.order_check(model, ids, labels)
    assert o.permuted == ["thirty", "hundred", "one", "twenty", "<eos>"]
    assert o.err[False] < 1e-12 and o.rel[False] < 1e-12 and o.enc_rel[False] < 1e-12, o
    assert o.rel[True] > 1e-3 and o.enc_rel[True] > 1e-3, o
    (a, b), (c, d) = o.weight[False], o.weight[True]
    assert a == pytest.approx(b, abs=1e-12) and abs(c - d) > 1e-6


def test_order_check_does_not_apply_without_bidirectional_self_attention():
    for kind in ("decoder-only", "bahdanau"):  # a causal mask carries order; a GRU has no encoding to remove
        model, vocab, _ = tiny(kind)
        assert P.order_check(model, *ids_of(vocab, "twenty one")) is None
    model, vocab, _ = tiny("transformer")
    with pytest.raises(P.AttnlabError):
        P.order_check(model, *ids_of(vocab, "one one"))  # reversed, it is the same sentence


def test_norms_are_the_tables_rows_and_the_sinusoid_has_norm_sqrt_half_d():
    model, vocab, cfg = tiny("transformer")
    ids, labels = ids_of(vocab, "twenty one")
    n = P.norm_check(model, ids, labels)
    D = cfg.model.num_hiddens
    table = model.src_embedding.weight.detach()
    assert [t for t, _ in n.tokens] == labels and n.rows == len(vocab)
    for (_, v), i in zip(n.tokens, ids):
        assert v == pytest.approx(math.sqrt(D) * table[i].norm().item(), rel=1e-12)
    assert n.sinusoidal and all(v == pytest.approx(math.sqrt(D / 2), rel=1e-6) for v in n.positions)


def test_measured_flops_match_the_closed_form_and_concatenating_costs_between_2x_and_4x():
    """The FLOP counter sees every matmul, attention's too: the encoder-only model's forward is
    S·2(4D² + 2DF) + 2·2·S²·D + S·2·D·V (one layer). Doubling the width multiplies D×D matrices by 4
    and D×F ones by 2, so the cost of concatenating lies strictly between ×2 and ×4."""
    model, vocab, cfg = tiny("encoder-only")
    m = cfg.model
    D, F, V = m.num_hiddens, m.ffn_num_hiddens, len(vocab)
    ids, _ = ids_of(vocab, "twenty one hundred")
    S = len(ids)
    assert P._forward_flops(model, torch.tensor([ids])) == S * 2 * (4 * D * D + 2 * D * F) + 4 * S * S * D + 2 * S * D * V
    for kind in ("transformer", "encoder-only", "decoder-only"):
        model, vocab, cfg = tiny(kind)
        c = P.concat_cost(model, ids, len(vocab), len(vocab))
        assert 2 < c.params[1] / c.params[0] < 4 and 2 < c.flops[1] / c.flops[0] < 4, (kind, c)


def test_delta_example_one_matrix_for_both_moves_and_not_for_any_table():
    ex = P.delta_example(32)
    assert ex.err_a < 1e-12 and ex.err_b < 1e-12 and ex.shown == [0, 1, 8, 15]
    ex = P.delta_example(30, table=sinusoidal_table(64, 30, torch.float32))  # a model's float32 buffer
    assert ex.err_a < 1e-6 and ex.err_b < 1e-6
    torch.manual_seed(0)
    assert P.delta_example(16, table=torch.randn(20, 16)).err_a > 0.1  # a learned table has no such rotation
    text = P.run(32).format()  # the worked example on the formula at d = 32
    assert "p_3 to p_5 and p_10 to p_12" in text and "M_2" in text


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "decoder-only"])
def test_model_section_text(kind):
    model, vocab, cfg = tiny(kind)
    text = P.run(translator=Translator(model.float(), vocab, vocab, cfg), sentence="twenty one").format()
    if kind == "bahdanau":
        assert "no positional encoding" in text and "FLOPs" not in text
    else:
        assert "FLOPs" in text and "√(D/2)" in text
        assert (P.TEXT["order_head"] in text) == (kind == "transformer")
        assert (P.TEXT["order_causal"] in text) == (kind == "decoder-only")


def test_run_carries_every_section_in_one_report():
    """positional.run -> one Report: the rotation check, the δ example and the §13–14 section in its text,
    the table drawn as its figure, all of it in its JSON; a --dim that is not the run's is refused."""
    model, vocab, cfg = tiny("transformer")
    tr = Translator(model.float(), vocab, vocab, cfg)
    r = P.run(positions=20, translator=tr, sentence="twenty one")
    assert isinstance(r, Report) and r.dim == cfg.model.num_hiddens
    text = r.format()
    assert text.startswith("rotation property: max error") and "§16 worked example" in text
    assert "the run's own position table" in text and "§13–14 on" in text
    assert len(r.figure().axes) >= 3
    data = json.loads(json.dumps(r.to_json()))
    assert data["dim"] == r.dim and data["model"]["kind"] == "transformer" and data["text"] == text
    with pytest.raises(P.AttnlabError, match="differs from the run's model.num_hiddens"):
        P.run(dim=r.dim + 2, translator=tr)
    with pytest.raises(P.AttnlabError, match="--columns"):
        P.run(8, columns=[0, 9])


@pytest.fixture(scope="module")
def run_d24(tmp_path_factory):
    """A real run whose d is not the command's default 32 (trained two updates: the weights do not matter)."""
    from attnlab.training.loop import train

    run = tmp_path_factory.mktemp("pos") / "t24"
    train(tiny_config("transformer", "train.max_steps=2", "model.num_hiddens=24", "model.ffn_num_hiddens=48"), run,
          progress=False)
    return run


def test_positional_run_command(run_d24, tmp_path, capsys):
    """`attnlab positional RUN`: the run's own d in the figure and the example, and §13 on its encoder."""
    assert cli.main(["positional", str(run_d24), "--checkpoint", "last", "--sentence", "twenty one",
                     "--save-dir", str(tmp_path), "--formats", "png"]) == 0
    out = capsys.readouterr().out
    assert (tmp_path / "positional_encoding_d24_p60.png").stat().st_size > 0
    assert "(d = 24, the run's own position table)" in out and "D = 24" in out
    without, with_pe = (float(x) for x in re.findall(r"max \|f\(πX\) − π f\(X\)\| = ([0-9.e+-]+)", out))
    assert without < 1e-12 < 1e-4 < with_pe
    assert cli.main(["positional", str(run_d24), "--dim", "32", "--save-dir", str(tmp_path)]) == 2
