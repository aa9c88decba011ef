"""The page in a real browser: headless Chromium (Debian's package) driven by Playwright.

Starts `attnlab serve` in a subprocess on a free loopback port, types the notes' sentence, checks
the heatmap's rows and columns against the API's tokens, changes layer and head, steps through the
decoding, compares runs, scores the alignment against a synthetic gold folder, opens the page in
Chinese, and saves screenshots under the test's tmp folder.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.analysis.align.test_gold import write_gold
from tests.web.test_alignment_web import EN, FR, LINKS

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = next(
    (
        p
        for p in (
            os.environ.get("ATTNLAB_CHROMIUM"),
            shutil.which("chromium"),
            shutil.which("chromium-browser"),
        )
        if p
    ),
    None,
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_runs, tmp_path_factory):
    """`attnlab serve` on 127.0.0.1:<free port>; yields the base URL, stops the process afterwards."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium, or run scripts/ci_browser.sh)")
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    gold = write_gold(tmp_path_factory.mktemp("gold") / "gold", EN, FR, LINKS)  # synthetic, WPT-2003 format
    env = {**os.environ, "ATTNLAB_GOLD_DIR": str(gold), "ATTNLAB_LANG": "en"}
    cmd = [
        sys.executable,
        "-m",
        "attnlab",
        "serve",
        f"transformer={tiny_runs('transformer')}",
        f"bahdanau={tiny_runs('bahdanau')}",
        "--port",
        str(port),
        "--workers",
        "1",
        "--threads",
        "1",
        "--log-level",
        "warning",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server did not answer /health within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        yield b
        b.close()


def _heatmap_shape(page, box="#heatmap"):
    return page.eval_on_selector_all(
        f"{box} .hm-row", "rows => rows.map(r => r.querySelectorAll('.hm-cell').length)"
    )


def test_translate_and_explore(server, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(server + "/")
    page.wait_for_selector(
        "#run option:nth-child(2)", state="attached"
    )  # the page's CSP forbids eval: selectors
    page.fill("#sentence", "i'm home .")
    page.click("#translate")
    page.wait_for_selector("#heatmap .hm-row")

    # the page asks for 2 <pad> positions (its PAD_SHOWN), so the padding columns are on screen
    api = httpx.post(server + "/api/translate", json={"text": "i'm home .", "run": "transformer", "pad": 2}).json()
    assert api["src_tokens"][-2:] == ["<pad>", "<pad>"]
    assert page.input_value("#kind") == "cross"
    assert page.input_value("#layer") == str(api["attention"]["cross"]["layers"] - 1)  # opens on the last layer
    shape = _heatmap_shape(page)
    assert len(shape) == len(api["tgt_tokens"])  # one row per target token
    assert set(shape) == {len(api["src_tokens"])}  # one column per source token
    assert (
        page.eval_on_selector_all("#heatmap .hm-colhead", "h => h.map(x => x.textContent)")
        == api["src_tokens"]
    )
    assert (
        page.eval_on_selector_all("#heatmap .hm-label", "h => h.map(x => x.textContent)") == api["tgt_tokens"]
    )
    assert page.text_content("#translation").strip() == (api["translation"] or "(empty)")
    first = page.get_attribute("#heatmap .hm-row[data-row='0'] .hm-cell[data-col='0']", "data-weight")
    want = api["attention"]["cross"]["weights"]
    mean = sum(h[0][0] for h in want[-1]) / len(want[-1])  # default view: the heads' mean, last layer
    assert float(first) == pytest.approx(mean, abs=2e-3)

    # Hover a cell: the tooltip names both tokens.
    page.hover("#heatmap .hm-row[data-row='0'] .hm-cell[data-col='0']")
    tip = page.text_content("#tooltip")
    assert api["tgt_tokens"][0] in tip and api["src_tokens"][0] in tip
    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)

    # Change layer and head: the cells show that head's weights.
    layers = page.eval_on_selector_all("#layer option", "o => o.map(x => x.value)")
    page.select_option("#layer", layers[-1])
    page.select_option("#head", "1")
    # The page asks the server for just that map (one layer, one head): wait for it to be drawn.
    page.wait_for_selector(f"#heatmap[data-view='cross:{layers[-1]}:1']")
    w = float(page.get_attribute("#heatmap .hm-row[data-row='0'] .hm-cell[data-col='0']", "data-weight"))
    assert w == pytest.approx(want[int(layers[-1])][1][0][0], abs=1e-4)
    assert page.eval_on_selector_all("#alignment line.al-line", "l => l.length") > 0

    # The encoder's self-attention: a square over the source tokens.
    page.select_option("#kind", "enc_self")
    page.wait_for_selector("#heatmap[data-view^='enc_self:']")
    assert _heatmap_shape(page) == [len(api["src_tokens"])] * len(api["src_tokens"])
    assert "0 steps" not in page.text_content("#step-text") and page.is_disabled("#step-next")  # no decoding steps
    assert "<pad>" in page.text_content("#kind-note")
    page.select_option("#kind", "cross")
    page.wait_for_selector("#heatmap[data-view^='cross:']")

    # Step through the decoding: one row highlighted, the translation built up to it.
    page.click("#step-next")
    assert page.eval_on_selector_all("#heatmap .hm-row.current", "r => r.map(x => x.dataset.row)") == ["0"]
    assert page.text_content("#translation .tok.current").strip() == api["tgt_tokens"][0]

    # The overview has one thumbnail per layer × head; clicking one selects it.
    page.click("#overview-box summary")
    n_thumbs = page.eval_on_selector_all("#overview .ov-cell", "c => c.length")
    att = api["attention"]["cross"]
    assert n_thumbs == att["layers"] * att["heads"]
    page.click("#overview .ov-cell[data-layer='0'][data-head='0']")
    assert page.input_value("#head") == "0"
    page.screenshot(path=str(tmp_path / "explorer-step.png"), full_page=True)

    # The same sentence through every run, then switch to Bahdanau.
    page.click("#compare")
    page.wait_for_selector("#compare-out .cmp:nth-child(1) .hm-row")
    page.wait_for_selector("#compare-out .cmp:nth-child(2) .hm-row")
    assert page.eval_on_selector_all("#compare-out .cmp", "c => c.map(x => x.dataset.run)") == [
        "transformer",
        "bahdanau",
    ]
    page.select_option("#run", "bahdanau")
    page.wait_for_selector("#result-meta:text-matches('^bahdanau')")
    bahd = httpx.post(server + "/api/translate", json={"text": "i'm home .", "run": "bahdanau", "pad": 2}).json()
    assert _heatmap_shape(page) == [len(bahd["src_tokens"])] * len(bahd["tgt_tokens"])
    assert page.eval_on_selector_all("#kind option", "o => o.map(x => x.value)") == ["cross"]

    # The training timeline shows the probe sentence recorded during training.
    page.wait_for_selector("#probe-heatmap .hm-row")
    assert page.input_value("#probe-sentence") is not None
    assert "step" in page.text_content("#probe-step-label")
    page.screenshot(path=str(tmp_path / "explorer-bahdanau.png"), full_page=True)
    assert not errors, errors


def test_errors_are_shown_not_thrown(server, browser):
    page = browser.new_page()
    page.goto(server + "/")
    page.wait_for_selector(
        "#run option:nth-child(2)", state="attached"
    )  # the page's CSP forbids eval: selectors
    page.eval_on_selector(
        "#sentence", "e => { e.removeAttribute('maxlength'); e.removeAttribute('required'); }"
    )
    page.fill("#sentence", "a" * 400)
    page.click("#translate")
    page.wait_for_selector("#status.error")
    assert "at most 300" in page.text_content("#status")
    assert page.get_attribute("#status", "role") == "alert"


def test_alignment_quality_and_the_chinese_notes(server, browser, tmp_path):
    """The alignment view draws the API's AER table with its best head outlined; ?lang=zh speaks Chinese."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/?lang=zh")
    page.wait_for_selector("#run option:nth-child(2)", state="attached")
    assert page.get_attribute("html", "lang") == "zh"
    assert page.text_content("#h-align") == "与金标准对比的对齐质量"
    assert page.get_attribute("#sentence", "placeholder").startswith("输入一个英语句子")
    assert "加拿大议会" in page.text_content("#align-card") and "Tatoeba" in page.text_content("#align-card")
    page.select_option("#align-sentences", "25")
    page.click("#align-score")
    page.wait_for_selector("#align-out table.aer-table[data-shift='1']")
    api = httpx.get(server + "/api/alignment", params={"run": "transformer", "sentences": 25}).json()
    assert api["cached"] is True  # the page's request computed it; this one is served from the cache
    best = page.eval_on_selector_all("#align-out .aer-cell.best", "c => c.map(x => x.textContent)")
    assert best == [f"{100 * api['best_head']['aer']:.1f}"]
    assert page.eval_on_selector_all("table.aer-table[data-shift='0'] tr", "r => r.length") == api["layers"] + 1
    assert "最好的头" in page.text_content("#align-summary")
    page.fill("#sentence", "twenty one")
    page.click("#translate")
    page.wait_for_selector("#heatmap .hm-row")
    note = page.text_content("#kind-note")
    assert "交叉注意力" in note and "<pad>" in note and "{pad}" not in note
    assert "法语" in note and "英语" in note and "{src}" not in note  # the run's pair (numbers: English → French)
    page.screenshot(path=str(tmp_path / "explorer-zh-align.png"), full_page=True)
    page.goto(server + "/?lang=klingon")  # an unknown language: said once, the page stays English
    page.wait_for_selector("#status.error")
    assert "klingon" in page.text_content("#status") and page.text_content("#h-align") == "Alignment quality against gold"
    assert not errors, errors



def test_phone_width_and_numbers_on_the_legend_scale(server, browser):
    """At 390 px (a phone) the page never scrolls sideways (wide maps scroll in their panel), and the
    "numbers" toggle writes each weight on the legend's 0–1 scale."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(server + "/")
    page.wait_for_selector("#run option:nth-child(2)", state="attached")
    page.fill("#sentence", "twenty one thousand three hundred")
    page.click("#translate")
    page.wait_for_selector("#heatmap .hm-row")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.check("#numbers")
    page.wait_for_selector("#heatmap .hm-cell:not(:empty)")
    shown = page.eval_on_selector_all("#heatmap .hm-cell", "c => c.map(x => [x.textContent, x.dataset.weight])")
    assert shown and all(text for text, _ in shown)
    for text, weight in shown:
        assert 0 <= float(text) <= 1 and float(text) == pytest.approx(float(weight), abs=0.006), (text, weight)
    page.close()
