"""The §9 parameter table's honesty: a tied W_o is named as the target embedding's table (not read as
"8,000 parameters"), what is not a parameter (the positional buffer, the context vectors) is listed with
its size, and the figure's title and labels are not cut off."""

from __future__ import annotations

import pytest

from attnlab.analysis.explain.params import draw_params, format_params, non_parameters, parameter_report
from attnlab.models import build_model
from tests.conftest import tiny_config

VS, VT = 37, 53


def _model(kind: str, *extra: str):
    return build_model(tiny_config(kind, *extra).model, VS, VT)


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "decoder-only"])
def test_a_tied_W_o_is_named_shared_and_counted_once(kind):
    model = _model(kind)
    D = model.config.num_hiddens
    report = parameter_report(model)
    text = format_params(report)
    (out_line,) = [ln for ln in text.splitlines() if ln.startswith("output layer")]
    assert f"{VT:>12,}" in out_line  # b_o alone is counted here ...
    assert f"output.bias only: output.weight ({VT}×{D}) is tied to the target embedding, shared, counted once" in out_line
    (emb_line,) = [ln for ln in text.splitlines() if ln.startswith("target embedding")]
    assert f"{VT * D:>12,}" in emb_line and "output.weight" in emb_line  # ... and W_o once, in its table's row
    untied = format_params(parameter_report(_model(kind, "model.tie_embeddings=false")))
    assert "tied" not in untied


def test_non_parameters_name_the_positional_buffer_and_the_context_vectors():
    tr = _model("transformer", "model.max_positions=64")
    D, L = tr.config.num_hiddens, tr.config.num_layers
    rows = {r.name: r for r in non_parameters(tr)}
    pe = rows["positional encoding P"]
    assert pe.what == "buffer" and pe.size.startswith(f"64×{D} = {64 * D:,} numbers") and "not saved" in pe.note
    assert "P" not in {n.split(".")[-1] for n in tr.state_dict()}  # indeed not in the checkpoint
    ctx = rows["context vectors (cross-attention)"]
    assert ctx.what == "activation" and ctx.size == f"{D} numbers per query position, × {L} layers"
    learned = {r.name for r in non_parameters(_model("transformer", "model.positional=learned"))}
    assert "positional encoding P" not in learned  # a learned table is a parameter, counted in the table
    bi = _model("bahdanau", "model.bidirectional=true")
    (c,) = [r for r in non_parameters(bi) if r.what == "activation"]
    assert c.size == f"{2 * bi.config.num_hiddens} numbers per decoder step"  # values = [h→; h←]
    (fixed,) = non_parameters(_model("seq2seq"))
    assert fixed.name == "context vector c" and fixed.size.startswith(f"{tiny_config('seq2seq').model.num_hiddens} ")
    assert "not parameters (§9)" in format_params(parameter_report(tr))


def test_params_figure_keeps_every_text_inside(tmp_path, monkeypatch):
    """Title, group names and the value labels lie inside the saved figure (nothing cut off)."""
    from attnlab.analysis.explain import params as P

    drawn = {}
    real_save = P.save_figure

    def keep(fig, stem, formats):
        drawn["fig"] = fig
        return real_save(fig, stem, formats)

    monkeypatch.setattr(P, "save_figure", keep)
    long_title = "a-rather-long-run-name-from-a-sweep-lr-0.0015-warmup-200 (transformer, fra-eng, bpe 8k)"
    report = parameter_report(_model("transformer"))
    saved = draw_params(report, tmp_path, long_title, formats=("png",))
    assert saved[0].read_bytes()[:4] == b"\x89PNG"
    fig = drawn["fig"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [t for ax in fig.axes for t in (ax.title, *ax.texts, *ax.get_yticklabels())] + fig.texts
    assert any(f"{report.total:,} trainable parameters" in t.get_text() for t in fig.texts)  # the title
    assert len(texts) > 5
    for t in texts:
        if not t.get_text():
            continue
        ext = t.get_window_extent(renderer)
        assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1 and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1, t.get_text()
