"""Seed 000's decision record on a sim run (issue 10 item 4), and the planning aid on the same run.

The 1-instance deployment run of tests/capacity/conftest.py (in virtual time against the sim's engine): a
ladder at 1.5 and 6 req/s where one instance falls behind at 6. The record must hold the thresholds as configured, the goodput at each rate
(worked out here from the records), the last passing sustained rate, the failing dimension, the owner
and retest triggers naming the conditions the manifest recorded, in summary.json, worksheet.csv and
the report.
"""

from __future__ import annotations

import pandas as pd
import pytest
from capacity_helpers import E2E_SLO_S, RATES, good_mask, read_json, window_requests

from llmload.cli import main

# quiet: with the instance and compare tests, whose live 2-instance run (tests/capacity/conftest.py) is built
# once in the quiet part; its own run is in virtual time
pytestmark = [pytest.mark.slow, pytest.mark.quiet]


def test_decision_record_in_summary_worksheet_and_report(deployments):
    run_dir = deployments.one
    summary = read_json(run_dir, "summary.json")
    decision = summary["decision"]
    # the error- and reject-ratio limits apply unless written (docs/METRICS.md), so the record shows them
    assert decision["thresholds"] == {"e2e_p95_s": E2E_SLO_S, "max_error_ratio": 0.05, "max_reject_ratio": 0.05,
                                      "min_samples": 5}
    assert "ttft_p95" in decision["not_checked"]  # a missing threshold says so

    records, windows = window_requests(run_dir)
    by_label = {g["label"]: g for g in decision["goodput_by_step"]}
    plan = {s["target_rate"]: s["label"] for s in read_json(run_dir, "plan.json")["steps"]}
    for rate in RATES:
        label = plan[rate]
        start, end = windows[label]
        mine = records[(records["step"] == label) & records["in_window"]]
        good = good_mask(mine, e2e_s=E2E_SLO_S)
        assert by_label[label]["goodput"] == pytest.approx(good.sum() / (end - start))
        assert by_label[label]["slo_attainment"] == pytest.approx(good.sum() / len(mine))
    assert [by_label[plan[r]]["verdict"] for r in RATES] == ["pass", "fail"]

    assert decision["last_passing_rate"] == RATES[0] and decision["first_failing_rate"] == RATES[1]
    failing_step = next(s for s in summary["steps"] if s["label"] == plan[RATES[1]])
    assert decision["failing_dimension"] == "e2e_p95" and "e2e_p95" in failing_step["failing"]
    assert decision["owner"] == "capacity team"

    # retest triggers derived from the manifest: every recorded condition is named with its value
    manifest = read_json(run_dir, "manifest.json")
    triggers = "\n".join(decision["retest_triggers"])
    recorded = manifest.get("conditions") or {}
    for key in ("gpus", "instances", "max_num_seqs", "server_version"):
        value = recorded.get(key, (manifest["config"].get("conditions") or {}).get(key))
        assert value is not None, key
        assert f"{key} changes (recorded: {value})" in triggers
    assert "new SLO thresholds" in triggers

    # the worksheet's final section and the report carry the same record
    sheet = pd.read_csv(run_dir / "worksheet.csv")
    decision_columns = [c for c in sheet.columns if c.startswith("decision.")]
    assert decision_columns
    assert sheet.filter(like="owner").iloc[0, 0] == "capacity team"
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    assert 'id="decision-table"' in page and "capacity team" in page
    assert "max_num_seqs changes (recorded: 1)" in page and "e2e_p95" in page


def test_plan_on_the_real_run_states_expected_load_with_its_assumption(deployments, capsys):
    run_dir = deployments.one

    def plan(users: int, think: str) -> tuple[int, str]:
        """`llmload plan`'s (exit code, output), in this process (no 1.5 s interpreter each)."""
        capsys.readouterr()
        code = main(["plan", str(run_dir), "--users", str(users), "--think-time", think])
        return code, capsys.readouterr().out

    code, within = plan(10, "30s")  # ~0.33 req/s, under the last passing 1.5 req/s
    assert code == 0, within
    records, _ = window_requests(run_dir)
    label = next(s["label"] for s in read_json(run_dir, "plan.json")["steps"] if s["target_rate"] == RATES[0])
    ok = records[(records["step"] == label) & records["in_window"] & (records["outcome"] == "ok")]
    response_s = float((ok["last_token_at"] - ok["scheduled_at"]).mean())
    rate = 10 / (30 + response_s)
    line = next(x for x in within.splitlines() if "requests in flight to expect" in x)
    assert float(line.split(":")[1].split()[0]) == pytest.approx(rate * response_s, rel=2e-3)
    assert "steady state" in within
    code, beyond = plan(400, "30s")  # ~13 req/s: beyond what passed
    assert code == 1 and "BEYOND" in beyond
    page = (run_dir / "report.html").read_text(encoding="utf-8")  # the report's planning section
    assert 'id="planning-table"' in page and f"{label} at {RATES[0]:g} req/s" in page
