"""Honest packaging: what the installed metadata declares matches what the code imports and what CI tests."""

from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

import attnlab

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def requirements(extra: str | None = None) -> dict[str, Requirement]:
    """The installed distribution's requirements, core ones (extra None) or one extra's."""
    out = {}
    for text in md.distribution("attnlab").requires or []:
        req = Requirement(text)
        in_extra = req.marker is not None and req.marker.evaluate({"extra": extra or ""})
        is_core = req.marker is None
        if (extra is None and is_core) or (extra is not None and in_extra and not is_core):
            out[req.name.lower()] = req
    return out


def test_pydantic_2_is_required_where_it_is_imported():
    """web/ imports pydantic v2's API; nothing outside web/ imports it, so the web extra declares it."""
    importers = {p.relative_to(ROOT / "src" / "attnlab").parts[0] for p in (ROOT / "src" / "attnlab").rglob("*.py")
                 if re.search(r"^\s*(from|import) pydantic\b", p.read_text(encoding="utf-8"), re.M)}
    assert importers == {"web"}
    pyd = requirements("web")["pydantic"]
    assert not pyd.specifier.contains("1.10.13") and pyd.specifier.contains("2.0.0")


def test_httpx_is_a_test_tool_only():
    assert "httpx" in requirements("dev")
    assert "httpx" not in requirements() and "httpx" not in requirements("web")
    src = [p for p in (ROOT / "src").rglob("*.py") if re.search(r"^\s*(from|import) httpx\b", p.read_text(), re.M)]
    assert not src, src


def test_license_file_and_metadata_agree():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and "the attnlab authors" in text and "WITHOUT WARRANTY" in text
    meta = md.metadata("attnlab")
    assert PYPROJECT["project"]["license"] == "MIT" and meta["License-Expression"] == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])


def test_version_is_written_once():
    """pyproject.toml names no version; setuptools reads attnlab._version.__version__ (the package re-exports
    it), and the install reports it."""
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "attnlab._version.__version__"}
    assert md.version("attnlab") == attnlab.__version__
    text = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "src" / "attnlab").rglob("*.py"))
    assert len(re.findall(r"^__version__ = \"[^\"]+\"$", text, re.M)) == 1


def test_torch_floor_is_the_release_setup_installs_and_ci_tests():
    """setup.sh installs ATTNLAB_TORCH_VERSION (CI runs every test on it): the declared floor must be it."""
    pinned = re.search(r"ATTNLAB_TORCH_VERSION:-([0-9.]+)\}", (ROOT / "scripts" / "setup.sh").read_text()).group(1)
    (floor,) = [s for s in requirements()["torch"].specifier if s.operator == ">="]
    assert Version(floor.version).release[:2] == Version(pinned).release[:2], (floor, pinned)
    import torch

    assert Version(torch.__version__).release >= Version(floor.version).release


def test_typed_marker_ships():
    assert (ROOT / "src" / "attnlab" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["attnlab"]


def test_the_completion_library_is_a_core_dependency():
    """`attnlab completion` is a core command, so shtab is not an extra."""
    assert "shtab" in requirements() and md.version("shtab")


def test_readme_keeps_its_two_commands_and_names_the_corpus_licence():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 2  # .ci/run runs the second line
    assert "CC-BY 2.0 FR" in readme and "Tatoeba" in readme
    assert "ATTNLAB_TORCH_INDEX" in readme
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in changelog and f"## [{attnlab.__version__}]" in changelog
