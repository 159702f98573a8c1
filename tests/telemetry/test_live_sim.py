"""The collector against `llmload sim` (every flavour): scraped series follow the sim's own state and the
queue-time quantiles from histogram deltas agree with its ground-truth log within the bucket resolution."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from llmload.clock import now
from llmload.telemetry.collector import TelemetryCollector
from llmload.telemetry.histogram import histogram_summary, queue_time_quantile
from llmload.telemetry.series import counter_delta
from llmload.telemetry.sink import finalise_telemetry, read_telemetry

from .helpers import config_for, send_burst

pytestmark = pytest.mark.slow

FAST = {"interval": "100ms", "timeout": "1s", "gpu": "off"}


class Sampler:
    """Runs `collector.sample_now()` every 0.1 s in a thread while a burst is served."""

    def __init__(self, collector: TelemetryCollector) -> None:
        self.collector, self._stop = collector, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.collector.sample_now()

    def __enter__(self) -> Sampler:
        self.collector.sample_now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        time.sleep(0.15)
        self.collector.sample_now()  # a last sample after everything finished
        self.collector.stop()


def _series(frame, source: str, metric: str) -> np.ndarray:
    return frame[(frame["source"] == source) & (frame["metric"] == metric)]["value"].to_numpy()


def test_vllm_waiting_grows_and_queue_quantiles_match_ground_truth(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory(flavor="vllm", config={"max_num_seqs": 2, "step_base_s": "20ms", "decode_cost_s": 0,
                                             "prefill_cost_s": 0, "load_time_s": 0})
    collector = TelemetryCollector(config_for(sim.url, telemetry=FAST), tmp_path)
    with Sampler(collector):
        t0 = now()
        statuses = send_burst(sim.url, 14)
    t1 = now()
    assert statuses == [200] * 14
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    src = f"server:{sim.url}"
    assert _series(frame, src, "waiting").max() >= 6          # arrivals beyond 2 slots queue up
    assert _series(frame, src, "running").max() == 2
    assert _series(frame, src, "waiting")[-1] == 0 and _series(frame, src, "running")[-1] == 0
    truth = np.array([r["queue_s"] for r in sim.ground_truth_rows() if r["request_id"].startswith("burst-")])
    assert len(truth) == 14
    for q in (0.5, 0.9, 0.99):
        value, resolution = queue_time_quantile(frame, t0, t1, q, source=src)
        exact = float(np.quantile(truth, q, method="inverted_cdf"))  # the order statistic at rank q*n
        assert value is not None and abs(value - exact) <= resolution + 1e-9, (q, value, exact, resolution)
    assert counter_delta(frame, "generation_tokens_total", t0, t1) == 14 * 16
    summary = histogram_summary(frame, "queue_time_seconds", t0, t1, source=src)
    assert summary["count"] == 14 and summary["mean"] == pytest.approx(truth.mean(), abs=1e-6)


def test_vllm_small_kv_cache_moves_usage_and_preemptions(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory(flavor="vllm", config={"max_num_seqs": 8, "num_blocks": 12, "block_size": 16,
                                             "step_base_s": "10ms", "decode_cost_s": 0, "prefill_cost_s": 0,
                                             "load_time_s": 0})
    collector = TelemetryCollector(config_for(sim.url, telemetry=FAST), tmp_path)
    body = {"model": "sim-model", "prompt": " ".join(["word"] * 40), "max_tokens": 60, "ignore_eos": True}
    with Sampler(collector):
        t0 = now()
        statuses = send_burst(sim.url, 6, body=body)
    assert statuses == [200] * 6
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    src = f"server:{sim.url}"
    kv = _series(frame, src, "kv_usage")
    assert kv.max() >= 0.6 and kv[-1] == 0 and (kv <= 1).all()
    truth = sum(r["preemptions"] for r in sim.ground_truth_rows())
    assert truth > 0
    assert counter_delta(frame, "preemptions_total", t0, now(), source=src) == truth


def test_llamacpp_deferred_and_slots(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory(flavor="llamacpp", config={"num_parallel": 2, "step_base_s": "20ms", "decode_cost_s": 0,
                                                 "prefill_cost_s": 0, "load_time_s": 0})
    collector = TelemetryCollector(config_for(sim.url, telemetry=FAST), tmp_path)
    with Sampler(collector):
        statuses = send_burst(sim.url, 8, path="/completion",
                              body={"prompt": "hello there", "n_predict": 16, "ignore_eos": True})
    assert statuses == [200] * 8
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    src, slots = f"server:{sim.url}", f"slots:{sim.url}"
    assert _series(frame, src, "deferred").max() >= 3 and _series(frame, src, "waiting").max() >= 3
    assert _series(frame, src, "processing").max() == 2
    assert _series(frame, slots, "slots_total").max() == 2 and _series(frame, slots, "slots_processing").max() == 2
    assert _series(frame, src, "deferred")[-1] == 0


def test_ollama_loaded_model_appears_in_api_ps(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory(flavor="ollama", config={"load_time_s": "200ms", "step_base_s": "10ms"})
    collector = TelemetryCollector(config_for(sim.url, telemetry=FAST), tmp_path)
    with Sampler(collector):
        statuses = send_burst(sim.url, 2, path="/api/generate",
                              body={"model": "sim-model", "prompt": "hi", "stream": False,
                                    "options": {"num_predict": 4}})
    assert statuses == [200, 200]
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    src = f"ollama_ps:{sim.url}"
    loaded = _series(frame, src, "ollama_loaded_models")
    assert loaded[0] == 0 and loaded[-1] == 1
    assert _series(frame, src, "ollama_size_vram_bytes").max() > 0
    assert (_series(frame, src, "scrape_error") == 0).all()


def _failed_scrapes(path: Path, source: str) -> int:
    """The `scrape_error` samples of value 1 for `source` written to the telemetry file so far (a line still
    being written is skipped)."""
    count = 0
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        count += row["source"] == source and row["metric"] == "scrape_error" and row["value"] == 1
    return count


def test_a_server_that_dies_leaves_a_recorded_gap(sim_factory, tmp_path: Path) -> None:
    sim = sim_factory(flavor="vllm", config={"load_time_s": 0, "faults": {"exit_after_s": "2s"}})
    collector = TelemetryCollector(config_for(sim.url, telemetry=FAST), tmp_path)
    collector.start()
    sim.proc.wait(10)
    # polling goes on after it died: wait for three failed scrapes (five polls' time when both cores are free;
    # beside two CPU hogs 0.5 s once held one), at most 10 s
    deadline = time.monotonic() + 10.0
    while _failed_scrapes(tmp_path / "telemetry.jsonl", f"server:{sim.url}") < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    collector.stop()
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    errors = frame[(frame["source"] == f"server:{sim.url}") & (frame["metric"] == "scrape_error")]
    values = errors["value"].to_numpy()
    assert values[0] == 0 and values[-1] == 1 and (values[-3:] == 1).all()  # polling went on after it died
    assert set(errors[errors["value"] == 1]["labels"]) <= {"error=refused", "error=failed", "error=timeout"}
