"""The LLM tab's script (llmload/runtime/locustglue/webui_tab.js) in a real headless Chromium, on a page that stands
in for Locust's (a header with RPS and Users, the step table) and a live.json the test writes: nice tick
numbers, a dot for every second that has a value (at low rates most seconds stand alone), and no RPS
figure in the header once the run is over, and Locust's "Average size (bytes)" column named for what it
holds: output tokens (issue 32); the TTFA column hidden while no step has one (issue 43)."""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import llmload.runtime

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
SCRIPT = Path(llmload.runtime.__file__).parent / "locustglue" / "webui_tab.js"
#: how Locust's RPS box is shown (our own box, cloned from it, has no "RPS" in it)
RPS_DISPLAY_JS = """() => getComputedStyle([...document.querySelectorAll('header .stat')]
  .find(n => n.textContent.includes('RPS'))).display"""
PAGE = """<!DOCTYPE html><html><body>
<header><div class="stat"><p>RPS</p><p>3.4</p></div><div class="stat"><p>Users</p><p>8</p></div></header>
<table><thead><tr><th>Offered req/s</th><th>TTFA p95 ms</th></tr></thead>
<tbody><tr><td>1.00</td><td></td></tr><tr><td>2.00</td><td></td></tr></tbody></table>
<table id="stats"><thead><tr><th><span>Name</span></th><th><span>Average size (bytes)</span></th></tr></thead></table>
<script src="webui_tab.js"></script></body></html>"""

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _live(state: str) -> dict:
    """Low rate: TTFT values in seconds 0, 3, 6 and 9 only (each alone), up to 8.3 ms."""
    t = list(range(12))
    ttft = [5.0 if s == 0 else 7.1 if s == 3 else 8.3 if s == 6 else 6.2 if s == 9 else None for s in t]
    return {"state": state, "pool": 8, "current": None, "result": None, "steps": [],
            "slo": {"ttft": [], "tpot": []},
            "series": {"t0": 0, "t": t, "ttft_p50_ms": ttft, "ttft_p95_ms": ttft, "tpot_p50_ms": [None] * 12,
                       "tpot_p95_ms": [None] * 12, "offered": [1] * 12, "achieved": [1] * 12,
                       "goodput": [1] * 12, "server": {"t": []}}}


@pytest.fixture
def site(tmp_path):
    (tmp_path / "llmload").mkdir()
    shutil.copy(SCRIPT, tmp_path / "webui_tab.js")
    (tmp_path / "index.html").write_text(PAGE, encoding="utf-8")
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _write(root: Path, state: str) -> None:
    (root / "llmload" / "live.json").write_text(json.dumps(_live(state)), encoding="utf-8")


@pytest.mark.timeout(120)
def test_ticks_markers_and_header_after_the_run(site):
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing under CI (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    root, base = site
    _write(root, "running")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "/index.html?tab=llm", wait_until="load")
            page.wait_for_function("() => document.querySelectorAll('#llmload-chart-ttft .llm-ytick').length > 0",
                                   timeout=15_000)
            ticks = page.evaluate("() => [...document.querySelectorAll('#llmload-chart-ttft .llm-ytick')]"
                                  ".map(n => n.textContent)")
            markers = page.locator('#llmload-chart-ttft circle.llm-marker[data-name="p95"]').count()
            rps_running = page.evaluate(RPS_DISPLAY_JS)
            ours_running = page.locator("#llmload-header").inner_text()
            size_header = page.evaluate("() => document.querySelector('#stats').innerText")
            more = page.evaluate("() => [0.7, 46, 1234, 0.033].map(v => window.llmloadNiceTicks(v, 4).ticks)")
            ttfa_cells = "() => [...document.querySelector('table').querySelectorAll('th, td')].filter(n => n.cellIndex === 1)"
            page.wait_for_function(f"() => ({ttfa_cells})().every(n => n.style.display === 'none')", timeout=15_000)
            page.evaluate("() => { document.querySelectorAll('tbody tr')[1].children[1].textContent = '850'; }")
            page.wait_for_function(f"() => ({ttfa_cells})().every(n => n.style.display === '')", timeout=15_000)
            _write(root, "stopped")
            page.wait_for_function("() => (window.llmloadLive() || {}).state === 'stopped'", timeout=15_000)
            page.wait_for_timeout(300)
            rps_stopped = page.evaluate(RPS_DISPLAY_JS)
            ours_stopped = page.evaluate("() => getComputedStyle(document.getElementById('llmload-header')).display")
        finally:
            browser.close()
    # 8.3 ms x 1.1: the axis reads 0, 2, 4, 6, 8, 10 (it read 0, 3, 5, 8, 10: steps of 2.5, rounded)
    assert ticks == ["0", "2", "4", "6", "8", "10"]
    for values in more:  # every step 1, 2 or 5 x 10^k
        step = values[1] - values[0]
        mantissa = step / 10 ** math.floor(math.log10(step) + 1e-9)
        assert round(mantissa, 6) in (1.0, 2.0, 5.0), values
        assert all(b - a == pytest.approx(step) for a, b in zip(values, values[1:], strict=False)), values
    assert "Average size (bytes)" not in size_header and "Average output tokens" in size_header  # tokens, not bytes
    assert markers == 4  # each lone second is a dot: no line joins them
    assert rps_running != "none" and "LLM step" in ours_running
    assert rps_stopped == "none" and ours_stopped != "none"
