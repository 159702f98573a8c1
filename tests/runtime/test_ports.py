"""`llmload.runtime.launcher.ports`: which ports a run listens on, and a taken one refused in one line
keyed by what sets it (issue 44, item 8). The real second master: tests/runtime/test_distributed_endings.py."""

from __future__ import annotations

import socket

import pytest

from llmload.errors import ConfigError
from llmload.runtime.launcher.ports import Listener, check_ports_free, run_listeners


def test_the_listeners_of_each_kind_of_run(monkeypatch):
    monkeypatch.delenv("LOCUST_WEB_HOST", raising=False)
    monkeypatch.setenv("LOCUST_WEB_PORT", "8100")
    common = {"master_bind_host": "0.0.0.0", "master_port": None, "default_master_port": 5557,
              "metrics_host": "127.0.0.1"}
    found = run_listeners(master=True, processes=0, web=True, metrics_port=9100, **common)
    assert [(x.host, x.port, x.set_by) for x in found] == [
        ("0.0.0.0", 5557, "--master-port"), ("127.0.0.1", 8100, "LOCUST_WEB_PORT"),
        ("127.0.0.1", 9100, "--metrics-port")]
    assert run_listeners(master=False, processes=2, web=False, metrics_port=None, **common) == []  # a free one
    assert run_listeners(master=False, processes=0, web=False, metrics_port=None, **common) == []


def test_a_port_something_listens_on_is_one_line_keyed_by_its_flag():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            check_ports_free([Listener("127.0.0.1", port, "--master-port")])
    assert caught.value.exit_code == 2
    assert str(caught.value) == f"--master-port {port}: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_port_nothing_listens_on_passes_even_after_a_connection_closed_there():
    """A run that just ended leaves its connections in TIME_WAIT; its listeners (ZeroMQ, gevent's server)
    set SO_REUSEADDR, as this one does, so the next run may bind there and the check agrees."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
        client.close()
    check_ports_free([Listener("127.0.0.1", port, "LOCUST_WEB_PORT")])
