"""The live web UI in a real headless Chromium (Debian's package): the LLM tab and /llmload page."""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest
from runtime_helpers import start_web_run

from llmload.sim.process import stop_process

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _wait_http(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


@pytest.mark.timeout(180)
def test_llm_tab_and_live_charts_show_numbers_during_a_run(sim_factory, tmp_path):
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing under CI (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    sim = sim_factory(flavor="vllm")
    proc, base, _ = start_web_run(sim.url, tmp_path, [{"rate": 5, "duration": "3s"},
                                                      {"rate": 8, "duration": "15s"}], autoquit_s=1)
    try:
        _wait_http(base + "/")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(base + "/", wait_until="load")
                page.get_by_role("tab", name="LLM").click()
                # the first step's row appears with its offered rate once it has been judged
                page.get_by_role("cell", name="r5.00").wait_for(timeout=60_000)
                row_text = page.get_by_role("row").filter(has_text="r5.00").first.inner_text()
                charts = browser.new_page()
                charts.goto(base + "/llmload", wait_until="load")
                charts.wait_for_function("document.querySelectorAll('#ttft circle').length >= 1", timeout=30_000)
                status = charts.locator("#status").inner_text()
            finally:
                browser.close()
    finally:
        stop_process(proc, timeout_s=30)
    cells = row_text.replace("r5.00", "", 1).split()
    assert any(c.replace(".", "", 1).isdigit() and float(c) > 0 for c in cells), row_text  # live numbers
    assert "r5.00" in status
