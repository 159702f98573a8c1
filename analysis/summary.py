"""`summary.json` (METRICS.md contract), the ladder's result, the decision record, the exit code.

Run verdict over the steps that ran: `invalid` if any step is invalid (fix the generator first), else
`fail` if any failed, else `insufficient` if any had too few samples (or none ran), else `inconclusive`
if any step's interval straddled a target (no step failed, but one could not be decided: the run
proves neither), else `pass`.
The ladder result uses the sustained-rate steps (phases `ladder`, `refine`, `soak`) sorted by their
realised offered rate (the target rate where none was measured): the first failing rate is the lowest
failing one, the last passing rate the highest passing rate below it; invalid, insufficient and
inconclusive steps are neither. Both rates are the steps' *realised* offered rates
(`last_passing_target_rate` / `first_failing_target_rate`: their target labels).
`knee`: `analysis.knee.estimate_knee` over the same step rows (so a re-analysis recomputes it). `failed_first` names the first failing step's
dimensions, furthest over their limits first. Closed-loop steps give `last_passing_concurrency`.

Exit code: 0 pass, 1 fail, 3 invalid, and 3 for insufficient and inconclusive too: no conclusion could be drawn, and
a CI gate must not pass on a test that proved nothing (the CLI documents 3 as "not a valid test").
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.conditions import retest_triggers
from analysis.knee import estimate_knee
from llmload import slo as slo_dims
from llmload.config import SLO
from shapes.phases import closed_loop_phases, sustained_phases

__all__ = [
    "DEFINITIONS_VERSION",
    "SUMMARY_STEP_KEYS",
    "build_summary",
    "coarse_histogram_p95",
    "decision_record",
    "exit_code",
    "json_value",
    "ladder_result",
    "not_checked",
    "overall_verdict",
]

DEFINITIONS_VERSION = "1"
SUMMARY_STEP_KEYS = (
    "label", "offered_rate", "achieved_rate", "completed", "goodput", "slo_attainment", "ttft_p95_s",
    "tpot_p95_s", "itl_p95_s", "e2e_p95_s", "client_wait_p95_s", "server_queue_p95_s", "send_lag_p99_s",
    "window_start", "window_end", "outcomes", "verdict", "failing",
    "output_tokens_per_s", "total_tokens_per_s", "good_output_tokens_per_s", "server_queue_p95_range_s", "split",
)
_EXTRA_STEP_KEYS = (
    "index", "phase", "status", "target_rate", "concurrency", "warmup_s", "arrivals", "sent", "ok",
    "completion_throughput", "in_flight_mean", "waiting_mean", "reject_ratio", "error_ratio", "oom",
    "queue_growth", "queue_trend_p", "tpot_excluded", "server_queue_basis", "server_queue_p95_resolution_s",
    "unmeasured", "undecided", "invalid_reasons", "worker_cpu_max", "over_on_few_samples", "undecided_targets",
    "needs_completions", "needs_window_s", "usage_mismatch", "usage_mismatch_ratio",
)
#: a step's energy figures, in summary.json only where some GPU energy was measured
_ENERGY_STEP_KEYS = ("energy_j", "energy_basis", "joules_per_good_output_token")
_SUSTAINED = sustained_phases()
#: the standard SLO keys (CONFIG.md), each absent one reported "not checked" (`llmload.slo`)
_STANDARD_SLO = slo_dims.standard_keys()
_EXIT = {"pass": 0, "fail": 1, "invalid": 3, "insufficient": 3, "inconclusive": 3}


def json_value(value: Any) -> Any:
    """A JSON-ready value: NaN/NA -> None, numpy scalars -> Python, containers converted inside."""
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [json_value(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or value is pd.NA:
        return None
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def overall_verdict(steps: pd.DataFrame) -> str:
    """The run's verdict from its steps' verdicts (rule in the module docstring)."""
    ran = [] if steps.empty else [v for v in steps["verdict"] if v != "not_run"]
    for verdict in ("invalid", "fail", "insufficient", "inconclusive"):
        if verdict in ran:
            return verdict
    return "pass" if ran else "insufficient"


def _first_failing(steps: pd.DataFrame, phases: tuple[str, ...],
                   key: str) -> tuple[pd.Series | None, pd.Series | None]:
    """(the highest passing step below the first failing one, the first failing step), by `key`."""
    if steps.empty or key not in steps:
        return None, None
    own = steps[steps["phase"].isin(phases) & (steps["verdict"] != "not_run") & steps[key].notna()]
    own = own.sort_values([key, "index"], kind="stable")
    failing = own[own["verdict"] == "fail"]
    first = failing.iloc[0] if len(failing) else None
    passing = own[own["verdict"] == "pass"]
    if first is not None:
        passing = passing[passing[key] < first[key]]
    return (passing.iloc[-1] if len(passing) else None), first


def _rate_axis(steps: pd.DataFrame) -> pd.DataFrame:
    """The columns the ladder result needs, with `_rate`: the realised offered rate, the target rate
    where none was measured (a small new frame: assigning to the wide step table fragments it)."""
    if steps.empty or "target_rate" not in steps:
        return pd.DataFrame()
    target = pd.to_numeric(steps["target_rate"], errors="coerce")
    offered = pd.to_numeric(steps["offered_rate"], errors="coerce") if "offered_rate" in steps else target
    return pd.DataFrame({"phase": steps["phase"], "verdict": steps["verdict"], "index": steps["index"],
                         "failing": steps["failing"], "target_rate": target,
                         "_rate": offered.where(offered.notna(), target)})


def _get(row: pd.Series | None, column: str) -> Any:
    return None if row is None else json_value(row.get(column))


def ladder_result(steps: pd.DataFrame) -> dict:
    """last_passing_rate, first_failing_rate (realised offered rates; `*_target_rate`: their labels),
    failed_first (+ the same for closed-loop concurrency)."""
    last, first = _first_failing(_rate_axis(steps), _SUSTAINED, "_rate")
    last_c, first_c = _first_failing(steps, closed_loop_phases(), "concurrency")
    failed = list(first["failing"]) if first is not None else []
    failed_c = list(first_c["failing"]) if first_c is not None else []
    return {"last_passing_rate": _get(last, "_rate"), "first_failing_rate": _get(first, "_rate"),
            "failed_first": failed or failed_c,
            "last_passing_target_rate": _get(last, "target_rate"),
            "first_failing_target_rate": _get(first, "target_rate"),
            "last_passing_concurrency": _get(last_c, "concurrency"),
            "first_failing_concurrency": _get(first_c, "concurrency")}


def _thresholds(slo: SLO) -> dict:
    out: dict[str, Any] = {f"{t.key}_s": t.value_s for t in slo.thresholds}
    for dim in slo_dims.LIMITS:
        if slo.setting(dim) is not None:
            out[dim.setting] = slo.setting(dim)
    out["min_samples"] = slo.min_samples
    return out


def not_checked(slo: SLO) -> list[str]:
    """The standard SLO keys (CONFIG.md) this SLO does not check, in their order."""
    checked = set(slo.checked)
    return [k for k in _STANDARD_SLO if k not in checked]


def decision_record(steps: pd.DataFrame, slo: SLO, conditions: dict, ladder: dict, *,
                    soak: dict | None = None) -> dict:
    """Seed 000's final section: thresholds, goodput per step, result, failing dimension, owner, triggers
    (and for a soak, what drifted: a pass over a drifting soak does not hold for longer runs)."""
    ran = steps[steps["verdict"] != "not_run"] if not steps.empty else steps
    goodput = [{"label": r["label"], "phase": r["phase"], "target_rate": r["target_rate"],
                "concurrency": r["concurrency"], "goodput": r["goodput"],
                "slo_attainment": r["slo_attainment"],
                "verdict": r["verdict"]} for _, r in ran.iterrows()]
    record = {
        "thresholds": _thresholds(slo), "not_checked": not_checked(slo), "goodput_by_step": goodput,
        "last_passing_rate": ladder["last_passing_rate"], "first_failing_rate": ladder["first_failing_rate"],
        "failing_dimension": ladder["failed_first"][0] if ladder["failed_first"] else None,
        "failed_first": ladder["failed_first"], "owner": conditions.get("owner", ""),
        "conditions": conditions, "retest_triggers": retest_triggers(conditions),
        "scope": "holds only for the recorded conditions, request mix and thresholds; not a number of users",
    }
    if soak is not None:
        record["soak_drift"] = {k: soak.get(k) for k in ("drifting", "memory_growth", "error_bursts")}
    return json_value(record)


def _split_entry(split: Any) -> dict | None:
    """The contract part of a step's split: four means and their basis (user E2E mean as the total)."""
    if not isinstance(split, dict):
        return None
    keys = ("client_wait_mean_s", "server_queue_mean_s", "prefill_mean_s", "decode_mean_s", "user_e2e_mean_s",
            "requests", "basis")
    return json_value({k: split.get(k) for k in keys})


