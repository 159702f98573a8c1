"""The SLO dimensions, each declared once (METRICS.md "SLO file", "Verdict of a step").

A dimension is something a step can fail on. Each `Dimension` says: its name (as `failing` names it),
the SLO key that sets it, its kind, the figure it reads, its unit, its display name and how its value is
compared with the setting. The config's validation (`llmload.config.SLO`), the verdicts
(`analysis.verdict`, run live by `llmload.runtime.master.judging`), goodput (`analysis.requests`), the
summary's thresholds and "not checked" list (`analysis.summary`) and the report's answer
(`llmload.report.answer`) all read this table.

Kinds:
- `latency`: a percentile of a per-request or step-level latency, set as `<name>_p<NN>: <duration>`
  (any percentile strictly between 0 and 100, value more than 0); fails when the step's percentile is
  over the value. Its figure is the step column `<name>_p<NN>_s`; `request_column` is the per-request
  column goodput judges each request on (None: step-level only, e.g. ITL, a request has many gaps).
- `ratio`: a share of the step's arrivals (`reject_ratio`, `error_ratio`, `usage_mismatch_ratio`), set as a
  limit from 0 to 1;
  fails when over it.
- `flag`: an event that must not happen: `oom` (a count, fails when any, unless `allow_oom: true`) and
  `queue_growth` (a significant rising trend, fails when `queue_growth: forbid`).

Adding a latency dimension is one entry here (plus, if its per-request column is new, the column in
`analysis.requests.derive_requests`); a ratio or flag dimension also needs its field on
`llmload.config.SLO` (the field's type and bounds) and its figure in `analysis.metrics.step_metrics`.
This module imports nothing of Locust or gevent (analysis/ must stay free of them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DIMENSIONS",
    "LATENCY",
    "LIMITS",
    "Dimension",
    "by_name",
    "check_threshold",
    "dimension_of",
    "latency",
    "latency_names",
    "parse_threshold_key",
    "standard_keys",
    "threshold_key",
]

#: 1 ns: differences of float wall-clock seconds carry rounding below the clock's resolution, so a
#: latency equal to its threshold must not fail by 1e-16
TOLERANCE_S = 1e-9


@dataclass(frozen=True)
class Dimension:
    """One SLO dimension. `compare` is one of `at_most` (value <= setting), `none_unless_allowed`
    (value must be 0 unless the setting is true), `no_rise_if_forbidden` (value must be false when
    the setting is `forbid`)."""

    name: str
    kind: str  # "latency", "ratio" or "flag"
    setting: str  # the `slo:` key (latency: the prefix of `<name>_p<NN>`)
    figure: str  # the step figure (column of `Analysis.steps`); latency: `<name>_p{p}_s`
    unit: str  # "s", "share of arrivals", "count", "trend"
    display: str
    compare: str = "at_most"
    request_column: str | None = None  # latency: the per-request column goodput judges
    standard: tuple[float, ...] = ()  # latency: percentiles of CONFIG.md's standard SLO ("not checked")
    standard_key: bool = False  # ratio / flag: named in the standard SLO
    lag_sensitive: bool = False  # latency: a late generator shifts it by its lag (analysis.validity)

    def figure_of(self, percentile: float | None = None) -> str:
        """The step column this dimension reads (`ttft_p95_s` for ttft at 95)."""
        return self.figure.format(p=f"{percentile:g}") if self.kind == "latency" else self.figure

    def excess(self, value: Any, setting: Any) -> float | None:
        """How far over its setting `value` is (value / limit; a breach of a zero limit, and an OOM,
        count as infinitely far, queue growth as exactly at its limit), or None when not breached or not
        checked (setting None) or not measured (value NaN/None)."""
        if setting is None or value is None:
            return None
        if self.compare == "none_unless_allowed":
            return math.inf if setting is False and value and float(value) > 0 else None
        if self.compare == "no_rise_if_forbidden":
            return 1.0 if setting == "forbid" and bool(value) else None
        number, limit = float(value), float(setting)
        tolerance = TOLERANCE_S if self.kind == "latency" else 0.0
        if math.isnan(number) or not number > limit + tolerance:
            return None
        return number / limit if limit > 0 else math.inf


def _latency(name: str, display: str, column: str | None, *, standard: bool = False,
             lag: bool = True) -> Dimension:
    return Dimension(name=name, kind="latency", setting=name, figure=name + "_p{p}_s", unit="s",
                     display=display, request_column=column, standard=(95.0,) if standard else (),
                     lag_sensitive=lag)


#: every dimension, latency first (the order of CONFIG.md's SLO keys and of the "not checked" list)
DIMENSIONS: tuple[Dimension, ...] = (
    _latency("ttft", "TTFT", "ttft_s", standard=True),
    _latency("user_ttft", "user TTFT", "user_ttft_s"),
    _latency("ttfa", "TTFA", "ttfa_s"),  # time to the first answer token (after any reasoning)
    _latency("user_ttfa", "user TTFA", "user_ttfa_s"),
    _latency("tpot", "TPOT", "tpot_s", standard=True, lag=False),  # a delay spread over the whole answer
    _latency("itl", "ITL", None),  # step-level only: a request has many gaps
    _latency("e2e", "E2E", "e2e_s", standard=True),
    _latency("user_e2e", "user E2E", "user_e2e_s"),
    _latency("client_wait", "client wait", "client_wait_s", standard=True),
    _latency("server_queue", "server queue", "server_queue_s", standard=True, lag=False),  # the server's own
    Dimension("reject_ratio", "ratio", "max_reject_ratio", "reject_ratio", "share of arrivals", "reject ratio",
              standard_key=True),
    Dimension("error_ratio", "ratio", "max_error_ratio", "error_ratio", "share of arrivals", "error ratio",
              standard_key=True),
    Dimension("usage_mismatch_ratio", "ratio", "max_usage_mismatch_ratio", "usage_mismatch_ratio",
              "share of arrivals", "usage mismatch ratio"),  # the server did not do the work asked
    Dimension("oom", "flag", "allow_oom", "oom", "count", "OOM", compare="none_unless_allowed",
              standard_key=True),
    Dimension("queue_growth", "flag", "queue_growth", "queue_growth", "trend", "queue growth",
              compare="no_rise_if_forbidden", standard_key=True),
)

LATENCY: tuple[Dimension, ...] = tuple(d for d in DIMENSIONS if d.kind == "latency")
#: the ratio and flag dimensions (one `slo:` key each)
LIMITS: tuple[Dimension, ...] = tuple(d for d in DIMENSIONS if d.kind != "latency")

_BY_NAME = {d.name: d for d in DIMENSIONS}
_KEY = re.compile(r"^([a-z][a-z0-9_]*?)_p(\d+(?:\.\d+)?)$")


def by_name(name: str) -> Dimension | None:
    return _BY_NAME.get(name)


def latency(name: str) -> Dimension:
    """The latency dimension `name`, for a name already validated as one (a `Threshold`'s metric);
    KeyError for any other name: a caller holding an unchecked name uses `by_name`."""
    dim = _BY_NAME[name]
    if dim.kind != "latency":
        raise KeyError(name)
    return dim


def latency_names() -> tuple[str, ...]:
    return tuple(d.name for d in LATENCY)


def threshold_key(metric: str, percentile: float) -> str:
    """`ttft_p95` for ttft at 95 (the SLO key and the name in `failing`)."""
    return f"{metric}_p{percentile:g}"


def parse_threshold_key(key: str) -> tuple[str, float] | None:
    """(metric, percentile) of a key shaped like a threshold (`ttft_p95`, `bogus_p250`), else None.
    The metric and percentile are not checked here: `check_threshold` does it."""
    match = _KEY.match(str(key))
    return (match.group(1), float(match.group(2))) if match else None


def dimension_of(name: str) -> tuple[Dimension, float | None] | None:
    """The dimension a `failing` / `checked` name refers to and its percentile (None for ratio and flag):
    `ttft_p95` -> (ttft, 95.0), `reject_ratio` or `max_reject_ratio` -> (reject_ratio, None)."""
    for d in LIMITS:
        if name in (d.name, d.setting):
            return d, None
    parsed = parse_threshold_key(name)
    if parsed and parsed[0] in _BY_NAME and _BY_NAME[parsed[0]].kind == "latency":
        return _BY_NAME[parsed[0]], parsed[1]
    return None


def check_threshold(metric: object, percentile: object, value_s: object) -> None:
    """ValueError naming what is wrong with a latency threshold (metric, percentile, value)."""
    dim = _BY_NAME.get(metric) if isinstance(metric, str) else None
    if dim is None or dim.kind != "latency":
        raise ValueError(f"unknown latency metric {_shown(metric)}: expected one of {', '.join(latency_names())}")
    if isinstance(percentile, bool) or not isinstance(percentile, (int, float)) or not 0 < percentile < 100:
        raise ValueError(f"percentile must be more than 0 and less than 100, got {_shown(percentile)}")
    if isinstance(value_s, bool) or not isinstance(value_s, (int, float)) or not value_s > 0:
        raise ValueError(f"expected a duration more than 0, got {_shown(value_s)}")


def standard_keys() -> tuple[str, ...]:
    """The SLO keys of CONFIG.md's standard SLO, in order: each absent one is reported "not checked"."""
    keys = [threshold_key(d.name, p) for d in LATENCY for p in d.standard]
    return tuple(keys + [d.setting for d in LIMITS if d.standard_key])


def _shown(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return f'"{value}"' if isinstance(value, str) else repr(value)
