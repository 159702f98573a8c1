"""One clock for every timestamp: monotonic `perf_counter_ns`, mapped once per process to wall time.

Records, ground-truth logs and telemetry all carry seconds on this shared wall-clock base, so client
and server timestamps on one machine (or NTP-synced machines) line up.

A worker on another host moves its base onto the master's timeline with `set_offset` (the offset the
master measured, `llmload.runtime.wire.clocksync`): from then on `now()` (its schedule, its records) is the
master's clock, while `raw_now()` stays this host's own (what the master's measurement reads).
"""

from __future__ import annotations

import time

__all__ = ["now", "offset", "raw_now", "set_offset", "to_wall", "wall_base"]


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


_RAW_BASE = _measure_base()
_BASE = _RAW_BASE
#: this host's clock minus the master's (seconds), as last set by `set_offset`
_OFFSET = 0.0


def set_offset(offset_s: float) -> None:
    """Put `now()` on another clock's timeline: `offset_s` is this host's clock minus that clock."""
    global _BASE, _OFFSET
    _OFFSET = float(offset_s)
    _BASE = _RAW_BASE - _OFFSET


def offset() -> float:
    """The offset `set_offset` applied (0.0: `now()` is this host's own clock)."""
    return _OFFSET


def raw_now() -> float:
    """This host's own wall-clock seconds (from the monotonic clock), whatever `set_offset` applied."""
    return _RAW_BASE + time.perf_counter_ns() / 1e9


def wall_base() -> float:
    """Seconds to add to `perf_counter()` to get `now()` (this process's wall time, or the master's)."""
    return _BASE


def now() -> float:
    """Current time in wall-clock seconds, from the monotonic clock."""
    return _BASE + time.perf_counter_ns() / 1e9


def to_wall(perf_counter_ns: int) -> float:
    """A `perf_counter_ns()` reading as wall-clock seconds."""
    return _BASE + perf_counter_ns / 1e9