def _range(value: Any) -> list | None:
    """`[low, high]` for JSON: high is null past the histogram's last finite bound (no upper bound)."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    return [json_value(v) for v in value]


def _step_entry(row: pd.Series) -> dict:
    intervals = tuple(k for k in row.index if str(k).endswith(("_s_low", "_s_high", "_over", "_over_low",
                                                                "_over_high")))
    keys = SUMMARY_STEP_KEYS + tuple(k for k in _EXTRA_STEP_KEYS if k in row.index) + intervals
    entry = {k: json_value(row.get(k)) for k in keys}
    entry["split"] = _split_entry(row.get("split"))
    entry["server_queue_p95_range_s"] = _range(row.get("server_queue_p95_range_s"))
    if isinstance(row.get("energy_basis"), str):  # GPU energy was measured (METRICS.md "Energy")
        entry.update({k: json_value(row.get(k)) for k in _ENERGY_STEP_KEYS})
    if isinstance(row.get("limit"), dict):  # the client cap held the load back (`analysis.validity`)
        entry["limit"] = json_value(row.get("limit"))
    if coarse_histogram_p95(row):
        entry["server_queue_p95_s"] = None  # the bucket is wider than the value: only the range is known
    return entry


def coarse_histogram_p95(row: pd.Series | dict) -> bool:
    """True when the server queue p95 was interpolated inside a histogram bucket wider than the value
    itself (e.g. 285 ms inside vLLM's 0-300 ms bucket, truth 20 ms): a point that must not be shown."""
    if row.get("server_queue_basis") != "histogram":
        return False
    value, width = row.get("server_queue_p95_s"), row.get("server_queue_p95_resolution_s")
    if value is None or width is None:
        return True
    try:
        return not (float(width) <= float(value))
    except (TypeError, ValueError):
        return True


def build_summary(steps: pd.DataFrame, slo: SLO, conditions: dict, *, warnings: list[str],
                  soak: dict | None = None, burst: pd.DataFrame | None = None) -> dict:
    """The whole summary.json document."""
    ladder = ladder_result(steps)
    knee = estimate_knee(steps, slo) if not steps.empty else None
    summary = {
        "verdict": overall_verdict(steps),
        "last_passing_rate": ladder["last_passing_rate"],
        "last_passing_target_rate": ladder["last_passing_target_rate"],
        "knee": json_value(knee.to_dict()) if knee is not None else None,
        "steps": [_step_entry(r) for _, r in steps.iterrows()],
        "first_failing_rate": ladder["first_failing_rate"],
        "first_failing_target_rate": ladder["first_failing_target_rate"],
        "failed_first": ladder["failed_first"],
        "last_passing_concurrency": ladder["last_passing_concurrency"],
        "first_failing_concurrency": ladder["first_failing_concurrency"],
        "slo": {"thresholds": _thresholds(slo), "checked": slo.checked, "not_checked": not_checked(slo)},
        "decision": decision_record(steps, slo, conditions, ladder, soak=soak),
        "definitions": {
            "version": DEFINITIONS_VERSION,
            "percentiles": "raw per-request values, linear interpolation between order statistics",
            "window": "requests belong to a step's window by scheduled_at in [window_start, window_end)",
            "itl": "chunk level: gaps between consecutive output-bearing events",
            "goodput": "ok arrivals in the window meeting every per-request threshold / window seconds",
            "slo_attainment": "arrivals meeting every per-request threshold / all arrivals in the window",
            "latency_sample": "completed arrivals (ok or quality_fail); send lag: sent, not capped",
            "tokens_per_s": "output (and input + output) tokens of ok requests finished in the window / window "
                            "seconds; good: output tokens of the goodput requests / window seconds",
            "split": "means over the step's completed requests (warm-up included): client wait + server "
                     "queue + prefill + decode = user E2E; basis per_request, histogram (read from the step's "
                     "start to its drained end) or remainder (what is left of TTFT)",
        },
        "warnings": list(warnings),
        "usage_mismatch": _usage_mismatch_total(steps),
    }
    if soak is not None:
        summary["soak"] = json_value(soak)
    if burst is not None:
        summary["burst"] = json_value(burst.to_dict(orient="records"))
    return summary


def _usage_mismatch_total(steps: pd.DataFrame) -> int | None:
    """The run's answers whose usage disagreed with the request (METRICS.md "Usage mismatch"); None when
    no step counted them (records from before the count)."""
    if "usage_mismatch" not in steps or steps.empty:
        return None
    counts = pd.to_numeric(steps["usage_mismatch"], errors="coerce")
    return int(counts.sum()) if counts.notna().any() else None


def exit_code(summary: dict) -> int:
    """0 pass, 1 fail, 3 invalid, insufficient or inconclusive (no conclusion)."""
    return _EXIT.get(summary.get("verdict", "insufficient"), 3)
