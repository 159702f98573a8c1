"""Probes and scrapes against servers that drip their answers (issue 33, item 2): each GET keeps to a
total deadline and a size cap, whatever the server does; the hostile server's log says what was asked."""

from __future__ import annotations

import time

import pytest
from hostile.hostile_server import hostile_server
from support import base_config

from llmload.config import Config
from llmload.errors import TelemetryError
from llmload.runtime.master.preflight import PreflightFailed, check_reachable
from llmload.telemetry.http import MAX_BODY_BYTES, fetch_bytes
from llmload.telemetry.probe import probe_server
from llmload.telemetry.sources import EndpointSource

#: what "bounded" means here: the deadlines below are 0.5-1 s; the old code never returned at all
_BOUND_S = 15.0


def _drip_head(handler, request) -> None:
    """The status line and headers themselves, one byte every 0.1 s (never finished)."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Slow: " + b"x" * 10**6:
        handler.send(bytes([byte]))
        handler.sleep(0.1)


@pytest.mark.parametrize("mode", ["drip", "drip_chunked", _drip_head])
def test_a_dripping_answer_times_out_on_the_total_deadline(mode) -> None:
    options = {"interval_s": 0.1, "chunked": mode == "drip_chunked"}
    with hostile_server("drip" if mode == "drip_chunked" else mode, **options) as server:
        started = time.monotonic()
        with pytest.raises(TelemetryError, match="timed out"):
            fetch_bytes(server.url + "/metrics", timeout_s=0.5)
        assert time.monotonic() - started < _BOUND_S
    assert [r.path for r in server.log] == ["/metrics"]


def test_an_answer_over_the_cap_is_an_error_not_a_truncated_page() -> None:
    def huge(handler, request) -> None:
        handler.respond(200, b"# x\n" * (MAX_BODY_BYTES // 4 + 1), content_type="text/plain")

    with hostile_server(huge) as server, pytest.raises(TelemetryError, match="longer than"):
        fetch_bytes(server.url + "/metrics", timeout_s=10.0)


def test_preflight_gives_up_on_a_dripping_model_list() -> None:
    with hostile_server("drip", interval_s=0.1) as server:
        config = Config.model_validate(base_config(server.url, {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}}))
        started = time.monotonic()
        with pytest.raises(PreflightFailed, match="no complete answer to GET /v1/models within 0.5s"):
            check_reachable(config, timeout_s=0.5)
        assert time.monotonic() - started < _BOUND_S
    assert [r.path for r in server.log] == ["/v1/models"]


def test_a_probe_of_a_dripping_server_keeps_to_its_budget() -> None:
    with hostile_server("drip", interval_s=0.1) as server:
        started = time.monotonic()
        result = probe_server(server.url, flavor="vllm", timeout_s=0.3)
        assert time.monotonic() - started < _BOUND_S
    assert result["facts"]["model"] is None and result["errors"]
    assert len(server.log) <= 4  # the budget (3 timeouts) leaves no time to ask more


def test_a_dripping_metrics_page_is_a_scrape_error_within_the_timeout() -> None:
    with hostile_server("drip", interval_s=0.1) as server:
        source = EndpointSource(server.url, flavor="vllm", metrics_url=server.url + "/metrics", timeout_s=0.5)
        started = time.monotonic()
        points = source.poll()
        assert time.monotonic() - started < _BOUND_S
    errors = [p for p in points if p.metric == "scrape_error"]
    assert errors and all(p.value == 1.0 and "timeout" in p.labels for p in errors)
