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


def _tree(root):
    """Every path under ``root`` with its bytes (None for a folder): what must survive a refused export."""
    return {p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes()) for p in root.rglob("*")}


def test_force_refuses_an_out_that_holds_the_run_or_other_files(exported, tmp_path):
    """`export P/num P --force` once deleted P/num (the run itself), P/other and P/notes.txt."""
    import shutil

    run, out = exported
    p = tmp_path / "P"
    p.mkdir()
    shutil.copytree(run, p / "num")
    shutil.copytree(out, p / "other")
    (p / "notes.txt").write_text("x")
    before = _tree(p)
    with pytest.raises(AttnlabError, match="contains RUN") as e:
        export_run(p / "num", p, force=True)
    assert "\n" not in str(e.value)
    assert _tree(p) == before and sorted(x.name for x in tmp_path.iterdir()) == ["P"]
    # a folder of the user's files, with or without an export among them, is not an export to replace
    q = tmp_path / "Q"
    shutil.copytree(out, q)
    (q / "notes.txt").write_text("mine")
    for target in (p / "other-files", q):
        target.mkdir(exist_ok=True)
        (target / "notes.txt").write_text("mine")
        before = _tree(target)
        with pytest.raises(AttnlabError, match="did not write.*notes.txt") as e:
            export_run(run, target, force=True)
        assert "\n" not in str(e.value) and _tree(target) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["P", "Q"] and not list(p.glob(".*"))


def test_force_replaces_an_earlier_export_and_leaves_nothing_beside_it(exported, tmp_path):
    run, out = exported
    target = tmp_path / "t"
    target.mkdir()  # an empty folder needs no --force
    export_run(run, target)
    was = target.stat().st_ino
    export_run(run, target, which="last", force=True)
    assert target.stat().st_ino != was  # a new folder swapped in, not files written into the old one
    assert runs.is_export(target) and sorted(x.name for x in tmp_path.iterdir()) == ["t"]
    Translator.from_run(target, device="cpu")


def test_force_into_the_current_folder_leaves_no_stale_folder(exported, tmp_path, monkeypatch):
    """`cd OUT; attnlab export RUN . --force` once left `..stale.*` folders behind."""
    run, _ = exported
    target = tmp_path / "here"
    export_run(run, target)
    monkeypatch.chdir(target)
    done = export_run(run, ".", force=True)
    assert done.resolve() == target and runs.is_export(target)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["here"]
    assert not [x.name for x in target.iterdir() if x.name.startswith(".")]
    Translator.from_run(target, device="cpu")


def test_export_force_through_the_cli_is_one_line(exported, tmp_path, capsys):
    import shutil

    from attnlab.cli import main

    run, _ = exported
    p = tmp_path / "P"
    shutil.copytree(run, p / "num")
    (p / "notes.txt").write_text("x")
    before = _tree(p)
    assert main(["export", str(p / "num"), str(p), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "contains RUN" in err
    assert _tree(p) == before


def test_force_replaces_an_earlier_ctranslate2_export(exported, tmp_path):
    """The files of OUT/ctranslate2/ are the earlier export's own (its manifest lists them), and a
    file the user put there is not."""
    pytest.importorskip("ctranslate2")
    run, _ = exported
    target = export_run(run, tmp_path / "ct2", fmt="ctranslate2")
    export_run(run, target, fmt="ctranslate2", force=True)
    (target / "ctranslate2" / "mine.txt").write_text("x")
    with pytest.raises(AttnlabError, match="ctranslate2/mine.txt"):
        export_run(run, target, force=True)
    assert (target / "ctranslate2" / "mine.txt").read_text() == "x"
