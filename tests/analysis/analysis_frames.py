"""Builders of small hand-made record sets and plans for the analysis tests.

`request(...)` gives one record dict with the timings written relative to `scheduled_at`, so a test
states exactly the numbers it then works out by hand.
"""

from __future__ import annotations

import pandas as pd

from analysis.run import Run, empty_telemetry, records_from_table
from llmload.records import RECORD_SCHEMA

__all__ = ["frame", "plan_step", "request", "run_of"]


def request(rid: str, step: str, at: float, *, ttft: float | None = 0.1, e2e: float | None = 0.5,
            wait: float = 0.0, out: int | None = 5, outcome: str = "ok", capped: bool = False,
            planned_out: int | None = None, events: int | None = None, instance: str | None = None,
            server_queue: float | None = None, counts: list[int] | None = None) -> dict:
    """One record: scheduled at `at`, sent `wait` later, first token `ttft` after sending, last token
    `e2e` after sending, `events` output events evenly spread between them (default: one per token)."""
    sent = None if outcome == "not_sent" else at + wait
    first = sent + ttft if sent is not None and ttft is not None else None
    last = sent + e2e if sent is not None and e2e is not None else None
    n = events if events is not None else (out or 0)
    times: list[float] = []
    if first is not None and last is not None and n:
        times = [first] if n == 1 else [first + i * (last - first) / (n - 1) for i in range(n)]
    return {"request_id": rid, "step": step, "worker": "w0", "scheduled_at": at, "sent_at": sent,
            "first_token_at": first, "last_token_at": last, "closed_at": last if last is not None else sent,
            "input_tokens": 100 if outcome == "ok" else None, "output_tokens": out if outcome == "ok" else None,
            "planned_output_tokens": planned_out, "outcome": outcome, "capped": capped,
            "token_times": times, "token_counts": counts or [], "instance": instance,
            "server_queue_s": server_queue}


def frame(rows: list[dict]) -> pd.DataFrame:
    """Records with the real schema (Arrow-backed list columns, as `load_run` gives them)."""
    import pyarrow as pa

    return records_from_table(pa.Table.from_pylist(rows, schema=RECORD_SCHEMA))


def plan_step(label: str, index: int, *, rate: float | None = 1.0, start: float = 0.0, length: float = 10.0,
              phase: str = "ladder", status: str = "run", concurrency: int | None = None) -> dict:
    return {"label": label, "index": index, "phase": phase, "target_rate": rate, "arrival": "constant",
            "concurrency": concurrency, "start_at": start, "window_start": start, "window_end": start + length,
            "drain_deadline": start + length + 5, "drained_at": start + length + 1,
            "planned_arrivals": None, "status": status}


def run_of(rows: list[dict], steps: list[dict], telemetry: pd.DataFrame | None = None,
           manifest: dict | None = None) -> Run:
    return Run(records=frame(rows), telemetry=telemetry if telemetry is not None else empty_telemetry(),
               plan={"kind": "ladder", "steps": steps}, manifest=manifest or {})
