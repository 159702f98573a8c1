"""One clock for every timestamp: monotonic `perf_counter_ns`, mapped once per process to wall time.

Records, ground-truth logs and telemetry all carry seconds on this shared wall-clock base, so client
and server timestamps on one machine (or NTP-synced machines) line up.
"""

from __future__ import annotations

import time

__all__ = ["now", "wall_base", "to_wall"]


def _measure_base() -> float:
    """Wall time minus monotonic time, taken as the tightest of a few paired readings."""
    best_gap, best_base = None, 0.0
    for _ in range(16):
        a = time.perf_counter_ns()
        w = time.time_ns()
        b = time.perf_counter_ns()
        if best_gap is None or b - a < best_gap:
            best_gap, best_base = b - a, (w - (a + b) / 2) / 1e9
    return best_base


_BASE = _measure_base()


def wall_base() -> float:
    """Seconds to add to `perf_counter()` to get this process's wall time."""
    return _BASE


def now() -> float:
    """Current time in wall-clock seconds, from the monotonic clock."""
    return _BASE + time.perf_counter_ns() / 1e9


def to_wall(perf_counter_ns: int) -> float:
    """A `perf_counter_ns()` reading as wall-clock seconds."""
    return _BASE + perf_counter_ns / 1e9
