"""Every command and every figure speaks Chinese with ``--lang zh`` (the notes' language): no printed line,
and no text on a figure, is English prose left untranslated (tests/zh_lines.py says what counts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnlab import i18n, notes
from attnlab.cli import main, make_parser
from attnlab.data import numbers
from tests.cli.test_align import numbers_gold  # noqa: F401  (a fixture: a synthetic gold folder)
from tests.conftest import tiny_config
from tests.zh_lines import english_lines

pytestmark = pytest.mark.usefixtures("english_only")  # tests/conftest.py

def _tiny_overrides() -> list[str]:
    """tests/conftest.py's tiny model, for the commands that train (train, sweep): a seconds-long run."""
    cfg = tiny_config("transformer")
    return ["data.numbers_size=400", "data.batch_tokens=600", "model.num_hiddens=32", "model.embed_size=32",
            "model.num_layers=1", "model.num_heads=2", "model.ffn_num_hiddens=64", "train.eval_every=0",
            "train.save_every=0", "train.threads=1", f"decode.max_len_b={cfg.decode.max_len_b}"]


#: The sentences' and translations' words the commands print: the numbers task's, English and French, and
#: the notes' example sentences with their accepted translations.
VOCAB = frozenset(
    w for text in (*(side for pair in numbers.numbers_pairs(2000) for side in pair), *notes.NUMBERS_EXAMPLES,
                   *notes.SENTENCES, *(t for ts in notes.ACCEPTED.values() for t in ts), *notes.REFERENCES.values())
    for w in text.split())

SENTENCE = "twenty one"


def _argv(command: str, run, tmp, gold) -> list[str] | None:
    """The command line that runs ``command`` on tiny runs (``run(kind)`` trains one on first use)."""
    t = str(run("transformer"))
    return {
        "data": ["data", "--dataset", "numbers", "--sentence", SENTENCE, "data.numbers_size=400"],
        "train": ["train", "--model", "transformer", "--dataset", "numbers", "--max-steps", "6",
                  "--out", str(tmp / "train"), *_tiny_overrides()],
        "config": ["config", "--model", "transformer", "--dataset", "numbers"],
        "translate": ["translate", t, SENTENCE, "nine hundred"],
        "evaluate": ["evaluate", t, "--max-sentences", "6"],
        "demo": None,  # its own test below (slow)
        "attention": ["attention", t, SENTENCE, "--save-dir", str(tmp / "att")],
        "explain": ["explain", str(run("bahdanau")), SENTENCE, "--reference", "vingt et un"],
        "params": ["params", t, "--save-dir", str(tmp / "params")],
        "positional": ["positional", t, "--save-dir", str(tmp / "pos")],
        "selfcheck": ["selfcheck", t, "--sentences", "4"],
        "doctor": ["doctor", t],
        "sweep": None,  # its own test below (slow)
        "heads": ["heads", t, "--sentences", "6", "--save-dir", str(tmp / "heads")],
        "compare": ["compare", t, str(run("bahdanau")), "--sentences", "6", "--save-dir", str(tmp / "cmp"),
                    "--timing-cap", "0.2"],
        "fill": ["fill", str(run("encoder-only")), "[MASK] one", "--top", "2"],
        "align": ["align", t, "--gold", str(gold), "--no-ibm", "--save-dir", str(tmp / "align")],
        "attribute": ["attribute", t, SENTENCE, "--save-dir", str(tmp / "attr")],
        "scaling": ["scaling", "--plan-only", "--quick", "--dataset", "numbers", "--widths", "16",
                    "--budget", "1e8", "--runs-dir", str(tmp / "scaling")],
        "serve": ["serve", t, "--port", "0"],
        "export": ["export", t, str(tmp / "export")],
        "average": ["average", _copy_run(t, tmp / "average-run"), "--last", "1"],
        "completion": None,  # a shell script: code, not text for the learner
    }[command]


def _copy_run(run: str, to: Path) -> str:
    """A copy of a trained run (average writes into its checkpoints/, which the shared tiny runs must not get)."""
    import shutil

    return str(shutil.copytree(run, to)) if (Path(run) / "checkpoints").is_dir() else run


def _commands() -> list[str]:
    parser = make_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return list(dict.fromkeys(sub.choices))  # aliases once


def test_the_cases_cover_every_command(tmp_path):
    """A command added to the CLI needs a line here, so that it is checked in Chinese too."""
    for command in _commands():
        _argv(command, lambda kind: tmp_path, tmp_path, tmp_path)  # KeyError: a command without a case


