import typing

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


def _float_fields():
    """(section, key, type) of every float field of every section, tuples of floats included."""
    for name, cls in C.SECTIONS.items():
        for key, tp in C._field_types(cls).items():
            args = typing.get_args(tp)
            if tp is float or float in args:
                yield name, key, tp


@pytest.mark.parametrize("bad", ["inf", "-inf", "nan"])
def test_every_float_field_refuses_non_finite_values(bad):
    """Audit of all sections: inf/nan passed range checks written as one comparison (inf passes any lower
    bound) and then failed silently: max_len_a=inf cut outputs to 1 token, max_minutes=inf stopped at step 0."""
    fields = list(_float_fields())
    assert {f"{s}.{k}" for s, k, _ in fields} >= {
        "train.lr", "train.min_lr_ratio", "train.weight_decay", "train.max_minutes", "train.clip_grad_norm",
        "train.betas", "decode.max_len_a", "decode.length_penalty", "data.valid_frac", "model.dropout"}
    for section, key, tp in fields:
        value = f"{bad},0.9" if typing.get_origin(tp) is tuple else bad
        with pytest.raises(C.ConfigError) as err:
            C.apply_overrides(C.Config(), [f"{section}.{key}={value}"])
        msg = str(err.value)
        assert "\n" not in msg and f"{section}.{key}=" in msg and ("finite" in msg or "between" in msg), msg


@pytest.mark.parametrize("override, needle", [
    ("train.min_lr_ratio=-5", "train.min_lr_ratio=-5.0 must lie between 0 and 1"),
    ("train.min_lr_ratio=1.5", "between 0 and 1"),
    ("train.weight_decay=-0.1", "train.weight_decay=-0.1 must lie between 0 and 1"),
    ("train.lr=1e6", "train.lr=1000000.0 must be > 0 and at most 10"),
    ("train.max_minutes=1e300", "train.max_minutes=1e+300 must lie between 0 and 1e+06"),
    ("decode.max_len_a=1e9", "decode.max_len_a=1000000000.0 must lie between 0 and 10"),
    ("decode.length_penalty=-1", "between 0 and 5"),
    ("decode.max_len_b=100000000", "decode.max_len_b=100000000 must lie between 1 and 10000"),
])
def test_out_of_range_floats_are_one_line_errors(override, needle):
    with pytest.raises(C.ConfigError) as err:
        C.apply_overrides(C.Config(), [override])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_the_documented_ranges_keep_every_preset_and_usual_value():
    for kind in C.MODEL_KINDS:
        C.preset(kind)
    C.apply_overrides(C.Config(), ["train.lr=10", "train.min_lr_ratio=0", "train.min_lr_ratio=1", "train.weight_decay=0",
                                   "train.max_minutes=0", "decode.max_len_a=0", "decode.length_penalty=0",
                                   "train.clip_grad_norm=0"])


@pytest.mark.parametrize("override, bound", [
    ("model.num_layers=100000", C.MAX_LAYERS), ("model.num_hiddens=100000", C.MAX_WIDTH),
    ("model.embed_size=100000", C.MAX_WIDTH), ("model.num_heads=100000", C.MAX_HEADS),
    ("model.ffn_num_hiddens=10000000", C.MAX_FFN), ("model.max_positions=10000000", C.MAX_POSITIONS),
])
def test_every_model_size_has_an_upper_bound(override, bound):
    """A config.toml / config.json edited to num_layers = 100000 made a loader allocate until memory ran out."""
    with pytest.raises(C.ConfigError) as err:
        C.apply_overrides(C.Config(), [override])
    msg = str(err.value)
    assert "\n" not in msg and override.split("=")[0] in msg and f"and {bound}" in msg, msg
    key = override.split("=")[0]
    C.apply_overrides(C.Config(), [f"{key}={bound}"] if key != "model.num_heads" else
                      [f"model.num_hiddens={C.MAX_WIDTH}", f"{key}={bound}"])  # the bound itself is allowed


def test_a_config_file_with_a_huge_model_is_refused(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("[model]\nnum_layers = 100000\n")
    with pytest.raises(C.ConfigError, match=r"config.toml: model.num_layers=100000 must lie between 1 and 128"):
        C.load_toml(path)
    path.write_text("[decode]\nmax_len_a = inf\n")  # TOML spells infinity `inf`
    with pytest.raises(C.ConfigError, match="decode.max_len_a=inf is not a finite number"):
        C.load_toml(path)
