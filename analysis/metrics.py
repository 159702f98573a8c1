"""Every per-step number of METRICS.md "Per step", for one step: `step_metrics(...) -> dict`.

Which requests each number uses (a step's requests are those with `step == label`):
- arrivals: requests scheduled inside the window `[window_start, window_end)` (not-sent ones included)
- unrecorded arrivals: plan.json's `planned_arrivals` (the whole open-loop step) minus the step's
  records; more than 0 means records were lost (a worker died): a warning, the rates are understated
- offered rate: arrivals / window; achieved rate: arrivals the generator dispatched inside the window
  (sent before `window_end` + `SEND_GRACE_S`, or held at the client cap: the cap is the user's, its
  wait is client wait) / window. An arrival of the window sent only after the window ended (a
  generator that fell behind) is not achieved, however long it waited; the grace keeps an arrival due
  in the window's last milliseconds, sent a few ms late, from counting as a shortfall. Closed-loop concurrency steps have no offered rate
  (NaN). A `partial` step (the run was stopped inside it) has its `window_end` at the stop (plan.json),
  so its rates use the time it ran.
- completed: arrivals whose answer streamed to the end (`ok` or `quality_fail`); `ok`: outcome ok.
  Latency percentiles (TTFT, user TTFT, TPOT, ITL, E2E, user E2E, client wait, per-request server
  queue) use the completed arrivals; send lag uses every sent arrival with `capped == False`.
- completion throughput: `ok` requests of the step that finished (end time) inside the window / window.
- goodput: dispatched (as for the achieved rate) `ok` arrivals meeting every per-request threshold /
  window, so goodput <= achieved <= offered; SLO attainment: the same count / all arrivals (rejected,
  timed-out, cancelled, failed and not-sent stay in the denominator) except `client_error` ones: a
  failure inside the generator is not the server's (it makes the step invalid).
- in-flight: time-average over the window of requests sent and not finished (client view).
- reject ratio: `rejected` / arrivals; error ratio: `http_error`, `malformed`, `timeout`, `disconnect`,
  `connect_error`, `oom`, `cancelled` / arrivals (quality failures and rejections are counted apart;
  `client_error` is in neither numerator).
- queue growth: Mann-Kendall (one-sided, increasing) over `slo.sub_windows` sub-window means of the
  server `waiting` gauge, else llama.cpp `deferred`, else client in-flight; growing when p < alpha and
  the Theil-Sen rise across the window (`queue_rise`) is at least `queue_rise_limit` =
  max(`MIN_QUEUE_GROWTH`, z(1 - alpha) x sqrt(arrivals in the window)): more than the step's own
  arrival noise can explain (`queue_growth`).
- server queue from the vLLM histogram, read over the step's served period (`served_period`: from its
  start to its drained end, where its requests were admitted and observed; warm-up included): mean
  from the `_sum`/`_count` increases (exact); percentiles by Prometheus-style interpolation inside
  buckets, with the bucket width kept as `server_queue_p95_resolution_s`, and the bucket itself as
  `server_queue_p95_range_s` (`[low, high]`; `[v, v]` when measured per request; None when unknown).
- token throughput: `output_tokens_per_s` = output tokens of the `ok` requests counted in completion
  throughput / window; `total_tokens_per_s` = their input + output tokens / window;
  `good_output_tokens_per_s` = output tokens of those same requests that also meet every per-request
  threshold (arrived in the window) / window: one basis (finish time in the window), so good <= all.
  Reasoning and answer apart: `reasoning_tokens_per_s` and `answer_tokens_per_s` (the same requests'
  reasoning and remaining output tokens / window), and the medians of the per-request phase rates
  `reasoning_rate_p50` / `answer_rate_p50` (tokens/s, `analysis.requests`).
- `split`: the queueing split of the step's completed requests (`analysis.split.step_split`).
- GPU memory peak: the largest sum over GPUs at one sample time (as `llmload.telemetry.series`).
- energy: `energy_j` = the GPUs' energy over the window `[window_start, window_end]`, summed over GPUs
  (`TelemetryIndex.energy`: energy counter, else integrated power; `energy_basis` `counter` / `power`,
  None without GPU energy); `joules_per_good_output_token` = `energy_j` / the good output tokens of the
  window (`good_output_tokens_per_s` x window seconds); NaN with no good token.
- Little's law: in-flight mean / (completion throughput x mean E2E of completed arrivals); ~1 in a
  steady state.
Percentiles are from raw values by linear interpolation (`analysis.stats.quantiles`).
- every SLO percentile threshold's figure `F` (e.g. `ttft_p95_s`) also has `F_low` / `F_high`: its
  two-sided interval at `slo.confidence`, autocorrelation-aware (`analysis.intervals`), from the same
  values in `scheduled_at` order; NaN when the figure is not per request (histogram server queue).
  And `<key>_over` (e.g. `ttft_p95_over`): the share of those values over the threshold, with
  `<key>_over_low` / `_over_high` (`exceedance_interval`): what the knee is placed with.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from analysis.intervals import MIN_VALUES, exceedance_interval, percentile_interval, rank_tau
from analysis.requests import (
    INPUT_OVER_FACTOR,
    INPUT_SLACK_TOKENS,
    OUTPUT_OVER_FACTOR,
    EventGaps,
    event_gaps,
)
from analysis.split import SPLIT_COLUMNS, empty_split, step_split
from analysis.stats import QUANTILES, mann_kendall, quantiles, sen_slope, time_average
from analysis.telemetry_stats import (
    TelemetryIndex,
    histogram_queue_quantiles,
    histogram_queue_ranges,
    queue_buckets,
    served_period,
)
from llmload import slo as slo_dims
from llmload.config import SLO
from shapes.phases import is_closed_loop

__all__ = ["ERROR_OUTCOMES", "LATENCIES", "MIN_QUEUE_GROWTH", "SEND_GRACE_S", "empty_metrics", "queue_growth",
           "step_metrics", "worst_clock"]

#: latencies with p50/p95/p99/max columns: name -> per-request column (None: computed apart)
LATENCIES = {
    "ttft": "ttft_s", "user_ttft": "user_ttft_s", "tpot": "tpot_s", "itl": None, "itl_token": None,
    "e2e": "e2e_s", "user_e2e": "user_e2e_s", "client_wait": "client_wait_s", "server_queue": None,
    "send_lag": None, "ttfa": "ttfa_s", "user_ttfa": "user_ttfa_s",
}
#: what the step's numbers read of its completed requests beside the latencies and the SLO's columns
_FIN_COLUMNS = ("tpot_s", "e2e_s", "server_queue_s", "input_tokens", "output_tokens", "planned_output_tokens",
                "prefix_id", "scheduled_at")
ERROR_OUTCOMES = ("http_error", "malformed", "timeout", "disconnect", "connect_error", "oom", "cancelled")
#: requests the queue must rise by across the window (Theil-Sen) for a significant trend to count
MIN_QUEUE_GROWTH = 1.0
#: an arrival of the window sent at most this long after the window's end still counts as achieved
#: (ten times the default send-lag limit: edge jitter, not a generator that fell behind)
SEND_GRACE_S = 0.25

_STEP_KEYS = ("label", "index", "phase", "status", "target_rate", "concurrency", "warmup_s", "lost_workers")


def _pct_columns(name: str, values: dict) -> dict:
    out = {f"{name}_p{q:g}_s": values[q] for q in QUANTILES}
    out[f"{name}_max_s"] = values["max"]
    return out


def _nan_pcts() -> dict:
    return {**{q: math.nan for q in QUANTILES}, "max": math.nan}


def empty_metrics(step: dict) -> dict:
    """The row of a step that was not run: identity and plan only, every number NaN."""
    start, end = _f(step.get("window_start")), _f(step.get("window_end"))
    row: dict = {k: step.get(k) for k in _STEP_KEYS}
    row.update(window_start=start, window_end=end, window_s=end - start)
    for key in ("arrivals", "sent", "completed", "ok", "offered_rate", "achieved_rate",
                "completion_throughput", "goodput", "slo_attainment", "in_flight_mean", "running_mean",
                "waiting_mean", "deferred_mean", "tpot_excluded", "reject_ratio", "error_ratio", "oom",
                "queue_trend_p", "queue_rise", "queue_rise_limit", "input_tokens_mean", "input_tokens_p50", "input_tokens_p95",
                "output_tokens_mean", "output_tokens_p50", "output_tokens_p95", "output_mismatch_ratio",
                "usage_mismatch", "usage_mismatch_ratio",
                "kv_usage_peak", "preemptions", "gpu_memory_peak_bytes", "worker_cpu_max",
                "littles_law_ratio", "server_queue_mean_s", "e2e_mean_s", "prefix_share_ratio",
                "unrecorded_arrivals", "output_tokens_per_s", "total_tokens_per_s", "good_output_tokens_per_s",
                "served_start", "served_end", "workers", "capped_share", "received_rate",
                "reasoning_tokens_per_s", "answer_tokens_per_s", "reasoning_rate_p50", "answer_rate_p50",
                "energy_j", "joules_per_good_output_token"):
        row[key] = math.nan
    for name in LATENCIES:
        row.update(_pct_columns(name, _nan_pcts()))
    row.update({f"server_queue_p{q:g}_resolution_s": math.nan for q in QUANTILES})
    row.update(outcomes=None, queue_growth=None, queue_trend_series=None, server_queue_basis=None,
               server_queue_note=None, server_queue_p95_range_s=None, split=None, usage_mismatch_note=None,
               energy_basis=None)
    row["clock"] = worst_clock(step.get("clock"))
    return row


def worst_clock(clocks: dict | None) -> dict | None:
    """The step's worker whose clock is known least well (plan.json's `clock`,
    `llmload.runtime.wire.clocksync`): its entry with `worker` added; None when no worker was measured."""
    measured = [{"worker": str(name), **entry} for name, entry in (clocks or {}).items()
                if isinstance(entry, dict) and entry.get("error_s") is not None]
    return max(measured, key=lambda e: e["error_s"]) if measured else None


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _closed_loop(step: dict) -> bool:
    return is_closed_loop(step.get("phase")) or (step.get("concurrency") is not None
                                                   and step.get("target_rate") is None)


def step_metrics(req: pd.DataFrame, step: dict, slo: SLO, tel: TelemetryIndex,
                 gaps: EventGaps | None = None, rows: np.ndarray | None = None) -> dict:
    """All numbers of one run step. `req`: the step's derived requests (`derive_requests`);
    `gaps`: per-event gaps of a larger set of requests of which `req` holds the rows at positions
    `rows`; both computed here from `req`'s own `token_times` when not given."""
    row = empty_metrics(step)
    ws, we = row["window_start"], row["window_end"]
    window_s = row["window_s"]
    in_win = req["in_window"].to_numpy(dtype=bool)
    outcome = _strings(req["outcome"].astype(str))
    finished = req["finished"].to_numpy(dtype=bool) & in_win
    sent_at = req["sent_at"].to_numpy(dtype=float)
    end_at = req["end_at"].to_numpy(dtype=float)
    capped = req["capped"].fillna(False).to_numpy(dtype=bool) if "capped" in req else np.zeros(len(req), bool)
    arrivals = int(in_win.sum())
    sent = int((in_win & ~np.isnan(sent_at)).sum())
    ok_win = in_win & (outcome == "ok")
    dispatched = in_win & ((sent_at < we + SEND_GRACE_S) | capped)  # NaN sent_at compares False
    good = int((req["good"].to_numpy(dtype=bool) & dispatched).sum())
    counts = pd.Series(outcome[in_win]).value_counts()
    outcomes = {str(k): int(v) for k, v in counts.items()}
    # a closed loop's window ends when its last request does (drained): one ending at that instant is in it
    # (in virtual time the last batch ends at exactly `we`: `<` left out half a probe level's completions)
    finished_in_window = (outcome == "ok") & (end_at >= ws) & ((end_at <= we) if _closed_loop(step) else (end_at < we))
    judged = arrivals - outcomes.get("client_error", 0)  # the generator's own failures: not the server's
    def per_s(count: int) -> float:
        return count / window_s if window_s > 0 else math.nan  # NaN window (no plan times): NaN

    row.update(
        arrivals=arrivals, sent=sent, completed=int(finished.sum()), ok=int(ok_win.sum()), outcomes=outcomes,
        offered_rate=math.nan if _closed_loop(step) else per_s(arrivals),
        achieved_rate=per_s(int(dispatched.sum())),
        completion_throughput=per_s(int(finished_in_window.sum())),
        goodput=per_s(good), slo_attainment=good / judged if judged else math.nan,
        reject_ratio=outcomes.get("rejected", 0) / arrivals if arrivals else math.nan,
        error_ratio=sum(outcomes.get(k, 0) for k in ERROR_OUTCOMES) / arrivals if arrivals else math.nan,
        oom=outcomes.get("oom", 0),
    )
    # arrivals held at the client's concurrency cap, and what the server was sent (the client cap check):
    # every request of the step sent inside the window, a backlog held since the warm-up included (what
    # the server received then; NaN sent_at compares False)
    row["capped_share"] = float(capped[in_win].mean()) if arrivals else math.nan
    row["received_rate"] = per_s(int(((sent_at >= ws) & (sent_at < we)).sum()))
    if "worker" in req:
        row["workers"] = int(req.loc[in_win, "worker"].nunique())
    planned = step.get("planned_arrivals")
    if planned is not None and not _closed_loop(step) and step.get("status") == "run":
        row["unrecorded_arrivals"] = max(int(planned) - len(req), 0)
    # the completed requests' columns read below (not the step's every column: a copy per request)
    wanted = {c for c in LATENCIES.values() if c} | set(_FIN_COLUMNS) | {
        LATENCIES.get(t.metric, slo_dims.latency(t.metric).request_column) for t in slo.thresholds}
    fin = _Rows(req, finished, [c for c in req.columns if c in wanted])
    for name, column in LATENCIES.items():
        if column is not None:
            row.update(_pct_columns(name, quantiles(fin.floats(column))))
    lag = req["send_lag_s"].to_numpy(dtype=float)[in_win]
    row.update(_pct_columns("send_lag", quantiles(lag)))
    row["tpot_excluded"] = int(fin["tpot_s"].isna().sum())
    row["e2e_mean_s"] = float(fin["e2e_s"].mean()) if len(fin) else math.nan

    if gaps is None:
        gaps, rows = event_gaps(req["token_times"], req.get("token_counts")), np.arange(len(req))
        gaps.disposable = True  # its own: read here once
    if any(t.metric == "itl" for t in slo.thresholds):  # its interval reads the gaps in order, NaN included
        itl, itl_token = gaps.select(np.asarray(rows)[finished])
        row.update(_pct_columns("itl", quantiles(itl)))
    else:  # only the percentiles: the gaps without NaN, reordered in place (no second copy)
        itl, itl_token = gaps.select(np.asarray(rows)[finished], finite=True, consume=True)
        row.update(_pct_columns("itl", quantiles(itl, scratch=True)))
    row.update(_pct_columns("itl_token", quantiles(itl_token, scratch=True)))

    _server_queue(row, fin, tel, step)
    _tokens(row, fin)
    _usage_mismatch(row, req, in_win, arrivals)
    _token_rates(row, req, finished_in_window, per_s)
    _split(row, req, step)
    is_sent = ~np.isnan(sent_at)
    starts, ends = sent_at[is_sent], np.fmax(end_at[is_sent], sent_at[is_sent])
    row["in_flight_mean"] = float(time_average(starts, ends, np.array([ws, we]))[0])
    row.update(running_mean=tel.gauge_mean("running", ws, we), waiting_mean=tel.gauge_mean("waiting", ws, we),
               deferred_mean=tel.gauge_mean("deferred", ws, we), kv_usage_peak=tel.peak("kv_usage", ws, we),
               preemptions=tel.counter_delta("preemptions_total", ws, we),
               gpu_memory_peak_bytes=tel.peak_total("gpu_memory_used_bytes", ws, we),
               worker_cpu_max=tel.peak("worker_cpu", _f(step.get("start_at") or ws), we))
    _energy(row, tel, ws, we, window_s)
    _queue_trend(row, slo, tel, starts, ends)
    _threshold_percentiles(row, slo, fin, itl)
    denom = row["completion_throughput"] * row["e2e_mean_s"]
    row["littles_law_ratio"] = row["in_flight_mean"] / denom if denom > 0 else math.nan
    return row


