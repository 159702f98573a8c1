"""The client cap reported as offered load (issue 33, item 8) and advice that follows the cause (item 24).

- Most arrivals waiting at the client's own cap (`client.max_concurrency`) never leave a step passing on
  the server's figures: without a user-side target (client wait, user TTFT, user E2E) the step is
  `invalid` (`client_cap`); with one it is judged on it; either way the row names the limit
  `{kind: client_cap, evidence: {capped_share, client_wait_p95_s, received_rate}, advice}`.
- "Run on a quieter machine" / "--processes N" only for a generator that really was CPU-bound or held
  up: a lost worker, a server whose answers kept the generator busy and requests failing inside llmload
  (a dataset) each get their own advice.
"""

from __future__ import annotations

import pandas as pd
from analysis_frames import plan_step, request, run_of

from analysis import analyze, exit_code
from analysis.validity import client_cap_line
from llmload.config import SLO, Client

CLIENT = Client.model_validate({"max_concurrency": 1})


def _capped_run(n: int = 50, length: float = 10.0) -> list[dict]:
    """The issue's case: 5 req/s offered, a cap of 1, the server sent ~1.3 req/s; 80% of arrivals waited."""
    rows = []
    for i in range(n):
        at = i * length / n
        capped = i % 5 != 0
        rows.append(request(f"r{i}", "s", at, wait=0.7 * i if capped else 0.0, capped=capped))
    return rows


def test_most_arrivals_waiting_at_the_client_cap_is_invalid_and_named() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5})
    result = analyze(run_of(_capped_run(), [plan_step("s", 0, rate=5.0)]), slo, CLIENT)
    row = result.steps.iloc[0]
    assert row["offered_rate"] == 5.0 and row["achieved_rate"] == 5.0  # what the old verdict passed on
    assert row["verdict"] == "invalid" and "client_cap" in list(row["failing"]) and exit_code(result.summary) == 3
    limit = row["limit"]
    assert limit["kind"] == "client_cap" and "raise client.max_concurrency above 1" in limit["advice"]
    ev = limit["evidence"]
    assert ev["capped_share"] == 0.8 and ev["client_wait_p95_s"] > 10 and ev["received_rate"] < 2.0
    entry = result.summary["steps"][0]
    assert entry["limit"]["kind"] == "client_cap"
    reason = next(r for r in entry["invalid_reasons"] if r["check"] == "client_cap")
    assert "80% of arrivals waited for a free slot of client.max_concurrency 1" in reason["message"]


def test_a_user_side_target_judges_the_cap_and_the_limit_is_still_named() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "user_ttft_p95": "2s", "min_samples": 5})
    row = analyze(run_of(_capped_run(), [plan_step("s", 0, rate=5.0)]), slo, CLIENT).steps.iloc[0]
    assert row["verdict"] == "fail" and list(row["failing"]) == ["user_ttft_p95"]
    assert row["limit"]["kind"] == "client_cap"
    line = client_cap_line("s", row.to_dict())  # the live table's and the closing lines' one line
    assert line.startswith("step s limited by the client's cap: 80% of arrivals waited for a free slot")
    assert "raise client.max_concurrency" in line


def test_a_step_under_its_cap_is_not_limited_by_it() -> None:
    rows = [request(f"r{i}", "s", i * 0.2) for i in range(50)]
    row = analyze(run_of(rows, [plan_step("s", 0, rate=5.0)]), SLO.model_validate({"ttft_p95": "1s"}),
                  CLIENT).steps.iloc[0]
    assert row["limit"]["kind"] != "client_cap" and row["verdict"] != "invalid"  # the cap bound nothing


def _cpu(value: float) -> pd.DataFrame:
    t = [float(k) for k in range(10)]
    return pd.DataFrame({"t": t, "source": "worker:w0", "metric": "worker_cpu", "value": value, "step": "s",
                         "labels": ""})


def _advice(rows: list[dict], step: dict, telemetry: pd.DataFrame | None = None) -> list[str]:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 5})
    row = analyze(run_of(rows, [step], telemetry), slo).steps.iloc[0]
    assert row["verdict"] == "invalid", row["failing"]
    return [r["advice"] for r in row["invalid_reasons"]]


def test_a_cpu_bound_generator_is_told_to_add_processes() -> None:
    rows = [request(f"r{i}", "s", i * 0.2) for i in range(50)]
    advice = _advice(rows, plan_step("s", 0, rate=5.0), _cpu(0.97))
    assert all("--processes" in a for a in advice)


def test_a_lost_worker_is_not_told_to_find_a_quieter_machine() -> None:
    rows = [request(f"r{i}", "s", i * 0.2) for i in range(25)]
    rows += [request(f"c{i}", "s", 5 + i * 0.2, ttft=None, e2e=None, outcome="cancelled") for i in range(25)]
    advice = _advice(rows, {**plan_step("s", 0, rate=5.0), "lost_workers": ["2"], "lost_requests": 25})
    assert advice and all("lost" in a and "quieter machine will not help" in a for a in advice)


def test_requests_failing_inside_llmload_point_at_the_dataset() -> None:
    rows = [request(f"r{i}", "s", i * 0.2, outcome="client_error", ttft=None, e2e=None) for i in range(40)]
    rows += [request(f"k{i}", "s", 8 + i * 0.2) for i in range(10)]
    advice = _advice(rows, plan_step("s", 0, rate=5.0), _cpu(0.95))
    assert advice and all("dataset" in a for a in advice)
    assert not any("quieter machine" in a or a.startswith("run with --processes") for a in advice)


def test_a_server_flooding_the_client_is_named_not_the_machine() -> None:
    rows = [request(f"r{i}", "s", i * 0.2, outcome="timeout", ttft=None, e2e=None) for i in range(40)]
    rows += [request(f"k{i}", "s", 8 + i * 0.2) for i in range(10)]
    advice = _advice(rows, plan_step("s", 0, rate=5.0), _cpu(0.97))
    assert advice and all("server's answers" in a for a in advice)
    assert not any("quieter machine" in a or a.startswith("run with --processes") for a in advice)
