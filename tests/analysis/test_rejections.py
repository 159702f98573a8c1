"""Rejections (429 / 503) have a default limit (`llmload.config.DEFAULT_MAX_REJECT_RATIO`): a server that
refuses most requests fails its step on `reject_ratio` (exit 1), never passes and never is merely
`insufficient` because no `max_reject_ratio` was written (issue 33, item 7)."""

from __future__ import annotations

from analysis_frames import plan_step, request, run_of

from analysis import analyze, exit_code
from llmload.config import DEFAULT_MAX_REJECT_RATIO, SLO


def _rejected_share(rejected: int, total: int = 40) -> list[dict]:
    rows = [request(f"ok{i}", "s", i * 0.25) for i in range(total - rejected)]
    rows += [request(f"rj{i}", "s", 0.1 + i * 0.25, ttft=None, e2e=None, outcome="rejected")
             for i in range(rejected)]
    return rows


def _judge(rows: list[dict], slo: SLO) -> tuple[dict, int]:
    result = analyze(run_of(rows, [plan_step("s", 0, rate=4.0, length=10.0)]), slo)
    return result.steps.iloc[0].to_dict(), exit_code(result.summary)


def test_most_requests_rejected_fails_on_reject_ratio_without_a_written_limit() -> None:
    slo = SLO.model_validate({"ttft_p95": "1s", "min_samples": 4})
    assert slo.max_reject_ratio == DEFAULT_MAX_REJECT_RATIO and "max_reject_ratio" in slo.checked
    row, code = _judge(_rejected_share(36), slo)  # 90% answered 429
    assert row["reject_ratio"] == 0.9
    assert row["verdict"] == "fail" and list(row["failing"]) == ["reject_ratio"] and code == 1


def test_every_request_rejected_fails_and_is_not_insufficient() -> None:
    row, code = _judge(_rejected_share(40), SLO.model_validate({"ttft_p95": "1s"}))
    assert row["completed"] == 0
    assert row["verdict"] == "fail" and list(row["failing"]) == ["reject_ratio"] and code == 1


def test_a_written_limit_or_null_replaces_the_default() -> None:
    rows = _rejected_share(4)  # 10% rejected
    assert _judge(rows, SLO.model_validate({"ttft_p95": "1s", "min_samples": 4}))[0]["verdict"] == "fail"
    loose = SLO.model_validate({"ttft_p95": "1s", "min_samples": 4, "max_reject_ratio": 0.2})
    assert _judge(rows, loose)[0]["verdict"] == "pass"
    off = SLO.model_validate({"ttft_p95": "1s", "min_samples": 4, "max_reject_ratio": None})
    assert _judge(_rejected_share(36), off)[0]["verdict"] == "pass" and "max_reject_ratio" not in off.checked
