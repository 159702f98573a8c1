"""The messages between the master's step controller and the workers' schedulers.

Each step is one self-contained `llmload:step` message per worker: it carries everything the worker
needs (step spec, absolute start time, seed, shard, run directory, the whole config as a dict), because
a custom message sent from the master's `test_start` reaches a worker before that worker applies the
master's options (NOTES.md). Workers answer with batches of compact per-request summaries
(`llmload:results`) and one `llmload:drained` per step; the master may send `llmload:cancel` when a
step's drain times out. The master measures the workers' clocks with `llmload:clock_ping` /
`llmload:clock_pong` (`llmload.runtime.clocksync`).

A summary is a record's fields with `token_times` packed as float64 bytes: shipping per-event float
lists raised send lag (NOTES.md), one bytes object is cheap to encode.
"""

from __future__ import annotations

from array import array
from typing import Any

from llmload.records import Record

__all__ = [
    "CANCEL",
    "DRAINED",
    "RESULTS",
    "STEP",
    "pack_record",
    "step_message",
    "unpack_record",
]

STEP = "llmload:step"
CANCEL = "llmload:cancel"
RESULTS = "llmload:results"
DRAINED = "llmload:drained"


def step_message(*, step: dict, start_at: float, seed: int, shard: int, shards: int, run_dir: str,
                 config: dict, worker: str, base_dir: str = ".", clock_offset_s: float | None = None) -> dict[str, Any]:
    """The one message a worker gets per step (plain types only: it crosses ZeroMQ as msgpack).

    `base_dir` resolves relative paths in the config (datasets, key files) as on the master;
    `clock_offset_s` is the worker's clock minus the master's as the master measured it
    (`llmload.runtime.clocksync`; None: not measured, the worker keeps its own clock).
    """
    return {"step": step, "start_at": start_at, "seed": seed, "shard": shard, "shards": shards,
            "run_dir": run_dir, "config": config, "worker": worker, "base_dir": base_dir,
            "clock_offset_s": clock_offset_s}


def pack_record(record: Record) -> dict[str, Any]:
    """A record as a compact message dict: per-event times as one bytes object."""
    row = record.as_dict()
    row["token_times"] = array("d", record.token_times).tobytes()
    row["token_counts"] = array("q", record.token_counts).tobytes()
    return row


def unpack_record(row: dict[str, Any]) -> dict[str, Any]:
    """The inverse of `pack_record`: a plain dict with the record's fields (JSON-serialisable)."""
    out = dict(row)
    for key, code in (("token_times", "d"), ("token_counts", "q")):
        raw = out.get(key)
        if isinstance(raw, (bytes, bytearray)):
            values = array(code)
            values.frombytes(bytes(raw))
            out[key] = values.tolist()
        elif raw is None:
            out[key] = []
    return out
