"""A CLI that explains itself: help texts and shown defaults, one meaning per option name, the
subcommand's own usage on a mistake, deprecated spellings that still work, `config` and `completion`."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from attnlab import config as C
from attnlab.cli import main, make_parser
from attnlab.cli.common import HelpFormatter
from tests.cli.test_cli import attnlab

ROOT = Path(__file__).resolve().parents[2]
#: Read by the tests only, not by attnlab: --help need not list them.
TEST_ONLY_ENV = {"ATTNLAB_CHROMIUM", "ATTNLAB_TEST_JOB_DEADLINE", "ATTNLAB_TEST_ELASTIC"}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def shown_options(p: argparse.ArgumentParser):
    return [a for a in p._actions if a.help is not argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_every_option_of_every_command_has_help_and_says_its_default():
    """An optional option with a value says what it defaults to: its value, or in words ("(default: …)")."""
    commands = subparsers(make_parser())
    assert {"train", "config", "completion", "translate", "demo", "serve"} <= set(commands)
    formatter = HelpFormatter("x")
    missing = []
    for name, p in commands.items():
        for a in shown_options(p):
            where = f"{name} {'/'.join(a.option_strings) or a.dest}"
            if not (a.help or "").strip():
                missing.append(f"{where}: no help")
            elif a.option_strings and a.nargs != 0 and not a.required and "(default" not in formatter._get_help_string(a):
                missing.append(f"{where}: no default shown")
    assert not missing, missing


@pytest.mark.parametrize("command, option, default", [
    ("train", "--device", "the config's, auto"), ("train", "--max-minutes", "the config's train.max_minutes"),
    ("train", "--max-steps", "the config's train.max_steps"), ("train", "--seed", "the config's train.seed, 42"),
    ("train", "--threads", "the config's train.threads"), ("train", "--nproc", "0"),
    ("evaluate", "--split", "test"), ("evaluate", "--max-sentences", "0"), ("demo", "--runs-dir", "runs/demo"),
    ("demo", "--data", "$ATTNLAB_DATA_DIR"), ("positional", "--dim", "32"), ("positional", "--positions", "60"),
    ("params", "--checkpoint", "best"), ("translate", "--device", "auto"), ("serve", "--port", "8000"),
])
def test_help_shows_the_default(command, option, default, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    text = flat(capsys.readouterr().out)
    entry = text[text.index(f" {option} "):]
    entry = entry[: entry.index(" -", 1) if " -" in entry[1:] else None]  # up to the next option
    assert "(default" in entry and default in entry, entry


def test_the_real_train_help_shows_defaults():
    """The issue's check, on the real command: `attnlab train --help` shows defaults."""
    proc = attnlab("train", "--help")
    assert proc.returncode == 0, proc.stderr
    text = flat(proc.stdout)
    assert "--nproc NPROC" in text and "(default: 0)" in text and "(default: the config's, auto)" in text


def test_top_level_help_has_examples_and_every_environment_variable_the_code_reads():
    text = attnlab("--help").stdout
    assert "examples:" in text and "attnlab train --model transformer" in text
    read = set()
    for path in [*(ROOT / "src" / "attnlab").rglob("*.py"), ROOT / "scripts" / "setup.sh"]:
        read |= set(re.findall(r"ATTNLAB_[A-Z_]+[A-Z]", path.read_text(encoding="utf-8")))
    assert {"ATTNLAB_DATA_DIR", "ATTNLAB_OFFLINE", "ATTNLAB_DIST_TIMEOUT", "ATTNLAB_TORCH_INDEX"} <= read
    assert not [v for v in sorted(read - TEST_ONLY_ENV) if v not in text], "env vars missing from --help"