class _Rows:
    """The rows `mask` of some of a frame's `columns`, each column copied when it is read (a step's
    completed requests are never copied with every column at once): `fin[name]`, `fin.floats(name)`,
    `name in fin`, `len(fin)`."""

    def __init__(self, frame: pd.DataFrame, mask: np.ndarray, columns: list[str]) -> None:
        self._frame, self._mask, self._columns = frame, mask, set(columns)
        self._len = int(np.count_nonzero(mask))

    def __contains__(self, name: str) -> bool:
        return name in self._columns

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, name: str) -> pd.Series:
        if name not in self._columns:
            raise KeyError(name)
        return self._frame[name][self._mask]

    def floats(self, name: str) -> np.ndarray:
        """`self[name]` as floats (not a number: NaN), a float column's array masked without a Series between."""
        if name not in self._columns:
            raise KeyError(name)
        column = self._frame[name]
        if column.dtype == np.float64:
            return column.to_numpy()[self._mask]
        return pd.to_numeric(column[self._mask], errors="coerce").to_numpy(dtype=float)


def _strings(values: pd.Series) -> np.ndarray:
    """`values.to_numpy()` (object), each distinct string one object (not one per request)."""
    codes, uniques = pd.factorize(values, use_na_sentinel=False)
    return np.asarray(uniques, dtype=object)[codes] if len(values) else values.to_numpy()


