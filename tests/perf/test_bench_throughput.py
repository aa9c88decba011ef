"""bench/throughput.py: the --quick contract of issue 7 and the results file it rewrites."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load_script(path: Path):
    """The benchmark script as a module, loaded from its file (bench/ is not a package and stays off sys.path)."""
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


throughput = _load_script(BENCH / "throughput.py")

SECTION = "## Throughput\n\nnew table\n"


def test_rewriting_the_table_keeps_notes_and_other_sections(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(
        "# results\n\n## Throughput\n\nold table\n\n"
        f"{throughput.NOTES_MARKER}\n\nhistory we wrote by hand\n\n## Quality\n\nquality rows\n"
    )
    throughput.write_results(SECTION, path)
    text = path.read_text()
    assert "old table" not in text and "new table" in text
    assert "history we wrote by hand" in text and "quality rows" in text
    assert text.index("new table") < text.index(throughput.NOTES_MARKER) < text.index("## Quality")


def test_a_first_write_adds_the_section_and_a_notes_marker(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# results\n\n## Quality\n\nrows\n")
    throughput.write_results(SECTION, path)
    assert path.read_text().count(throughput.NOTES_MARKER) == 1
    throughput.write_results(SECTION, path)  # twice: still one section, one marker
    text = path.read_text()
    assert text.count("## Throughput") == 1 and text.count(throughput.NOTES_MARKER) == 1
    assert "rows" in text and "new table" in text


@pytest.mark.slow
def test_quick_mode_prints_one_ratio_line_per_race(tmp_path):
    """The issue's --quick contract: `ratio NAME VALUE` for the four races; decoding agrees with the reference."""
    res = subprocess.run(
        [sys.executable, str(BENCH / "throughput.py"), "--quick", "--threads", "1", "--no-write"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    ratios = dict(re.findall(r"^ratio (\w+) ([0-9.]+)$", res.stdout, flags=re.M))
    assert set(ratios) == {"transformer_train", "bahdanau_train", "greedy_decode", "beam_decode"}
    assert all(float(v) > 0 for v in ratios.values())
    agree = [float(x) for x in re.findall(r"same output ([0-9.]+)%", res.stdout)]
    assert len(agree) == 2 and min(agree) >= 90.0, res.stdout