def test_top_level_help_lists_every_model_kind_and_named_corpus():
    """`attnlab --help` names what --model and --dataset accept, read from the tables the subcommands use, so a
    new kind or corpus shows up without editing the text (encoder-only and cmn-eng were once left out)."""
    from attnlab.data.pairs import CORPORA
    from attnlab.models import BUILDERS

    text = flat(attnlab("--help").stdout)
    assert set(C.MODEL_KINDS) == set(BUILDERS) and set(C.DATASETS) == set(CORPORA)
    assert f"models (--model) {', '.join(C.MODEL_KINDS)}" in text
    assert f"corpora (--dataset) {', '.join(C.DATASETS)}" in text
    assert "encoder-only" in text and "cmn-eng" in text


def test_help_imports_no_torch():
    code = ("import sys\nfrom attnlab.cli import main\nfor argv in (['--help'], ['train', '--help'], ['config', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == "False", proc.stderr


def test_device_is_auto_everywhere():
    for name, p in subparsers(make_parser()).items():
        dev = next((a for a in p._actions if "--device" in a.option_strings and a.help is not argparse.SUPPRESS), None)
        if dev is None:
            continue
        if dev.default is None:  # train, sweep, config: the option sets train.device, whose own default is auto
            assert "auto" in dev.help and C.TrainConfig().device == "auto", name
        else:
            assert dev.default == "auto", name


def test_one_meaning_per_option_name():
    """--out is train's run folder only; the folder of runs is --runs-dir, figures go to --save-dir."""
    meta = {}
    for name, p in subparsers(make_parser()).items():
        for a in shown_options(p):
            for opt in a.option_strings:
                meta.setdefault(opt, set()).add(a.dest)
        opts = {o for a in shown_options(p) for o in a.option_strings}
        assert "--minutes" not in opts and "--minutes-per-trial" not in opts, name
        if "--out" in opts:
            assert name == "train", name
    different = {opt: dests for opt, dests in meta.items() if len(dests) > 1}
    assert not different, different


@pytest.mark.parametrize("argv, prog, hint", [
    (["train", "--out", "r", "--modle", "transformer"], "attnlab train", "did you mean --model?"),
    (["translate", "r", "--bem", "3", "hi"], "attnlab translate", "did you mean --beam?"),
    (["positional", "--dims", "8"], "attnlab positional", "did you mean --dim?"),
])
def test_a_typo_after_a_subcommand_shows_that_subcommands_usage(argv, prog, hint):
    proc = attnlab(*argv)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"usage: {prog} ")
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {prog}: unrecognized arguments") and hint in last, last
    assert f"`{prog} --help`" in last


def test_translate_without_arguments_asks_only_for_the_run():
    last = attnlab("translate").stderr.strip().splitlines()[-1]
    assert "required: RUN" in last and "TEXT" not in last and "text" not in last, last


def test_quiet_and_verbose_are_one_helper_on_every_command_that_reports_progress():
    for name in ("train", "translate", "evaluate", "demo", "sweep", "heads", "compare"):
        p = subparsers(make_parser())[name]
        opts = {o for a in p._actions for o in a.option_strings}
        assert {"-q", "--quiet", "-v", "--verbose"} <= opts, name
    proc = attnlab("translate", "r", "-q", "-v", "hi")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


@pytest.mark.parametrize("argv, dest, value, new", [
    (["demo", "--minutes", "0.5"], "max_minutes", 0.5, "--max-minutes"),
    (["demo", "--out", "d"], "runs_dir", "d", "--runs-dir"),
    (["sweep", "--model", "transformer", "--grid", "train.lr=1", "--minutes-per-trial", "2", "--out", "s"],
     "max_minutes", 2.0, "--max-minutes"),
    (["heads", "r", "--out", "h"], "save_dir", "h", "--save-dir"),
    (["attention", "r", "go .", "--out", "f"], "save_dir", "f", "--save-dir"),
])
def test_deprecated_spellings_still_work_and_warn(argv, dest, value, new, capsys):
    args = make_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert f"is deprecated; use {new}" in err and err.count("\n") == argv.count("--out") + sum(
        a.startswith("--minutes") for a in argv)


