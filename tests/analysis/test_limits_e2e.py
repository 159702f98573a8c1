"""End to end: the sim set so that one limit is the cause, a 2-step ladder run against it, and the step's
`limit` in summary.json checked against the sim's ground-truth log and its /metrics.

Each run is whole in virtual time (`llmload run --virtual`, `tests/virtual_truth.py`): the sim's engine,
its /metrics, /slots and ground-truth log on the run's clock, scraped into telemetry.jsonl as a live run
scrapes them; deterministic, seconds of CPU. One run stays live (`test_few_batch_slots_is_batch_slots_live`):
the real HTTP scrape of a `llmload sim` process and its own log, two short steps on 127.0.0.1, no report."""

from __future__ import annotations

import json
import re
import subprocess
from urllib.request import urlopen

import numpy as np
import pytest
from support import run_said, write_config
from virtual_truth import run_against_sim, scraped, truth_rows

from analysis.stats import time_average
from llmload.runtime.launcher.run import locust_command


def _config(*, rates, duration="4s", input_tokens=16, output_tokens=16, slo=None, client=None, conditions=None,
            url="http://127.0.0.1:9", flavor="vllm"):
    config = {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": flavor},
              "requests": {"input_tokens": {"dist": "fixed", "value": input_tokens},
                           "output_tokens": {"dist": "fixed", "value": output_tokens}},
              "shape": {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "20s",
                                   "stop_after_failures": None,  # every step: a failing first step too
                                   "steps": [{"rate": r, "duration": duration} for r in rates]}},
              "slo": {"min_samples": 5, **(slo or {"ttft_p95": "500ms"})},
              "client": {"max_concurrency": 64, "max_send_lag_p99": "500ms", **(client or {})},
              "telemetry": {"gpu": "off", "interval": "250ms"}}
    if conditions:
        config["conditions"] = conditions
    return config