def _server_queue(row: dict, fin: _Rows, tel: TelemetryIndex, step: dict) -> None:
    per_request = fin.floats("server_queue_s")
    if (~np.isnan(per_request)).any():
        row.update(_pct_columns("server_queue", quantiles(per_request)))
        row["server_queue_mean_s"] = float(np.nanmean(per_request))
        row["server_queue_basis"] = "per-request"
        p95 = row["server_queue_p95_s"]
        row["server_queue_p95_range_s"] = None if math.isnan(p95) else [p95, p95]
    elif tel.has("queue_time_seconds_bucket"):
        t0, t1 = served_period(step, tel)
        row.update(served_start=t0, served_end=t1)
        buckets = queue_buckets(tel.frame, t0, t1)  # read once for the percentiles and the range
        values, widths, problem = histogram_queue_quantiles(tel.frame, t0, t1, QUANTILES, buckets=buckets)
        row.update(_pct_columns("server_queue", {**values, "max": math.nan}))
        row.update({f"server_queue_p{q:g}_resolution_s": widths[q] for q in QUANTILES})
        row["server_queue_p95_range_s"] = histogram_queue_ranges(tel.frame, t0, t1, (95.0,), buckets=buckets)[95.0]
        row["server_queue_note"] = problem
        row["server_queue_mean_s"] = tel.histogram_mean(t0, float(np.nextafter(t1, math.inf)))
        row["server_queue_basis"] = "histogram"


