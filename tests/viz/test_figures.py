"""Figures a learner can read (issue 18, item 8): the attention maps and the heads figures, drawn from
hand-built results (no model to train), checked on the artists matplotlib draws."""

from __future__ import annotations

import math
import re

import pytest
import torch

pytest.importorskip("matplotlib")

from matplotlib.text import Text  # noqa: E402

from attnlab.analysis import heads as Hd  # noqa: E402
from attnlab.maps import attention_figure, continues_word, display_tokens  # noqa: E402
from attnlab.translator import AttentionResult  # noqa: E402
from attnlab.viz.figure import save_figure  # noqa: E402


def _rows(L: int, H: int, Q: int, K: int, seed: int = 0) -> torch.Tensor:
    """``(L, H, Q, K)`` weights whose rows sum to 1."""
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(3 * torch.randn(L, H, Q, K, generator=g), dim=-1)


def _result(L: int = 2, H: int = 3) -> AttentionResult:
    src = ["▁i'm", "▁ho", "me", "▁.", "<eos>", "<pad>"]
    tgt = ["▁je", "▁suis", "▁chez", "▁moi", "▁.", "<eos>"]
    inputs = ["<bos>", *tgt[:-1]]
    S, T = len(src), len(tgt)
    return AttentionResult(
        "i'm home .", "je suis chez moi.", src, tgt, inputs,
        {"enc_self": _rows(L, H, S, S), "dec_self": _rows(L, H, T, T, 1), "cross": _rows(L, H, T, S, 2)},
    )


def _panels(fig):
    return [ax for ax in fig.axes if ax.images and ax.get_title()]


def _drawn(ax) -> torch.Tensor:
    return torch.as_tensor(ax.images[0].get_array().data).float()


@pytest.mark.parametrize("kind", ["enc_self", "dec_self", "cross"])
def test_every_row_of_heads_ends_with_their_mean(kind):
    res = _result()
    L, H = res.attention[kind].shape[:2]
    fig = attention_figure(res, kind, head="all")
    panels = _panels(fig)
    assert len(panels) == L * (H + 1) and len(fig.axes) == len(panels) + 1  # + the colour bar
    for layer in range(L):
        row = panels[layer * (H + 1) : (layer + 1) * (H + 1)]
        for h, ax in enumerate(row[:-1]):
            assert ax.get_title().startswith(f"layer {layer + 1}, head {h + 1} ·")
            assert torch.allclose(_drawn(ax), res.attention[kind][layer, h])
        assert row[-1].get_title().startswith(f"layer {layer + 1}, mean of {H} heads ·")
        assert torch.allclose(_drawn(row[-1]), res.attention[kind][layer].mean(dim=0), atol=1e-6)
    one = attention_figure(res, kind, layer=2, head=1)  # one head: beside its layer's mean
    assert [ax.get_title().split(" ·")[0] for ax in _panels(one)] == ["layer 2, head 1", f"layer 2, mean of {H} heads"]
    assert len(_panels(attention_figure(res, kind))) == L  # heads averaged: the mean alone


def test_colour_scale_is_fixed_and_each_panel_prints_its_maximum():
    res = _result()
    flat = torch.full((6, 6), 0.64 / 5)
    flat[:, 4] = 0.36  # a flat map (rows sum to 1) that peaks at 0.36 must not look bright
    res.attention["cross"] = flat.expand(2, 3, 6, 6).clone()
    for kind in res.attention:
        fig = attention_figure(res, kind, head="all")
        for ax in _panels(fig):
            assert ax.images[0].get_clim() == (0.0, 1.0)
            top = float(re.search(r"max (\d\.\d\d)$", ax.get_title()).group(1))
            assert top == pytest.approx(float(_drawn(ax).max()), abs=0.005)
        assert fig.axes[-1].get_ylim() == pytest.approx((0.0, 1.0))  # the colour bar: 0 to 1
    cross = _panels(attention_figure(res, "cross"))[0]
    assert cross.get_title().endswith("max 0.36")


def test_bpe_pieces_are_shown_without_their_word_start_mark():
    assert display_tokens(["▁mai", "son", "▁.", "<eos>", "<pad>"]) == ["mai", "·son", ".", "<eos>", "<pad>"]
    assert display_tokens(["twenty-one", "<eos>"]) == ["twenty-one", "<eos>"]  # words: as they are
    assert continues_word(["▁mai", "son", "▁.", "<eos>"]) == [False, True, False, False]
    assert continues_word(["son", "<eos>"]) == [False, False]  # no ▁ anywhere: a word vocabulary
    fig = attention_figure(_result(), "cross")
    ax = _panels(fig)[0]
    keys = [t.get_text() for t in ax.get_xticklabels()]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert keys == ["i'm", "ho", "·me", ".", "<eos>", "<pad>"] and rows[0] == "je"
    assert "·x continues the word" in fig._suptitle.get_text()


def _report(shape: dict[str, tuple[int, int]]) -> Hd.HeadsReport:
    g = torch.Generator().manual_seed(0)
    heads = []
    for kind, (L, H) in shape.items():
        for layer in range(L):
            for h in range(H):
                v = {s: float(torch.rand(1, generator=g)) for s in Hd.STATS}
                v["distance"] *= 6
                v["bleu_drop"] = 4 * v["bleu_drop"] - 2
                v["bleu_drop_lo"], v["bleu_drop_hi"] = v["bleu_drop"] - 1, v["bleu_drop"] + 1
                if kind != "cross":
                    v["diag_agreement"] = math.nan
                heads.append(Hd.HeadStats(kind, layer, h, v))
    return Hd.HeadsReport("runs/x", 100, 30.0, 1.2, heads, shape, 1000)


