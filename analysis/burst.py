"""Burst vs uniform (seed 000, case two): a trace phase and its uniform twin at the same mean rate.

Steps of phase `burst` are paired in plan order with steps of phase `uniform`. For each pair, one row
per metric: the burst value, the uniform value, `difference = burst - uniform` and
`ratio = burst / uniform` (NaN when the uniform value is 0 or missing), with both steps' labels and
verdicts on every row. A uniform pass says nothing
about the burst: that is what this table shows.

Bursts and recovery (`burst_summary`, METRICS.md "Bursts and recovery"): inside each trace replay as
recorded, the sub-windows whose arrivals exceed the mean (`burst_windows`), each with its arrivals, the
peak server queue, the drain time (burst end, or the queue's peak if later, to the first sample back at
the pre-burst level), the SLO recovery time (burst end to the first time from which the TTFT percentile
of the next `ROLLING_S` seconds' arrivals is within its target) and whether its own requests met the
SLO; and the trace's burstiness (inter-arrival CV, peak-to-mean per 10 s, against Poisson).

The trace's own knee (`burst_knee`, METRICS.md "The trace's own knee"): with `shape.trace.scales` the
trace is replayed time-scaled to several mean rates, each with its uniform twin; `analysis.knee`'s
`estimate_knee` runs on the burst steps and on the uniform steps separately (x = realised offered rate).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.requests import PER_REQUEST_COLUMNS
from analysis.stats import time_average
from analysis.telemetry_stats import TelemetryIndex
from llmload import slo as slo_dims
from llmload.config import SLO
from shapes.phases import phases_where

__all__ = ["BURST_METRICS", "burst_knee", "burst_knee_sentence", "burst_summary", "burst_vs_uniform", "burst_windows",
           "burstiness", "step_bursts"]

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


# --------------------------------------------------------------------------- bursts and recovery
#: arrivals are counted in bins of this many seconds
BURST_BIN_S = 1.0
#: the rate a burst is found on: a centred rolling mean of the bin counts over this many seconds
BURST_SMOOTH_S = 5.0
#: a burst's smoothed rate is over BURST_FACTOR x the step's mean rate ...
BURST_FACTOR = 1.5
#: ... and over the mean by this many Poisson standard deviations of a BURST_SMOOTH_S count
BURST_SIGMAS = 3.0
#: the pre-burst queue level is its mean over this many seconds before the burst
PRE_BURST_S = 10.0
#: the queue is drained when it is at most its pre-burst level plus this many requests
DRAIN_SLACK = 0.5
#: the rolling TTFT percentile is over the requests arriving in the next ROLLING_S seconds
ROLLING_S = 5.0
#: burstiness: peak-to-mean arrivals per bin of this many seconds
PEAK_BIN_S = 10.0


def burst_windows(scheduled: np.ndarray, t0: float, t1: float) -> list[tuple[float, float]]:
    """`[(start, end)]` of the bursts among arrival times `scheduled` over `[t0, t1)`: maximal runs of
    `BURST_BIN_S` bins whose centred `BURST_SMOOTH_S` rolling rate exceeds
    `max(BURST_FACTOR x mean, mean + BURST_SIGMAS x sqrt(mean / BURST_SMOOTH_S))`, each trimmed to the
    first and last bin of the run (widened by half the smoothing window) whose own rate exceeds that
    threshold. Runs closer than `BURST_SMOOTH_S` are merged."""
    times = np.sort(scheduled[(scheduled >= t0) & (scheduled < t1)])
    span = t1 - t0
    if times.size < 2 or span <= 0:
        return []
    k = max(int(math.ceil(span / BURST_BIN_S)), 1)
    edges = t0 + BURST_BIN_S * np.arange(k + 1)
    counts = np.bincount(np.minimum(((times - t0) // BURST_BIN_S).astype(int), k - 1), minlength=k)
    rate = counts / BURST_BIN_S
    mean = times.size / span
    threshold = max(BURST_FACTOR * mean, mean + BURST_SIGMAS * math.sqrt(mean / BURST_SMOOTH_S))
    width = max(int(round(BURST_SMOOTH_S / BURST_BIN_S)), 1)
    smooth = pd.Series(rate).rolling(width, center=True, min_periods=1).mean().to_numpy()
    over = smooth > threshold
    runs: list[list[int]] = []
    for i in np.flatnonzero(over):
        if runs and i - runs[-1][1] <= width:
            runs[-1][1] = int(i)
        else:
            runs.append([int(i), int(i)])
    out = []
    half = width // 2
    for a, b in runs:
        lo, hi = max(a - half, 0), min(b + half, k - 1)
        hot = np.flatnonzero(rate[lo:hi + 1] > threshold)
        if hot.size:
            out.append((float(edges[lo + hot[0]]), float(edges[lo + hot[-1] + 1])))
    return out


def _queue_series(tel: TelemetryIndex, requests: pd.DataFrame, t0: float, t1: float
                  ) -> tuple[np.ndarray, np.ndarray, str]:
    """The server queue over `[t0, t1)`: `waiting` (else llama.cpp `deferred`) summed over sources at each
    sample time; else the client's in-flight requests in `BURST_BIN_S` bins."""
    for metric in ("waiting", "deferred"):
        t, value, _ = tel.samples(metric, t0, t1)
        if t.size:
            total = pd.Series(value).groupby(t).sum()
            return total.index.to_numpy(dtype=float), total.to_numpy(dtype=float), metric
    sent = requests["sent_at"].to_numpy(dtype=float)
    end = requests["end_at"].to_numpy(dtype=float)
    ok = ~np.isnan(sent)
    edges = np.arange(t0, t1 + BURST_BIN_S, BURST_BIN_S)
    values = time_average(sent[ok], np.fmax(end[ok], sent[ok]), edges)
    return edges[:-1], values, "client_in_flight"