def _run_zh(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    from attnlab.web import serving

    monkeypatch.setattr(serving, "serve", lambda *a, **k: None)  # serve: everything up to listening
    rc = main([*argv, "--lang", "zh"])
    out, err = capsys.readouterr()
    return rc, out + err


COMMANDS = [c for c in ("data", "train", "config", "translate", "evaluate", "attention", "explain", "params",
                        "positional", "selfcheck", "doctor", "heads", "compare", "fill", "align", "attribute",
                        "scaling", "serve", "export", "average")]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_chinese(command, tiny_runs, tmp_path, numbers_gold, capsys, monkeypatch):  # noqa: F811
    if command == "align":
        pytest.importorskip("nltk")
    rc, text = _run_zh(_argv(command, tiny_runs, tmp_path, numbers_gold), capsys, monkeypatch)
    assert rc in (0, 1), text[-2000:]  # selfcheck exits 1 when a check fails on an untrained-ish model
    assert english_lines(text, VOCAB) == [], text
    if command == "attribute":  # its tables' corner, one word beside the tokens
        assert not [line for line in text.splitlines() if line.startswith(("output ", "query "))], text


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["demo", "--max-minutes", "0.05", "--threads", "1", "--dataset", "numbers"],
    ["sweep", "--model", "transformer", "--dataset", "numbers", "--max-steps", "4", "--grid", "train.lr=1e-3,3e-3"],
], ids=["demo", "sweep"])
def test_the_training_commands_print_chinese(argv, tmp_path, capsys, monkeypatch):
    argv = [*argv, "--runs-dir", str(tmp_path / "runs")]
    if argv[0] == "sweep":
        argv += _tiny_overrides()
    rc, text = _run_zh(argv, capsys, monkeypatch)
    assert rc == 0, text[-2000:]
    assert english_lines(text, VOCAB) == [], text


def test_a_signal_is_said_in_chinese(monkeypatch, capsys):
    """SIGTERM (or Ctrl-C) ending a command: the one line it leaves is the learner's language too."""
    import signal

    from attnlab.interrupts import Interrupted

    def stopped(args):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr("attnlab.cli.train.cmd_config", stopped)
    assert main(["config", "--model", "transformer", "--lang", "zh"]) == 143
    err = capsys.readouterr().err
    assert err.strip() and english_lines(err, VOCAB) == [], err


def _without_metavars(help_text: str) -> str:
    """A command's --help without the usage lines that hold only metavars (``RUN OUT``: names, not prose)."""
    import re

    return "\n".join(line for line in help_text.splitlines()
                     if not (re.fullmatch(r"[\sA-Z_\[\].|{},-]*", line.replace("decode.key=value", "")) and line.strip()))


