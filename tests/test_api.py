"""The notebook API (`attnlab.load`, `attnlab.train`, `Translator.translate`, `AttentionResult.plot`)."""

from __future__ import annotations

import base64
import re
import subprocess
import sys

import pytest
import torch

import attnlab
from attnlab import config as C
from attnlab.errors import AttnlabError
from attnlab.runs import resolve_checkpoint
from attnlab.translator import Translation, Translator
from tests.conftest import tiny_config

SENTENCES = ["seven", "twenty one", "forty two", "three hundred"]


def test_import_stays_cheap_and_names_the_api():
    code = "import sys, attnlab; print('torch' in sys.modules, 'load' in dir(attnlab), 'train' in dir(attnlab))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        attnlab.nope  # noqa: B018


def test_the_issue_check_prints_a_string(tiny_runs):
    run = tiny_runs("transformer")
    code = "import attnlab; t = attnlab.load(__import__('sys').argv[1]); print(repr(t.translate('seven')))"
    out = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, check=True)
    tr = attnlab.load(run)
    assert out.stdout.strip() == repr(tr.translate_full(["seven"])[0][0].text)


def test_load_is_from_run_on_the_auto_device(tiny_runs):
    run = tiny_runs("transformer")
    tr = attnlab.load(run)
    assert isinstance(tr, Translator) and tr.run_dir == run
    assert tr.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert Translator.from_run(run).device == tr.device  # auto is the library's default too
    assert attnlab.load(run, which="last", device="cpu").checkpoint == resolve_checkpoint(run, "last")


@pytest.mark.parametrize("kind", ["transformer", "bahdanau"])
def test_translate_str_in_str_out_list_in_list_out(tiny_runs, kind):
    tr = attnlab.load(tiny_runs(kind), device="cpu")
    full = tr.translate_full(SENTENCES)
    one = tr.translate("seven")
    assert isinstance(one, str) and one == full[0][0].text
    many = tr.translate(SENTENCES)
    assert isinstance(many, list) and many == [t[0].text for t in full]
    assert tr.translate(tuple(SENTENCES)) == many  # any sequence of str
    assert [tr.translate(s) for s in SENTENCES] == many  # batched == one by one
    assert tr.translate([]) == []
    assert tr.translate("") == ""  # nothing to translate: an empty line, as the CLI prints


def test_translate_full_keeps_the_details(tiny_runs):
    tr = attnlab.load(tiny_runs("transformer"), device="cpu")
    nbest = tr.translate_full("twenty one", beam_size=3, nbest=3)  # one sentence: its n-best list alone
    assert [type(t) for t in nbest] == [Translation] * 3
    assert nbest == tr.translate_full(["twenty one"], beam_size=3, nbest=3)[0]
    assert [t.score for t in nbest] == sorted((t.score for t in nbest), reverse=True)
    assert nbest[0].text == tr.translate("twenty one", beam_size=3)


@pytest.mark.parametrize("bad", [7, None, [1, "seven"], ["seven", b"two"]])
def test_translate_refuses_what_is_not_text(tiny_runs, bad):
    tr = attnlab.load(tiny_runs("transformer"), device="cpu")
    with pytest.raises(AttnlabError, match=r"translate\(\) takes a sentence \(str\) or a list of sentences"):
        tr.translate(bad)


def _layers_heads(result, kind):
    return int(result.attention[kind].shape[0]), int(result.attention[kind].shape[1])


@pytest.mark.parametrize("run_kind", ["transformer", "decoder-only", "bahdanau"])
def test_attention_plot_returns_a_figure_with_one_axes_per_panel(tiny_runs, run_kind):
    from matplotlib.figure import Figure

    res = attnlab.load(tiny_runs(run_kind), device="cpu").attention("twenty one")
    for kind in res.kinds:
        L, H = _layers_heads(res, kind)
        queries, keys = res.labels(kind)
        assert res.attention[kind].shape[-2:] == (len(queries), len(keys))
        fig = res.plot(kind)  # every layer, heads averaged, + the colour bar
        assert isinstance(fig, Figure) and len(fig.axes) == L + 1
        per_row = H + 1 if H > 1 else H  # the heads, then their mean (when there are several)
        assert len(res.plot(kind, head="all").axes) == L * per_row + 1
        assert len(res.plot(kind, layer=L, head=H).axes) == (per_row - H + 1) + 1
        panel = fig.axes[0]
        assert [t.get_text() for t in panel.get_xticklabels()] == keys
        # heads averaged: the drawn image is the mean of the layer's heads
        drawn = torch.as_tensor(panel.images[0].get_array().data)
        assert torch.allclose(drawn.float(), res.attention[kind][0].mean(dim=0), atol=1e-6)
    assert res.plot().axes[0].get_title() != ""  # default kind: cross, or self for the decoder-only model


