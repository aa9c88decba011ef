import pickle

import pytest
import torch
from torch import nn

from attnlab import runs
from attnlab.errors import CheckpointError


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


def test_missing_run_is_one_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        runs.resolve_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no checkpoint"):
        runs.resolve_checkpoint(tmp_path)