def test_new_spellings_keep_their_defaults_and_sweep_needs_its_runs_dir():
    p = subparsers(make_parser())
    assert p["demo"].parse_args([]).runs_dir == "runs/demo" and p["demo"].parse_args([]).max_minutes == 1.5
    assert p["heads"].parse_args(["r"]).save_dir is None
    proc = attnlab("sweep", "--model", "transformer", "--grid", "train.lr=1")
    assert proc.returncode == 2 and "--runs-dir" in proc.stderr.strip().splitlines()[-1]


def test_positional_writes_where_the_old_out_says_and_warns(tmp_path, capsys):
    assert main(["positional", "--dim", "8", "--positions", "12", "--formats", "png", "--out", str(tmp_path / "f")]) == 0
    assert "warning: --out is deprecated; use --save-dir" in capsys.readouterr().err
    assert list((tmp_path / "f").glob("*.png"))


@pytest.mark.parametrize("kind", C.MODEL_KINDS)
def test_config_prints_toml_that_loads_back_to_what_train_would_run(kind, capsys, tmp_path):
    argv = ["--model", kind, "--dataset", "numbers", "--max-steps", "7", "--seed", "3", "train.lr=3e-4",
            "model.dropout=0.2"]
    assert main(["config", *argv]) == 0
    out = capsys.readouterr().out
    assert "train.size" in out.split("\n\n", 1)[0]  # the header says auto is not resolved yet
    loaded = C.from_dict(tomllib.loads(out))
    expected = C.apply_overrides(C.preset(kind), ["data.dataset=numbers", "train.max_steps=7", "train.seed=3",
                                                  "train.lr=3e-4", "model.dropout=0.2"])
    assert loaded == expected
    (tmp_path / "c.toml").write_text(out)  # a fixed point: fed back as --config, the same config
    assert main(["config", "--model", kind, "--config", str(tmp_path / "c.toml")]) == 0
    assert C.from_dict(tomllib.loads(capsys.readouterr().out)) == expected


def test_config_resolve_applies_a_named_size_as_train_would(capsys):
    from attnlab.training import sizing

    assert main(["config", "--model", "transformer", "--size", "tiny", "--resolve", "train.max_minutes=1"]) == 0
    out = capsys.readouterr().out
    cfg = C.apply_overrides(C.preset("transformer"), ["train.size=tiny", "train.max_minutes=1"])
    assert C.from_dict(tomllib.loads(out)) == sizing.resolve(cfg, frozenset({"train.max_minutes"}))[0]
    assert C.from_dict(tomllib.loads(out)) != cfg  # the tier changed something


def test_completion_prints_scripts_that_complete_commands_and_options():
    bash = attnlab("completion", "bash")
    zsh = attnlab("completion", "zsh")
    assert bash.returncode == 0 and zsh.returncode == 0
    assert zsh.stdout.startswith("#compdef attnlab") and "--max-minutes" in zsh.stdout
    if shutil.which("bash") is None:
        pytest.skip("no bash to run the completion in")
    script = bash.stdout + "\n" + (
        'complete_line() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE};'
        ' COMPREPLY=(); _shtab_attnlab; echo "${COMPREPLY[*]}"; }\n'
        "complete_line attnlab tra\ncomplete_line attnlab train --max-m\ncomplete_line attnlab train --model ''\n")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["train translate", "--max-minutes", " ".join(C.MODEL_KINDS)]


def test_verbose_says_what_was_loaded_and_quiet_says_nothing(tiny_runs, capsys):
    run = str(tiny_runs("transformer"))
    assert main(["translate", run, "--checkpoint", "last", "-v", "seven"]) == 0
    verbose = capsys.readouterr()
    assert verbose.err.startswith(f"loaded {run} (transformer, checkpoint last) on ")
    assert main(["translate", run, "--checkpoint", "last", "--quiet", "seven"]) == 0
    quiet = capsys.readouterr()
    assert quiet.out == verbose.out and len(quiet.out.splitlines()) == 1 and quiet.err == ""
