"""The queueing split: where a user's wait came from, per step (seed 000, METRICS.md "Queueing split").

Per request, user E2E = client wait + server queue + prefill to first token + decode:
- `client_wait` = sent_at - scheduled_at (inside the load generator), `per_request`
- `decode` = last token - first token (E2E - TTFT), `per_request`
- server queue + prefill = TTFT, split by what the server reports:
  - Ollama durations: server queue per request (`total - load - prompt eval - eval`, `per_request`);
    prefill = TTFT - server queue (`remainder`: prompt eval, any model load, the network)
  - llama.cpp `timings`: prefill per request (`prompt_ms`, `per_request`); server queue = TTFT - prefill
    (`remainder`: the slot wait, HTTP and the network)
  - vLLM's `request_queue_time_seconds` histogram: server queue mean from its `_sum`/`_count`
    increases over the step's served period (`histogram`); prefill mean = mean TTFT - that mean
    (`remainder`, means only)
  - nothing: server queue not reported (None); prefill = TTFT (`remainder`: includes any queue)
Means add up exactly over the same requests. Percentiles are each component's own (never added); a
histogram gives its p95 only as the bucket range it lies in.

The population is every completed request of the step (warm-up included; in-window only for undrained
steps): the requests the server's histogram observed between the step's start and its drained end,
so per-request and histogram components describe the same requests.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.stats import quantiles

__all__ = ["BASES", "COMPONENTS", "SPLIT_COLUMNS", "empty_split", "queueing_split", "step_split"]

COMPONENTS = ("client_wait", "server_queue", "prefill_to_first_token", "decode", "user_e2e")
#: how a component was obtained (`not_reported`: the server gives nothing to split TTFT by)
BASES = ("per_request", "histogram", "remainder", "not_reported")
#: the columns `step_split` reads of the completed requests
SPLIT_COLUMNS = ("client_wait_s", "ttft_s", "e2e_s", "server_queue_s", "server_prompt_s")
_KEY = {"client_wait": "client_wait_mean_s", "server_queue": "server_queue_mean_s",
        "prefill_to_first_token": "prefill_mean_s", "decode": "decode_mean_s", "user_e2e": "user_e2e_mean_s"}
_BASIS_KEY = {"client_wait": "client_wait", "server_queue": "server_queue", "prefill_to_first_token": "prefill",
              "decode": "decode"}
_NOTES = {
    ("server_queue", "per_request"): "server durations (Ollama: total - load - prompt eval - eval)",
    ("server_queue", "remainder"): "TTFT - server prompt time (llama.cpp timings): slot wait + HTTP + network",
    ("server_queue", "histogram"): "histogram _sum/_count over the step's served period; p95 as its bucket",
    ("server_queue", "not_reported"): "not reported by this server",
    ("prefill_to_first_token", "per_request"): "server prompt time (llama.cpp timings.prompt_ms)",
    ("prefill_to_first_token", "remainder"): "TTFT - server queue",
}


def _col(fin: Any, name: str) -> np.ndarray:
    if name not in fin:
        return np.full(len(fin), np.nan)
    if hasattr(fin, "floats"):  # `analysis.metrics`' rows of a frame: the column's array, no Series between
        return fin.floats(name)
    return pd.to_numeric(fin[name], errors="coerce").to_numpy(dtype=float)


def _mean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan


def empty_split() -> dict:
    """The split of a step with no completed requests: every mean None."""
    return {**{k: None for k in _KEY.values()}, "basis": {v: None for v in _BASIS_KEY.values()},
            "requests": 0, "p50_s": {}, "p95_s": {}}


def step_split(fin: Any, *, histogram_mean_s: float = math.nan) -> dict:
    """The split of one step's completed requests `fin` (derived columns of `derive_requests`: a frame, or
    `analysis.metrics`' rows of one);
    `histogram_mean_s`: the server queue mean from the histogram over the served period (NaN: none)."""
    wait, ttft, e2e = _col(fin, "client_wait_s"), _col(fin, "ttft_s"), _col(fin, "e2e_s")
    keep = ~np.isnan(wait) & ~np.isnan(ttft) & ~np.isnan(e2e)
    if not keep.any():
        return empty_split()
    wait, ttft, e2e = wait[keep], ttft[keep], e2e[keep]
    queue_req, prompt = _col(fin, "server_queue_s")[keep], _col(fin, "server_prompt_s")[keep]
    per: dict[str, np.ndarray | None] = {"client_wait": wait, "decode": e2e - ttft, "user_e2e": wait + e2e}
    basis = {"client_wait": "per_request", "decode": "per_request"}
    means: dict[str, float] = {}
    if (~np.isnan(queue_req)).any():
        per["server_queue"], per["prefill_to_first_token"] = queue_req, ttft - queue_req
        basis.update(server_queue="per_request", prefill_to_first_token="remainder")
    elif (~np.isnan(prompt)).any():
        per["server_queue"], per["prefill_to_first_token"] = ttft - prompt, prompt
        basis.update(server_queue="remainder", prefill_to_first_token="per_request")
    elif not math.isnan(histogram_mean_s):
        per["server_queue"], per["prefill_to_first_token"] = None, None
        means["server_queue"], means["prefill_to_first_token"] = histogram_mean_s, _mean(ttft) - histogram_mean_s
        basis.update(server_queue="histogram", prefill_to_first_token="remainder")
    else:
        per["server_queue"], per["prefill_to_first_token"] = None, ttft
        means["server_queue"] = math.nan
        basis.update(server_queue="not_reported", prefill_to_first_token="remainder")
    out: dict = {"requests": int(keep.sum()), "p50_s": {}, "p95_s": {}}
    for component in COMPONENTS:
        values = per.get(component)
        mean = _mean(values) if values is not None else means[component]
        out[_KEY[component]] = None if math.isnan(mean) else mean
        if values is not None:
            q = quantiles(values, (50.0, 95.0))
            out["p50_s"][component], out["p95_s"][component] = q[50.0], q[95.0]
    out["basis"] = {_BASIS_KEY[c]: basis[c] for c in _BASIS_KEY}
    return out


def queueing_split(requests: pd.DataFrame | None, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (run step, component) from the steps' `split`: step, component, mean_s, p50_s, p95_s,
    share (of the mean user E2E), basis, note. `requests` is unused (kept for the pipeline's call)."""
    columns = ["step", "component", "mean_s", "p50_s", "p95_s", "share", "basis", "note"]
    rows: list[dict] = []
    if steps.empty or "split" not in steps:
        return pd.DataFrame(columns=columns)
    for _, row in steps.iterrows():
        split = row.get("split")
        if row["verdict"] == "not_run" or not isinstance(split, dict) or not split.get("requests"):
            continue
        total = split.get("user_e2e_mean_s")
        for component in COMPONENTS:
            mean = split.get(_KEY[component])
            basis = split["basis"].get(_BASIS_KEY.get(component, ""), "per_request")
            note = _NOTES.get((component, basis), "")
            deferred = row.get("deferred_mean")
            if component == "server_queue" and basis == "not_reported" and deferred is not None \
                    and not math.isnan(deferred):
                note += f" as a time (llama.cpp: {deferred:.2f} requests deferred on average)"
            p95 = split["p95_s"].get(component, math.nan)
            if component == "server_queue" and basis == "histogram":
                rng = row.get("server_queue_p95_range_s")
                note += f"; p95 in [{_ms(rng[0])}, {_ms(rng[1])}] ms" if isinstance(rng, (list, tuple)) else ""
            rows.append({"step": str(row["label"]), "component": component,
                         "mean_s": math.nan if mean is None else mean,
                         "p50_s": split["p50_s"].get(component, math.nan), "p95_s": p95,
                         "share": mean / total if mean is not None and total else math.nan,
                         "basis": basis, "note": note})
    return pd.DataFrame(rows, columns=columns)


def _ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "inf"
    return f"{value * 1000:g}"
