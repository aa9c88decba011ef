import hashlib
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from attnlab import config as C
from attnlab import runs
from attnlab.errors import CheckpointError
from attnlab.translator import Translator


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(7, 4)
        self.output = nn.Linear(4, 7)
        self.output.weight = self.embedding.weight  # tied, like the Transformer's W_o


def _save(tmp_path, step=10, model=None):
    model = model or Tied()
    runs.save_checkpoint(tmp_path, step, model, {"step": step, "rng": torch.get_rng_state()})
    return model


def test_round_trip_with_tied_weights(tmp_path):
    m = _save(tmp_path)
    m2 = Tied()
    runs.load_weights(runs.resolve_checkpoint(tmp_path, "last"), m2)
    for (k, a), (_, b) in zip(m.state_dict().items(), m2.state_dict().items()):
        assert torch.equal(a, b), k
    assert m2.output.weight is m2.embedding.weight
    st = runs.load_state(runs.resolve_checkpoint(tmp_path, "last"))
    assert st["step"] == 10


def test_flipped_byte_is_refused(tmp_path):
    _save(tmp_path)
    path = runs.resolve_checkpoint(tmp_path, "last")
    w = path / runs.WEIGHTS
    data = bytearray(w.read_bytes())
    data[len(data) // 2] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        runs.load_weights(path, Tied())


def test_truncated_file_is_refused(tmp_path):
    _save(tmp_path)
    path = runs.resolve_checkpoint(tmp_path, "last")
    w = path / runs.WEIGHTS
    w.write_bytes(w.read_bytes()[:40])
    with pytest.raises(CheckpointError):
        runs.load_weights(path, Tied())
    with pytest.raises(CheckpointError, match="not a valid safetensors"):
        runs.load_weights(path, Tied(), verify=False)


class Evil:
    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/attnlab-pwned-ckpt",))


def test_pickle_is_refused_and_never_runs(tmp_path):
    import os

    _save(tmp_path)
    path = runs.resolve_checkpoint(tmp_path, "last")
    # a pickle in place of the weights, and in place of the training state (manifest updated to match)
    (path / runs.WEIGHTS).write_bytes(pickle.dumps({"w": Evil()}))
    (path / runs.STATE).write_bytes(pickle.dumps({"x": Evil()}))
    with pytest.raises(CheckpointError):
        runs.load_weights(path, Tied(), verify=False)
    with pytest.raises(CheckpointError, match="refused"):
        runs.load_state(path)
    assert not os.path.exists("/tmp/attnlab-pwned-ckpt")


def test_wrong_shape_is_refused(tmp_path):
    _save(tmp_path)

    class Other(Tied):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(9, 4)
            self.output = nn.Linear(4, 9)

    with pytest.raises(CheckpointError, match="shape"):
        runs.load_weights(runs.resolve_checkpoint(tmp_path, "last"), Other())


def test_rotation_keeps_best_and_last(tmp_path):
    m = Tied()
    runs.save_checkpoint(tmp_path, 1, m, {}, keep=2, best=True)
    for s in range(2, 7):
        runs.save_checkpoint(tmp_path, s, m, {}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("step-*"))
    assert names == ["step-0000001", "step-0000004", "step-0000005", "step-0000006"]  # keep=2 besides best and last
    assert runs.resolve_checkpoint(tmp_path, "best").name == "step-0000001"
    assert runs.resolve_checkpoint(tmp_path, "last").name == "step-0000006"


def test_rotation_keeps_the_decay_phase_for_averaging(tmp_path):
    """keep_checkpoints rotates the others; every checkpoint written after the lr began to decay stays (the
    run's train.average_last ones), and the manifest records when that was."""
    m = Tied()
    for s in range(1, 10):
        runs.save_checkpoint(tmp_path, s, m, {}, keep=1, decay_start=6, keep_decay=True)
    names = [p.name for p in runs.step_checkpoints(tmp_path)]
    assert names == ["step-0000006", "step-0000007", "step-0000008", "step-0000009"]  # 1 kept besides 7, 8, 9
    assert runs.run_decay_start(tmp_path) == 6
    assert [p.name for p in runs.decay_checkpoints(tmp_path)] == names[1:]


def test_missing_run_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        runs.resolve_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        runs.resolve_checkpoint(tmp_path)


# ------------------------------------------------------------------------------------------------
# Nothing trusted before it is verified: a config, a pointer, a manifest or a tokenizer that someone
# edited or crafted is refused in one line, and the model is built only once its weights are checked.

HUGE = {"num_layers": C.MAX_LAYERS, "num_hiddens": C.MAX_WIDTH, "ffn_num_hiddens": C.MAX_FFN}  # ~400 G parameters


@pytest.fixture
def built(monkeypatch):
    """The device of every model that a loader builds (``meta`` = shapes only, nothing allocated).

    A build anywhere else fails the test at once rather than allocate: these tests hand the loader
    configs of hundreds of billions of parameters, which it must refuse before building anything real.
    """
    import attnlab.models
    import attnlab.translator

    real = attnlab.models.build_model
    devices: list[str] = []

    def spy(*args, **kwargs):
        devices.append(torch.get_default_device().type)
        if devices[-1] != "meta":
            raise AssertionError("a model was built before its weights were checked against its config")
        return real(*args, **kwargs)

    for module in (attnlab.models, runs, attnlab.translator):
        monkeypatch.setattr(module, "build_model", spy, raising=False)
    return devices


def _run_copy(tiny_runs, tmp_path, kind="transformer") -> Path:
    return Path(shutil.copytree(tiny_runs(kind), tmp_path / "run"))


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _set_model_keys(text: str, keys: dict) -> str:
    lines = text.splitlines()
    for k, v in keys.items():
        lines = [f"{k} = {v}" if line.split(" =")[0] == k else line for line in lines]
    return "\n".join(lines) + "\n"


def _one_line_cli_error(capsys, argv, needle):
    from attnlab.cli import main

    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
    return lines[0]


def test_an_edited_config_is_refused_before_any_model_is_built(tiny_runs, tmp_path, built, capsys):
    """config.toml says 128 layers of width 16384: the manifest records what the weights were trained
    with, and that check now comes first (the loader built the 400-G-parameter model, then verified)."""
    run = _run_copy(tiny_runs, tmp_path)
    cfg = run / "config.toml"
    cfg.write_text(_set_model_keys(cfg.read_text(), HUGE))
    with pytest.raises(CheckpointError, match="was trained with model.ffn_num_hiddens=64"):
        Translator.from_run(run, device="cpu")
    assert built == []
    _one_line_cli_error(capsys, ["translate", str(run), "twenty one"], "was trained with model.ffn_num_hiddens=64")
    import attnlab

    with pytest.raises(CheckpointError):
        attnlab.load(run)
    assert built == []


def test_a_crafted_run_whose_manifest_agrees_with_its_config_is_refused_by_the_weights_shapes(
        tiny_runs, tmp_path, built):
    """A folder crafted as a whole (config.toml, and a manifest re-sealed to match it): the weights file's
    header names the tensors it ships, and they are compared with the config's on the meta device."""
    run = _run_copy(tiny_runs, tmp_path)
    cfg = run / "config.toml"
    cfg.write_text(_set_model_keys(cfg.read_text(), HUGE))
    ckpt = runs.resolve_checkpoint(run, "last")
    manifest = json.loads((ckpt / runs.MANIFEST).read_text())
    manifest["model"].update(HUGE)
    (ckpt / runs.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError) as err:
        Translator.from_run(run, device="cpu")
    msg = str(err.value)
    assert "does not fit the transformer model its config describes" in msg and "the file ships" in msg, msg
    assert "\n" not in msg and set(built) <= {"meta"}


def _export(tiny_runs, tmp_path) -> Path:
    from attnlab.export.folder import export_run

    return export_run(tiny_runs("transformer"), tmp_path / "exp")


def _reseal(folder: Path, skip: tuple[str, ...] = ()) -> None:
    """Recompute an export's manifest over every file in it, as a forger would."""
    files = {p.relative_to(folder).as_posix(): _sha(p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.name != runs.MANIFEST and p.relative_to(folder).as_posix() not in skip}
    manifest = json.loads((folder / runs.MANIFEST).read_text())
    manifest["files"] = files
    (folder / runs.MANIFEST).write_text(json.dumps(manifest))


def test_a_crafted_export_asking_for_a_huge_model_is_refused_before_it_is_built(tiny_runs, tmp_path, request):
    """The issue's few-MB export: config.json, the fingerprints in it and in the weights' metadata and the
    manifest all agree on a huge model, but the weights file ships the tiny one."""
    out = _export(tiny_runs, tmp_path)
    spec = json.loads((out / "config.json").read_text())
    spec["config"]["model"].update(HUGE)
    cfg = C.from_dict(spec["config"])
    toks = runs.read_export(_export(tiny_runs, tmp_path / "again")).tokenizers
    spec["fingerprint"] = runs.fingerprint(cfg, toks)
    (out / "config.json").write_text(json.dumps(spec))
    tensors = load_file(out / runs.WEIGHTS)
    save_file(tensors, out / runs.WEIGHTS, metadata={"attnlab_fingerprint": json.dumps(spec["fingerprint"])})
    _reseal(out)
    built = request.getfixturevalue("built")  # from here on, no model may be built for real
    with pytest.raises(CheckpointError, match="does not fit the transformer model its config describes"):
        Translator.from_run(out, device="cpu")
    assert set(built) <= {"meta"}


@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x01garbage", b"../../etc", b"step-1\x00x", b"/tmp",
                                     b"step-0000040\nstep-0000020\n", b"s" * 1000, b".."])
