"""The queueing split: where a user's wait came from, per step (seed 000, METRICS.md server queue).

Components of the user's end-to-end time, over the step's completed arrivals:
- `client_wait` = sent_at - scheduled_at (inside the load generator)
- `server_queue` (per request from Ollama's durations; else the vLLM histogram: mean from its
  `_sum`/`_count` increases, percentiles from its buckets; else not measured, with llama.cpp's mean
  deferred count in `basis` where known)
- `prefill_to_first_token` = TTFT - server queue (per request where the server queue is per request;
  from means otherwise; when the server queue is not measured this row is the whole TTFT)
- `decode` = E2E - TTFT
- `user_e2e`, the total the components make up.
Means add up (mean client wait + mean TTFT + mean decode = mean user E2E); percentiles are each
component's own and are never added. `basis` says how each row was obtained; `share` is the
component's mean over the mean user E2E.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.stats import quantiles

__all__ = ["COMPONENTS", "queueing_split"]

COMPONENTS = ("client_wait", "server_queue", "prefill_to_first_token", "decode", "user_e2e")


def _row(step: str, component: str, values: np.ndarray | None, basis: str, *, mean: float | None = None,
         p50: float = math.nan, p95: float = math.nan) -> dict:
    if values is not None:
        q = quantiles(values, (50.0, 95.0))
        finite = values[~np.isnan(values)]
        mean = float(finite.mean()) if finite.size else math.nan
        p50, p95 = q[50.0], q[95.0]
    return {"step": step, "component": component, "mean_s": math.nan if mean is None else mean,
            "p50_s": p50, "p95_s": p95, "basis": basis}


def _step_split(label: str, fin: pd.DataFrame, row: pd.Series) -> list[dict]:
    wait = fin["client_wait_s"].to_numpy(dtype=float)
    ttft = fin["ttft_s"].to_numpy(dtype=float)
    decode = (fin["e2e_s"] - fin["ttft_s"]).to_numpy(dtype=float)
    total = fin["user_e2e_s"].to_numpy(dtype=float)
    basis = row.get("server_queue_basis")
    out = [_row(label, "client_wait", wait, "per-request")]
    if basis == "per-request":
        queue = fin["server_queue_s"].to_numpy(dtype=float)
        out.append(_row(label, "server_queue", queue, "per-request (server timings)"))
        out.append(_row(label, "prefill_to_first_token", ttft - queue, "per-request: TTFT - server queue"))
    elif basis == "histogram":
        q_mean = row.get("server_queue_mean_s", math.nan)
        out.append(_row(label, "server_queue", None,
                        "histogram: mean from _sum/_count, percentiles from buckets",
                        mean=q_mean, p50=row.get("server_queue_p50_s", math.nan),
                        p95=row.get("server_queue_p95_s", math.nan)))
        finite = ttft[~np.isnan(ttft)]
        ttft_mean = float(finite.mean()) if finite.size else math.nan
        out.append(_row(label, "prefill_to_first_token", None,
                        "mean TTFT - mean server queue (means only; percentiles are not subtracted)",
                        mean=ttft_mean - q_mean))
    else:
        deferred = row.get("deferred_mean", math.nan)
        note = "not measured" if deferred is None or math.isnan(deferred) else (
            f"not measured as time (llama.cpp: {deferred:.2f} requests deferred on average)")
        out.append(_row(label, "server_queue", None, note, mean=math.nan))
        out.append(_row(label, "prefill_to_first_token", ttft, "per-request: whole TTFT (server queue not "
                                                                   "measured, included)"))
    out.append(_row(label, "decode", decode, "per-request: E2E - TTFT"))
    out.append(_row(label, "user_e2e", total, "per-request: last token - scheduled"))
    return out


def queueing_split(requests: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (run step, component): step, component, mean_s, p50_s, p95_s, share, basis."""
    rows: list[dict] = []
    if requests.empty or steps.empty:
        return pd.DataFrame(columns=["step", "component", "mean_s", "p50_s", "p95_s", "share", "basis"])
    columns = ["step", "client_wait_s", "ttft_s", "e2e_s", "user_e2e_s", "server_queue_s"]
    finished = requests.loc[requests["finished"] & requests["in_window"], columns]
    by_step = dict(tuple(finished.groupby("step", sort=False)))
    for _, row in steps.iterrows():
        if row["verdict"] == "not_run":
            continue
        fin = by_step.get(row["label"], finished.iloc[0:0])
        rows.extend(_step_split(str(row["label"]), fin, row))
    out = pd.DataFrame(rows)
    totals = out.loc[out["component"] == "user_e2e"].set_index("step")["mean_s"]
    share = out["mean_s"] / out["step"].map(totals)
    return out.assign(share=share)[["step", "component", "mean_s", "p50_s", "p95_s", "share", "basis"]]
