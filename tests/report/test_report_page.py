"""report.html from a hand-made analysis: every section and plot, blank unrun cells, offline, no secret."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fakes import SECRET, Page, make_analysis, make_manifest

from llmload.report import write_report
from llmload.report.html import cell_text
from llmload.report.manifest_view import flatten, is_secret_key


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    path = write_report(make_analysis(), root, manifest=make_manifest())
    assert path == root / "report.html"
    text = path.read_text(encoding="utf-8")
    parser = Page()
    parser.feed(text)
    return text, parser


def test_every_section_and_plot(page):
    text, parsed = page
    for section in ("answer", "warnings", "worksheet-section", "plots", "split", "burst", "decision",
                    "manifest", "definitions"):
        assert section in parsed.ids, section
    assert parsed.plots == ["plot-latency", "plot-goodput", "plot-timeline", "plot-distributions",
                            "plot-split", "plot-burst"]
    assert text.count("<figcaption>") == len(parsed.plots)
    assert "worksheet" in parsed.tables and "name-map" in parsed.tables


def test_answer_first(page):
    text, parsed = page
    answer = text[text.index('id="answer"'):text.index('id="warnings"')]
    assert "Highest passing step: 1 req/s offered (step r1.00)." in answer
    assert "First failing step: 2 req/s offered (step r2.00)" in answer
    # the knee leads, with its interval, the binding target, the others' headroom and why the search stopped
    assert ("Knee 1.5 req/s (1.3 to 1.7, 90%): TTFT p95 binds; TPOT p95 at 41% of its target there. The knee "
            "search stopped after 2 refine steps: the search") in answer and "time budget would run out" in answer
    plots = text[text.index('id="plot-latency"'):text.index('id="plot-timeline"')]
    assert plots.count("knee 1.5 req/s (1.3 to 1.7, 90%)") >= 2  # marked on the latency and goodput plots
    assert "ttft_p95 (1800 ms &gt; 1000 ms)" in answer and "queue_growth" in answer
    assert "gpus 2" in answer
    assert "Burst vs uniform at the same mean rate: burst fail, uniform pass; TTFT p95 1200 ms vs 500 ms" in answer


def test_unrun_step_is_blank_everywhere(page):
    _, parsed = page
    ws_rows = [r for r in parsed.tables["worksheet"] if r and r[0] == "r4.00"]
    assert ws_rows == [["r4.00", "4", "", "", ""]]  # target kept; measured cells and verdict blank
    step_rows = [r for r in parsed.tables["steps-table"] if r and r[0] == "r4.00"]
    assert len(step_rows) == 1 and "pass" not in step_rows[0] and step_rows[0][3] == "not_run"
    assert step_rows[0][1:3] == ["", ""] and all(cell == "" for cell in step_rows[0][5:])
    detail = [r for r in parsed.tables["steps-detail"] if r and r[0] == "r4.00"]
    assert len(detail) == 1 and "pass" not in detail[0] and all(cell == "" for cell in detail[0][5:])


def test_offline_and_no_secret(page):
    text, parsed = page
    assert parsed.resources == []
    for needle in ("<script src", "<link", "url(http", "@import", "cdn"):
        assert needle not in text.lower()
    assert SECRET not in text
    assert "OPENAI_API_KEY" in text  # the variable's name is where the key lives, not the key


def test_warnings_name_prefix_cache_and_unchecked_slo(page):
    text, _ = page
    warnings = text[text.index('id="warnings"'):text.index('id="worksheet-section"')]
    assert "prefix cache may have been warm" in warnings
    assert "e2e_p95" in warnings and "allow_oom" in warnings
    assert "ttft_p95," not in warnings.split("not checked")[1]


def test_generator_behind_and_insufficient_said_plainly(tmp_path, manifest):
    analysis = make_analysis()
    steps = analysis.steps.copy()
    steps.loc[0, "verdict"], steps.loc[1, "verdict"] = "invalid", "insufficient"
    analysis.steps, analysis.summary = steps, {"verdict": "invalid", "last_passing_rate": None}
    text = write_report(analysis, tmp_path, manifest=manifest).read_text()
    assert 'id="run-verdict">invalid<' in text
    assert "INVALID at r0.50" in text and "INSUFFICIENT at r1.00" in text
    assert "generator fell behind" in text and "Too few samples" in text


def test_missing_optional_frames_and_columns(tmp_path):
    analysis = make_analysis()
    analysis.burst, analysis.split = None, pd.DataFrame()
    analysis.timeline = pd.DataFrame({"t": [1.0, 2.0]})
    analysis.steps = analysis.steps.drop(columns=["tpot_p50_s", "tpot_p95_s", "tpot_p99_s"])
    text = write_report(analysis, tmp_path).read_text()
    parsed = Page()
    parsed.feed(text)
    assert parsed.plots == ["plot-latency", "plot-goodput", "plot-distributions"]
    assert "plot-timeline-nodata" in parsed.ids and "burst" not in parsed.ids


def test_soak_slices_and_instances_drawn_when_present(tmp_path):
    analysis = make_analysis()
    analysis.slices = pd.DataFrame({"label": ["s0", "s1", "s2"], "window_start": [0.0, 600, 1200],
                                    "window_end": [600.0, 1200, 1800], "arrivals": [600, 600, 600],
                                    "errors": [0, 1, 9], "error_rate": [0.0, 0.002, 0.015],
                                    "ttft_p95_s": [0.3, 0.4, 0.6], "tpot_p95_s": [0.03, 0.03, 0.03],
                                    "e2e_p95_s": [2.0, 2.2, 2.9], "waiting_mean": [0.1, 0.5, 2.0],
                                    "kv_usage_peak": [0.2, 0.3, 0.5], "gpu_memory_peak_bytes": [2.0e9] * 3,
                                    "verdict": ["pass", "pass", "fail"], "error_burst": [False, False, True]})
    analysis.summary = {**analysis.summary, "soak": {
        "drifting": ["ttft_p95_s", "kv_usage_peak"], "memory_growth": True, "error_bursts": ["s2"],
        "trends": [{"metric": "ttft_p95_s", "p": 0.01, "slope_per_slice": 0.15, "drifting": True}]}}
    analysis.instances = pd.DataFrame({"instance": ["http://a", "http://b"], "label": ["r1.00", "r1.00"],
                                       "completed": [10, 11], "ttft_p95_s": [0.2, 0.3]})
    parsed = Page()
    text = write_report(analysis, tmp_path).read_text()
    parsed.feed(text)
    assert "plot-slices" in parsed.plots and "instances-table" in parsed.tables
    assert "Drifting series: ttft_p95_s, kv_usage_peak. Memory growth: yes. Error bursts in slices: s2." in text
    assert parsed.tables["instances-table"][0] == ["instance", "label", "completed", "ttft_p95_ms"]
    assert parsed.tables["instances-table"][2] == ["http://b", "r1.00", "11", "300"]
    assert "trends-table" in parsed.tables
    # KV usage, vLLM's 0-1 ratio, is a percent in the tables as on the timeline's axis (issue 43)
    header = parsed.tables["slices-table"][0]
    assert "kv_usage_peak_pct" in header and "kv_usage_peak" not in header
    assert [row[header.index("kv_usage_peak_pct")] for row in parsed.tables["slices-table"][1:]] == ["20", "30", "50"]


def test_secret_keys_are_dropped_and_token_counts_kept():
    assert is_secret_key("api_key") and is_secret_key("Authorization") and is_secret_key("hf_token")
    assert not is_secret_key("api_key_env") and not is_secret_key("max_tokens")
    assert not is_secret_key("input_tokens")
    rows = dict(flatten(make_manifest()))
    assert "api_key" not in rows and not any("Authorization" in k for k in rows)
    assert rows["config.target.api_key_env"] == "OPENAI_API_KEY"


def test_cell_text_blanks():
    assert [cell_text(v) for v in (None, float("nan"), pd.NA, "", [])] == [""] * 5
    assert cell_text(0.000123) == "0.000123" and cell_text(1234.5) == "1234" and cell_text(True) == "yes"


def test_public_surface():
    import llmload.report

    assert sorted(llmload.report.__all__) == ["compare_runs", "render_report", "rereport", "write_report"]
    assert all(callable(getattr(llmload.report, name)) for name in llmload.report.__all__)


def test_step_table_shows_what_each_slo_threshold_judged(tmp_path, manifest):
    """The step table carries a column for every latency threshold of the SLO (here a p99 and an ITL that
    the fixed p95 columns do not show), and the fixed columns the SLO sets name their threshold."""
    from llmload.config import SLO

    analysis = make_analysis()
    analysis.steps["itl_p95_s"] = 0.04
    analysis.slo = SLO.model_validate({"ttft_p95": "1s", "ttft_p99": "2s", "itl_p95": "50ms"})
    parser = Page()
    parser.feed(write_report(analysis, tmp_path, manifest=manifest).read_text(encoding="utf-8"))
    header, *rows = parser.tables["steps-table"]
    assert "TTFT p95 ms (SLO ≤ 1000)" in header and "TPOT p95 ms" in header  # tpot: no threshold, no suffix
    p99, itl = header.index("TTFT p99 ms (SLO ≤ 2000)"), header.index("ITL p95 ms (SLO ≤ 50)")
    assert header.index("verdict") == 1 and header.index("failing") == 2  # first: seen without scrolling
    r2 = next(r for r in rows if r[0] == "r2.00")
    assert float(r2[p99]) == pytest.approx(1800 * 1.3) and float(r2[itl]) == pytest.approx(40)
    assert all(cell == "" for cell in next(r for r in rows if r[0] == "r4.00")[5:])  # unrun stays blank


def test_manifest_leaves_empty_values_out_and_long_sections_are_folded(tmp_path):
    """Issue 32: the manifest section listed dozens of empty rows; the long sections now fold."""
    manifest = {**make_manifest(), "notes": None, "fingerprint": {"driver": "", "gpu_uuids": [], "extra": {}},
                "conditions": {"gpus": 2, "server_version": None, "owner": "capacity team"}}
    parser = Page()
    html = write_report(make_analysis(), tmp_path, manifest=manifest).read_text(encoding="utf-8")
    parser.feed(html)
    rows = parser.tables["manifest-table"]
    assert rows and all(len(r) == 2 and r[1].strip() for r in rows), [r for r in rows if not r[1].strip()]
    keys = {r[0] for r in rows}
    assert "conditions.gpus" in keys and not keys & {"notes", "conditions.server_version", "fingerprint.driver"}
    for fold_id in ("manifest-fold", "definitions-fold", "decision-fold", "worksheet-fold", "steps-detail-fold"):
        assert f'<details class="fold" id="{fold_id}">' in html
