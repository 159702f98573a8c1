"""Loaded as an extra Locust file by tests/runtime/test_run_warnings.py: a generator that spends 30 ms
of CPU on every request (after reading its answer): a quarter of a core at 8 req/s."""

from __future__ import annotations

import time

import llmload.client.core as core

_count = core._count


def burning_count(record, stream, request, got_200):
    until = time.process_time() + 0.03
    while time.process_time() < until:
        pass
    return _count(record, stream, request, got_200)


core._count = burning_count
