"""report.html in a real headless Chromium (Debian's package): every plot rendered, worksheet present.

Loaded from a file:// URL with networking off, so a page that needed a CDN would show it here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from report_fakes import make_analysis, make_manifest

from llmload.report import write_report

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _need_chromium() -> None:
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing under CI (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)")


@pytest.mark.timeout(120)
def test_report_renders_every_plot_in_chromium(tmp_path):
    _need_chromium()
    from playwright.sync_api import sync_playwright

    path = write_report(make_analysis(), tmp_path, manifest=make_manifest())
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.resolve().as_uri(), wait_until="load")
            sizes = page.evaluate("""() => Array.from(document.querySelectorAll('figure.plot')).map(f => {
                const s = f.querySelector('svg'); const r = s ? s.getBoundingClientRect() : {width: 0, height: 0};
                return [f.id, r.width, r.height]; })""")
            worksheet_rows = page.locator("table#worksheet tbody tr").count()
            page.locator("table#steps-table thead th").first.click()  # the sort script runs without error
        finally:
            browser.close()
    assert [s[0] for s in sizes] == ["plot-latency", "plot-goodput", "plot-timeline", "plot-distributions",
                                     "plot-split", "plot-burst"]
    assert all(width > 100 and height > 100 for _, width, height in sizes), sizes
    assert worksheet_rows == 6
    assert errors == []
    assert all(url.startswith("file://") for url in requests), requests