def _token_rates(row: dict, req: pd.DataFrame, finished_in_window: np.ndarray, per_s) -> None:
    """Output, total and good output tokens per second (module docstring); unknown counts add 0."""
    def counts(name: str) -> np.ndarray:
        if name not in req:
            return np.zeros(len(req))
        column = req[name]
        if column.dtype == np.float64:
            return column.to_numpy()
        return pd.to_numeric(column, errors="coerce").astype(float).to_numpy()

    out, inp = counts("output_tokens"), counts("input_tokens")
    good = req["good"].to_numpy(dtype=bool)
    done = np.asarray(finished_in_window, dtype=bool)
    row["output_tokens_per_s"] = per_s(np.nansum(out[done]))
    row["total_tokens_per_s"] = per_s(np.nansum(out[done]) + np.nansum(inp[done]))
    row["good_output_tokens_per_s"] = per_s(np.nansum(out[good & done]))  # a subset of `done`: good <= all
    reasoning = np.nan_to_num(counts("reasoning_tokens"))  # reasoning and answer kept apart
    row["reasoning_tokens_per_s"] = per_s(np.nansum(reasoning[done]))
    row["answer_tokens_per_s"] = per_s(np.nansum(out[done]) - np.nansum(reasoning[done]))
    for name in ("reasoning_rate", "answer_rate"):
        rates = counts(name)[done] if name in req else np.array([])
        rates = rates[~np.isnan(rates)]
        row[f"{name}_p50"] = float(np.median(rates)) if rates.size else math.nan


