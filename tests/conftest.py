"""Shared fixtures: servers started as subprocesses on free ports, killed by PID at the end."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO, SimServer, free_port, start_sim, stop_process, wait_http

# re-exported for modules that import them from here; prefer `from support import ...`
__all__ = ["REPO", "SimServer", "free_port", "sim_factory", "start_sim", "stop_process", "vllm_sim", "wait_http"]

# A suite started with SIGINT ignored (`nohup`, or a background job of a non-interactive shell) would pass
# that on to every process it starts, and the tests that stop a command with Ctrl-C would see it ignored.
# A handled signal is reset to its default action across exec, so handling it here gives every child
# Ctrl-C's usual meaning, however the suite was started.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator:
    """Start simulated servers: `sim_factory(flavor="ollama", config={...})`; all killed at the end."""
    started: list[SimServer] = []

    def factory(**kwargs) -> SimServer:
        server = start_sim(tmp_path, **kwargs)
        started.append(server)
        return server

    yield factory
    for server in started:
        stop_process(server.proc)


@pytest.fixture
def vllm_sim(sim_factory) -> SimServer:
    return sim_factory(flavor="vllm")
