"""A request's latencies, defined once (METRICS.md "Per request"): the analysis (vectorised over a
frame), the live table and the Locust events all call `latencies`.

- `ttft = first_token_at - sent_at`
- `e2e = last_token_at - sent_at`
- `tpot = (e2e - ttft) / (output_tokens - 1)`, only for `output_tokens >= 2` (a 1-token answer has no TPOT)
- `itl`: gaps between consecutive output-bearing events (`token_times`), chunk level

Arguments may be floats (None for unknown) or numpy / pandas arrays (NaN for unknown): the same
arithmetic serves both. Scalars give floats or None; arrays give float arrays with NaN.

    >>> latencies(10.0, 10.25, 11.25, 5)
    Latencies(ttft=0.25, tpot=0.25, e2e=1.25)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Latencies", "itl_gaps", "latencies"]


class Latencies(NamedTuple):
    ttft: Any
    tpot: Any
    e2e: Any


def _num(value: Any) -> Any:
    if value is None:
        return np.nan
    if isinstance(value, (int, float, np.number)):
        return np.float64(value)  # numpy division: x / 0 is inf or NaN, never an exception
    return np.asarray(value, dtype=float)


def _out(value: Any, scalar: bool) -> Any:
    if not scalar:
        return value
    value = float(value)
    return None if value != value else value


def _real(value: float) -> float | None:
    value = float(value)
    return None if value != value else value


def _scalar(sent: Any, first: Any, last: Any, n: Any) -> Latencies:
    """`latencies` of plain Python numbers (None for unknown): the same IEEE arithmetic as the array
    path, without numpy's per-call overhead (~40 us; this runs once per request in the Locust event)."""
    ttft = None if sent is None or first is None else _real(first - sent)
    e2e = None if sent is None or last is None else _real(last - sent)
    tpot = None
    if n is not None and n >= 2 and ttft is not None and e2e is not None:
        tpot = _real((e2e - ttft) / (float(n) - 1.0))
    return Latencies(ttft, tpot, e2e)


_PLAIN = (float, int)


def latencies(sent_at: Any, first_token_at: Any, last_token_at: Any, output_tokens: Any) -> Latencies:
    """TTFT, TPOT and E2E of one request (scalars) or of many (arrays); see the module docstring."""
    if all(v is None or type(v) in _PLAIN for v in (sent_at, first_token_at, last_token_at, output_tokens)):
        return _scalar(sent_at, first_token_at, last_token_at, output_tokens)
    scalar = all(v is None or np.isscalar(v) for v in (sent_at, first_token_at, last_token_at, output_tokens))
    sent, first, last, n = _num(sent_at), _num(first_token_at), _num(last_token_at), _num(output_tokens)
    ttft, e2e = first - sent, last - sent
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n >= 2, (e2e - ttft) / (n - 1), np.nan)
    return Latencies(_out(ttft, scalar), _out(tpot, scalar), _out(e2e, scalar))


def itl_gaps(token_times: Any) -> np.ndarray:
    """Chunk-level inter-token latencies of one request: gaps between its output events' times
    (`analysis.requests.event_gaps` computes the same for many requests at once)."""
    times = np.asarray(token_times if token_times is not None else [], dtype=float)
    return np.diff(times) if times.size > 1 else np.array([], dtype=float)