def _energy(row: dict, tel: TelemetryIndex, ws: float, we: float, window_s: float) -> None:
    """The GPUs' energy over the window and per good output token (module docstring)."""
    joules, basis = tel.energy(ws, we)
    good_tokens = row["good_output_tokens_per_s"] * window_s
    row.update(energy_j=joules, energy_basis=basis,
               joules_per_good_output_token=joules / good_tokens if good_tokens > 0 else math.nan)


def _split(row: dict, req: pd.DataFrame, step: dict) -> None:
    """The queueing split over the step's completed requests (warm-up included when the step drains:
    the requests its served period's histogram observed; in-window only for undrained steps)."""
    done = req["finished"].to_numpy(dtype=bool)
    if step.get("drain") is False:
        done = done & req["in_window"].to_numpy(dtype=bool)  # not in place: pandas' arrays are read-only
    hist = row["server_queue_mean_s"] if row["server_queue_basis"] == "histogram" else math.nan
    fin = _Rows(req, done, [c for c in req.columns if c in SPLIT_COLUMNS])
    row["split"] = step_split(fin, histogram_mean_s=hist) if done.any() else empty_split()


def _usage_mismatch(row: dict, req: pd.DataFrame, in_win: np.ndarray, arrivals: int) -> None:
    """The step's answers whose usage disagrees with the request (`analysis.requests`' `usage_mismatched`):
    their count, their share of the arrivals (the `usage_mismatch_ratio` SLO dimension) and a note naming
    the worst of each kind, for the step's warning."""
    if "usage_mismatched" not in req:
        return
    mask = req["usage_mismatched"].to_numpy(dtype=bool) & in_win
    count = int(np.count_nonzero(mask))
    row["usage_mismatch"] = count
    row["usage_mismatch_ratio"] = count / arrivals if arrivals else math.nan
    if not count:  # the usual case: no frame of the hits
        return
    hit = req[mask]
    parts = []
    out, planned_out = (pd.to_numeric(hit.get(c), errors="coerce") for c in ("output_tokens", "planned_output_tokens"))
    over = (out / planned_out).where(out > OUTPUT_OVER_FACTOR * planned_out)
    if over.notna().any():
        worst = over.idxmax()
        parts.append(f"up to {int(out[worst])} output tokens for max_tokens {int(planned_out[worst])}")
    if "planned_input_tokens" in hit:
        inp, planned_in = (pd.to_numeric(hit.get(c), errors="coerce") for c in ("input_tokens", "planned_input_tokens"))
        far = (np.log(inp / planned_in).abs()).where((inp > INPUT_OVER_FACTOR * planned_in + INPUT_SLACK_TOKENS)
                                                     | (inp < planned_in / 2))
        if far.notna().any():
            worst = far.idxmax()
            parts.append(f"input {int(inp[worst])} tokens for {int(planned_in[worst])} planned")
    if "usage_mismatch" in hit:
        disbelieved = int(hit["usage_mismatch"].fillna(False).astype(bool).sum())
        if disbelieved:
            parts.append(f"{disbelieved} server token count not believed (reported_output_tokens)")
    row["usage_mismatch_note"] = "; ".join(parts)