def _threshold(slo: SLO, metric: str = "ttft") -> tuple[float, float] | None:
    """`(percentile, seconds)` of the SLO's threshold on `metric` (the lowest percentile first)."""
    own = sorted((t for t in slo.thresholds if t.metric == metric), key=lambda t: t.percentile)
    return (own[0].percentile, own[0].value_s) if own else None


def _recovery(req: pd.DataFrame, end: float, t_stop: float, target: tuple[float, float] | None) -> float:
    """Seconds from `end` to the first grid time (every `BURST_BIN_S`) from which the TTFT percentile of
    the requests arriving in the next `ROLLING_S` seconds is within its target; NaN when never."""
    if target is None:
        return math.nan
    q, limit = target
    done = req[req["finished"].to_numpy(dtype=bool)]
    sched = done["scheduled_at"].to_numpy(dtype=float)
    ttft = done["ttft_s"].to_numpy(dtype=float)
    grid = np.arange(end, t_stop, BURST_BIN_S)
    for t in grid:
        values = ttft[(sched >= t) & (sched < t + ROLLING_S)]
        values = values[~np.isnan(values)]
        if values.size and np.percentile(values, q) <= limit + slo_dims.TOLERANCE_S:
            return float(t - end)
    return math.nan


def _met(req: pd.DataFrame, slo: SLO) -> tuple[bool | None, float]:
    """Whether the burst's own arrivals met every per-request percentile threshold (at most
    `100 - p` % of them over the threshold, an arrival that did not complete counting as over), and
    their share of good ones (`ok` and meeting every threshold)."""
    if req.empty:
        return None, math.nan
    done = req["finished"].to_numpy(dtype=bool)
    met = True
    for t in slo.thresholds:
        column = PER_REQUEST_COLUMNS.get(t.metric)
        if column is None or column not in req:
            continue
        values = req[column].to_numpy(dtype=float)
        over = ~done | (values > t.value_s + slo_dims.TOLERANCE_S)
        if over.mean() > 1.0 - t.percentile / 100.0 + 1e-12:
            met = False
    return met, float(req["good"].mean()) if "good" in req else math.nan


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def step_bursts(req: pd.DataFrame, step: dict, tel: TelemetryIndex, slo: SLO) -> list[dict]:
    """Every burst of one step (see `burst_windows`) with its arrivals, peak server queue, drain and
    SLO recovery times and whether its requests met the SLO (METRICS.md "Bursts and recovery")."""
    sched = req["scheduled_at"].to_numpy(dtype=float)
    if sched.size < 2:
        return []
    t0 = _f(step.get("start_at"))
    t0 = float(np.nanmin(sched)) if math.isnan(t0) else t0
    t1 = _f(step.get("window_end"))
    t1 = float(np.nanmax(sched)) + BURST_BIN_S if math.isnan(t1) else t1
    last = req["end_at"].to_numpy(dtype=float)
    t_stop = max(_f(step.get("drained_at")) if not math.isnan(_f(step.get("drained_at"))) else t1,
                 float(np.nanmax(last)) if (~np.isnan(last)).any() else t1) + BURST_BIN_S
    windows = burst_windows(sched, t0, t1)
    qt, qv, basis = _queue_series(tel, req, t0 - PRE_BURST_S, t_stop)
    mean = (sched[(sched >= t0) & (sched < t1)].size / (t1 - t0)) if t1 > t0 else math.nan
    target = _threshold(slo)
    out = []
    for i, (start, end) in enumerate(windows):
        prev_end = windows[i - 1][1] if i else t0 - PRE_BURST_S
        next_start = windows[i + 1][0] if i + 1 < len(windows) else t_stop
        pre = qv[(qt >= max(start - PRE_BURST_S, prev_end)) & (qt < start)]
        if pre.size == 0:
            before = qv[qt < start]
            pre = before[-1:] if before.size else np.array([0.0])
        level = float(pre.mean())
        during = (qt >= start) & (qt < next_start)
        peak, peak_at = math.nan, start
        if during.any():
            j = int(np.argmax(np.where(during, qv, -np.inf)))
            peak, peak_at = float(qv[j]), float(qt[j])
        after = (qt >= max(end, peak_at)) & (qt < next_start) & (qv <= level + DRAIN_SLACK)
        drained_at = float(qt[after][0]) if after.any() else math.nan
        own = req[(sched >= start) & (sched < end)]
        met, good = _met(own, slo)
        ttft = own.loc[own["finished"].to_numpy(dtype=bool), "ttft_s"].to_numpy(dtype=float)
        arrivals = len(own)
        out.append({
            "step": step.get("label"), "start": start, "end": end, "duration_s": end - start,
            "arrivals": arrivals, "rate": arrivals / (end - start), "mean_rate": mean,
            "peak_to_mean": (arrivals / (end - start)) / mean if mean else math.nan,
            "queue_basis": basis, "pre_burst_queue": level, "peak_queue": peak, "peak_queue_at": peak_at,
            "drained_at": drained_at, "drain_s": max(drained_at - end, 0.0) if not math.isnan(drained_at) else math.nan,
            "recovery_s": _recovery(req, end, t_stop, target),
            "recovery_target": None if target is None else {"percentile": target[0], "ttft_s": target[1]},
            "ttft_p95_s": float(np.percentile(ttft[~np.isnan(ttft)], 95)) if (~np.isnan(ttft)).any() else math.nan,
            "good_share": good, "met_slo": met,
        })
    return out


