"""Fixtures for the telemetry tests (helpers in helpers.py, server formats in exposition_samples.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .helpers import CannedServer


@pytest.fixture
def canned() -> Iterator[CannedServer]:
    """A loopback server with canned answers, stopped at the end."""
    server = CannedServer()
    yield server
    server.stop()