def _tokens(row: dict, fin: _Rows) -> None:
    for name in ("input_tokens", "output_tokens"):
        values = fin.floats(name) if name in fin else np.array([])
        q = quantiles(values, (50.0, 95.0))
        row[f"{name}_mean"] = float(np.nanmean(values)) if (~np.isnan(values)).any() else math.nan
        row[f"{name}_p50"], row[f"{name}_p95"] = q[50.0], q[95.0]
    if "planned_output_tokens" in fin:
        planned = fin.floats("planned_output_tokens")
        served = fin.floats("output_tokens")
        known = ~np.isnan(planned) & ~np.isnan(served)
        mismatch = (planned[known] != served[known]).mean() if known.any() else math.nan
        row["output_mismatch_ratio"] = float(mismatch)
    if "prefix_id" in fin and len(fin):
        row["prefix_share_ratio"] = float(fin["prefix_id"].notna().mean())


def _queue_trend(row: dict, slo: SLO, tel: TelemetryIndex, starts: np.ndarray, ends: np.ndarray) -> None:
    edges = np.linspace(row["window_start"], row["window_end"], slo.sub_windows + 1)
    series, name = None, None
    for metric in ("waiting", "deferred"):
        values = tel.subwindow_means(metric, edges)
        if (~np.isnan(values)).sum() >= 3:
            series, name = values, metric
            break
    if series is None:
        series, name = time_average(starts, ends, edges), "in_flight"
    growing, p, rise, limit = queue_growth(series, row["arrivals"], alpha=slo.trend_alpha)
    row.update(queue_trend_p=p, queue_trend_series=name, queue_rise=rise, queue_rise_limit=limit,
               queue_growth=growing)


