"""The verdict of a step (METRICS.md "Verdict of a step") and `judge_step`, the same rules run live.

Every SLO dimension (the figure it reads, its setting, how it is compared) is declared once, in
`llmload.slo`. Order of the rules:
1. `not_run`: the step never started; no other rule applies (its cells stay blank, never "pass").
2. `invalid`: the generator's deviation could have changed the server's load or a judged number
   (`analysis.validity`): `rate_shortfall`, `send_lag` (p99 over a limit from the step's inter-arrival
   time and the judged latency targets), `worker_cpu` (while sending), `client_error` (a failure inside
   llmload). Each failed check, with its measured value, limit, config key and advice, is in
   `details["invalid"]` (the step row's `invalid_reasons`). Fix the generator before reading anything else.
3. `fail` on count dimensions, which need no tail estimate: `oom` (any, unless `allow_oom`),
   `reject_ratio`, `error_ratio` (over their limits; `max_error_ratio` and `max_reject_ratio` have
   defaults, `llmload.config.DEFAULT_MAX_ERROR_RATIO` / `DEFAULT_MAX_REJECT_RATIO`, so a step where most
   requests failed or were rejected never passes for want of a written limit), `queue_growth` (a significant rising trend, when `queue_growth: forbid`). These are judged
   even with few completions: an overloaded server that rejects most requests fails, it is not merely
   "insufficient". In a `partial` step (the run was stopped inside it) the requests cancelled by the
   stop are not errors of the server: its error ratio leaves `cancelled` out.
4. `insufficient`: fewer than `slo.min_samples` completed requests (a small floor, 20 by default: below
   it no interval is formed): the percentiles are not judged. Above it the intervals decide, whatever
   the count (rules 5 and 7). Thresholds the few samples are over anyway are listed in `stats["over_on_few_samples"]` (not
   judged, but never silent: a reader must not take "insufficient" for "probably fine").
5. `fail` on every percentile threshold over its value (`ttft_p95`, `tpot_p95`, ...). Where the step row
   carries the figure's interval (`<figure>_low` / `_high`, `analysis.intervals`, at `slo.confidence`),
   a threshold fails only when the whole interval is over it (`low` over the limit); an interval that
   straddles it (`low` at or under, `high` over, whichever side the point is on) leaves that target
   undecided: listed in `details["undecided_targets"]` (the row's `undecided_targets`). Without an
   interval (NaN: too few values, a histogram figure) the point is compared, as before.
6. `insufficient` when the SLO has percentile thresholds and none of them could be measured (no
   latency sample carried them: nothing was judged), and for a `partial` step, which never passes:
   a stopped step does not decide a passing rate.
7. `inconclusive`: nothing failed, enough samples, and at least one percentile target's interval
   straddles its threshold (`undecided_targets` names them; `failing` is empty). A longer step decides.
   Also when a checked target could not be measured (`unmeasured`) or its histogram bucket straddles
   it (`undecided`): a checked threshold that was not measured never leaves a step `pass`; both are
   named in `undecided_targets` too.
   An undecided (inconclusive) or insufficient step says how many completions would decide it
   (`details["needs_completions"]`, the row's `needs_completions`: `min_samples` for an insufficient one,
   else `analysis.intervals.completions_to_decide` for the target that needs most; inf when its share
   sits on the level) and the window that would give them at its completion rate (`needs_window_s`),
   so a reader knows how long to run it.
8. `pass`.
Every failing dimension is named, ordered by how far over its limit (value / limit, largest first;
a breach of a zero limit, and OOM, count as infinitely far; queue growth as exactly at its limit).
A threshold whose value could not be measured (e.g. server queue without telemetry) is not judged and
is listed in `stats["unmeasured"]` (the step is then at best inconclusive, rule 7); a server-queue percentile from the vLLM histogram that is over its
threshold only inside a bucket that straddles the threshold cannot be told apart from a pass: it is
listed in `stats["undecided"]` and not judged (a value in the `+Inf` bucket is a lower bound: judged).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.intervals import completions_to_decide
from analysis.metrics import empty_metrics, step_metrics
from analysis.requests import derive_requests
from analysis.telemetry_stats import TelemetryIndex
from analysis.validity import generator_checks
from llmload import slo as slo_dims
from llmload.config import SLO, Client

__all__ = ["VERDICTS", "judge", "judge_step", "judged_fields"]

VERDICTS = ("pass", "fail", "inconclusive", "invalid", "insufficient", "not_run")


#: the ratio and flag dimensions in rule order: an event that must not happen at all (OOM) first, then
#: the others as `llmload.slo` declares them (a tie in `failing` keeps this order)
_LIMITS_IN_RULE_ORDER = sorted(slo_dims.LIMITS, key=lambda d: d.compare != "none_unless_allowed")


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


def _straddles(metrics: dict, key: str, value: float, limit: float) -> bool:
    """True when a histogram estimate over `limit` comes from a bucket that also holds values under it:
    the histogram cannot tell which side the true percentile is on."""
    width = metrics.get(f"{key}_resolution_s")
    if width is None or math.isnan(width) or math.isinf(width):
        return False  # per-request values, or a lower bound already over the limit
    return value - width <= limit


def _interval(metrics: dict, figure: str) -> tuple[float, float] | None:
    """The figure's (low, high) interval from the row, None when absent or not measured."""
    given: tuple[Any, Any] = (metrics.get(f"{figure}_low"), metrics.get(f"{figure}_high"))
    try:
        low, high = float(given[0]), float(given[1])
    except (TypeError, ValueError):
        return None
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def _empty_details(**extra: object) -> dict:
    return {"excess": {}, "unmeasured": [], "undecided": [], "invalid": [], "over_on_few_samples": [],
            "undecided_targets": [], "needs_completions": math.nan, "needs_window_s": math.nan, **extra}