def test_heads_figures_are_one_per_kind_readable_and_listed(tmp_path):
    shape = {"enc_self": (2, 4), "cross": (2, 4)}
    report = _report(shape)
    figures = report.figures()  # the report protocol's named figures: no argument to figure()
    assert list(figures) == list(shape)
    paths = [p for k, fig in figures.items() for p in save_figure(fig, tmp_path / f"heads_{k}", ("png",))]
    assert [p.name for p in paths] == [f"heads_{k}.png" for k in shape]
    assert all(p.stat().st_size > 0 for p in paths)
    for kind, (L, H) in shape.items():
        fig = figures[kind]
        panels = _panels(fig)
        n_stats = len([s for s in Hd.STATS if kind == "cross" or s != "diag_agreement"])
        assert len(panels) == n_stats
        w, h = fig.get_size_inches() * 120  # the dpi save_figure writes at
        assert w <= 2000 and h <= 1400, (w, h)  # not the old 3132 px strip of 27 panels
        for ax in panels:
            bbox = ax.get_position()  # a share of the figure: its size in inches per cell
            assert bbox.width * fig.get_size_inches()[0] / (H + 1) >= 0.35
            assert [t.get_text() for t in ax.get_xticklabels()] == [*map(str, range(1, H + 1)), "mean"]
            assert [t.get_text() for t in ax.get_yticklabels()] == [str(i) for i in range(1, L + 1)]
            stat = next(s for s in Hd.STATS if Hd.label(s, kind) == ax.get_title().split("\n")[0])
            grid = report.grid(kind, stat)
            assert torch.allclose(_drawn(ax)[:, -1], grid.mean(dim=1), atol=1e-6)  # the heads' mean column
            if stat == "bleu_drop":  # starred where the bootstrap interval (here value ± 1) excludes 0
                starred = sorted(t.get_text() for t in ax.texts if t.get_text().endswith("*"))
                assert starred == sorted(f"{v:+.2f}*" for v in grid.flatten().tolist() if abs(v) > 1)
        fig.canvas.draw()
        sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text().strip() and t.get_visible()]
        assert sizes and min(sizes) >= 8


def test_a_cross_heads_same_position_is_named_the_diagonal():
    """A cross head's query and keys are two sentences: its "same" statistic and role are the diagonal
    position's, never "same token"; a self-attention head's stay "same token"."""
    titles = {k: [ax.get_title() for ax in _panels(_report({k: (1, 2)}).figure())] for k in ("cross", "enc_self")}
    assert "diagonal position" in titles["cross"] and "same token" not in titles["cross"]
    assert "same token" in titles["enc_self"]
    for kind, role in [("cross", "diagonal-position"), ("enc_self", "same-token")]:
        assert Hd.HeadStats(kind, 0, 0, {"same": 0.9}).role == role


def test_heads_figure_scales_shares_on_0_1_and_importance_around_0():
    report = _report({"self": (3, 2)})
    fig = report.figure()  # the only kind
    by_title = {ax.get_title().split("\n")[0]: ax.images[0].get_clim() for ax in _panels(fig)}
    assert by_title[Hd.LABELS["prev"]] == (0.0, 1.0)
    lo, hi = by_title[Hd.LABELS["bleu_drop"]]
    assert lo == -hi and hi >= max(abs(h.values["bleu_drop"]) for h in report.heads)
    assert Hd.LABELS["diag_agreement"] not in by_title  # not defined for a self-attention head


def test_save_figure_keeps_a_stem_with_a_dot_whole(tmp_path):
    from attnlab.viz.figure import new_figure, save_figure

    fig = new_figure((2, 2))
    fig.subplots().plot([0, 1], [0, 1])
    paths = save_figure(fig, tmp_path / "params_bahdanau-1.5min", formats=("png", "svg"))
    assert [p.name for p in paths] == ["params_bahdanau-1.5min.png", "params_bahdanau-1.5min.svg"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)


def test_every_figure_of_weights_draws_darker_for_larger_on_one_0_1_scale():
    """attribute, heads and the training timeline use the attention maps' colours (the notes §23, the web
    page): viz.attention.CMAP on 0…1, so 1 is dark and 0 white, never viridis' bright = large."""
    import numpy as np

    from attnlab.analysis import attribution as A
    from attnlab.training.tensorboard import attention_image
    from attnlab.viz.attention import CMAP

    w = torch.tensor([[0.9, 0.1], [0.2, 0.8]])
    a = A.Attribution("a b", "x y", "ixg", ["x", "y"], ["a", "b"], torch.randn(2, 2), torch.zeros(2),
                      torch.zeros(2), compare={"attention": w}, rho={"attention": [1.0, 1.0]})
    roll = A.RolloutReport("a b", "x y", [A.RolloutMap("enc_self", ["a", "b"], w, w, [1.0, 1.0])])
    unsigned = [ax.images[0] for ax in [*a.figure().axes[:1], *roll.figure().axes] if ax.images]
    report = _report({"cross": (2, 2)})
    unsigned += [ax.images[0] for ax in _panels(report.figure()) if ax.get_title().split("\n")[0] in
                 {Hd.label(s, "cross") for s in Hd.SHARES}]
    assert len(unsigned) >= 8
    for image in unsigned:
        assert image.get_cmap().name == CMAP and image.get_clim() == (0.0, 1.0)
    img = attention_image(np.array([[[0.0, 1.0]]]))  # (layers, rows, keys): one light and one dark cell
    light, dark = img[0, 0].astype(int).sum(), img[0, -1].astype(int).sum()
    assert light > 700 and dark < 300