def test_help_summaries_are_chinese(capsys, monkeypatch):
    """The parser is built before --lang is read: main() looks for it (and ATTNLAB_LANG) first. The top
    level's help (every command's summary, the examples, the environment) and each command's whole --help:
    its description and every option's help."""
    for argv in (["--lang", "zh", "--help"], ["--lang=zh", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert "用法：" in out and english_lines(out, VOCAB) == [], out
    monkeypatch.setenv(i18n.ENV_VAR, "zh")
    for command in _commands():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "选项" in out and english_lines(_without_metavars(out), VOCAB) == [], out
    monkeypatch.delenv(i18n.ENV_VAR)
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "usage:" in capsys.readouterr().out  # English stays English


def test_an_untranslated_message_is_named_once(tiny_runs, capsys, monkeypatch):
    """A message the catalogue lacks is shown in English and named on stderr once, not silently."""
    from attnlab.cli import data as data_cli

    def twice(args):
        print(i18n._("a message nobody translated"))
        print(i18n._("a message nobody translated"))
        print(i18n._("  {value:>8} {other}"))  # fields and symbols alone: nothing to translate

    monkeypatch.setattr(data_cli, "cmd_data", twice)
    assert main(["data", "--lang", "zh"]) == 0
    out, err = capsys.readouterr()
    assert out.count("a message nobody translated") == 2
    assert err.count("a message nobody translated") == 1 and "翻译" in err and "value" not in err
    assert i18n.missing() == ["a message nobody translated"]
    assert main(["data", "--lang", "en"]) == 0
    assert capsys.readouterr().err == ""  # English is the messages themselves: nothing is missing


def test_the_chinese_readme_starts_with_the_same_two_commands():
    """README.zh.md opens with README.md's two commands, exactly; README.md links it after them."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    fence = "`" * 3 + "bash\n"
    first_block = lambda text: text.split(fence, 1)[1].split("`" * 3, 1)[0]  # noqa: E731
    en, zh = (root / "README.md").read_text(encoding="utf-8"), (root / "README.zh.md").read_text(encoding="utf-8")
    assert first_block(zh) == first_block(en)
    assert "docs/notes-sections.md" in zh and (root / "docs" / "notes-sections.md").is_file()
    assert "(README.zh.md)" in en.split(first_block(en), 1)[1].split("\n\n", 2)[1]  # the line after the block


@pytest.mark.parametrize("argv, zh, en", [
    (["config", "--model", "transformer", "train.lrx=1"], "error: 未知的键 train.lrx；[train] 中有效的键：",
     "error: unknown key train.lrx; valid keys in [train]: "),
    (["config", "--model", "transformer", "model.dropout=1.5"], "error: model.dropout=1.5 必须在 [0, 1) 之内",
     "error: model.dropout=1.5 must lie in [0, 1)"),
    (["translate", "RUN", "go .", "--beam", "0"], "error: --beam 0 至少为 1（--beam 1 = 贪心搜索；",
     "error: --beam 0 must be at least 1 (--beam 1 = greedy; "),
    (["train", "--model", "transformer", "--size", "huge", "--out", "RUN"],
     "error: attnlab train：参数 --size：无效的选择 'huge'（可选：",
     "error: attnlab train: argument --size: invalid choice: 'huge' (choose from "),
    (["translate", "RUN", "go ."], "error: RUN 不是运行文件夹（其中没有 config.toml）；请给一次 `attnlab train` 训练的 --out 文件夹",
     "error: RUN is not a run folder (it has no config.toml); give the --out folder of an `attnlab train` run"),
    (["demo", "--runs-dir", "FILE"], "error: --runs-dir FILE 是一个文件，不是文件夹；请给出一个文件夹",
     "error: --runs-dir FILE is a file, not a folder; give a folder"),
    (["data", "--write-tsv", "RUN/x.tsv", "--run", "RUN"], "error: --write-tsv 写出一个语料，--run 读取一次运行的语料",
     "error: --write-tsv writes a corpus, --run reads a run's: drop one of them"),
    (["attribute", "RUN", "go .", "--steps", "0"], "error: --steps 0 必须 >= 1（积分梯度的插值点数）",
     "error: --steps 0 must be >= 1 (integrated gradients' interpolation points)"),
    (["serve", "RUN", "--workers", "0"], "error: attnlab serve：参数 --workers：0 必须 >= 1",
     "error: attnlab serve: argument --workers: 0 must be >= 1"),
], ids=["unknown-key", "out-of-range", "beam", "size", "not-a-run", "file-for-folder", "two-data-sources", "steps",
        "type-check"])
def test_an_error_that_teaches_speaks_chinese(argv, zh, en, tmp_path, capsys):
    """A learner's first mistakes (a config typo, a value out of range, a count below 1, a --size that is not
    one, a folder that is not a run, a file where a folder goes, two options that contradict, a count an option's
    type refuses) end in one Chinese ``error:`` line, exit 2, no traceback, with the option and key names as
    they are typed; English stays English."""
    file = tmp_path / "a-file"
    file.write_text("not a folder\n")
    argv = [a.replace("RUN", str(tmp_path)).replace("FILE", str(file)) for a in argv]
    zh = zh.replace("RUN", str(tmp_path)).replace("FILE", str(file))
    en = en.replace("RUN", str(tmp_path)).replace("FILE", str(file))
    assert _exit_code([*argv, "--lang", "zh"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    err = err.splitlines()[-1]  # a usage error prints the usage first
    assert err.startswith(zh) and english_lines(err, VOCAB) == [], err
    assert _exit_code(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(en)


def _exit_code(argv: list[str]) -> int:
    """main's return value, or the status a usage error exits with (argparse raises SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def test_plain_progress_lines_speak_chinese_and_json_keeps_its_keys():
    """``--log-format plain``'s human text follows --lang; a JSON record's keys are for programs and stay."""
    import io
    import json

    from attnlab.progress import Progress

    ticks = iter(range(100))
    with i18n.using("zh"):
        plain, js = io.StringIO(), io.StringIO()
        for fmt, stream in (("plain", plain), ("json", js)):
            p = Progress("训练 transformer", fmt, unit="step", total=10, interval_s=1, stream=stream,
                         clock=lambda: float(next(ticks)))
            p.update(2, loss=3.25, lr=1e-3, tokens_per_s=1234.0)
            p.close()
    line = plain.getvalue().splitlines()[0]
    assert line.startswith("训练 transformer: 步 2/10, 损失 3.250, lr 1.00e-03, tok/s 1,234, 已用 ") and "预计剩余" in line
    assert english_lines(plain.getvalue(), VOCAB) == []
    rec = json.loads(js.getvalue().splitlines()[0])
    assert {"event", "step", "total", "loss", "lr", "tokens_per_s", "elapsed_s"} <= set(rec)


def test_the_library_errors_a_command_can_end_in_speak_chinese():
    """Errors raised below the CLI (a too-long sentence, a layer that is not there, a resume that changes the
    model, a model that cannot translate) are written in the current language too: the CLI prints them as
    they are."""
    import torch

    from attnlab import config
    from attnlab.attention.positional import check_positions
    from attnlab.errors import AttnlabError
    from attnlab.maps import select_maps
    from attnlab.models.encoder_only import _cannot_generate
    from attnlab.training.resume import check_resume_overrides

    def cannot_generate():
        raise _cannot_generate()

    saved = config.preset("transformer")
    changed = config.apply_overrides(saved, ["model.num_layers=7"])
    raisers = [lambda: check_positions(90, 64), lambda: select_maps(torch.zeros(2, 1, 3, 3), 5, None, "cross"),
               lambda: check_resume_overrides(saved, changed), cannot_generate]
    for lang in ("zh", "en"):
        with i18n.using(lang):
            texts = []
            for raise_it in raisers:
                with pytest.raises((AttnlabError, ValueError)) as e:  # select_maps: a ValueError (a 422)
                    raise_it()
                texts.append(str(e.value))
        bad = [t for t in texts if english_lines(t, VOCAB)]
        assert (bad == []) if lang == "zh" else (len(bad) == len(texts)), texts
