"""Loaded as an extra Locust file by tests/runtime/test_client_faults.py: a bug in llmload's own client
code for one request in four (chosen by request id), raised after the server's answer was read."""

from __future__ import annotations

import zlib

import llmload.client.core as core

_count = core._count


def faulty_count(record, stream, request, got_200):
    if zlib.crc32(record.request_id.encode()) % 4 == 0:
        raise RuntimeError("injected fault in llmload's own code")
    return _count(record, stream, request, got_200)


core._count = faulty_count
