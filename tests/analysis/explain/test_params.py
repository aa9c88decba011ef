"""The §9 parameter table's honesty: a tied W_o is named as the target embedding's table (not read as
"8,000 parameters"), what is not a parameter (the positional buffer, the context vectors) is listed with
its size, and the figure's title and labels are not cut off."""

from __future__ import annotations

import json

import pytest

from attnlab.analysis.explain.params import non_parameters, run
from attnlab.analysis.report import Report
from attnlab.models import build_model
from tests.conftest import tiny_config

VS, VT = 37, 53


def _model(kind: str, *extra: str):
    return build_model(tiny_config(kind, *extra).model, VS, VT)


@pytest.mark.parametrize("kind", ["transformer", "bahdanau", "decoder-only"])
def test_a_tied_W_o_is_named_shared_and_counted_once(kind):
    model = _model(kind)
    D = model.config.num_hiddens
    report = run(model)
    text = report.format()
    (out_line,) = [ln for ln in text.splitlines() if ln.startswith("output layer")]
    assert f"{VT:>12,}" in out_line  # b_o alone is counted here ...
    assert f"output.bias only: output.weight ({VT}×{D}) is tied to the target embedding, shared, counted once" in out_line
    (emb_line,) = [ln for ln in text.splitlines() if ln.startswith("target embedding")]
    assert f"{VT * D:>12,}" in emb_line and "output.weight" in emb_line  # ... and W_o once, in its table's row
    untied = run(_model(kind, "model.tie_embeddings=false")).format()
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
    assert "not parameters (§9)" in run(tr).format()


def test_params_figure_keeps_every_text_inside(tmp_path):
    """Title, group names and the value labels lie inside the saved figure (nothing cut off)."""
    from attnlab.viz.figure import save_figure

    long_title = "a-rather-long-run-name-from-a-sweep-lr-0.0015-warmup-200 (transformer, fra-eng, bpe 8k)"
    report = run(_model("transformer"), long_title)
    fig = report.figure()
    saved = save_figure(fig, tmp_path / "params", formats=("png",))
    assert saved[0].read_bytes()[:4] == b"\x89PNG"
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


def test_run_answers_through_the_report_protocol():
    """run(model) -> a Report: its text (in the language asked, for that call only), its bar chart, its JSON."""
    report = run(_model("bahdanau"), "bahdanau", vocab=(VS, VT), verbose=True)
    assert isinstance(report, Report)
    text = report.format()
    assert text.startswith(f"bahdanau: source vocabulary {VS}, target vocabulary {VT}")
    assert "encoder.embedding.weight" in text  # verbose: every tensor under its group
    zh = report.format("zh")
    assert "参数量" in zh and "参数量" not in text and report.format() == text
    assert report.figure().axes
    data = json.loads(json.dumps(report.to_json()))
    assert data["total"] == report.total and [g["name"] for g in data["groups"]] == [g.name for g in report.groups]