def judged_fields(verdict: str, failing: list[str], details: dict) -> dict:
    """What a judged step row gets from `judge` (the live judge and the analysis add the same fields)."""
    return {"verdict": verdict, "failing": failing, "unmeasured": details["unmeasured"],
            "undecided": details["undecided"], "invalid_reasons": details["invalid"],
            "over_on_few_samples": details["over_on_few_samples"],
            "undecided_targets": details["undecided_targets"],
            "needs_completions": details.get("needs_completions", math.nan),
            "needs_window_s": details.get("needs_window_s", math.nan)}


def _needs(metrics: dict, slo: SLO, keys: list[str]) -> float:
    """About how many completions would decide the targets `keys` (their intervals straddle): the most
    any of them needs (`analysis.intervals.completions_to_decide`, from its share over the threshold)."""
    needs = []
    for t in slo.thresholds:
        if t.key in keys:
            needs.append(completions_to_decide(
                _float(metrics.get(f"{t.key}_over")), _float(metrics.get(f"{t.key}_over_high")),
                _float(metrics.get("completed")), 1.0 - t.percentile / 100.0, slo.confidence))
    known = [n for n in needs if n == n]
    return max(known) if known else math.nan


def _window_for(metrics: dict, completions: float) -> float:
    """The measurement window that would give `completions` at this step's completion rate (NaN when it
    completed nothing; inf for inf)."""
    done, window = _float(metrics.get("completed")), _float(metrics.get("window_s"))
    if not done > 0 or not window > 0 or completions != completions:
        return math.nan
    return window * completions / done


def _set_needs(details: dict, metrics: dict, completions: float) -> None:
    details["needs_completions"] = completions
    details["needs_window_s"] = _window_for(metrics, completions)


