"""`llmload sim --reuse-port`: several sims share one port (SO_REUSEPORT), each with its own engine and
ground-truth log, so a bench can give the sim more than one core (bench/scaling.py --sims)."""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlparse

import pytest
from sim_client import FAST

from llmload.errors import ServerError
from llmload.sim.groundtruth import read_ground_truth
from llmload.sim.process import start_sim_process

REQUESTS = 40


def _one_request(port: int, i: int) -> None:
    """One non-streamed completion on its own connection (a new source port each time)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    body = {"model": "sim-model", "prompt": "hello", "max_tokens": 2, "stream": False}
    conn.request("POST", "/v1/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json", "X-Request-Id": f"r{i}", "Connection": "close"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    resp.read()
    conn.close()


def test_two_sims_share_a_port_and_each_logs_its_own_requests(tmp_path):
    first = start_sim_process(tmp_path / "a", settings=FAST, reuse_port=True)
    try:
        port = urlparse(first.url).port
        second = start_sim_process(tmp_path / "b", settings=FAST, port=port, reuse_port=True)
        try:
            assert second.url == first.url
            for i in range(REQUESTS):
                _one_request(port, i)
        finally:
            second.stop()
    finally:
        first.stop()
    a, b = read_ground_truth(first.ground_truth), read_ground_truth(second.ground_truth)
    # every request is logged exactly once, by whichever sim the kernel gave its connection to; with 40
    # connections from distinct source ports, all landing on one sim has probability 2**-39
    assert sorted(a.keys() | b.keys()) == sorted(f"r{i}" for i in range(REQUESTS))
    assert not a.keys() & b.keys()
    assert a and b


def test_a_second_sim_without_the_flag_cannot_take_the_port(tmp_path):
    first = start_sim_process(tmp_path / "a", settings=FAST, reuse_port=True)
    try:
        with pytest.raises(ServerError):
            start_sim_process(tmp_path / "b", settings=FAST, port=urlparse(first.url).port, timeout_s=10)
        assert "cannot listen" in (tmp_path / "b" / "sim.log").read_text()
    finally:
        first.stop()
