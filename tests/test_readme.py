"""The README starts with use: the two commands, what the demo shows, a five-minute guide; the
benchmarks come near the end, and no table cell runs past two lines."""

from __future__ import annotations

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
CELL_CHARS = 110  # about two lines of a two-column table as GitHub renders it


def test_usage_comes_first_and_benchmarks_near_the_end():
    heads = re.findall(r"^## (.+)$", README, flags=re.M)
    assert heads[:3] == ["What the demo shows", "Five minutes with attnlab", "Commands"], heads
    assert heads.index("Benchmarks") >= len(heads) - 3, heads
    guide = README.split("## Five minutes with attnlab", 1)[1].split("\n## ", 1)[0]
    steps = ["**Train**", "**Translate**", "**Look at attention**", "**Serve**", "**Export**", "**Your own corpus**"]
    assert [guide.index(s) for s in steps] == sorted(guide.index(s) for s in steps)
    assert "--data pairs.tsv data.src_lang=en data.tgt_lang=de" in guide
    assert "| budget |" not in README  # the benchmark table lives in bench/RESULTS.md


def test_no_table_cell_longer_than_two_lines():
    rows = [line for line in README.splitlines() if line.startswith("|") and not line.startswith("|---")]
    long = [c.strip() for row in rows for c in row.strip("|").split("|") if len(c.strip()) > CELL_CHARS]
    assert not long, long


# ------------------------------------------------------------------ the five-minute guide runs after setup.sh

ROOT = Path(__file__).resolve().parents[1]
README_ZH = (ROOT / "README.zh.md").read_text(encoding="utf-8")
# What a guide command needs beyond the core package: pyproject's extra, named by what the command line holds.
NEEDS = {"ct2": lambda argv: "ctranslate2" in argv, "web": lambda argv: argv[0] == "serve",
         "explain": lambda argv: argv[0] == "attribute", "align": lambda argv: argv[0] == "align",
         "tensorboard": lambda argv: "train.tensorboard=true" in argv}


def guide_commands(text: str, section: str) -> list[list[str]]:
    """Each ``attnlab …`` command of ``section``'s bash blocks, as argv (comments and pipes cut off)."""
    import shlex

    part = text.split(section, 1)[1].split("\n## ", 1)[0]
    argvs = []
    for block in re.findall(r"```bash\n(.*?)```", part, flags=re.S):
        for line in block.splitlines():
            for piece in line.split(" | "):
                argv = shlex.split(piece, comments=True)
                if argv[:1] == ["attnlab"]:
                    argvs.append(argv[1:])
    return argvs


def default_extras() -> set[str]:
    """The extras ``scripts/setup.sh`` (without ``dev``) installs."""
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    return set(re.search(r'^extras="([^"]*)"', setup, flags=re.M).group(1).split(","))


def _parses(argv: list[str]) -> None:
    from attnlab.cli import make_parser, parse
    from attnlab.cli.common import build_config

    args = parse(make_parser(), argv)  # as `attnlab` parses it: an unknown command or option exits 2, and the test fails
    if argv[0] == "train":  # its section.key=value overrides are checked as the command checks them
        build_config(args)


def test_every_guide_command_parses_and_its_extra_is_installed_by_setup():
    argvs = guide_commands(README, "## Five minutes with attnlab")
    assert {a[0] for a in argvs} >= {"train", "translate", "evaluate", "attention", "serve", "export"}
    for argv in argvs:
        _parses(argv)
        missing = {extra for extra, needs in NEEDS.items() if needs(argv)} - default_extras()
        assert not missing, f"`attnlab {' '.join(argv)}` needs the {missing} extra that scripts/setup.sh leaves out"


def test_the_chinese_guide_commands_parse_and_name_their_languages():
    argvs = guide_commands(README_ZH, "**自己的语料**")
    assert argvs and all("data.src_lang=en" in a and "data.tgt_lang=de" in a for a in argvs)
    for argv in argvs:
        _parses(argv)
    own = README_ZH.split("**自己的语料**", 1)[1].split("```", 1)[0]
    assert "源语言句子<TAB>目标语言句子" in own and "英语<TAB>法语" not in own
