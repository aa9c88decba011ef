import pytest

from attnlab import config as C


def test_overrides_are_typed():
    cfg = C.apply_overrides(C.Config(), ["train.lr=3e-4", "model.num_layers=3", "model.tie_embeddings=false",
                                         "train.betas=0.9,0.99", "data.data_path=/x/y"])
    assert cfg.train.lr == 3e-4 and isinstance(cfg.train.lr, float)
    assert cfg.model.num_layers == 3 and cfg.model.tie_embeddings is False
    assert cfg.train.betas == (0.9, 0.99)
    assert cfg.data.data_path == "/x/y"


@pytest.mark.parametrize("override, needle", [
    ("train.lrr=1", r"valid keys in \[train\]"),
    ("trian.lr=1", "valid sections"),
    ("train.lr=abc", "expects a number"),
    ("model.num_layers=2.5", "expects an integer"),
    ("model.kind=rnn", "choose one of"),
    ("model.num_heads=3", "divisible"),
    ("lr=1", "must name a section"),
    ("train.lr", "section.key=value"),
])
def test_bad_overrides_name_the_fix(override, needle):
    with pytest.raises(C.ConfigError, match=needle):
        C.apply_overrides(C.Config(), [override])


def test_toml_round_trip(tmp_path):
    cfg = C.apply_overrides(C.preset("bahdanau"), ["train.lr=0.005", "train.probe_sentences=a .,b ."])
    path = tmp_path / "c.toml"
    path.write_text(C.dumps_toml(cfg))
    assert C.load_toml(path) == cfg


def test_toml_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nlr = 1")
    with pytest.raises(C.ConfigError, match="not valid TOML"):
        C.load_toml(bad)
    bad.write_text("[train]\nlr = 'fast'\n")
    with pytest.raises(C.ConfigError, match="train.lr expects a number"):
        C.load_toml(bad)
    bad.write_text("[train]\nwarmup = 3\n")
    with pytest.raises(C.ConfigError, match="unknown key train.warmup"):
        C.load_toml(bad)
    with pytest.raises(C.ConfigError, match="does not exist"):
        C.load_toml(tmp_path / "missing.toml")


def test_presets_cover_every_kind():
    for kind in C.MODEL_KINDS:
        assert C.preset(kind).model.kind == kind
    with pytest.raises(C.ConfigError):
        C.preset("lstm")