def test_attention_plot_counts_layers_and_heads_from_one(tiny_runs):
    res = attnlab.load(tiny_runs("transformer"), device="cpu").attention("forty two")
    L, H = _layers_heads(res, "enc_self")
    fig = res.plot("enc_self", layer=1, head=H)
    assert fig.axes[0].get_title().startswith(f"layer 1, head {H} · max ")
    drawn = torch.as_tensor(fig.axes[0].images[0].get_array().data)
    assert torch.allclose(drawn.float(), res.attention["enc_self"][0, H - 1])
    titles = [ax.get_title().split(" · max ")[0] for ax in res.plot("enc_self", head="all").axes[:-1]]
    assert titles == [
        t for i in range(1, L + 1) for t in [*(f"layer {i}, head {h}" for h in range(1, H + 1)), f"layer {i}, mean of {H} heads"]
    ]
    with pytest.raises(AttnlabError, match=rf"layer=0 is out of range.*counted from 1.*1…{L}"):
        res.plot("enc_self", layer=0)
    with pytest.raises(AttnlabError, match=rf"head={H + 1} is out of range"):
        res.plot("enc_self", head=H + 1)
    with pytest.raises(AttnlabError, match="no 'self' attention in this model; its kinds are enc_self"):
        res.plot("self")


def test_attention_shows_itself_in_jupyter(tiny_runs):
    res = attnlab.load(tiny_runs("transformer"), device="cpu").attention("seven")
    html = res._repr_html_()
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == len(res.kinds) == 3
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in images)
    assert res.plot("cross")._repr_png_().startswith(b"\x89PNG")  # a Figure shows inline without pyplot
    assert "AttentionResult('seven'" in repr(res) and "tensor(" not in repr(res)


def test_seq2seq_attention_says_there_is_none(tiny_runs):
    from attnlab.maps import NoAttentionError

    res = attnlab.load(tiny_runs("seq2seq"), device="cpu").attention("seven")
    assert res.kinds == []
    with pytest.raises(NoAttentionError, match="has no attention"):
        res.plot()
    assert "no attention maps" in res._repr_html_()


def test_resolve_config_reads_every_form(tmp_path):
    from attnlab.api import resolve_config

    assert resolve_config("bahdanau") == C.preset("bahdanau")
    want = C.apply_overrides(C.preset("transformer"), ["data.dataset=numbers", "train.max_steps=7"])
    assert resolve_config({"model": {"kind": "transformer"}, "data": {"dataset": "numbers"}},
                          ["train.max_steps=7"]) == want
    toml = tmp_path / "c.toml"
    toml.write_text('[model]\nkind = "transformer"\n[data]\ndataset = "numbers"\n', encoding="utf-8")
    assert resolve_config(toml, ["train.max_steps=7"]) == want
    assert resolve_config(str(toml), ["train.max_steps=7"]) == want
    assert resolve_config(want) == want
    with pytest.raises(C.ConfigError, match="neither a model kind .* nor an existing TOML file"):
        resolve_config("transfromer")
    with pytest.raises(C.ConfigError, match="list of section.key=value strings"):
        resolve_config("transformer", "train.lr=1e-3")
    with pytest.raises(C.ConfigError, match="unknown config section"):
        resolve_config({"modle": {}})


def test_train_returns_a_run_you_can_translate_with(tmp_path):
    run = attnlab.train(tiny_config("transformer"), tmp_path / "t", ["train.max_steps=12"], progress=False)
    assert isinstance(run, attnlab.Run) and run.step == 12 and run.stopped_by == "max_steps"
    tr = run.translator(device="cpu")
    assert isinstance(tr.translate("seven"), str)
    assert tr.translate(SENTENCES) == attnlab.load(run, device="cpu").translate(SENTENCES)
    assert [r["step"] for r in run.metrics() if r.get("event") == "train"][-1] <= 12
    assert len(run.curves().axes) == 3
    with pytest.raises(AttnlabError, match="out is empty"):
        attnlab.train("transformer", "")
