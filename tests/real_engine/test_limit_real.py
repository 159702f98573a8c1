"""The limit of a failing step against the real llama-server: 2 slots (`--parallel 2`) past their capacity.

One ladder step at 6 req/s of 32-token prompts and 32-token answers, several times what 2 slots on one
thread serve (about 1-2 req/s: the two slots share the thread's ~50 tokens/s), so llama.cpp runs both
slots and defers the rest. The step's `limit` must be `batch_slots` with the slot count read from the
server itself (`/props`, `/slots`), not from `conditions:`, and the evidence must agree with the server's own gauges (`requests_processing`, `requests_deferred`) in the
telemetry. Bounded: 2 s warm-up, an 8 s window, a 5 s drain that cancels what is still queued.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from engine_gate import require_engine
from support import run_said, write_config

from llmload.cli import main
from llmload.llama_server import start_llama_server, stop_llama_server

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

PARALLEL = 2


@pytest.fixture
def two_slot_server(tmp_path):
    require_engine()
    url, proc = start_llama_server(port=0, parallel=PARALLEL, threads=1, ctx_size=2048,
                                   log_path=tmp_path / "llama-server.log")
    try:
        yield url
    finally:
        stop_llama_server(proc)


def test_two_slots_past_capacity_is_batch_slots_from_its_slots(two_slot_server, tmp_path) -> None:
    config = {"target": {"url": two_slot_server, "api": "openai-chat", "model": "gemma3-270m",
                         "server": "llamacpp", "timeout": "30s"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 32},
                           "output_tokens": {"dist": "fixed", "value": 32}, "ignore_eos": True, "seed": 1},
              "client": {"max_concurrency": 64, "max_send_lag_p99": "200ms", "max_worker_cpu": 1.0},
              "shape": {"ladder": {"arrival": "constant", "warmup": "2s", "drain_timeout": "5s",
                                   "steps": [{"rate": 6, "duration": "8s"}]}},
              "slo": {"ttft_p95": "500ms", "min_samples": 5},
              "telemetry": {"interval": "250ms", "gpu": "off"}}
    run_dir = tmp_path / "run"
    code = main(["run", str(write_config(tmp_path, config)), "--out", str(run_dir)])
    assert code in (0, 1) and (run_dir / "summary.json").exists(), run_said(run_dir)
    step = json.loads((run_dir / "summary.json").read_text())["steps"][0]
    assert step["verdict"] == "fail", run_said(run_dir)
    limit = step["limit"]
    assert limit["kind"] == "batch_slots", limit
    ev = limit["evidence"]
    # the slot count is the server's own (/props, /slots, recorded as conditions.max_num_seqs): the
    # config names none
    assert "conditions" not in config and ev["slots"] == PARALLEL, ev
    assert ev["running_at_slots_share"] >= 0.5 and ev["waiting_mean"] >= 1.0, ev
    # the evidence agrees with the server's own gauges, sampled in the step's window
    tel = pd.read_parquet(run_dir / "telemetry.parquet")
    inside = tel[tel["t"].between(step["window_start"], step["window_end"])]
    processing = inside[inside["metric"] == "running"]["value"]
    deferred = inside[inside["metric"] == "deferred"]["value"]
    assert len(processing) and processing.max() == PARALLEL, processing.tolist()
    assert len(deferred) and deferred.max() >= 2, deferred.tolist()
    assert ev["running_mean"] == pytest.approx(processing.mean(), abs=0.3)
    assert "--parallel" in limit["advice"] or "max_num_seqs" in limit["advice"]