def _run(tmp_path, *, flavor="vllm", sim, **kwargs):
    """(steps, run dir, the sim's ground-truth rows) of a run in virtual time against a sim set by `sim`."""
    code, run_dir = run_against_sim(tmp_path, _config(flavor=flavor, **kwargs), flavor=flavor, sim=sim)
    assert code in (0, 1, 3) and (run_dir / "summary.json").exists(), run_said(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary["steps"], run_dir, truth_rows(run_dir)


def _run_live(sim, tmp_path, **kwargs):
    """The run's Locust process (`llmload run`'s command line) with no report.html (`--llmload-no-report`:
    the test reads none; matplotlib's import and the plots were ~1 s of the run's CPU)."""
    config = _config(url=sim.url, flavor=sim.flavor, **kwargs)
    run_dir = tmp_path / "run"
    cmd = locust_command(write_config(tmp_path, config), run_dir) + ["--llmload-no-report"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert (run_dir / "summary.json").exists(), (done.returncode, done.stderr[-3000:], run_said(run_dir))
    summary = json.loads((run_dir / "summary.json").read_text())
    return summary["steps"], run_dir


def _scrape(sim, name: str) -> float:
    with urlopen(sim.url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _truth_in(rows, ws, we):
    return [r for r in rows if r.get("received_at") is not None and r["received_at"] < we
            and (r.get("finished_at") or we) >= ws]


def _check_few_batch_slots(steps, run_dir, truth_rows, preemptions_scraped):
    low, high = steps
    assert high["verdict"] == "fail", run_said(run_dir)
    assert low["limit"]["kind"] in ("none", "batch_slots") and high["limit"]["kind"] == "batch_slots", \
        (low["limit"], high["limit"])
    ev = high["limit"]["evidence"]
    assert ev["slots"] == 2 and ev["slots_source"] == "conditions.max_num_seqs"
    assert ev["running_at_slots_share"] >= 0.5 and ev["kv_usage_peak"] < 0.5 and not ev["preemptions"]
    # the sim's own log: two requests ran at every moment of the window, the rest waited
    ws, we = high["window_start"], high["window_end"]
    truth = [r for r in truth_rows if r.get("admitted_at") is not None]
    admitted = np.array([r["admitted_at"] for r in truth])
    finished = np.array([r["finished_at"] for r in truth])
    received = np.array([r["received_at"] for r in truth])
    running = time_average(admitted, finished, np.array([ws, we]))[0]
    waiting = time_average(received, admitted, np.array([ws, we]))[0]
    assert running == pytest.approx(2.0, abs=0.3)
    # the scraped gauge against the gauge the sim set (from its log), not against the log's time-average: the
    # gauge is the batch after the last step, so a slot freed in one step reads empty until the next step ends
    # (vLLM's SchedulerStats alike); here that is ~1/8 of the time (1.86). A CI run compared with the log's
    # 2.00 read 1.688: 5 of 16 scrapes in such a gap (the fixed-length requests free slots periodically, and
    # the 250 ms scrapes alias with that period: 1.75 to 2.00 in runs beside CPU hogs)
    assert ev["running_mean"] == pytest.approx(_running_gauge_mean(truth, ws, we), abs=0.3)
    assert ev["waiting_mean"] == pytest.approx(waiting, rel=0.25, abs=1.0) and waiting > 1.0
    step_truth = [r for r in truth if high["window_start"] - 1.5 <= r["received_at"] < high["window_end"] + 1]
    assert ev["server_queue_mean_s"] == pytest.approx(np.mean([r["queue_s"] for r in step_truth]), rel=0.35)
    assert preemptions_scraped == 0


def _running_gauge_mean(truth, ws, we):
    """Time-average over [ws, we) of the running gauge the sim set, rebuilt from its log: after each engine
    step (its end is a `planned_times` entry) the gauge is the count of requests admitted before that end
    whose last token comes later."""
    ends = np.unique(np.concatenate([r["planned_times"] for r in truth if r.get("planned_times")]))
    admitted = np.array([r["admitted_at"] for r in truth if r.get("planned_times")])
    last = np.array([r["planned_times"][-1] for r in truth if r.get("planned_times")])
    gauge = ((admitted[None, :] < ends[:, None]) & (last[None, :] > ends[:, None])).sum(axis=1)
    edges = np.clip(np.append(ends, np.inf), ws, we)
    return float(np.sum(gauge * np.diff(edges)) / (we - ws))


FEW_SLOTS = {"max_num_seqs": 2, "step_base_s": "20ms"}


def test_few_batch_slots_is_batch_slots(tmp_path):
    steps, run_dir, truth = _run(tmp_path, sim=FEW_SLOTS, rates=[1, 9], conditions={"max_num_seqs": 2})
    _check_few_batch_slots(steps, run_dir, truth, scraped(run_dir, "vllm:num_preemptions_total"))


# quiet: its verdict and means are compared with the live sim's truth, which the busy part's workers and two
# CPU hogs moved
@pytest.mark.slow
@pytest.mark.quiet
def test_few_batch_slots_is_batch_slots_live(sim_factory, tmp_path):
    """The same decision live: the collector's real HTTP scrape of a `llmload sim` process, checked
    against that process's own ground-truth log and its /metrics over HTTP."""
    sim = sim_factory(flavor="vllm", config=FEW_SLOTS)
    # 4 s steps, as the virtual twin's: with 3 s steps a CI run's scraped running mean read 1.58 against the
    # log's 2.00 (a window of few scrapes, one of them before the queue had formed)
    steps, run_dir = _run_live(sim, tmp_path, rates=[1, 9], conditions={"max_num_seqs": 2})
    _check_few_batch_slots(steps, run_dir, sim.ground_truth_rows(), _scrape(sim, "vllm:num_preemptions_total"))


def test_small_kv_cache_with_long_prompts_is_kv_cache(tmp_path):
    steps, run_dir, truth_rows = _run(tmp_path, sim={"num_blocks": 48, "block_size": 16, "step_base_s": "15ms",
                                                     "enable_prefix_caching": False},
                                      rates=[0.5, 6], input_tokens=200, output_tokens=64, slo={"ttft_p95": "300ms"})
    high = steps[1]
    assert high["verdict"] == "fail", run_said(run_dir)
    assert high["limit"]["kind"] == "kv_cache", high["limit"]
    ev = high["limit"]["evidence"]
    total = scraped(run_dir, "vllm:num_preemptions_total")
    truth = sum(r.get("preemptions") or 0 for r in truth_rows)
    assert total == truth > 0
    assert 0 < ev["preemptions"] <= truth
    assert ev["kv_usage_peak"] >= 0.9


def test_long_prompts_small_token_budget_is_prefill(tmp_path):
    steps, run_dir, truth_rows = _run(tmp_path, sim={"max_num_batched_tokens": 48, "step_base_s": "10ms",
                                                     "prefill_cost_s": "0.2ms", "enable_prefix_caching": False},
                                      rates=[1, 1.5], duration="5s", input_tokens=480, output_tokens=4,
                                      slo={"ttft_p95": "100ms", "min_samples": 3})
    for step in steps:
        assert step["verdict"] == "fail", run_said(run_dir)
        assert step["limit"]["kind"] == "prefill", step["limit"]
        ev = step["limit"]["evidence"]
        assert ev["prefill_share"] >= 0.5 and ev["input_tokens_mean"] >= 400
        ws, we = step["window_start"], step["window_end"]
        truth = [r for r in truth_rows if ws - 1.5 <= r["received_at"] < we]
        prefill = np.mean([r["first_token_at"] - r["admitted_at"] for r in truth])
        assert ev["prefill_mean_s"] == pytest.approx(prefill, rel=0.3, abs=0.03)


def test_client_cap_below_the_arrival_rate_is_client_cap(tmp_path):
    steps, run_dir, truth_rows = _run(tmp_path, sim={"step_base_s": "25ms"}, rates=[0.5, 6], output_tokens=24,
                                      client={"max_concurrency": 2}, slo={"ttft_p95": "1s"})
    high = steps[1]
    assert high["limit"]["kind"] == "client_cap", (high["limit"], run_said(run_dir))
    ev = high["limit"]["evidence"]
    assert ev["capped_share"] >= 0.5 and ev["client_wait_p95_s"] > 0.5
    ws, we = high["window_start"], high["window_end"]
    received = [r for r in truth_rows if ws <= r["received_at"] < we]
    assert ev["received_rate"] == pytest.approx(len(received) / (we - ws), rel=0.15)
    assert ev["received_rate"] < 0.6 * high["offered_rate"]
    # the server itself was never short of slots: nothing waited there
    assert (ev["waiting_mean"] or 0.0) < 0.5


def test_llamacpp_parallel_slots_busy_is_batch_slots_from_its_own_slots(tmp_path):
    steps, run_dir, _ = _run(tmp_path, flavor="llamacpp", sim={"num_parallel": 2, "step_base_s": "20ms",
                                                               "load_time_s": 0}, rates=[1, 9])
    high = steps[1]
    assert high["verdict"] == "fail", run_said(run_dir)
    assert high["limit"]["kind"] == "batch_slots", high["limit"]
    ev = high["limit"]["evidence"]
    # the slot count is the server's own (/props, /slots), not written in the config nor inferred
    assert ev["slots"] == 2 and ev["running_at_slots_share"] >= 0.5
    assert ev["slots_source"] in ("conditions.max_num_seqs", "llama.cpp /slots"), ev["slots_source"]
    assert ev["waiting_mean"] > 1.0 and scraped(run_dir, "llamacpp:requests_processing") == 0


def test_slot_bound_with_no_conditions_names_batch_slots_from_the_running_plateau(tmp_path):
    """Issue 43: nothing written in `conditions`; the running plateau is the slot count, said inferred."""
    steps, run_dir, _ = _run(tmp_path, sim=FEW_SLOTS, rates=[1, 9])
    high = steps[1]
    assert high["verdict"] == "fail", run_said(run_dir)
    assert high["limit"]["kind"] == "batch_slots", high["limit"]
    ev = high["limit"]["evidence"]
    assert ev["slots"] == 2 and ev["slots_source"] == "inferred from the running plateau"
    assert ev["kv_usage_peak"] < 0.05 and not ev.get("missing")


def test_kv_bound_with_no_conditions_names_kv_cache_by_its_head_of_line(tmp_path):
    """Issue 43: 16 slots, 64 blocks; two 448-token requests hold the cache under 95% and the next one's
    28 blocks do not fit: a full cache whatever its percentage, with no preemption and no conditions."""
    steps, run_dir, _ = _run(tmp_path, sim={"max_num_seqs": 16, "num_blocks": 64, "block_size": 16,
                                            "step_base_s": "15ms", "enable_prefix_caching": False},
                             rates=[1, 6], duration="5s", input_tokens=448, output_tokens=32, slo={"ttft_p95": "300ms"})
    high = steps[1]
    assert high["verdict"] == "fail", run_said(run_dir)
    assert high["limit"]["kind"] == "kv_cache", high["limit"]
    ev = high["limit"]["evidence"]
    assert ev["kv_decided_by"] == "head_of_line" and ev["kv_head_blocks"] == 28 and ev["kv_num_gpu_blocks"] == 64
    assert ev["kv_usage_peak"] < 0.95 and not ev["preemptions"] and scraped(run_dir, "vllm:num_preemptions_total") == 0
    assert ev["slots"] is None  # the plateau at 2 is the cache's, not two slots
