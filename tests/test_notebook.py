"""examples/notes_tour.ipynb and notes_tour.zh.ipynb: written by scripts/notebooks.py from one list of cells,
committed with their outputs, and reproduced by a fresh execution.

What "reproduced" means (``structure()`` in scripts/notebooks.py): the same cells with the same sources, and in
each code cell the same sequence of output kinds (stdout/stderr streams; results and displays with the same MIME
types), the same number of figures, and, for the cells tagged ``figure-fixed-size`` (figures whose size their
code sets), the same pixel sizes. Numbers and words are not compared, not even with the digits masked: the models
are sized for the machine (``train.size=auto``) and trained for half a minute of wall time, so another processor
trains another model (other widths, step counts, translations, hence other words in the text), and an attention
map's pixel size follows the number of tokens its model emits. A text comparison would fail on every honest
re-run, or be loosened until it compared nothing. When this machine trains on another dataset than the committed
outputs were made on (no corpus here: the offline numbers task), the cells differ by design and the comparison is
skipped, saying so; the execution itself is still checked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat
import pytest

from attnlab.notes import SECTIONS, cite

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("notebooks_script", ROOT / "scripts" / "notebooks.py")
notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebooks)

# A code cell whose last line returns a figure must show it inline (image/png), without pyplot.
FIGURE_ENDINGS = (".plot(", ".plot()", "_figure(", ".figure()")


def _committed(lang: str) -> nbformat.NotebookNode:
    return nbformat.read(notebooks.PATHS[lang], as_version=4)


@pytest.mark.parametrize("lang", notebooks.LANGS)
def test_committed_notebook_is_the_scripts_with_outputs(lang):
    nb = _committed(lang)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    built = notebooks.build(lang)
    assert [(c.cell_type, c.source) for c in nb.cells] == [(c.cell_type, c.source) for c in built.cells], (
        f"{notebooks.PATHS[lang].name} differs from scripts/notebooks.py: edit the script, then run it")
    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    unrun = [i for i, c in code if c.execution_count is None]
    assert not unrun, f"cells {unrun} have no outputs committed: run `python scripts/notebooks.py`"
    errors = [i for i, c in code if any(o.output_type == "error" for o in c.outputs)]
    assert not errors, f"cells {errors} failed when the outputs were made"
    for i, c in code:
        last = c.source.strip().splitlines()[-1]
        if any(e in last for e in FIGURE_ENDINGS):
            kinds = {k for o in c.outputs for k in o.get("data", {})}
            assert "image/png" in kinds, f"cell {i}: the figure of {last!r} did not show inline"


@pytest.mark.parametrize("lang", notebooks.LANGS)
def test_every_section_has_its_heading_in_both_numberings(lang):
    headings = [c.source.splitlines()[0] for c in notebooks.build(lang).cells if c.cell_type == "markdown"]
    for s in SECTIONS:
        title = s.title_zh if lang == "zh" else s.title[0].upper() + s.title[1:]
        assert any(h.startswith(f"## {cite(s.number, lang)}") and h.endswith(title) for h in headings), \
            f"no heading for §{s.number}"
    if lang == "zh":  # the Chinese tour speaks Chinese: set_language in its first code cell
        assert 'LANG = "zh"' in next(c.source for c in notebooks.build(lang).cells if c.cell_type == "code")


@pytest.mark.slow
def test_both_notebooks_run_and_reproduce_the_committed_outputs(tmp_path, monkeypatch):
    # One test for both languages: the English notebook trains the runs the Chinese one reuses, and under
    # pytest-xdist a module fixture would run (and train) once per worker.
    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")  # nothing may be fetched: fra-eng from ATTNLAB_DATA_DIR, else numbers
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # the kernel's history stays out of $HOME
    fresh = notebooks.run_both(tmp_path)  # raises CellExecutionError naming the cell that failed
    for kind in ("bahdanau", "transformer"):
        assert (tmp_path / "runs" / "notes_tour" / kind / "config.toml").is_file()  # it trained where it ran
    skipped = []
    for lang, nb in fresh.items():
        committed = _committed(lang)
        made_on, here = committed.metadata.get("attnlab", {}).get("dataset"), nb.metadata["attnlab"]["dataset"]
        if made_on != here:
            skipped.append(f"{lang}: committed outputs made on {made_on}, this machine trained on {here}")
            continue
        new, old = notebooks.structure(nb), notebooks.structure(committed)
        assert len(new) == len(old)
        for i, (n, o) in enumerate(zip(new, old)):
            assert n == o, (f"cell {i} of {notebooks.PATHS[lang].name}: fresh {n.get('outputs')} "
                            f"{n.get('figure_sizes')}, committed {o.get('outputs')} {o.get('figure_sizes')}")
    if skipped:
        pytest.skip("both notebooks ran; not compared with the committed outputs: " + "; ".join(skipped))


def test_the_chinese_tour_comments_its_code_in_chinese():
    """The code is the English tour's; every comment and docstring of it that is prose is Chinese."""
    import re

    prose = re.compile(r"[A-Za-z]{3,}.*[A-Za-z]{3,}")
    for cell in notebooks.build("zh").cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            said = line.partition("# ")[2] if "# " in line else line.strip() if line.strip().startswith('"""') else ""
            said = re.sub(r"`[^`]*`|\([^)]*\)|i'm home \. → je suis chez moi \.", "", said)
            assert not prose.search(said) or re.search(r"[\u4e00-\u9fff]", said), line