@pytest.mark.parametrize("which", ["LAST", "BEST"])
def test_a_corrupt_pointer_is_one_line(tiny_runs, tmp_path, capsys, content, which):
    run = _run_copy(tiny_runs, tmp_path)
    (run / "checkpoints" / which).write_bytes(content)
    with pytest.raises(CheckpointError, match=f"{which} is corrupt"):
        runs.resolve_checkpoint(run, which.lower())
    _one_line_cli_error(capsys, ["translate", str(run), "--checkpoint", which.lower(), "twenty one"],
                        f"{which} is corrupt")


@pytest.mark.parametrize("manifest, needle", [
    (b"\x00\xff binary", "is corrupt: not a checkpoint manifest"),
    (b"[1, 2]", "is corrupt: not a checkpoint manifest"),
    (b'"files"', "is corrupt: not a checkpoint manifest"),
    (b'{"files": ["model.safetensors"]}', "is corrupt: not a checkpoint manifest"),
    (b'{"files": {"model.safetensors": 5}}', "is corrupt: not a checkpoint manifest"),
    (b'{"files": {}}', "does not list model.safetensors"),
    (b'{"files": {"model.safetensors": "00", "/etc/passwd": "00"}}', "which is not a path inside"),
    (b'{"files": {"model.safetensors": "00", "../../config.toml": "00"}}', "which is not a path inside"),
    (b"[" * 100_000, "is corrupt: not a checkpoint manifest"),
    (b" " * (runs.MAX_MANIFEST_BYTES + 1), "larger than 4 MiB"),
])
def test_a_malformed_manifest_is_one_line(tiny_runs, tmp_path, capsys, manifest, needle):
    run = _run_copy(tiny_runs, tmp_path)
    (runs.resolve_checkpoint(run, "last") / runs.MANIFEST).write_bytes(manifest)
    with pytest.raises(CheckpointError, match=needle):
        Translator.from_run(run, which="last", device="cpu")
    _one_line_cli_error(capsys, ["translate", str(run), "--checkpoint", "last", "twenty one"], needle)