def judge(metrics: dict, step: dict, slo: SLO, client: Client | None = None) -> tuple[str, list[str], dict]:
    """(verdict, failing dimensions, details) of one step from its `step_metrics` row."""
    client = client or Client()
    if step.get("status") == "not_run":
        return "not_run", [], _empty_details()
    invalid = generator_checks(metrics, slo, client)
    if invalid:
        return "invalid", [c["check"] for c in invalid], _empty_details(invalid=invalid)

    partial = step.get("status") == "partial"
    excess: dict[str, float] = {}
    for dim in _LIMITS_IN_RULE_ORDER:
        value = metrics.get(dim.figure_of())
        if dim.name == "error_ratio" and partial:
            value = _error_ratio_without_cancelled(metrics)
        over = dim.excess(value, slo.setting(dim))
        if over is not None:
            excess[dim.name] = over
    unmeasured: list[str] = []
    undecided: list[str] = []
    undecided_targets: list[str] = []
    over_on_few: list[str] = []
    enough = metrics["completed"] >= slo.min_samples
    for t in slo.thresholds:
        dim = slo_dims.latency(t.metric)
        figure = dim.figure_of(t.percentile)
        value = metrics.get(figure, math.nan)
        if value is None or math.isnan(value):
            if enough:
                unmeasured.append(t.key)
            continue
        over = dim.excess(value, t.value_s)
        interval = _interval(metrics, figure) if enough else None
        if interval is not None:
            low_over = dim.excess(interval[0], t.value_s) is not None
            high_over = dim.excess(interval[1], t.value_s) is not None
            if high_over and not low_over:
                undecided_targets.append(t.key)  # the interval straddles the threshold
                continue
            if not low_over:
                continue
            over = over if over is not None else dim.excess(interval[0], t.value_s)
        if over is None:
            continue
        if not enough:
            over_on_few.append(t.key)
        elif _straddles(metrics, t.key, value, t.value_s):
            undecided.append(t.key)
        else:
            excess[t.key] = over
    details = {"excess": excess, "unmeasured": unmeasured, "undecided": undecided,
               "over_on_few_samples": over_on_few, "invalid": [], "undecided_targets": undecided_targets,
               "needs_completions": math.nan, "needs_window_s": math.nan}
    if excess:
        order = sorted(excess, key=lambda k: -excess[k])  # sorted() is stable: ties keep rule order
        return "fail", order, details
    if not enough:
        _set_needs(details, metrics, float(slo.min_samples))
        return "insufficient", [], details
    if slo.thresholds and len(unmeasured) == len(slo.thresholds):
        return "insufficient", [], details  # every latency target unmeasured: nothing was judged
    if partial:
        return "insufficient", [], details
    # a target that was checked but could not be measured (no sample carried it, e.g. server queue time
    # from a server that reports none) or whose histogram bucket straddles it is not met: it can never
    # leave a step `pass` (its interval is the whole axis); the step is inconclusive and names it
    undecided_targets.extend(k for k in unmeasured + undecided if k not in undecided_targets)
    if undecided_targets:
        _set_needs(details, metrics, _needs(metrics, slo, undecided_targets))
        return "inconclusive", [], details
    return "pass", [], details


def _error_ratio_without_cancelled(metrics: dict) -> float:
    """The error ratio less the `cancelled` requests (a stopped step's in-flight requests)."""
    arrivals = metrics["arrivals"]
    if not arrivals or arrivals != arrivals:
        return math.nan
    cancelled = (metrics.get("outcomes") or {}).get("cancelled", 0)
    return metrics["error_ratio"] - cancelled / arrivals


def judge_step(step_records: pd.DataFrame, step: dict, slo: SLO, client: Client | None = None,
               telemetry: pd.DataFrame | None = None, *, keep_history: bool = False) -> tuple[str, list[str], dict]:
    """Judge one step from its raw records (and telemetry if any): (verdict, failing, stats).

    Cheap enough for the Locust master after each step; `stats` is the step's row of `Analysis.steps`.
    `keep_history`: `stats[SHARE_HISTORY]` holds the step's requests as `analysis.share_cv` reads them
    (the knee search's estimate reads its TTFT shares against them).
    """
    if step.get("status") == "not_run":
        stats = empty_metrics(step)
        stats.update(judged_fields("not_run", [], _empty_details()))
        return "not_run", [], stats
    label = str(step["label"])
    windows = {label: (_float(step.get("window_start")), _float(step.get("window_end")))}
    own = step_records[step_records["step"].astype(str) == label].reset_index(drop=True)
    req = derive_requests(own, windows, slo)
    stats = step_metrics(req, step, slo, TelemetryIndex(telemetry))
    verdict, failing, details = judge(stats, step, slo, client)
    stats.update(judged_fields(verdict, failing, details))
    if keep_history:
        from analysis.share_cv import SHARE_HISTORY, history_of

        stats[SHARE_HISTORY] = history_of(req)
    return verdict, failing, stats
