"""The load-test worksheet of seed 000 ("填写服务负载试验表"), one row per step.

Its four groups, left to right, as column-name prefixes:
- `condition.*` fixed conditions (model and revision, server version, GPU residency, context, KV and
  cache policy, client and server admission caps): the same on every row, blank where not recorded
- `traffic.*` traffic shape: phase, arrival process, target and measured rates, token distributions,
  prefix reuse, window length
- `observed.*` per-step observations: sent / completed / rejected / failed / OOM, P95 TTFT, TPOT, E2E,
  client and server queueing (a histogram's server queue p95 as its bucket `low`/`high`, the point
  left blank when the bucket is wider than it), running and waiting, queue trend, KV ratio, device memory peak, output /
  total / good output tokens per second
- `decision.*` thresholds, goodput, verdict and failing dimensions, last passing rate, owner, triggers
A step that was not run keeps only what was planned (its label, phase, target rate, window length):
every observation and its verdict stay blank, never "pass". Seconds and requests per second, rounded
to 6 decimals (microseconds).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from analysis.conditions import WORKSHEET_CONDITIONS
from analysis.summary import coarse_histogram_p95

__all__ = ["worksheet"]

_TRAFFIC = (
    ("traffic.step", "label"), ("traffic.phase", "phase"), ("traffic.status", "status"),
    ("traffic.arrival", "arrival"), ("traffic.target_rate", "target_rate"),
    ("traffic.concurrency", "concurrency"), ("traffic.planned_window_s", "window_s"),
)
_MEASURED_TRAFFIC = (
    ("traffic.offered_rate", "offered_rate"), ("traffic.achieved_rate", "achieved_rate"),
    ("traffic.send_lag_p99_s", "send_lag_p99_s"), ("traffic.input_tokens_p50", "input_tokens_p50"),
    ("traffic.input_tokens_p95", "input_tokens_p95"), ("traffic.output_tokens_p50", "output_tokens_p50"),
    ("traffic.output_tokens_p95", "output_tokens_p95"), ("traffic.prefix_share_ratio", "prefix_share_ratio"),
)
_OBSERVED = (
    ("observed.arrivals", "arrivals"), ("observed.sent", "sent"), ("observed.completed", "completed"),
    ("observed.rejected", None), ("observed.failed", None), ("observed.oom", "oom"),
    ("observed.ttft_p95_s", "ttft_p95_s"), ("observed.tpot_p95_s", "tpot_p95_s"),
    ("observed.e2e_p95_s", "e2e_p95_s"), ("observed.client_wait_p95_s", "client_wait_p95_s"),
    ("observed.server_queue_p95_s", "server_queue_p95_s"), ("observed.server_queue_p95_low_s", None),
    ("observed.server_queue_p95_high_s", None), ("observed.running_mean", "running_mean"),
    ("observed.waiting_mean", "waiting_mean"), ("observed.in_flight_mean", "in_flight_mean"),
    ("observed.queue_trend", None), ("observed.kv_usage_peak", "kv_usage_peak"),
    ("observed.gpu_memory_peak_bytes", "gpu_memory_peak_bytes"),
    ("observed.output_tokens_per_s", "output_tokens_per_s"), ("observed.total_tokens_per_s", "total_tokens_per_s"),
    ("observed.good_output_tokens_per_s", "good_output_tokens_per_s"),
    ("observed.server_queue_mean_s", "server_queue_mean_s"),
)


def _blank(value: Any) -> Any:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _thresholds_text(thresholds: dict) -> str:
    return "; ".join(f"{k}={v}" for k, v in thresholds.items())


def worksheet(steps: pd.DataFrame, plan_steps: list[dict], conditions: dict, decision: dict) -> pd.DataFrame:
    """The worksheet frame (written as worksheet.csv; None / NaN cells are written blank)."""
    plan = {str(s.get("label")): s for s in plan_steps}
    fixed = {f"condition.{k}": _blank(conditions.get(k)) for k in WORKSHEET_CONDITIONS}
    run_level = {
        "decision.thresholds": _thresholds_text(decision.get("thresholds", {})),
        "decision.last_passing_rate": decision.get("last_passing_rate"),
        "decision.failing_dimension": decision.get("failing_dimension"),
        "decision.owner": decision.get("owner") or None,
        "decision.retest_triggers": "; ".join(decision.get("retest_triggers", [])),
    }
    rows = []
    for _, r in steps.iterrows():
        ran = r["verdict"] != "not_run"
        step = plan.get(str(r["label"]), {})
        row: dict[str, Any] = dict(fixed)
        for name, key in _TRAFFIC:
            row[name] = _blank(step.get("arrival") if key == "arrival" else r.get(key))
        for name, column in _MEASURED_TRAFFIC + _OBSERVED:
            row[name] = _blank(r.get(column)) if ran and column else None
        if ran:
            rng = r.get("server_queue_p95_range_s")
            if isinstance(rng, (list, tuple)) and len(rng) == 2:
                row["observed.server_queue_p95_low_s"] = _blank(rng[0])
                row["observed.server_queue_p95_high_s"] = _blank(rng[1]) if rng[1] != float("inf") else None
            if coarse_histogram_p95(r):
                row["observed.server_queue_p95_s"] = None  # only its bucket is known: see low/high
            outcomes = r["outcomes"] or {}
            row["observed.rejected"] = int(outcomes.get("rejected", 0))
            row["observed.failed"] = int(sum(v for k, v in outcomes.items()
                                            if k not in ("ok", "rejected", "not_sent")))
            row["observed.queue_trend"] = (f"{'growing' if r['queue_growth'] else 'not growing'} "
                                           f"({r['queue_trend_series']}, p={r['queue_trend_p']:.3g})")
        row["decision.goodput"] = _blank(r["goodput"]) if ran else None
        row["decision.slo_attainment"] = _blank(r["slo_attainment"]) if ran else None
        row["decision.verdict"] = r["verdict"] if ran else None
        row["decision.failing"] = "; ".join(r["failing"]) if ran and r["failing"] else None
        row.update(run_level)
        rows.append(row)
    sheet = pd.DataFrame(rows)
    floats = sheet.select_dtypes("float").columns
    return sheet.assign(**{c: sheet[c].round(6) for c in floats})
