"""config.toml reads back what was written; strings and integers are taken as typed (issue 15, items 9, 13)."""

from __future__ import annotations

import dataclasses
import tomllib
import unicodedata

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import config as C
from tests.cli.test_cli import assert_one_line_error, attnlab

PLAIN = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=30)  # no control characters
ANY = st.text(max_size=30)


def _same_after_reading(cfg: C.Config) -> C.Config:
    """What a config file means: an optional string "", "none" or "null" is read as unset (None)."""
    if cfg.data.data_path is not None and cfg.data.data_path.lower() in ("", "none", "null"):
        return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, data_path=None))
    return cfg


def _read_back(text: str) -> C.Config:
    """What :func:`attnlab.config.load_toml` makes of a config file holding ``text`` (without the file)."""
    return C.from_dict(tomllib.loads(text))


def _with_strings(probes, data_path) -> C.Config:
    """A Config built in code (past the override parser) holding these strings."""
    cfg = C.Config()
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, data_path=data_path),
                               train=dataclasses.replace(cfg.train, probe_sentences=tuple(probes)))


@settings(max_examples=200, deadline=None)
@given(probes=st.lists(PLAIN, max_size=4), data_path=st.none() | PLAIN)
def test_dumps_toml_round_trips_any_string(probes, data_path):
    """Pass: the TOML written for any Config (quotes, backslashes, any Unicode) parses back to the same Config."""
    cfg = _with_strings(probes, data_path)
    assert _read_back(C.dumps_toml(cfg)) == _same_after_reading(cfg)


@settings(max_examples=200, deadline=None)
@given(probes=st.lists(ANY, max_size=4), data_path=st.none() | ANY)
def test_a_config_either_refuses_a_string_or_round_trips_it(probes, data_path):
    """Pass: a string with a control character (or a lone surrogate) is refused with one line when the
    Config is built; anything else is written so that it reads back unchanged."""
    try:
        cfg = _with_strings(probes, data_path)
    except C.ConfigError as e:
        assert "\n" not in str(e) and ("control character" in str(e) or "undecodable" in str(e))
        assert any(unicodedata.category(c) in ("Cc", "Cs") for s in [*probes, data_path or ""] for c in s)
        return
    assert _read_back(C.dumps_toml(cfg)) == _same_after_reading(cfg)


def test_the_writer_escapes_what_toml_must_escape():
    """The old writer copied "\n" and DEL into a basic string: not valid TOML. tomli-w escapes them."""
    text = C.dumps_toml(_with_strings(['say "hi" \\ there', "é ü 中"], "C:\\data\\fra.txt"))
    assert tomllib.loads(text)["train"]["probe_sentences"] == ['say "hi" \\ there', "é ü 中"]
    assert tomli_w.dumps({"s": "a\nb\x7f"}) == 's = "a\\nb\\u007f"\n'  # what dumps_toml relies on


def test_a_newline_in_a_probe_sentence_is_refused_in_code_too():
    with pytest.raises(C.ConfigError, match="train.probe_sentences=.*control character '\\\\n'"):
        _with_strings(["go .\nhome"], None)


@pytest.mark.parametrize("override", [
    "train.probe_sentences=go .\nhome .", "train.probe_sentences=go .,i\tlost .", "data.data_path=/tmp/a\x7fb",
    "data.data_path=x\x85y", "train.device=cpu\x00",
])
def test_control_characters_in_strings_are_refused(override):
    """Pass: one ConfigError line naming the key and the character; nothing is built."""
    with pytest.raises(C.ConfigError, match="control character") as err:
        C.apply_overrides(C.Config(), [override])
    assert "\n" not in str(err.value) and override.split("=")[0] in str(err.value)


def test_control_characters_in_a_config_file_are_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[train]\nprobe_sentences = ["go .\\u0007"]\n')
    with pytest.raises(C.ConfigError, match="control character"):
        C.load_toml(path)


def test_cli_refuses_a_newline_in_a_probe_sentence(tmp_path):
    out = tmp_path / "r"
    proc = attnlab("train", "--model", "transformer", "--dataset", "numbers", "--out", str(out), "--quiet",
                   "train.max_steps=1", "model.num_hiddens=8", "model.num_heads=1", "model.ffn_num_hiddens=8",
                   "model.num_layers=1", "data.numbers_size=200", "train.eval_max_sentences=2",
                   "train.probe_sentences=go .\nhome .")
    assert_one_line_error(proc, "train.probe_sentences")
    assert not out.exists()


def test_integer_overrides_are_exact():
    """Pass: digits are parsed with int(), not through float; "1e3" still gives 1000."""
    cfg = C.apply_overrides(C.Config(), ["train.seed=12345678901234567891", "train.max_steps=1e3",
                                         "train.log_every=1_000", "data.max_pairs=+7"])
    assert cfg.train.seed == 12345678901234567891
    assert cfg.train.max_steps == 1000 and cfg.train.log_every == 1000 and cfg.data.max_pairs == 7
    assert _read_back(C.dumps_toml(cfg)).train.seed == 12345678901234567891


@pytest.mark.parametrize("value", ["1.5", "1e-3", "nan", "inf", "0x10", "1e999999999", "", "seven"])
def test_non_integers_are_refused_for_integer_keys(value):
    with pytest.raises(C.ConfigError, match="expects an integer"):
        C.apply_overrides(C.Config(), [f"train.max_steps={value}"])


def test_a_seed_torch_cannot_take_is_refused():
    with pytest.raises(C.ConfigError, match="train.seed=.*64 bits"):
        C.apply_overrides(C.Config(), [f"train.seed={2**64}"])
    assert C.apply_overrides(C.Config(), [f"train.seed={2**64 - 1}"]).train.seed == 2**64 - 1
