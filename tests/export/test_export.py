"""`attnlab export`: a self-contained folder that every run-taking entry point accepts, checked on load."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from tokenizers import Tokenizer as HFTokenizer

from attnlab import runs
from attnlab.errors import AttnlabError, CheckpointError
from attnlab.export.folder import export_run
from attnlab.translator import Translator


@pytest.fixture(scope="module")
def exported(export_runs, tmp_path_factory):
    run = export_runs("transformer")
    return run, export_run(run, tmp_path_factory.mktemp("exp") / "out")


def test_folder_is_self_contained_and_described(exported):
    run, out = exported
    spec = json.loads((out / "config.json").read_text())
    assert spec["attnlab_export"] == runs.EXPORT_FORMAT and spec["config"]["model"]["kind"] == "transformer"
    assert {e["file"] for e in spec["tokenizers"].values()} == {"tokenizer.en.json", "tokenizer.fr.json"}
    for side, e in spec["tokenizers"].items():
        hf = HFTokenizer.from_file(str(out / e["file"]))
        assert hf.get_vocab_size() == spec["vocab_sizes"][side] == e["size"]
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        meta = f.metadata()
    assert json.loads(meta["attnlab_fingerprint"]) == spec["fingerprint"]
    assert json.loads(meta["attnlab_config"]) == spec["config"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == {"config.json", "model.safetensors", "tokenizer.en.json", "tokenizer.fr.json"}
    assert not (out / "config.toml").exists() and runs.is_export(out) and not runs.is_export(run)


def test_exported_translator_is_the_run_s(exported, numbers_sentences):
    run, out = exported
    a, b = Translator.from_run(run, device="cpu"), Translator.from_run(out, device="cpu")
    assert b.checkpoint == out and b.cfg == a.cfg
    assert b.translate_full(numbers_sentences, beam_size=3, nbest=2) == a.translate_full(
        numbers_sentences, beam_size=3, nbest=2)
    for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()):
        assert torch.equal(x, y)
    ra, rb = a.attention("twenty-one"), b.attention("twenty-one")
    assert ra.tgt_tokens == rb.tgt_tokens and all(torch.equal(ra.attention[k], rb.attention[k]) for k in ra.attention)


def test_a_changed_file_is_refused(exported, tmp_path):
    _, out = exported
    copy = export_run(out, tmp_path / "copy")  # an export exports again
    tok = copy / "tokenizer.fr.json"
    tok.write_text(tok.read_text().replace('"trois"', '"troix"'))
    with pytest.raises(CheckpointError, match="tokenizer.fr.json does not match its sha256"):
        Translator.from_run(copy, device="cpu")


def test_another_config_under_a_valid_manifest_is_refused(exported, tmp_path):
    _, out = exported
    copy = export_run(out, tmp_path / "copy")
    spec = json.loads((copy / "config.json").read_text())
    spec["config"]["model"]["num_heads"] = 1  # same shapes, another function: must not load silently
    (copy / "config.json").write_text(json.dumps(spec))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"]["config.json"] = runs.sha256_file(copy / "config.json")
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="config.json records another model config"):
        Translator.from_run(copy, device="cpu")


def test_export_refusals(exported, tmp_path):
    run, out = exported
    with pytest.raises(CheckpointError, match="drop --checkpoint step-1"):
        Translator.from_run(out, which="step-1", device="cpu")
    with pytest.raises(AttnlabError, match="not empty"):
        export_run(run, out)
    with pytest.raises(AttnlabError, match="inside RUN"):
        export_run(run, run / "exported")
    with pytest.raises(CheckpointError, match="does not exist"):
        export_run(tmp_path / "nope", tmp_path / "o")
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.*"))  # nothing half-written is left


def test_force_replaces_an_existing_folder(exported, tmp_path):
    run, _ = exported
    target = tmp_path / "t"
    target.mkdir()
    (target / "old.txt").write_text("x")
    export_run(run, target, force=True)
    assert not (target / "old.txt").exists() and runs.is_export(target)
    Translator.from_run(target, device="cpu")