def test_a_manifest_entry_linking_out_of_the_folder_is_refused(tiny_runs, tmp_path):
    run = _run_copy(tiny_runs, tmp_path)
    ckpt = runs.resolve_checkpoint(run, "last")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"x")
    (ckpt / "extra.bin").symlink_to(outside)
    manifest = json.loads((ckpt / runs.MANIFEST).read_text())
    manifest["files"]["extra.bin"] = _sha(outside)
    (ckpt / runs.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="leads out of"):
        runs.verify_checkpoint(ckpt)


@pytest.mark.parametrize("tokenizers, needle", [
    (b"\xff\xfe", "is corrupt"), (b"[]", "is corrupt"), (b'{"src": 1, "tgt": 2}', "its src tokenizer"),
    (b'{"src": {"kind": "word"}, "tgt": {}}', "its src tokenizer"), (b"[" * 100_000, "is corrupt"),
])
def test_a_malformed_tokenizers_json_is_one_line(tiny_runs, tmp_path, capsys, tokenizers, needle):
    run = _run_copy(tiny_runs, tmp_path)
    (run / runs.TOKENIZERS).write_bytes(tokenizers)
    with pytest.raises(CheckpointError, match=needle):
        Translator.from_run(run, device="cpu")
    _one_line_cli_error(capsys, ["translate", str(run), "twenty one"], needle)


def test_the_other_tokenizer_side_is_checked_too(tiny_runs, tmp_path):
    run = _run_copy(tiny_runs, tmp_path)
    toks = json.loads((run / runs.TOKENIZERS).read_text())
    toks["tgt"] = {"kind": "bpe", "lang": "fr", "tokenizer": "{not json"}
    (run / runs.TOKENIZERS).write_text(json.dumps(toks))
    with pytest.raises(CheckpointError, match="its tgt tokenizer: saved BPE tokenizer cannot be parsed"):
        runs.read_run(run)


