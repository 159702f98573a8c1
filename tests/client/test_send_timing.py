"""Measured TTFT, ITL and E2E against the sim's ground truth, for every flavour and API.

The sim logs, for each request id, when it wrote each output event to the socket; the client stamps
each event when `readline()` returns it. At low load the gaps are delivery latency only: p99 within
5 ms (measured on a quiet machine: event-time error p50 0.3 ms, p99 under 1 ms; the tight figure
is measured by bench/generator_cost.py, see bench/README.md). A 20-token stream at ~25 ms per token also shows TTFT far below E2E (the stream is read
incrementally, not at the end).
"""

from __future__ import annotations

from statistics import median

import pytest
from client_helpers import fixed_requests, send_batch, sim_target

from llmload.client import Transport

CASES = [
    ("vllm", "openai-chat"),
    ("vllm", "openai-completions"),
    ("llamacpp", "openai-chat"),
    ("llamacpp", "openai-completions"),
    ("ollama", "ollama-chat"),
    ("ollama", "ollama-generate"),
    ("ollama", "openai-chat"),
]
TOLERANCE_S = 0.005


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.slow
@pytest.mark.quiet  # client times within 5 ms of the server's: few neighbours
@pytest.mark.parametrize(("flavor", "api"), CASES)
def test_times_match_ground_truth(sim_factory, flavor: str, api: str) -> None:
    sim = sim_factory(flavor=flavor, config={"load_time_s": 0.0})
    target = sim_target(sim.url, api, flavor)
    transport = Transport.from_target(target, concurrency=2)
    # warm the two connections first: a new connection's accept costs the sim a few ms before it stamps
    # `received_at`, which is the sim's cost, not the client's error (the runtime keeps connections alive)
    send_batch(target, fixed_requests(4, 1), 2, concurrency=2, prefix="warm", transport=transport)
    records = send_batch(target, fixed_requests(24, 20), 10, concurrency=2, transport=transport)
    transport.close()
    truth = {row["request_id"]: row for row in sim.ground_truth_rows()}

    event_errors, ttft_errors, e2e_errors = [], [], []
    for rec in records:
        assert rec.outcome == "ok", rec.error
        gt = truth[rec.request_id]
        assert rec.output_tokens == gt["output_tokens"] == 20
        assert rec.input_tokens == gt["input_tokens"] == 24 and not rec.tokens_estimated
        assert len(rec.token_times) == len(gt["token_times"])
        event_errors += [abs(a - b) for a, b in zip(rec.token_times, gt["token_times"], strict=True)]
        ttft_errors.append(abs((rec.first_token_at - rec.sent_at) - (gt["first_token_at"] - gt["received_at"])))
        e2e_errors.append(abs((rec.last_token_at - rec.sent_at) - (gt["token_times"][-1] - gt["received_at"])))
        # incremental reading: the first event was read before the server had written the 11th of 20
        # (~250 ms later), so TTFT is well below E2E whatever the server's own speed was
        assert rec.first_token_at < gt["token_times"][10]
        assert rec.closed_at >= rec.last_token_at
        assert rec.finish_reason == "length"
        if flavor == "vllm":  # continuous usage stats: one token per event, summing to the total
            assert rec.token_counts == [1] * 20
        else:
            assert rec.token_counts == []
        if flavor == "llamacpp":  # `timings` on the finish chunk
            assert rec.server_prompt_s >= 0 and rec.server_decode_s > 0
        if api.startswith("ollama"):  # the final object's nanosecond durations
            assert rec.server_total_s >= rec.server_decode_s > 0 and rec.server_queue_s >= 0
            assert rec.cold is False
    print(f"{flavor} {api}: event error p50 {median(event_errors) * 1e3:.2f} ms p99 {quantile(event_errors, 0.99) * 1e3:.2f} ms; "
          f"TTFT error max {max(ttft_errors) * 1e3:.2f} ms; E2E error max {max(e2e_errors) * 1e3:.2f} ms")
    # On a quiet machine every error here is under 5 ms at p99 (see the module docstring). The test
    # machine has 2 cores shared with other jobs; under a load average of 5-8 the time slices put
    # events 5-70 ms late on either side (seen: p90 8.6 ms, max 70 ms), so the hard assertions are the
    # typical error (median under 5 ms) and a p90 under 20 ms, below one inter-token gap (25 ms), which
    # still catches any event matched to the wrong token or read late by design.
    measured = (f"event error p50 {median(event_errors) * 1e3:.2f} ms p90 {quantile(event_errors, 0.9) * 1e3:.2f} ms; "
                f"TTFT error p50 {median(ttft_errors) * 1e3:.2f} ms; E2E error p50 {median(e2e_errors) * 1e3:.2f} ms")
    assert median(event_errors) < TOLERANCE_S and quantile(event_errors, 0.9) < 4 * TOLERANCE_S, measured
    # TTFT and E2E are durations from the client's send to the sim's receipt of the request: they also hold
    # how late the sim's process read it, which beside two CPU hogs is a few ms more than any event stamp's
    # (seen: event error p50 0.30 ms, TTFT error p50 4.70 ms, E2E 5.77 ms): twice the tolerance there, still
    # far under a send stamped at the wrong moment (a queued request's wait, an inter-token gap of 25 ms)
    assert median(ttft_errors) < 2 * TOLERANCE_S and median(e2e_errors) < 2 * TOLERANCE_S, measured
    itl = [b - a for rec in records for a, b in zip(rec.token_times, rec.token_times[1:], strict=False)]
    gt_itl = [b - a for rec in records for a, b in zip(truth[rec.request_id]["token_times"],
                                                       truth[rec.request_id]["token_times"][1:], strict=False)]
    itl_errors = [abs(a - b) for a, b in zip(itl, gt_itl, strict=True)]
    assert median(itl_errors) < TOLERANCE_S and quantile(itl_errors, 0.9) < 4 * TOLERANCE_S, (
        f"ITL error p50 {median(itl_errors) * 1e3:.2f} ms p90 {quantile(itl_errors, 0.9) * 1e3:.2f} ms")
