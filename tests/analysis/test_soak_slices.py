"""A soak at any length (issue 46): an 8-hour soak of 1-minute slices, as a generated records file, is
reported in at most `MAX_SLICES` slices, each merged slice's figures computed from its own records (a true
p95, here recomputed by METRICS.md's definitions from the records), an injected drift found with its
size, a steady soak not flagged, an error burst kept to its plan slice, and the records read a merged
slice at a time."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from analysis_frames import plan_step, request

from analysis import analyze, load_run
from analysis import run as run_module
from analysis.soak import MAX_SLICES, merged_step, slice_groups
from llmload.config import SLO
from llmload.records import records_table
from llmload.report import page, write_report

SLO_ = SLO.model_validate({"ttft_p95": "5s", "min_samples": 5})
#: 8 hours of 2-minute slices at 0.1 req/s: 240 slices of 12 requests, 2,880 records, reported as 48 of 10 min
HOURS, SLICE_S, RATE = 8, 120.0, 0.1
SLICES = int(HOURS * 3600 / SLICE_S)
T0 = 1_800_000_000.0


def _soak_run(tmp_path, *, drift_s_per_h: float, burst_slice: int | None = None, seed: int = 3,
              slices: int = SLICES, slice_s: float = SLICE_S, rate: float = RATE):
    """records.parquet and plan.json of a soak: constant arrivals at `rate`, TTFT 0.1 s + noise + the drift
    (seconds per hour since the start), E2E TTFT + 0.3 s; `burst_slice` gets 6 timeouts."""
    rng = np.random.default_rng(seed)
    rows, steps = [], []
    per_slice = int(rate * slice_s)
    for s in range(slices):
        label = f"soak-{s:03d}"
        start = T0 + s * slice_s
        step = plan_step(label, s, rate=rate, start=start, length=slice_s, phase="soak")
        steps.append({**step, "drain": s == slices - 1, "planned_arrivals": per_slice})
        for i in range(per_slice):
            at = start + i / rate
            ttft = 0.1 + rng.uniform(0.0, 0.05) + drift_s_per_h * (at - T0) / 3600
            timeout = burst_slice == s and i < 6
            rows.append(request(f"{label}-{i:04d}", label, at, ttft=ttft, e2e=ttft + 0.3, out=4,
                                outcome="timeout" if timeout else "ok"))
    pq.write_table(records_table(rows), tmp_path / "records.parquet", row_group_size=1000)
    (tmp_path / "plan.json").write_text(json.dumps({"kind": "soak", "steps": steps}))
    return tmp_path, rows


def test_slice_groups_are_consecutive_near_equal_and_bounded():
    assert slice_groups(["a", "b"]) == [["a"], ["b"]]
    for n in (MAX_SLICES, MAX_SLICES + 1, 100, 480, 10_000):
        labels = [f"s{i}" for i in range(n)]
        groups = slice_groups(labels)
        sizes = {len(g) for g in groups}
        assert len(groups) <= MAX_SLICES and max(sizes) - min(sizes) <= 1
        assert [x for g in groups for x in g] == labels
    assert len(slice_groups([f"s{i}" for i in range(480)])) == 48


def test_merged_step_spans_its_slices():
    a = {**plan_step("soak-000", 0, start=0.0, length=60.0, phase="soak"), "planned_arrivals": 12, "drain": False,
         "clock": {"0": {"error_s": 0.001}}}
    b = {**plan_step("soak-001", 1, start=60.0, length=60.0, phase="soak"), "planned_arrivals": 11, "drain": True,
         "clock": {"0": {"error_s": 0.004}}, "status": "partial"}
    step = merged_step([a, b])
    assert step["label"] == "soak-000..001" and step["window_start"] == 0.0 and step["window_end"] == 120.0
    assert step["planned_arrivals"] == 23 and step["drain"] is True and step["status"] == "partial"
    assert step["clock"] == {"0": {"error_s": 0.004}}


def _p95_by_hand(rows: list[dict], start: float, end: float, key: str) -> float:
    """METRICS.md: over the requests scheduled in [start, end) that finished (ok), linear interpolation."""
    values = [r["first_token_at"] - r["sent_at"] if key == "ttft" else r["last_token_at"] - r["sent_at"]
              for r in rows if start <= r["scheduled_at"] < end and r["outcome"] == "ok"]
    return float(np.percentile(values, 95))


# slow: each plan slice costs the analysis ~50 ms (a step's figures), and these analyse hundreds
@pytest.mark.slow
def test_an_eight_hour_soak_is_reported_in_48_slices_true_to_its_records_and_drift(tmp_path, monkeypatch):
    drift = 0.05  # TTFT +50 ms an hour: +0.4 s over the soak
    path, rows = _soak_run(tmp_path, drift_s_per_h=drift, burst_slice=123)
    run = load_run(path)
    reads: list[int] = []
    rows_and_gaps = run.source.rows_and_gaps
    monkeypatch.setattr(run.source, "rows_and_gaps", lambda pos, f32, *skip: reads.append(len(pos)) or rows_and_gaps(pos, f32, *skip))
    analysis = analyze(run, SLO_)
    soak, slices = analysis.summary["soak"], analysis.slices
    assert soak["plan_slices"] == SLICES and soak["slices"] == len(slices) == MAX_SLICES
    assert soak["merged"] == SLICES // MAX_SLICES == 5 and soak["slice_s"] == pytest.approx(600.0)
    assert slices["label"].iloc[0] == "soak-000..004" and slices["label"].iloc[-1] == "soak-235..239"
    assert slices["elapsed"].iloc[1] == "0:10:00" and slices["elapsed"].iloc[-1] == "7:50:00"
    assert (slices["slices"] == 5).all() and int(slices["arrivals"].sum()) == len(rows)
    for i in (0, 17, 47):  # a merged slice's p95 is the p95 of its records, not a mean of its slices' p95s
        start, end = slices["window_start"].iloc[i], slices["window_end"].iloc[i]
        assert slices["ttft_p95_s"].iloc[i] == pytest.approx(_p95_by_hand(rows, start, end, "ttft"), abs=1e-9)
        assert slices["e2e_p95_s"].iloc[i] == pytest.approx(_p95_by_hand(rows, start, end, "e2e"), abs=1e-9)
    trends = {t["metric"]: t for t in soak["trends"]}
    assert {"ttft_p95_s", "e2e_p95_s"} <= set(soak["drifting"])
    assert trends["ttft_p95_s"]["slope_per_hour"] == pytest.approx(drift, rel=0.1)
    # the burst stays in its minute (plan slice soak-123), and the merged slice holding it says so
    assert soak["error_bursts"] == ["soak-123"]
    assert slices.loc[slices["error_burst"], "label"].tolist() == ["soak-120..124"]
    # read a step at a time, then a merged slice at a time: never the run's records at once
    merged = 5 * int(RATE * SLICE_S)
    assert max(reads) == merged < len(rows) and sum(1 for n in reads if n == merged) == MAX_SLICES
    # the report: a table of 48 rows by time since the start, and it says the slices were merged (the page's
    # latency plots, queueing split and limits section, half this test's CPU and nothing to do with the
    # slices, left out: the split of 288 steps alone was 0.6 s of CPU drawing 1,152 bars)
    monkeypatch.setattr(page, "_plots_html", lambda analysis: "")
    monkeypatch.setattr(page, "_split_html", lambda analysis: "")
    monkeypatch.setattr(page, "limits_html", lambda analysis: "")
    html = write_report(analysis, tmp_path / "report").read_text(encoding="utf-8")
    table = html[html.index('id="slices-table"'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr") == MAX_SLICES + 1 and ">7:50:00<" in table and ">soak-235..239<" in table
    assert "240 slices of 120 s are shown merged, consecutive, up to 5 in one" in html
    assert "across 48 slices of 600 s (its 240 slices of 120 s merged, up to 5 in one)" in html


@pytest.mark.slow
def test_a_steady_two_hour_soak_is_not_flagged(tmp_path):
    # 120 slices of a minute, reported as 40 of 3 minutes
    path, _rows = _soak_run(tmp_path, drift_s_per_h=0.0, seed=5, slices=120, slice_s=60.0, rate=0.2)
    soak = analyze(load_run(path), SLO_).summary["soak"]
    assert soak["slices"] == 40 and soak["merged"] == 3
    assert soak["drifting"] == [] and soak["error_bursts"] == [] and not soak["memory_growth"]


def test_a_short_soak_keeps_its_slices(tmp_path, monkeypatch):
    monkeypatch.setattr(run_module, "LIST_BATCH_ROWS", 7)
    path, _rows = _soak_run(tmp_path, drift_s_per_h=0.0, slices=6)
    soak = analyze(load_run(path), SLO_).summary["soak"]
    assert soak["slices"] == soak["plan_slices"] == 6 and soak["merged"] == 1
    assert math.isclose(soak["slice_s"], SLICE_S)
