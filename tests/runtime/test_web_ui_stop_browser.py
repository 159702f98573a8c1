"""The web UI's Stop button, pressed in a real headless Chromium during a run against the sim: the run
stops at once (a step planned for two minutes is `partial`, its window cut at the stop, the next step
`not_run`), is finalised (summary, report) and the UI shows its result. A Stop that does nothing leaves
the four-minute plan running and this test failing on its one-minute wait."""

from __future__ import annotations

import json

import pytest
from runtime_helpers import start_web_run
from test_web_ui_browser import _wait_live, form_page, playwright_or_skip

from llmload.sim.process import stop_process

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.timeout(200)
def test_the_web_uis_stop_button_stops_and_finalises_the_run(sim_factory, tmp_path):
    sync_playwright = playwright_or_skip()

    sim = sim_factory(flavor="vllm")
    log = open(tmp_path / "locust.log", "w")  # noqa: SIM115 (closed below, after the process)
    proc, base, run_dir = start_web_run(sim.url, tmp_path, [{"rate": 3, "duration": "120s"},
                                                            {"rate": 4, "duration": "120s"}],
                                        autostart=False, stderr=log)
    try:
        with form_page(sync_playwright, base) as page:
            page.get_by_label("Step Rates", exact=False).wait_for(timeout=15_000)
            page.get_by_role("button", name="Start").click()
            page.get_by_role("tab", name="LLM").click()
            _wait_live(page, lambda s: (s.get("current") or {}).get("label") == "r3.00"
                       and (s["current"].get("elapsed_s") or 0) >= 3, 60, "3 s into step r3.00")
            page.get_by_role("button", name="Stop", exact=True).click()
            state = _wait_live(page, lambda s: s.get("state") == "finished" and s.get("result"), 60,
                               "the stopped run's result")
    finally:
        stop_process(proc, timeout_s=30)
        log.close()
    plan = json.loads((run_dir / "plan.json").read_text())
    first, second = plan["steps"]
    assert plan["stopped"] is True
    assert first["status"] == "partial" and first["planned_window_end"] == first["start_at"] + 120
    assert first["window_end"] < first["start_at"] + 60  # cut at the stop, a few seconds in
    assert second["status"] == "not_run"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["verdict"] for s in summary["steps"]][1] == "not_run"
    assert state["result"]["run_dir"] == str(run_dir)