@pytest.mark.parametrize("text", [
    b"\xff\xfe not utf-8", b"not json", b"[1, 2]", b'{"model": []}', b'{"model": {"type": "WordLevel", "vocab": [1]}}',
    b'{"model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": "x"}}}', b"[" * 100_000,
])
def test_a_crafted_export_tokenizer_is_one_line(tiny_runs, tmp_path, capsys, text):
    """The tokenizer files of an export, with a manifest re-sealed to match: never a traceback."""
    out = _export(tiny_runs, tmp_path)
    (out / "tokenizer.fr.json").write_bytes(text)
    _reseal(out)
    with pytest.raises(CheckpointError, match="tokenizer.fr.json is not a usable tokenizer"):
        Translator.from_run(out, device="cpu")
    _one_line_cli_error(capsys, ["translate", str(out), "twenty one"], "is not a usable tokenizer")


@pytest.mark.parametrize("spec_edit", [
    lambda spec: ["not", "an", "object"], lambda spec: {**spec, "config": []}, lambda spec: {**spec, "attnlab_export": True},
    lambda spec: {**spec, "tokenizers": {"src": {"file": "/etc/passwd", "kind": "word", "lang": "en"}}},
    lambda spec: {**spec, "engines": ["ctranslate2"]},
])
def test_a_malformed_export_config_is_one_line(tiny_runs, tmp_path, capsys, spec_edit):
    out = _export(tiny_runs, tmp_path)
    spec = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(spec_edit(spec)))
    _reseal(out)
    with pytest.raises(CheckpointError):
        Translator.from_run(out, device="cpu")
    _one_line_cli_error(capsys, ["translate", str(out), "twenty one"], "config.json")


# ------------------------------------------------------------------------------------------------
# The CTranslate2 model of an export lies inside it, and the manifest covers every file of it


def _with_ct2(tiny_runs, tmp_path, path: str, make=True) -> Path:
    """An export whose config.json names a CTranslate2 model at ``path`` (a stand-in model.bin in ``ct2/``)."""
    out = _export(tiny_runs, tmp_path)
    if make:
        (out / "ct2").mkdir()
        (out / "ct2" / "model.bin").write_bytes(b"a stand-in")
        (out / "ct2" / "config.json").write_text("{}")
    spec = json.loads((out / "config.json").read_text())
    spec["engines"] = {"ctranslate2": {"path": path, "spec": "TransformerSpec", "one_sequence": False}}
    (out / "config.json").write_text(json.dumps(spec))
    _reseal(out)
    return out


def test_a_ct2_model_inside_the_folder_and_in_the_manifest_is_accepted(tiny_runs, tmp_path):
    from attnlab.export.engine import ct2_entry

    out = _with_ct2(tiny_runs, tmp_path, "ct2")
    runs.read_export(out)
    assert ct2_entry(out)["path"] == "ct2"


@pytest.mark.parametrize("where", ["../elsewhere", "ABSOLUTE", "ct2/../../elsewhere"])
def test_a_ct2_path_outside_the_folder_is_refused(tiny_runs, tmp_path, capsys, where):
    """The engine read `OUT/<path>` whatever the path: a model (and vocabularies) the manifest never verified."""
    from attnlab.export.engine import ct2_entry, load_translator

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.bin").write_bytes(b"never verified")
    path = str(elsewhere) if where == "ABSOLUTE" else where
    out = _with_ct2(tiny_runs, tmp_path, path, make=where.startswith("ct2"))
    with pytest.raises(CheckpointError, match="not a path inside"):
        runs.read_export(out)
    with pytest.raises(CheckpointError, match="not a path inside"):
        ct2_entry(out)
    with pytest.raises(CheckpointError):
        load_translator(out, engine="auto")
    _one_line_cli_error(capsys, ["translate", str(out), "twenty one"], "not a path inside")


def test_a_ct2_folder_linking_out_or_holding_unlisted_files_is_refused(tiny_runs, tmp_path):
    out = _with_ct2(tiny_runs, tmp_path, "ct2")
    (out / "ct2" / "shared_vocabulary.json").write_text("[]")  # added after the manifest was written
    with pytest.raises(CheckpointError, match="shared_vocabulary.json is not a file .* lists and verified"):
        runs.read_export(out)
    out = _with_ct2(tiny_runs, tmp_path / "2", "ct2", make=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "model.bin").write_bytes(b"never verified")
    (out / "ct2").symlink_to(elsewhere)
    with pytest.raises(CheckpointError, match="leads out of"):
        runs.read_export(out)
    out = _with_ct2(tiny_runs, tmp_path / "3", "ct2")
    _reseal(out, skip=("ct2/model.bin",))
    with pytest.raises(CheckpointError, match="does not list ct2/model.bin"):
        runs.read_export(out)
