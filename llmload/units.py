"""Durations and rates as users write them (`800ms`, `30s`, `2m`, `4h`)."""

from __future__ import annotations

import re

__all__ = ["format_duration", "format_ms", "parse_duration"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|m|h)?\s*$")
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """Seconds from `800ms`, `30s`, `2m`, `4h` or a bare number of seconds.

    >>> parse_duration("800ms"), parse_duration("2m"), parse_duration(1.5)
    (0.8, 120.0, 1.5)
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 800ms, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a non-negative duration, got {value!r}")
        return float(value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match.group(1)) * _SCALE[match.group(2)]
    raise ValueError(f'expected a duration like 800ms, got "{value}"')


def format_duration(seconds: float) -> str:
    """A short human form: `850ms`, `30s`, `2m`, `1h30m`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:g}m"
    return f"{seconds / 3600:g}h"


def format_ms(seconds: float | None) -> str:
    """Milliseconds for display; blank for a missing value."""
    if seconds is None or seconds != seconds:
        return ""
    return f"{seconds * 1000:.1f}"
