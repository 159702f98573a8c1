"""Quality cases (`quality`): check answers at low load before a test, and sample answers under load.

`run_quality_cases(quality, target, transport)` sends each case once, one after another (the lowest
load there is), through the same streaming core as the test itself (so what passes here is what the
test will send and read), with `temperature` 0 and the case's `max_tokens`, and without `ignore_eos`
(a case wants the model's own answer). It returns one `QualityResult` per case; a case whose request
failed (rejected, timeout, ...) fails with that outcome as its reason. `quality_failure(results)` is
the one-line message for the run to stop with (None when all passed); the caller decides, by
`quality.required`, whether it stops.

Under load the runtime samples a fraction `quality.sample_under_load` of requests and calls
`send(..., expect=case.expect)` with a case's request (`case_request`); a failed check becomes outcome
`quality_fail`.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.checks import excerpt
from llmload.client.core import send
from llmload.client.transport import Transport
from llmload.clock import now
from llmload.config import Quality, QualityCase, Target
from llmload.records import Record

__all__ = ["QualityResult", "case_request", "quality_failure", "run_quality_cases"]


@dataclass(frozen=True, slots=True)
class QualityResult:
    """One case's verdict."""

    index: int
    passed: bool
    reason: str
    outcome: str
    answer: str
    ttft_s: float | None
    e2e_s: float | None


def case_request(case: QualityCase, target: Target, request_id: str) -> PreparedRequest:
    """The request for a quality case, in the target's API."""
    messages = [dict(m) for m in case.messages] if case.messages is not None else None
    body = build_body(target.api, model=target.model, max_tokens=case.max_tokens, prompt=case.prompt,
                      messages=messages, temperature=0.0, ignore_eos=False, server=target.server)
    return PreparedRequest(request_id, target.api, body, planned_output_tokens=case.max_tokens)


def run_quality_cases(quality: Quality, target: Target, transport: Transport, *,
                      prefix: str = "quality") -> list[QualityResult]:
    """Send every case once, sequentially; call under gevent (a plain script is fine)."""
    results = []
    for i, case in enumerate(quality.cases):
        request_id = f"{prefix}-{i}"
        record = Record(request_id=request_id, step="quality", worker="preflight", scheduled_at=now())
        result = send(transport, case_request(case, target, request_id), record, expect=case.expect)
        passed = record.outcome == "ok"
        reason = "" if passed else (record.error or record.outcome)
        ttft = record.first_token_at - record.sent_at if record.first_token_at and record.sent_at else None
        e2e = record.last_token_at - record.sent_at if record.last_token_at and record.sent_at else None
        results.append(QualityResult(i, passed, reason, record.outcome, result.text, ttft, e2e))
    return results


def quality_failure(results: list[QualityResult]) -> str | None:
    """One line naming the failed cases and why, or None when all passed."""
    failed = [r for r in results if not r.passed]
    if not failed:
        return None
    first = failed[0]
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    answer = f" (answer: {excerpt(first.answer)})" if first.outcome == "quality_fail" else ""
    return f"quality case {first.index} failed: {first.reason}{answer}{more}"
