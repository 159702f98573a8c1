"""The run-directory contract: load_run, summary.json, worksheet.csv, exit codes (METRICS.md)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from analysis_frames import plan_step, request, run_of

import analysis
from analysis import analyze, exit_code, load_run, write_outputs
from llmload.config import SLO, Conditions
from llmload.errors import ConfigError
from llmload.records import RECORD_SCHEMA

SLO_FILE = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5, "max_reject_ratio": 0.0})
CONTRACT_STEP_KEYS = {"label", "offered_rate", "achieved_rate", "completed", "goodput", "slo_attainment",
                      "ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p95_s", "client_wait_p95_s",
                      "server_queue_p95_s", "send_lag_p99_s", "window_start", "window_end", "outcomes",
                      "verdict", "failing", "output_tokens_per_s", "total_tokens_per_s",
                      "good_output_tokens_per_s", "server_queue_p95_range_s", "split"}


def _write_run(root: Path, rows: list[dict], steps: list[dict], manifest: dict | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=RECORD_SCHEMA), root / "records.parquet")
    (root / "plan.json").write_text(json.dumps({"kind": "ladder", "steps": steps}))
    if manifest is not None:
        (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def _ladder(tmp_path: Path) -> Path:
    rows = [request(f"a{i}", "r1", float(i)) for i in range(10)]
    rows += [request(f"b{i}", "r2", 20.0 + i / 2, ttft=2.0, e2e=3.0) for i in range(20)]  # carries its 2 req/s
    steps = [plan_step("r1", 0), plan_step("r2", 1, rate=2.0, start=20.0),
             plan_step("r4", 2, rate=4.0, start=40.0, status="not_run")]
    manifest = {"config": {"target": {"model": "m1"}, "client": {"max_concurrency": 64},
                           "conditions": {"gpus": 1, "owner": "ops-team"}},
                "conditions": {"server_version": "0.33", "max_num_seqs": 8}}
    return _write_run(tmp_path / "run", rows, steps, manifest)


def test_summary_and_worksheet_follow_the_contract(tmp_path: Path) -> None:
    run_dir = _ladder(tmp_path)
    result = analyze(load_run(run_dir), SLO_FILE)
    summary_path, sheet_path = write_outputs(result, run_dir)
    summary = json.loads(summary_path.read_text())
    assert summary["verdict"] == "fail" and summary["last_passing_rate"] == 1.0
    assert summary["first_failing_rate"] == 2.0 and summary["failed_first"] == ["ttft_p95"]
    assert summary["last_passing_target_rate"] == 1.0 and summary["first_failing_target_rate"] == 2.0
    assert [s["verdict"] for s in summary["steps"]] == ["pass", "fail", "not_run"]
    for step in summary["steps"]:
        assert set(step) >= CONTRACT_STEP_KEYS
    unrun = summary["steps"][2]
    assert unrun["goodput"] is None and unrun["ttft_p95_s"] is None and unrun["outcomes"] is None
    assert summary["steps"][0]["server_queue_p95_s"] is None  # not measured -> null
    assert summary["steps"][0]["completed"] == 10 and isinstance(summary["steps"][0]["completed"], int)
    decision = summary["decision"]
    assert decision["owner"] == "ops-team" and decision["failing_dimension"] == "ttft_p95"
    assert decision["thresholds"]["ttft_p95_s"] == 1.0
    assert any(t == "max_num_seqs changes (recorded: 8)" for t in decision["retest_triggers"])
    assert summary["definitions"]["version"]

    with open(sheet_path, newline="") as f:
        sheet = list(csv.DictReader(f))
    assert [r["traffic.step"] for r in sheet] == ["r1", "r2", "r4"]
    assert sheet[0]["condition.model"] == "m1" and sheet[0]["condition.client_max_concurrency"] == "64"
    assert sheet[0]["decision.verdict"] == "pass" and sheet[1]["decision.failing"] == "ttft_p95"
    unrun_row = sheet[2]
    assert unrun_row["traffic.status"] == "not_run" and unrun_row["traffic.target_rate"] == "4.0"
    observed = [k for k in unrun_row if k.startswith("observed.")]
    assert observed and all(unrun_row[k] == "" for k in observed)
    assert unrun_row["decision.verdict"] == "" and unrun_row["decision.goodput"] == ""
    assert "pass" not in unrun_row.values()
    assert sheet[0]["observed.server_queue_p95_s"] == ""  # not measurable -> blank


def test_exit_codes() -> None:
    assert exit_code({"verdict": "pass"}) == 0
    assert exit_code({"verdict": "fail"}) == 1
    assert exit_code({"verdict": "invalid"}) == 3
    assert exit_code({"verdict": "insufficient"}) == 3


def test_run_verdict_order_and_nothing_run(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "empty", [], [plan_step("r1", 0, status="not_run")])
    result = analyze(load_run(run_dir), SLO_FILE)
    assert result.summary["verdict"] == "insufficient" and result.summary["last_passing_rate"] is None
    assert exit_code(result.summary) == 3
    json.dumps(result.summary, allow_nan=False)


def test_load_run_without_telemetry_and_manifest(tmp_path: Path) -> None:
    run_dir = _write_run(tmp_path / "bare", [request("a", "r1", 0.0)], [plan_step("r1", 0)])
    run = load_run(run_dir)
    assert run.telemetry.empty and run.manifest == {} and len(run.records) == 1
    assert list(run.records["token_times"].iloc[0]) == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
    result = analyze(run, SLO_FILE)
    assert any("no telemetry" in w for w in result.warnings)


def test_load_run_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="records.parquet"):
        load_run(tmp_path)
    run_dir = _write_run(tmp_path / "bad", [request("a", "r1", 0.0)], [plan_step("r1", 0)])
    (run_dir / "plan.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"plan\.json:1"):
        load_run(run_dir)


def test_conditions_argument_overrides_the_manifest(tmp_path: Path) -> None:
    result = analyze(load_run(_ladder(tmp_path)), SLO_FILE, conditions=Conditions(gpus=2, owner="alice"))
    assert result.decision["owner"] == "alice" and result.decision["conditions"]["gpus"] == 2
    assert result.worksheet["condition.gpus"].tolist() == [2, 2, 2]


def test_public_surface() -> None:
    assert sorted(analysis.__all__) == ["Analysis", "Knee", "Run", "analyze", "estimate_knee", "exit_code",
                                        "judge_step", "knee_of", "knee_sentence", "load_run", "plan_in_flight",
                                        "write_outputs"]
    assert all(getattr(analysis, name) is not None for name in analysis.__all__)
    fields = set(analysis.Analysis.__dataclass_fields__)
    assert fields == {"steps", "summary", "worksheet", "requests", "split", "burst", "timeline", "slices",
                      "instances", "decision", "warnings", "slo"}


def test_planned_arrivals_without_records_are_reported() -> None:
    step = {**plan_step("r1", 0), "planned_arrivals": 12}
    result = analyze(run_of([request(f"a{i}", "r1", float(i)) for i in range(10)], [step]), SLO_FILE)
    assert result.steps.iloc[0]["unrecorded_arrivals"] == 2
    assert any("2 planned arrivals have no record" in w for w in result.warnings)
    lost = analyze(run_of([], [{**step, "lost_workers": ["w1"]}]), SLO_FILE)
    assert any("workers lost during the step: w1" in w for w in lost.warnings)
    counted = analyze(run_of([], [{**step, "lost_workers": ["w1"], "lost_requests": 5}]), SLO_FILE)
    assert any("w1; 5 of their planned requests recorded as cancelled" in w for w in counted.warnings)
