"""The layers of docs/DESIGN.md hold in the code: no import runs upward.

The table under "## Layers" in docs/DESIGN.md is the one statement of the layers, bottom first; this test
reads it, then every import of every module of src/attnlab (at module level, inside functions and under
``if TYPE_CHECKING:`` alike) and fails on one that reaches a higher layer. Within a layer any import is
allowed (``../shared/tools/structure.py --max-cycles 0`` keeps them acyclic). There is no exception list.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
DESIGN = ROOT / "docs" / "DESIGN.md"


def layer_table() -> list[tuple[str, list[str]]]:
    """``[(layer name, [dotted module or package prefixes])]``, bottom layer first."""
    text = DESIGN.read_text(encoding="utf-8")
    section = re.search(r"^## Layers\b.*?$(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "docs/DESIGN.md has no '## Layers' section"
    rows = []
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[0]) <= set("-: "):
            continue
        names = re.findall(r"`([\w./]+)`", cells[1])
        if names:  # `__init__` is the package itself; `data/` a package; `maps` a module
            rows.append((cells[0], ["attnlab" if n == "__init__" else "attnlab." + n.strip("/").replace("/", ".")
                                    for n in names]))
    return rows


def modules() -> dict[str, Path]:
    out = {}
    for p in (SRC / "attnlab").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def layer_of(module: str, table: list[tuple[str, list[str]]]) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for i, (_, prefixes) in enumerate(table):
        for pre in prefixes:
            if module == pre or (pre != "attnlab" and module.startswith(pre + ".")):
                if best is None or len(pre) > best[0]:
                    best = (len(pre), i)
    return None if best is None else best[1]


def imports_of(path: Path, here: str, mods: dict[str, Path]) -> list[tuple[int, str]]:
    """``(line, target module)`` for every attnlab import in the file, wherever it is written."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "attnlab"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            if base.split(".")[0] != "attnlab":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if sub in mods else base))
    return [(line, t) for line, t in out if t != here]


def test_the_table_names_every_module():
    table = layer_table()
    assert len(table) >= 8, table
    missing = sorted(m for m in modules() if layer_of(m, table) is None)
    assert not missing, f"modules in no layer of docs/DESIGN.md: {missing}"


def test_no_import_runs_upward():
    table, mods = layer_table(), modules()
    upward = []
    for name, path in sorted(mods.items()):
        mine = layer_of(name, table)
        for line, target in imports_of(path, name, mods):
            theirs = layer_of(target, table)
            if theirs is not None and mine is not None and theirs > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line} {name} ({table[mine][0]}) -> {target} "
                              f"({table[theirs][0]})")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


@pytest.mark.parametrize("code, found", [
    ("from attnlab.viz import save\n", "attnlab.viz.save"),
    ("def f():\n    from attnlab import maps\n", "attnlab.maps"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from attnlab.translator import Translator\n",
     "attnlab.translator"),
])
def test_imports_are_found_wherever_written(tmp_path, code, found):
    """The parser sees module-level, function-level and TYPE_CHECKING imports (the check cannot be fooled)."""
    p = tmp_path / "m.py"
    p.write_text(code)
    mods = {"attnlab.viz.save": p, "attnlab.maps": p, "attnlab.translator": p}
    assert found in [t for _, t in imports_of(p, "attnlab.x", mods)]
