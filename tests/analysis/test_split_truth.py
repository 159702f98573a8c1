"""The queueing split at and past the knee, checked against the sim's ground truth (issue 13).

A small sim (2 sequences at once, 8-token answers: capacity about 7 req/s) is driven at about 0.5x, 1x,
1.5x and 3x its capacity, one short drained step each. Per step, the split's means are compared with
the ground-truth log's rows of the same requests (every completed request of the step, warm-up
included): mean server queue (`admitted_at - received_at`) within 10% or 20 ms, prefill to first token
(`first_token_at - admitted_at`) within 20 ms, and a histogram p95 given as a bucket range that holds
the ground truth's p95 (nearest rank, the order statistic a histogram's bucket count locates). The
generator's validity limits are loose: on a busy 2-core machine the assertions are about the server.

Each run is whole in virtual time (`llmload run --virtual`, `tests/virtual_truth.py`) against the sim's
engine, its /metrics and per-request timings and its ground-truth log on the run's clock: deterministic,
seconds of CPU. The live scrape of a `llmload sim` process and its own log, compared the same way, is
tests/analysis/test_limits_e2e.py's `test_few_batch_slots_is_batch_slots_live`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support import base_config
from virtual_truth import run_against_sim, truth_rows

from analysis import analyze, load_run
from llmload.config import SLO

SIM = {"step_base_s": 0.03, "decode_cost_s": 0.0005, "prefill_cost_s": 0.0002, "load_time_s": 0,
       "max_num_seqs": 2, "num_parallel": 2}
#: about 0.5x, 1x, 1.5x and 3x the capacity (2 sequences x ~0.27 s each)
RATES = (3.5, 7.0, 10.5, 21.0)
TARGETS = {"vllm": ("openai-chat", "vllm"), "llamacpp": ("openai-chat", "llamacpp"),
           "ollama": ("ollama-chat", "ollama")}
EXPECTED_BASIS = {"vllm": ("histogram", "remainder"), "llamacpp": ("remainder", "per_request"),
                  "ollama": ("per_request", "remainder")}


def _config(url: str, flavor: str) -> dict:
    shape = {"ladder": {"arrival": "constant", "warmup": "500ms", "drain_timeout": "30s",
                        "steps": [{"rate": r, "duration": "2s"} for r in RATES]}}
    api, server = TARGETS[flavor]
    config = base_config(url, shape, client={"max_concurrency": 256, "max_send_lag_p99": "10s",
                                             "max_rate_shortfall": 0.5, "max_worker_cpu": 1.0},
                         slo={"min_samples": 3})
    config["target"].update(api=api, server=server)
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 8}
    config["telemetry"] = {"gpu": "off", "interval": "250ms"}
    return config


def _run(tmp_path, flavor: str):
    """The run in virtual time against the sim's engine: its analysis, and the sim's log by request id."""
    _, run_dir = run_against_sim(tmp_path, _config("http://127.0.0.1:9", flavor), flavor=flavor, sim=SIM)
    result = analyze(load_run(run_dir), SLO.model_validate({"min_samples": 3}))
    return result, {row["request_id"]: row for row in truth_rows(run_dir)}


@pytest.mark.parametrize("flavor", ["vllm", "llamacpp", "ollama"])
def test_split_matches_the_sims_ground_truth_past_the_knee(tmp_path, flavor) -> None:
    _check_split(*_run(tmp_path, flavor), flavor)


def _check_split(result, truth: dict, flavor: str) -> None:
    req = result.requests
    steps = result.steps.set_index("label")
    queue_basis, prefill_basis = EXPECTED_BASIS[flavor]
    worst_queue = 0.0
    for label, step in steps.iterrows():
        done = req.loc[(req["step"] == label) & req["finished"], "request_id"]
        rows = [truth[r] for r in done if r in truth]
        assert len(rows) == len(done) >= 5, label
        split = step["split"]
        assert split["requests"] == len(rows)
        assert split["basis"]["server_queue"] == queue_basis and split["basis"]["prefill"] == prefill_basis
        queue = np.array([r["queue_s"] for r in rows])
        prefill = np.array([r["first_token_at"] - r["admitted_at"] for r in rows])
        assert queue.min() >= 0
        assert split["server_queue_mean_s"] == pytest.approx(queue.mean(), rel=0.10, abs=0.02), label
        assert split["prefill_mean_s"] == pytest.approx(prefill.mean(), abs=0.02), label
        parts = sum(split[k] for k in ("client_wait_mean_s", "server_queue_mean_s", "prefill_mean_s",
                                       "decode_mean_s"))
        assert parts == pytest.approx(split["user_e2e_mean_s"], abs=1e-9)
        if queue_basis == "histogram":
            low, high = step["server_queue_p95_range_s"]
            p95 = float(np.percentile(queue, 95, method="inverted_cdf"))
            assert low < p95 <= high or (low == 0 and p95 == 0), (label, low, p95, high)
        worst_queue = max(worst_queue, queue.mean())
        assert step["output_tokens_per_s"] > 0 and step["total_tokens_per_s"] > step["output_tokens_per_s"]
    assert worst_queue > 1.0  # the 3x step really queued (seconds), so the check is past the knee
    assert not math.isnan(steps.iloc[-1]["output_tokens_per_s"])
