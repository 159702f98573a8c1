"""Ollama's server-side timings: the queue it does not expose, derived from per-request durations.

Ollama has no /metrics. Each final NDJSON line carries integer-nanosecond `load_duration`,
`prompt_eval_duration`, `eval_duration` and `total_duration`; METRICS.md defines the server queue as
`total - load - prompt_eval - eval`. A request whose load took at least `cold_load_s` found the model
unloaded (`cold`): its TTFT includes the load and says nothing about capacity.
"""

from __future__ import annotations

import pandas as pd

__all__ = ["COLD_LOAD_S", "derive_ollama_queue", "ollama_timings"]

#: a load this long means the model was loaded for this request (a warm model answers in milliseconds)
COLD_LOAD_S = 0.5

_NS = 1e-9


def ollama_timings(final: dict, *, cold_load_s: float = COLD_LOAD_S) -> dict[str, float | bool | None]:
    """Record fields (`server_load_s`, `server_prompt_s`, `server_decode_s`, `server_total_s`,
    `server_queue_s`, `cold`) from an Ollama final message; None where a duration is missing."""

    def seconds(key: str) -> float | None:
        value = final.get(key)
        return float(value) * _NS if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    load, prompt, decode, total = (seconds(k) for k in ("load_duration", "prompt_eval_duration",
                                                          "eval_duration", "total_duration"))
    queue = None
    if total is not None:
        queue = max(0.0, total - (load or 0.0) - (prompt or 0.0) - (decode or 0.0))
    return {"server_load_s": load, "server_prompt_s": prompt, "server_decode_s": decode,
            "server_total_s": total, "server_queue_s": queue,
            "cold": None if load is None else load >= cold_load_s}


def derive_ollama_queue(records: pd.DataFrame, *, cold_load_s: float = COLD_LOAD_S) -> pd.DataFrame:
    """Records with `server_queue_s` and `cold` filled where missing but the durations are known."""
    parts = records[["server_load_s", "server_prompt_s", "server_decode_s"]].fillna(0.0).sum(axis=1)
    queue = (records["server_total_s"] - parts).clip(lower=0.0)
    cold = (records["server_load_s"] >= cold_load_s).astype("boolean").mask(records["server_load_s"].isna())
    return records.assign(server_queue_s=records["server_queue_s"].fillna(queue),
                          cold=records["cold"].astype("boolean").fillna(cold))
