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


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for this module's tests (each test opens its own page, in its own context):
    a launch and Playwright's driver cost about a second of CPU each time."""
    _need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.mark.timeout(120)
def test_report_renders_every_plot_in_chromium(browser, tmp_path):
    path = write_report(make_analysis(), tmp_path, manifest=make_manifest())
    requests: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
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
        page.close()
    assert [s[0] for s in sizes] == ["plot-latency", "plot-goodput", "plot-timeline", "plot-distributions",
                                     "plot-split", "plot-burst"]
    assert all(width > 100 and height > 100 for _, width, height in sizes), sizes
    assert worksheet_rows == 6
    assert errors == []
    assert all(url.startswith("file://") for url in requests), requests


#: where a table's `verdict` header lies against the window and its scroll box, and the page's height
VERDICT_JS = """(tableId) => {
  const t = document.getElementById(tableId), box = t.closest('.scroll');
  const th = [...t.querySelectorAll('thead th')].find(h => h.textContent.trim().startsWith('verdict'));
  const r = th.getBoundingClientRect(), b = box.getBoundingClientRect();
  return {left: r.left, right: r.right, boxRight: b.right, window: window.innerWidth,
          tableWidth: t.scrollWidth, boxWidth: box.clientWidth, height: document.documentElement.scrollHeight};
}"""


def _realistic_run(root: Path) -> Path:
    from report_fakes import write_run_dir

    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 1.5)], gpus=1, cost_per_hour=2.0,
                  slo={"ttft_p95": "1s", "tpot_p95": "50ms", "e2e_p99": "3s", "min_samples": 50})
    return root


def _plot_boxes(monkeypatch) -> None:
    """Every report plot built (its data, axes, size) but drawn as an empty SVG of the size the drawn one has
    (matplotlib writes the figure's size in points, no tight box): the page lays out as with the plots
    drawn, at a fraction of the CPU. For a test of the page's layout, not of its plots (the test above)."""
    from llmload.report import plots

    def box(fig, salt: str) -> str:
        width, height = fig.get_size_inches() * 72
        return f'<svg id="unrendered-{salt}" width="{width:g}pt" height="{height:g}pt"></svg>'

    monkeypatch.setattr(plots, "_svg", box)


@pytest.mark.timeout(180)
def test_verdicts_are_seen_without_scrolling_at_1280_px(browser, tmp_path, monkeypatch):
    """Issue 32: in "Steps at a glance" (and the compare page) the verdict was the 18th of 19 columns, off
    screen at 1280 px behind a horizontal scroll. It comes first now, the table fits, the detail is folded,
    and the page is shorter (7,900 px before for this run: the worksheet, decision record, manifest and
    definitions are folded)."""
    import analysis

    _plot_boxes(monkeypatch)
    from llmload.config import SLO
    from llmload.report.compare import load_figures, render_comparison

    run_dir = _realistic_run(tmp_path / "run-a")
    run = analysis.load_run(run_dir)
    slo = SLO.model_validate({"ttft_p95": "1s", "tpot_p95": "50ms", "e2e_p99": "3s", "min_samples": 50})
    report = write_report(analysis.analyze(run, slo), run_dir, manifest=run.manifest)
    other = tmp_path / "run-b"
    from report_fakes import write_run_dir

    write_run_dir(other, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=2, cost_per_hour=3.0,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    compare = tmp_path / "compare.html"
    compare.write_text(render_comparison([load_figures(run_dir), load_figures(other)]), encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(report.resolve().as_uri(), wait_until="load")
        glance = page.evaluate(VERDICT_JS, "steps-table")
        detail_open = page.evaluate("() => document.getElementById('steps-detail-fold').open")
        page.goto(compare.resolve().as_uri(), wait_until="load")
        compared = page.evaluate(VERDICT_JS, "steps-table")
    finally:
        page.close()
    for where in (glance, compared):
        assert where["left"] >= 0 and where["right"] <= min(where["boxRight"], where["window"]), where
    assert glance["tableWidth"] <= glance["boxWidth"], glance  # the whole table fits: no horizontal scroll
    assert detail_open is False  # every figure of a step: one click away
    assert glance["height"] < 6500, glance