def burstiness(scheduled: np.ndarray) -> dict:
    """How bursty arrival times are: the coefficient of variation of the inter-arrival times (1 for a
    Poisson process), the peak-to-mean arrivals per `PEAK_BIN_S`, and `versus_poisson`: `less` when
    the CV is under 1 by more than the margin `max(0.05, 2 / sqrt(n))` (n inter-arrivals: about two
    standard errors of a Poisson process's sample CV), `more` when over by as much, else `similar`."""
    times = np.sort(scheduled[~np.isnan(scheduled)])
    gaps = np.diff(times)
    out: dict[str, Any] = {"arrivals": int(times.size), "interarrival_cv": math.nan, "peak_to_mean_10s": math.nan,
           "versus_poisson": None, "margin": math.nan}
    if gaps.size < 2 or gaps.mean() <= 0:
        return out
    cv = float(gaps.std(ddof=1) / gaps.mean())
    margin = max(0.05, 2.0 / math.sqrt(gaps.size))
    span = times[-1] - times[0]
    k = max(int(math.ceil(span / PEAK_BIN_S)), 1)
    counts = np.bincount(np.minimum(((times - times[0]) // PEAK_BIN_S).astype(int), k - 1), minlength=k)
    mean = times.size / k if span >= PEAK_BIN_S else math.nan
    out.update(interarrival_cv=cv, margin=margin,
               peak_to_mean_10s=float(counts.max() / mean) if mean == mean and mean > 0 else math.nan,
               versus_poisson="less" if cv < 1 - margin else "more" if cv > 1 + margin else "similar")
    return out


def burst_summary(requests: pd.DataFrame, steps: pd.DataFrame, plan_steps: list[dict], tel: TelemetryIndex,
                  slo: SLO) -> dict | None:
    """summary.json's `bursts` (every burst of every trace-replay step as recorded) and `burstiness`
    (per such step); None when the run replayed no trace."""
    phases = set(phases_where(burst_pair="burst"))
    plan = {str(s.get("label")): s for s in plan_steps}
    ran = steps[steps["phase"].isin(phases) & (steps["verdict"] != "not_run")] if not steps.empty else steps
    if ran.empty:
        return None
    groups = requests.groupby(requests["step"].astype(str), sort=False).indices if len(requests) else {}
    bursts, shape = [], {}
    for _, row in ran.iterrows():
        label = str(row["label"])
        pos = groups.get(label)
        own = requests.iloc[pos] if pos is not None else requests.iloc[0:0]
        step = {**row.to_dict(), **plan.get(label, {})}
        bursts.extend(step_bursts(own, step, tel, slo))
        shape[label] = burstiness(own["scheduled_at"].to_numpy(dtype=float))
    from analysis.summary import json_value

    out = json_value({"bursts": bursts, "burstiness": shape})
    knee = burst_knee(steps, slo)
    if knee is not None:
        out["burst_knee"] = knee
    return out


# --------------------------------------------------------------------------- the trace's own knee

def _knee_rows(steps: pd.DataFrame, side: str) -> list[dict]:
    """The judged steps of one side (`burst` / `uniform`) as rows `estimate_knee` reads: the trace steps
    are not on the ladder's rate axis, so each is handed over as one (x = its realised offered rate)."""
    rows = steps[steps["phase"].isin(phases_where(burst_pair=side))]
    on_axis = phases_where(rate_axis=True)[0]
    return [{**r, "phase": on_axis} for r in rows.to_dict(orient="records")]


def burst_knee(steps: pd.DataFrame, slo: SLO) -> dict | None:
    """summary.json's `burst_knee` (METRICS.md "The trace's own knee"): the knee of the trace replayed as
    recorded at several mean rates (`shape.trace.scales`), with its interval, and `uniform`: the knee of
    its uniform twins; `cost`: 1 - burst knee / uniform knee (the share of capacity the bursts cost);
    `cost_at_least`: when the twins held at every rate run, 1 - burst knee / the highest rate run;
    `bracket`: the passing and failing mean rates the burst knee lies between (no interpolation).
    None unless at least two mean rates of the trace were judged."""
    from analysis.knee import estimate_knee  # the knee module imports this package's siblings

    if steps.empty or "phase" not in steps:
        return None
    bursts, uniforms = _knee_rows(steps, "burst"), _knee_rows(steps, "uniform")
    judged = {round(float(r["offered_rate"]), 9) for r in bursts
              if r.get("verdict") in ("pass", "fail", "inconclusive") and _f(r.get("offered_rate")) == _f(r.get("offered_rate"))}
    if len(judged) < 2:
        return None
    b, u = estimate_knee(bursts, slo), estimate_knee(uniforms, slo) if uniforms else None
    if b is None:
        return None
    cost = cost_at_least = None
    if b.rate is not None and u is not None and u.rate is not None and u.rate > 0:
        cost = 1.0 - b.rate / u.rate
    elif b.rate is not None and u is not None and u.binding is None and u.low:
        cost_at_least = max(0.0, 1.0 - b.rate / u.low)  # the twins held at every rate run, up to u.low
    from analysis.summary import json_value

    rates = sorted(judged)
    return json_value({**b.to_dict(), "rates_run": [rates[0], rates[-1]], "bracket": _bracket(bursts, b.rate),
                       "uniform": {**u.to_dict(), "bracket": _bracket(uniforms, u.rate)} if u is not None else None,
                       "cost": cost,
                       "cost_at_least": cost_at_least})


def _bracket(rows: list[dict], rate: float | None) -> list[float | None] | None:
    """The judged steps around the knee: [highest passing rate at or below it, lowest failing rate above
    it] (None where there is none): where the crossing is known to lie without interpolating."""
    if rate is None:
        return None
    passed = [_f(r.get("offered_rate")) for r in rows if r.get("verdict") == "pass"]
    failed = [_f(r.get("offered_rate")) for r in rows if r.get("verdict") == "fail"]
    below = [x for x in passed if x <= rate]
    above = [x for x in failed if x > rate]
    return [max(below) if below else None, min(above) if above else None]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 1 else f"{value:.1f}"


def burst_knee_sentence(entry: dict | None) -> str | None:
    """The trace's own knee in one sentence, e.g. "With this trace's bursts the service holds 3.1 req/s;
    evenly spaced it would hold 4.6: bursts cost 33% of capacity." None without a `burst_knee`.

    >>> burst_knee_sentence({"rate": 3.1, "uniform": {"rate": 4.6}, "cost": 1 - 3.1 / 4.6})
    "With this trace's bursts the service holds 3.1 req/s; evenly spaced it would hold 4.6: bursts cost 33% of capacity."
    """
    if not entry:
        return None
    lo_run, hi_run = (entry.get("rates_run") or [None, None])
    rate, uniform = entry.get("rate"), entry.get("uniform") or {}
    if rate is not None:
        head = f"With this trace's bursts the service holds {_rate(rate)} req/s"
    elif entry.get("binding"):
        head = f"With this trace's bursts the service misses the SLO already at {_rate(lo_run)} req/s, the lowest mean rate run"
    else:
        head = f"With this trace's bursts the service holds every mean rate run, up to {_rate(hi_run)} req/s"
    u_rate = uniform.get("rate")
    if u_rate is not None:
        tail = f"evenly spaced it would hold {_rate(u_rate)}"
    elif uniform.get("binding"):
        tail = f"evenly spaced it misses it too at {_rate(lo_run)} req/s"
    elif uniform:
        tail = f"evenly spaced it holds every mean rate run (up to {_rate(hi_run)} req/s)"
    else:
        tail = "its uniform twins were not judged"
    cost = entry.get("cost")
    if cost is None:
        least = entry.get("cost_at_least")
        return f"{head}; {tail}" + (f": bursts cost at least {least * 100:.0f}% of capacity." if least else ".")
    if cost <= 0:
        return f"{head}; {tail}: the bursts cost no capacity here."
    return f"{head}; {tail}: bursts cost {cost * 100:.0f}% of capacity."
