"""The collector against canned servers: samples land on disk, failures become recorded gaps, polling goes on."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from llmload.errors import ConfigError
from llmload.telemetry.collector import TelemetryCollector, dcgm_url, metrics_urls
from llmload.telemetry.sink import TELEMETRY_SCHEMA, finalise_telemetry, read_telemetry

from .exposition_samples import LLAMACPP, VLLM
from .helpers import CannedServer, config_for

#: a timeout no local scrape outlasts even on a loaded machine (at 300 ms one beside seven busy xdist workers and
#: two CPU hogs did: a malformed page came out as a timeout)
FAST = {"interval": "100ms", "timeout": "2s", "gpu": "off"}


def _errors(frame, source: str) -> list[str]:
    rows = frame[(frame["source"] == source) & (frame["metric"] == "scrape_error")]
    return [lab if v else "ok" for lab, v in zip(rows["labels"], rows["value"], strict=True)]


def test_gaps_are_recorded_and_polling_goes_on(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    collector = TelemetryCollector(config_for(canned.url, telemetry=FAST), tmp_path)
    source = f"server:{canned.url}"
    collector.set_step("r1")
    collector.sample_now()                                            # detects vLLM from the names
    canned.routes["/metrics"] = (200, "<html>502 Bad Gateway</html>", 0.0)
    collector.sample_now()
    assert collector.latest()[source]["scrape_error"] == 1.0
    assert collector.latest()[source]["running"] == 5.0               # last good value kept for the table
    canned.routes["/metrics"] = (200, VLLM, 3.0)                      # slower than the 2 s timeout
    collector.sample_now()
    canned.routes["/metrics"] = (200, VLLM.replace("} 3.0", "} 13.0"), 0.0)
    collector.set_step("r2")
    collector.sample_now()
    canned.stop()                                                     # the server dies
    collector.sample_now()
    collector.stop()
    frame = read_telemetry(finalise_telemetry(tmp_path).parent)
    assert _errors(frame, source) == ["ok", "error=malformed", "error=timeout", "ok", "error=refused"]
    running = frame[(frame["source"] == source) & (frame["metric"] == "running")]
    assert list(running["value"]) == [5.0, 15.0] and list(running["step"]) == ["r1", "r2"]
    # after a gap every series is written again, even unchanged counters
    prompt = frame[(frame["metric"] == "prompt_tokens_total")]
    assert len(prompt) == 2


def test_unchanged_counters_and_raw_series_are_not_repeated(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    collector = TelemetryCollector(config_for(canned.url, telemetry=FAST, target={"server": "vllm"}), tmp_path)
    for _ in range(3):
        collector.sample_now()
    collector.stop()
    frame = read_telemetry(tmp_path)  # straight from the JSON lines
    assert (frame["metric"] == "running").sum() == 3
    assert (frame["metric"] == "preemptions_total").sum() == 1
    assert (frame["metric"] == "vllm:num_requests_running").sum() == 2  # two engines, once each
    assert canned.requests == {"/metrics": 3}  # the hint skips detection


def test_threads_poll_each_endpoint_until_stopped(tmp_path: Path) -> None:
    a, b = CannedServer(), CannedServer()
    try:
        a.routes["/metrics"] = (200, VLLM, 0.0)
        b.routes["/metrics"] = (200, LLAMACPP, 0.0)
        b.routes["/props"] = (200, "{}", 0.0)
        b.routes["/slots"] = (200, json.dumps([{"id": 0, "n_ctx": 1024, "is_processing": True},
                                               {"id": 1, "n_ctx": 1024, "is_processing": False}]), 0.0)
        collector = TelemetryCollector(config_for([a.url, b.url], telemetry=FAST), tmp_path)
        collector.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(collector.latest()) < 3:
            time.sleep(0.05)
        time.sleep(0.35)
        collector.stop()
        latest = collector.latest()
    finally:
        a.stop()
        b.stop()
    assert latest[f"server:{a.url}"]["waiting"] == 8.0
    assert latest[f"server:{b.url}"]["deferred"] == 6.0
    assert latest[f"slots:{b.url}"]["slots_processing"] == 1.0
    lines = (tmp_path / "telemetry.jsonl").read_text().splitlines()
    counted = len(lines)
    time.sleep(0.3)
    assert len((tmp_path / "telemetry.jsonl").read_text().splitlines()) == counted  # stopped means stopped
    assert a.requests["/metrics"] >= 3
    table = pq.read_table(finalise_telemetry(tmp_path))
    assert table.schema.equals(TELEMETRY_SCHEMA) and table.num_rows == counted


def test_ollama_is_polled_on_api_ps(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/api/version"] = (200, '{"version":"0.12.3"}', 0.0)
    canned.routes["/api/ps"] = (200, json.dumps({"models": [{
        "name": "llama3:8b", "model": "llama3:8b", "size": 6_000_000_000, "size_vram": 4_500_000_000,
        "context_length": 8192, "expires_at": "2099-01-01T00:00:00.123456789Z"}]}), 0.0)
    collector = TelemetryCollector(config_for(canned.url, telemetry=FAST), tmp_path)
    points = {(p.source, p.metric, p.labels): p.value for p in collector.sample_now()}
    collector.stop()
    src = f"ollama_ps:{canned.url}"
    assert points[(src, "ollama_size_vram_bytes", "model=llama3:8b")] == 4_500_000_000
    assert points[(src, "ollama_context_length", "model=llama3:8b")] == 8192
    assert points[(src, "ollama_expires_in_seconds", "model=llama3:8b")] > 1e9
    assert points[(src, "scrape_error", "")] == 0.0
    assert "/metrics" in canned.requests and canned.requests.get("/api/ps") == 1


def test_missing_endpoint_is_retired_after_one_line(tmp_path: Path, canned: CannedServer, caplog) -> None:
    canned.routes["/metrics"] = (501, "This server does not support metrics endpoint.", 0.0)
    canned.routes["/slots"] = (200, "[]", 0.0)
    collector = TelemetryCollector(config_for(canned.url, telemetry=FAST, target={"server": "llamacpp"}),
                                   tmp_path)
    for _ in range(3):
        collector.sample_now()
    collector.stop()
    assert canned.requests["/metrics"] == 1 and canned.requests["/slots"] == 3
    assert sum("not polled again" in r.getMessage() for r in caplog.records) == 1


def test_metrics_url_settings() -> None:
    cfg = config_for(["http://a:1", "http://b:2/"], telemetry={"metrics_url": "{url}/prom"})
    assert metrics_urls(cfg) == [("http://a:1", "http://a:1/prom"), ("http://b:2", "http://b:2/prom")]
    assert metrics_urls(config_for("http://a:1", telemetry={"metrics_url": "off"})) == []
    with pytest.raises(ConfigError, match="telemetry.metrics_url"):
        metrics_urls(config_for(["http://a:1", "http://b:2"], telemetry={"metrics_url": "http://x/metrics"}))
    assert dcgm_url("dcgm:http://gpu:9400") == "http://gpu:9400/metrics"
    assert dcgm_url("dcgm:http://gpu:9401/custom") == "http://gpu:9401/custom"


def test_credentials_in_the_url_are_sent_but_never_named(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    url = canned.url.replace("http://", "http://ops:s3cr3t-pw@")
    collector = TelemetryCollector(config_for(url, telemetry=FAST), tmp_path)
    sources = {p.source for p in collector.sample_now()}
    collector.stop()
    assert sources == {f"server:{canned.url}"}
    assert canned.headers_seen[0]["Authorization"].startswith("Basic ")
    assert "s3cr3t-pw" not in (tmp_path / "telemetry.jsonl").read_text()


def test_recent_samples_give_the_live_judge_a_steps_gauges_and_keep_counter_baselines() -> None:
    from llmload.telemetry.collector import RecentSamples
    from llmload.telemetry.sink import Point

    recent = RecentSamples()
    for i in range(10):  # one sample a second: waiting climbs 0..9 on one server, 1 on another
        recent.add(100.0 + i, "r1", "server:a", [Point("server:a", "waiting", float(i)),
                                                 Point("server:a", "preemptions_total", float(i)),
                                                 Point("server:a", "vllm:raw_series", 7.0)])
        recent.add(100.0 + i, "r1", "server:b", [Point("server:b", "waiting", 1.0)])
    assert recent.gauge_mean("waiting", 105.0, 110.0) == pytest.approx(7.0 + 1.0)
    assert recent.gauge_mean("waiting", 200.0, 210.0) is None
    assert {r["metric"] for r in recent.rows()} == {"waiting", "preemptions_total"}  # judged metrics only
    recent.trim(before=105.5)
    times = sorted({r["t"] for r in recent.rows() if r["source"] == "server:a"})
    assert times == [105.0, 106.0, 107.0, 108.0, 109.0]  # 105: the last one before, each key keeps it


def test_collector_samples_reach_recent_samples(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    collector = TelemetryCollector(config_for(canned.url, telemetry=FAST), tmp_path)
    collector.set_step("r1")
    collector.sample_now()
    collector.stop()
    rows = collector.recent.rows()
    assert {"running", "waiting"} <= {r["metric"] for r in rows} and {r["step"] for r in rows} == {"r1"}
