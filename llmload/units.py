"""Durations and rates as users write them (`800ms`, `30s`, `2m`, `4h`)."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["MAX_DURATION_S", "finite", "format_duration", "format_ms", "parse_duration"]

#: the longest duration any setting takes: 30 days (a longer soak is split into runs)
MAX_DURATION_S = 30 * 86400.0

#: ASCII digits only (`re.ASCII`): `\d` and float() also read Arabic-Indic or full-width digits, which
#: every other number of a config (a rate, a count) refuses
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(us|ms|s|m|h)?\s*$", re.ASCII)
_SCALE = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object) -> float:
    """Seconds from `800ms`, `30s`, `2m`, `4h` or a bare number of seconds: finite, from 0 to 30 days.

    >>> parse_duration("800ms"), parse_duration("2m"), parse_duration(1.5)
    (0.8, 120.0, 1.5)
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 800ms, got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value) if isinstance(value, float) or abs(value) < 1e300 else math.inf
        if seconds < 0:
            raise ValueError(f"expected a non-negative duration, got {value!r}")
        return _bounded(seconds, value)
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return _bounded(float(match.group(1)) * _SCALE[match.group(2)], value)
    raise ValueError(f"expected a duration like 800ms, got {_shown(value)}")


def _bounded(seconds: float, given: object) -> float:
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(f"expected a finite duration of at most 30 days, got {_shown(given)}")
    return seconds


def _shown(given: object) -> str:
    """A value for a one-line error: a string quoted, its control and non-ASCII characters escaped
    (`"3\\n0s"`, `"\\u0663s"`), at most 40 characters."""
    if isinstance(given, str):
        shown = '"' + given.encode("unicode_escape").decode("ascii") + '"'
    else:
        shown = repr(given)
    return shown if len(shown) <= 40 else shown[:37] + "..."


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


def finite(value: Any) -> float | None:
    """`value` as a finite float, None when it is not a number (None, text, NaN, an infinity).

    >>> finite("2.5"), finite(None), finite(float("nan")), finite("x")
    (2.5, None, None, None)
    """
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
