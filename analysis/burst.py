"""Burst vs uniform (seed 000, case two): a trace phase and its uniform twin at the same mean rate.

Steps of phase `burst` are paired in plan order with steps of phase `uniform`. For each pair, one row
per metric: the burst value, the uniform value, `difference = burst - uniform` and
`ratio = burst / uniform` (NaN when the uniform value is 0 or missing), with both steps' labels and
verdicts on every row. A uniform pass says nothing
about the burst: that is what this table shows.
"""

from __future__ import annotations

import math

import pandas as pd

from shapes.phases import phases_where

__all__ = ["BURST_METRICS", "burst_vs_uniform"]

BURST_METRICS = (
    "offered_rate", "achieved_rate", "ttft_p95_s", "user_ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p95_s",
    "user_e2e_p95_s", "client_wait_p95_s", "server_queue_p95_s", "goodput", "slo_attainment",
    "rejected", "reject_ratio", "error_ratio", "waiting_mean", "in_flight_mean",
)


def _value(row: pd.Series, metric: str) -> float:
    if metric == "rejected":
        outcomes = row.get("outcomes") or {}
        return float(outcomes.get("rejected", 0))
    value = row.get(metric, math.nan)
    return math.nan if value is None else float(value)


def burst_vs_uniform(steps: pd.DataFrame) -> pd.DataFrame | None:
    """Side-by-side table of each run burst phase and its uniform twin; None when the run has none."""
    if steps.empty:
        return None
    ran = steps[steps["verdict"] != "not_run"]
    bursts = ran[ran["phase"].isin(phases_where(burst_pair="burst"))]
    uniforms = ran[ran["phase"].isin(phases_where(burst_pair="uniform"))]
    if bursts.empty or uniforms.empty:
        return None
    rows = []
    for (_, b), (_, u) in zip(bursts.iterrows(), uniforms.iterrows(), strict=False):
        for metric in BURST_METRICS:
            bv, uv = _value(b, metric), _value(u, metric)
            ratio = bv / uv if uv and not math.isnan(uv) else math.nan
            rows.append({"metric": metric, "burst": bv, "uniform": uv, "difference": bv - uv, "ratio": ratio,
                         "burst_step": b["label"], "uniform_step": u["label"],
                         "burst_verdict": b["verdict"], "uniform_verdict": u["verdict"]})
    return pd.DataFrame(rows)
