"""examples/notes_tour.ipynb: committed without outputs, and every cell runs (executed with nbclient)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "notes_tour.ipynb"
# A code cell whose last line returns a figure must show it inline (image/png), without pyplot.
FIGURE_ENDINGS = (".plot(", ".curves()", "_figure(", ".figure()", "Image(")


def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def test_notebook_is_committed_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    dirty = [i for i, c in enumerate(_code_cells(nb)) if c.outputs or c.execution_count is not None]
    assert not dirty, f"code cells {dirty} carry outputs: clear them before committing (Cell → All Output → Clear)"
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for section in ("§4", "§5", "§6–7", "§8", "§9", "§23", "§24", "§25", "§15", "§16", "§11"):
        assert section in text, f"the tour no longer cites the notes' {section}"


@pytest.mark.slow
def test_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("ATTNLAB_OFFLINE", "1")  # the numbers task needs no download; nothing may be fetched
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # the kernel's history stays out of $HOME
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError naming the cell when any cell fails
    assert (tmp_path / "runs" / "notes_tour" / "transformer" / "config.toml").is_file()  # it trained where it ran
    for cell in _code_cells(nb):
        last = cell.source.strip().splitlines()[-1]
        kinds = {k for o in cell.outputs for k in o.get("data", {})}
        if last.strip() == "res":
            assert "text/html" in kinds and "data:image/png;base64," in "".join(
                o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {}))
        elif any(e in last for e in FIGURE_ENDINGS):
            assert "image/png" in kinds, f"the figure of {last!r} did not show inline"