def queue_growth(series: np.ndarray, arrivals: float, *, alpha: float) -> tuple[bool, float, float, float]:
    """(growing, p, rise, limit) of a queue series (sub-window means over the step window).

    Growing when the rise is significant (Mann-Kendall, one-sided, p < `alpha`) AND larger than the
    step's arrival noise can explain: the Theil-Sen rise across the window must reach
    `limit = max(MIN_QUEUE_GROWTH, z(1 - alpha) x sqrt(arrivals))`. A queue below capacity changes by
    arrivals minus departures, and a window's arrival count fluctuates by about sqrt(N) (Poisson): a
    stationary queue's burst stays inside that, while an overloaded queue grows by (rate - capacity) x
    window, which outgrows sqrt(N) as the window lengthens. (Mann-Kendall alone assumes independent
    sub-windows; a queue's are not: bursts in a stationary queue at 75% load passed the old rule, a rise
    of one request, in 15 of 600 series of 10 s steps, and none pass this one: tests/analysis/test_queue_growth.py.)

    >>> queue_growth(np.array([1.0, 6.0, 11.0, 16.0, 21.0, 26.0]), 100, alpha=0.05)[0]  # +25 > 16.4
    True
    >>> queue_growth(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 100, alpha=0.05)[0]  # +5: a burst
    False
    """
    _s, p = mann_kendall(series)
    rise = sen_slope(series) * (len(series) - 1)
    n = float(arrivals) if arrivals == arrivals and arrivals is not None else 0.0
    limit = max(MIN_QUEUE_GROWTH, NormalDist().inv_cdf(1.0 - alpha) * math.sqrt(max(n, 0.0)))
    return bool(p < alpha and rise >= limit), p, rise, limit


def _threshold_values(row: dict, t, fin: _Rows, itl: np.ndarray) -> np.ndarray | None:
    """The raw values threshold `t` is judged on (None: not per request, e.g. a histogram queue)."""
    # a registered dimension without its own p50/p95/p99 columns reads its per-request column
    column = LATENCIES.get(t.metric, slo_dims.latency(t.metric).request_column)
    if t.metric == "itl":
        return itl
    if t.metric == "server_queue":
        if row["server_queue_basis"] == "per-request":
            return fin.floats("server_queue_s")
        return None
    if column is not None:
        return fin.floats(column)
    return None


def _threshold_percentiles(row: dict, slo: SLO, fin: _Rows, itl: np.ndarray) -> None:
    """Percentiles an SLO asks for beyond p50/p95/p99 (e.g. `ttft_p90`), from the same raw values, and
    every threshold's interval `<figure>_low` / `<figure>_high` at `slo.confidence`
    (`analysis.intervals`: the values in `scheduled_at` order; NaN when not per request)."""
    # the completed requests in `scheduled_at` order: only the values judged are reordered (not every column)
    order = (np.argsort(fin.floats("scheduled_at"), kind="stable")
             if "scheduled_at" in fin and len(fin) else None)
    for t in slo.thresholds:
        key = f"{t.key}_s"
        values = _threshold_values(row, t, fin, itl)
        if values is not None and order is not None and t.metric != "itl":
            values = values[order]
        if key not in row:
            row[key] = math.nan if values is None else quantiles(values, (t.percentile,))[t.percentile]
        # the ranks' autocorrelation, the same for both intervals of these values: computed once
        ranks = rank_tau(values) if values is not None and np.count_nonzero(~np.isnan(values)) >= MIN_VALUES \
            else None
        low, high = (math.nan, math.nan) if values is None else percentile_interval(
            values, t.percentile, slo.confidence, blocks=slo.sub_windows, alpha=slo.trend_alpha, ranks_tau=ranks)
        row[f"{key}_low"], row[f"{key}_high"] = low, high
        over = (math.nan,) * 3 if values is None else exceedance_interval(
            values, t.value_s, slo.confidence, blocks=slo.sub_windows, alpha=slo.trend_alpha, ranks_tau=ranks)
        row[f"{t.key}_over"], row[f"{t.key}_over_low"], row[f"{t.key}_over_high"] = over
