"""What limited each judged step (METRICS.md "What limited a step"): `classify_limit(row, window, server)`.

The rules read the server's own figures where it gives them: running and waiting requests (vLLM,
SGLang and TGI `/metrics`; llama.cpp `requests_processing` and `requests_deferred`), the slot count
(`conditions.max_num_seqs`, filled from llama.cpp `/props` / `/slots`, SGLang `max_running_requests`,
or written by the user for vLLM, whose `cache_config_info` has no scheduler fields;
`conditions.ollama_num_parallel` for Ollama; llama.cpp `/slots` as `slots_total`), KV usage and
preemptions, the queueing split (server queue against prefill to first token), GPU utilisation (NVML or
DCGM) and the client's own records (arrivals held at the client's concurrency cap). Rules, first match
wins:

1. `client_cap`: the row already carries that limit (the verdict's own check), or at least
   `CLIENT_CAP_SHARE` of the window's arrivals waited for a client slot with a client wait p95 of at
   least `CLIENT_WAIT_MIN_S`.
2. `generator`: the step is `invalid` (the generator did not deliver the load: nothing else is read).
3. `none`: the step passed (nothing limited it inside the SLO).
4. `kv_cache`: preemptions in the window; or the head-of-line request's KV blocks exceeded the free
   blocks in at least `KV_BLOCKED_SHARE` of the samples with requests waiting, with requests waiting
   (`analysis.limit_evidence.kv_head_of_line`: `num_gpu_blocks` and `block_size` from
   `vllm:cache_config_info`, the prompt from the step's records), whatever the percentage; or KV usage
   peak at least `KV_FULL` with requests waiting. `evidence["kv_decided_by"]` says which. Not for
   llama.cpp: its "KV usage" is the context its slots hold, and it never preempts.
5. `gpu`: the step failed on OOM (the server said it ran out of GPU memory).
   `decode`: the first failing dimension is TPOT or ITL.
6. `batch_slots`: running at the slot count (`plateau_floor`: a slot short per eight slots counts, the
   gauges being set once per step) in at least `SLOTS_FULL_SHARE` of the samples with at least
   `WAITING_MIN` requests waiting on average. With no slot count written or reported, the running
   plateau is the slot count (`analysis.limit_evidence.infer_slots`; `slots_source` says so). For a
   server without running/waiting gauges (Ollama), a server queue that is at least `QUEUE_SHARE` of
   TTFT (queue + prefill) instead.
7. `prefill`: a time-to-first-token dimension failed and prefill to first token is at least
   `PREFILL_SHARE` of queue + prefill.
8. `decode`: any TPOT or ITL dimension failed.
9. `gpu`: GPU utilisation averaged at least `GPU_BUSY` over the window (never asked for when
   `conditions.gpus` is 0).
10. `none`: nothing matched and no dimension failed (an insufficient or inconclusive step).
11. `unknown`: nothing matched; `evidence["missing"]` names what the server did not give.

Pure: the caller (`step_limits`) gathers the window's figures from the telemetry index and records.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.limit_evidence import (
    KV_BLOCKED_SHARE,
    head_of_line_blocks,
    infer_slots,
    kv_head_of_line,
    plateau_floor,
    server_samples,
)
from analysis.telemetry_stats import TelemetryIndex
from llmload import slo as slo_dims

__all__ = [
    "PromptCounts",
    "CLIENT_CAP_SHARE",
    "add_limits",
    "CLIENT_WAIT_MIN_S",
    "GPU_BUSY",
    "INFERRED_SLOTS",
    "KV_BLOCKED_SHARE",
    "KV_FULL",
    "LIMIT_KINDS",
    "OOM_ADVICE",
    "PREFILL_SHARE",
    "QUEUE_SHARE",
    "SLOTS_FULL_SHARE",
    "WAITING_MIN",
    "classify_limit",
    "limit_answer",
    "limit_sentence",
    "server_info",
    "step_limits",
    "window_figures",
]

LIMIT_KINDS = ("none", "batch_slots", "kv_cache", "prefill", "decode", "gpu", "client_cap", "generator",
               "unknown")
#: share of the window's telemetry samples with running at the slot count for the slots to be "full"
SLOTS_FULL_SHARE = 0.5
#: requests waiting in the server on average (time-average of the gauge) for a queue to count
WAITING_MIN = 0.5
#: KV usage peak (0-1 share of blocks) that counts as full
KV_FULL = 0.95
#: prefill to first token as a share of server queue + prefill for prefill to dominate TTFT
PREFILL_SHARE = 0.5
#: server queue as a share of queue + prefill for the queue to dominate TTFT (no running gauge)
QUEUE_SHARE = 0.5
#: GPU utilisation (0-1) averaged over the window that counts as busy
GPU_BUSY = 0.95
#: share of the window's arrivals that waited for a client slot for the client cap to bind
CLIENT_CAP_SHARE = 0.2
#: client wait p95 (s) under which a cap is only brushed, not binding
CLIENT_WAIT_MIN_S = 0.05

#: `slots_source` of a slot count read from the running plateau (no conditions, no server figure)
INFERRED_SLOTS = "inferred from the running plateau"

_TTFT_DIMS = ("ttft", "user_ttft", "e2e", "user_e2e", "server_queue", "client_wait", "queue_growth")
_DECODE_DIMS = ("tpot", "itl")

#: the `gpu` limit's advice when the server ran out of GPU memory (not a busy GPU)
OOM_ADVICE = ("the GPU ran out of memory: lower max_num_seqs or the context length, a smaller or quantised "
              "model, or more GPUs (tensor parallelism) or replicas")
_ADVICE = {
    "none": "no limit reached inside the SLO",
    "batch_slots": "raise max_num_seqs (llama.cpp --parallel, OLLAMA_NUM_PARALLEL) if memory allows, "
                   "or add replicas",
    "kv_cache": "give the KV cache more memory (gpu_memory_utilization, a smaller model or quantised KV "
                "cache), shorten prompts or lower max_num_seqs, or add replicas",
    "prefill": "raise max_num_batched_tokens (the per-step token budget), shorten prompts, enable prefix "
               "caching, or add replicas",
    "decode": "lower max_num_seqs to trade throughput for TPOT, use a faster GPU or a smaller model, or add "
              "replicas",
    "gpu": "the GPU is busy: a faster GPU, tensor parallelism or more replicas",
    "client_cap": "raise client.max_concurrency (or run more worker processes) so the server gets the "
                  "offered rate",
    "generator": "fix the generator first (see the step's invalid reasons); nothing else can be read",
    "unknown": "record what is missing (see evidence.missing) to tell the limit",
}


def _f(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def _known(value: Any) -> bool:
    return not math.isnan(_f(value))


def _dim(key: str) -> str:
    """`ttft_p95` -> `ttft` (the dimension name of a failing key)."""
    parsed = slo_dims.parse_threshold_key(str(key))
    return parsed[0] if parsed else str(key)


def _round(value: Any, digits: int = 4) -> float | None:
    number = _f(value)
    return None if math.isnan(number) else round(number, digits)


def server_info(conditions: Mapping[str, Any] | None, tel: TelemetryIndex | None = None) -> dict[str, Any]:
    """What the rules need of the server: its flavour, its slot count (and where that came from), the
    client's concurrency cap and the number of instances."""
    conds = dict(conditions or {})
    flavor = str(conds.get("server") or "") or None
    slots, source = None, None
    for key in ("max_num_seqs", "ollama_num_parallel"):
        if _known(conds.get(key)):
            slots, source = int(_f(conds[key])), f"conditions.{key}"
            break
    if slots is None and tel is not None and tel.has("slots_total"):
        _, values, _ = tel.samples("slots_total", -math.inf, math.inf)
        if values.size:
            slots, source = int(values.max()), "llama.cpp /slots"
    cap = conds.get("client_max_concurrency")
    return {"flavor": flavor, "slots": slots, "slots_source": source,
            "client_max_concurrency": int(_f(cap)) if _known(cap) else None,
            "instances": int(_f(conds.get("instances"))) if _known(conds.get("instances")) else 1,
            "max_num_batched_tokens": _round(conds.get("extra.max_num_batched_tokens")),
            "num_gpu_blocks": _round(conds.get("kv_num_gpu_blocks"), 0),
            "block_size": _round(conds.get("kv_block_size"), 0),
            "gpus": _round(conds.get("gpus"), 0)}


def _prompt_tokens(requests: pd.DataFrame | None, in_window: bool = True) -> float:
    """Median prompt of the requests (those in the window when `in_window`), from the records."""
    if requests is None or not len(requests) or "input_tokens" not in requests:
        return math.nan
    tokens = pd.to_numeric(requests["input_tokens"], errors="coerce")
    if in_window and "in_window" in requests:
        tokens = tokens[requests["in_window"].fillna(False).to_numpy(dtype=bool)]
    tokens = tokens[tokens > 0]
    return float(tokens.median()) if len(tokens) else math.nan


class PromptCounts:
    """The median prompt of every request (`_prompt_tokens(requests, in_window=False)`), exact, gathered a
    step at a time: the distinct positive prompts and how often each came, not a value per request."""

    def __init__(self) -> None:
        self.values, self.counts = np.array([], dtype=float), np.array([], dtype=np.int64)

    def add(self, requests: pd.DataFrame) -> None:
        if not len(requests) or "input_tokens" not in requests:
            return
        tokens = pd.to_numeric(requests["input_tokens"], errors="coerce").to_numpy(dtype=float)
        values, counts = np.unique(tokens[tokens > 0], return_counts=True)
        merged, at = np.unique(np.concatenate([self.values, values]), return_inverse=True)
        self.counts = np.bincount(at, weights=np.concatenate([self.counts, counts]),
                                  minlength=merged.size).astype(np.int64)
        self.values = merged

    def median(self) -> float:
        """The median as `pandas.Series.median` gives it (the mean of the two middle values of an even count)."""
        n = int(self.counts.sum())
        if not n:
            return math.nan
        ends = np.cumsum(self.counts)
        low, high = self.values[np.searchsorted(ends, [(n - 1) // 2, n // 2], side="right")]
        return float((low + high) / 2)


def _kv_figures(samples: pd.DataFrame, server: Mapping[str, Any], prompt_tokens: float) -> dict[str, float]:
    return kv_head_of_line(samples, num_blocks=server.get("num_gpu_blocks"), block_size=server.get("block_size"),
                           prompt_tokens=prompt_tokens, max_num_batched_tokens=server.get("max_num_batched_tokens"))


def request_figures(requests: pd.DataFrame | None, t0: float, t1: float) -> dict[str, float]:
    """What `window_figures` reads of a step's requests over its window `[t0, t1)`: the median prompt of
    its in-window requests, the share of them held at the client cap and the rate the server was sent
    (NaN where unknown). Computed while the step's requests are in memory (`analysis.pipeline`)."""
    out = {"prompt_tokens": _prompt_tokens(requests), "capped_share": math.nan, "received_rate": math.nan}
    if requests is not None and len(requests):
        in_win = requests["in_window"].to_numpy(dtype=bool)
        if in_win.any():
            capped = requests["capped"].fillna(False).to_numpy(dtype=bool) if "capped" in requests \
                else np.zeros(len(requests), dtype=bool)
            out["capped_share"] = float(capped[in_win].mean())
            sent = requests["sent_at"].to_numpy(dtype=float)
            window = t1 - t0
            if window > 0:
                out["received_rate"] = float(((sent >= t0) & (sent < t1)).sum() / window)
    return out


def window_figures(row: Mapping[str, Any], tel: TelemetryIndex, slots: int | None,
                   requests: pd.DataFrame | None = None, *, server: Mapping[str, Any] | None = None,
                   figures: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The window's figures the rules read beyond the step row: running at the slot count, GPU
    utilisation, the arrivals held at the client cap (from the step's requests, or their `figures`
    made by `request_figures`) and, with `server`'s KV cache size, whether the head-of-line request
    fitted the free KV blocks (`kv_head_of_line`)."""
    t0, t1 = _f(row.get("window_start")), _f(row.get("window_end"))
    own = figures if figures is not None else request_figures(requests, t0, t1)
    out: dict[str, Any] = {"running_at_slots_share": math.nan, "running_peak": math.nan,
                           "gpu_utilization_mean": math.nan, "capped_share": own["capped_share"],
                           "received_rate": own["received_rate"], "telemetry": {}}
    if server is not None and not (math.isnan(t0) or math.isnan(t1)):
        prompt = own["prompt_tokens"]
        out.update(_kv_figures(server_samples(tel, t0, t1), server,
                               prompt if _known(prompt) else _f(row.get("input_tokens_mean"))))
    if not (math.isnan(t0) or math.isnan(t1)):
        _, values, sources = tel.samples("running", t0, t1)
        if values.size:
            out["running_peak"] = float(pd.Series(values).groupby(sources).max().sum())
            if slots:
                out["running_at_slots_share"] = float(np.mean(values >= plateau_floor(slots)))
        out["gpu_utilization_mean"] = tel.gauge_mean("gpu_utilization", t0, t1)
        out["telemetry"] = {m: tel.has(m) for m in ("running", "waiting", "kv_usage", "preemptions_total",
                                                     "queue_time_seconds_count", "gpu_utilization")}
    return out


def _common(row: Mapping[str, Any], window: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    given = row.get("split")
    split = given if isinstance(given, Mapping) else {}
    return {
        "slots": server.get("slots"), "slots_source": server.get("slots_source"),
        "running_mean": _round(row.get("running_mean"), 3), "running_peak": _round(window.get("running_peak"), 3),
        "running_at_slots_share": _round(window.get("running_at_slots_share"), 3),
        "waiting_mean": _round(row.get("waiting_mean"), 3), "kv_usage_peak": _round(row.get("kv_usage_peak"), 4),
        "preemptions": _round(row.get("preemptions"), 1),
        "server_queue_mean_s": _round(split.get("server_queue_mean_s")),
        "prefill_mean_s": _round(split.get("prefill_mean_s")),
        "prefill_share": _round(_prefill_share({"server_queue_mean_s": split.get("server_queue_mean_s"),
                                                "prefill_mean_s": split.get("prefill_mean_s")}), 3),
        "capped_share": _round(window.get("capped_share"), 4),
        "client_wait_p95_s": _round(row.get("client_wait_p95_s")),
        "gpu_utilization_mean": _round(window.get("gpu_utilization_mean"), 3),
        **_kv_evidence(window, server),
    }


def _kv_evidence(window: Mapping[str, Any], server: Mapping[str, Any]) -> dict[str, Any]:
    """The head-of-line figures, only where the server gave its KV cache size (cache_config_info)."""
    if not _known(window.get("kv_head_blocks")):
        return {}
    return {"kv_num_gpu_blocks": server.get("num_gpu_blocks"), "kv_block_size": server.get("block_size"),
            "kv_blocked_share": _round(window.get("kv_blocked_share"), 3),
            "kv_free_blocks_min": _round(window.get("kv_free_blocks_min"), 0),
            "kv_head_blocks": _round(window.get("kv_head_blocks"), 0),
            "kv_head_prompt_tokens": _round(window.get("kv_head_prompt_tokens"), 1)}


def _limit(kind: str, evidence: dict[str, Any], advice: str | None = None) -> dict[str, Any]:
    return {"kind": kind, "evidence": evidence, "advice": advice or _ADVICE[kind]}


def _prefill_share(evidence: Mapping[str, Any]) -> float:
    queue, prefill = _f(evidence.get("server_queue_mean_s")), _f(evidence.get("prefill_mean_s"))
    total = queue + prefill
    return prefill / total if total > 0 else math.nan


def classify_limit(row: Mapping[str, Any], window: Mapping[str, Any], server: Mapping[str, Any], *,
                   baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`{kind, evidence, advice}` of one step (rules in the module docstring). `row`: the step row
    (`Analysis.steps`); `window`: `window_figures`; `server`: `server_info`; `baseline`: the lightest
    judged step of the same run (TPOT and batch there, for `decode`)."""
    own = row.get("limit")
    evidence = _common(row, window, server)
    if isinstance(own, Mapping) and own.get("kind") == "client_cap":  # the verdict's check: its figures win
        return {**own, "evidence": {**evidence, **dict(own.get("evidence") or {})}}
    verdict = str(row.get("verdict") or "")
    share, wait = _f(window.get("capped_share")), _f(row.get("client_wait_p95_s"))
    if share >= CLIENT_CAP_SHARE and wait >= CLIENT_WAIT_MIN_S:
        evidence.update(max_concurrency=server.get("client_max_concurrency"),
                        offered_rate=_round(row.get("offered_rate")),
                        received_rate=_round(window.get("received_rate")))
        return _limit("client_cap", evidence)
    if verdict == "invalid":
        evidence["invalid"] = [str(c.get("check")) for c in row.get("invalid_reasons") or []
                               if isinstance(c, Mapping)] or list(row.get("failing") or [])
        return _limit("generator", evidence)
    if verdict in ("pass", "not_run", ""):
        return _limit("none", evidence)
    dims = [_dim(k) for k in (list(row.get("failing") or []) + list(row.get("undecided_targets") or [])
                              + list(row.get("over_on_few_samples") or []))]
    llamacpp = server.get("flavor") == "llamacpp"
    preempted = _f(evidence["preemptions"]) > 0
    waiting = _f(evidence["waiting_mean"])
    kv_full = not llamacpp and _f(evidence["kv_usage_peak"]) >= KV_FULL and waiting >= WAITING_MIN
    blocked = not llamacpp and _f(evidence.get("kv_blocked_share")) >= KV_BLOCKED_SHARE and waiting >= WAITING_MIN
    if preempted or kv_full or blocked:
        evidence["kv_decided_by"] = "preemptions" if preempted else "head_of_line" if blocked else "usage_peak"
        return _limit("kv_cache", evidence)
    if "oom" in dims:  # the server said it ran out of GPU memory
        evidence.update(oom=_round(row.get("oom"), 0), gpu_memory_peak_bytes=_round(row.get("gpu_memory_peak_bytes"), 0))
        return _limit("gpu", evidence, OOM_ADVICE)
    decode = dims and dims[0] in _DECODE_DIMS
    if decode:
        return _limit("decode", _decode_evidence(evidence, row, baseline))
    has_running = bool(window.get("telemetry", {}).get("running")) or _known(evidence["running_mean"])
    full = _f(evidence["running_at_slots_share"]) >= SLOTS_FULL_SHARE
    if has_running and full and waiting >= WAITING_MIN:
        return _limit("batch_slots", evidence)
    prefill = _f(evidence["prefill_share"])
    if not has_running and _known(prefill) and 1.0 - prefill >= QUEUE_SHARE and \
            (row.get("split") or {}).get("basis", {}).get("server_queue") == "per_request":
        return _limit("batch_slots", evidence)  # Ollama: the queue it reports per request is a slot wait
    if any(d in _TTFT_DIMS for d in dims) and prefill >= PREFILL_SHARE:
        evidence.update(input_tokens_mean=_round(row.get("input_tokens_mean"), 1),
                        max_num_batched_tokens=server.get("max_num_batched_tokens"))
        return _limit("prefill", evidence)
    if any(d in _DECODE_DIMS for d in dims):
        return _limit("decode", _decode_evidence(evidence, row, baseline))
    if _f(evidence["gpu_utilization_mean"]) >= GPU_BUSY and server.get("gpus") != 0:
        return _limit("gpu", evidence)
    if not dims:
        return _limit("none", evidence)  # insufficient or inconclusive, and nothing saturated
    evidence["missing"] = _missing(evidence, window, server)
    return _limit("unknown", evidence)


def _decode_evidence(evidence: dict[str, Any], row: Mapping[str, Any],
                     baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """TPOT p95 and, when another decode target failed (a TPOT p99, an ITL p95), that figure too
    (`decode_key`, `decode_value_s`, `baseline_decode_value_s`): the sentence quotes what failed."""
    base = baseline or {}
    keys = list(row.get("failing") or []) + list(row.get("undecided_targets") or []) + \
        list(row.get("over_on_few_samples") or [])
    key = next((str(k) for k in keys if _dim(k) in _DECODE_DIMS and slo_dims.parse_threshold_key(str(k))),
               "tpot_p95")
    return {**evidence, "tpot_p95_s": _round(row.get("tpot_p95_s")),
            "baseline_tpot_p95_s": _round(base.get("tpot_p95_s")),
            "decode_key": key, "decode_value_s": _round(row.get(f"{key}_s")),
            "baseline_decode_value_s": _round(base.get(f"{key}_s")),
            "baseline_running_mean": _round(base.get("running_mean"), 3),
            "baseline_step": base.get("label")}


def _missing(evidence: Mapping[str, Any], window: Mapping[str, Any], server: Mapping[str, Any]) -> list[str]:
    """What the server did not give that a rule needed."""
    out = []
    if not _known(evidence.get("running_mean")):
        out.append("running/waiting requests (the server's /metrics)")
    if server.get("slots") is None:
        out.append("the slot count (conditions.max_num_seqs, or ollama_num_parallel)")
    if not _known(evidence.get("kv_usage_peak")) and server.get("flavor") != "llamacpp":
        out.append("KV cache usage")
    if not _known(evidence.get("server_queue_mean_s")):
        out.append("the server queue time (vLLM queue-time histogram, Ollama durations, llama.cpp timings)")
    if not _known(window.get("gpu_utilization_mean")) and server.get("gpus") != 0:
        out.append("GPU utilisation (telemetry.gpu: nvml or a DCGM exporter)")
    if not out:
        out.append("nothing: no resource was saturated in the figures the server gave")
    return out


def _baseline(steps: pd.DataFrame) -> dict[str, Any] | None:
    judged = steps[steps["verdict"].isin(("pass", "fail", "inconclusive", "insufficient"))] \
        if "verdict" in steps else steps.iloc[0:0]
    if judged.empty:
        return None
    rate = pd.to_numeric(judged["offered_rate"], errors="coerce").to_numpy(dtype=float) \
        if "offered_rate" in judged else np.full(len(judged), np.nan)
    lightest = int(np.nanargmin(rate)) if not np.isnan(rate).all() else 0
    return _row_dict(judged.iloc[lightest])


def _row_dict(row: pd.Series) -> dict[str, Any]:
    """A step row as the rules read it: its columns by name."""
    return {str(k): v for k, v in row.items()}


def step_limits(steps: pd.DataFrame, requests: pd.DataFrame | None, tel: TelemetryIndex,
                conditions: Mapping[str, Any] | None, *, figures: Mapping[str, Mapping[str, float]] | None = None,
                prompt_tokens: Callable[[], float] | None = None) -> list[dict[str, Any] | None]:
    """The `limit` of every step row (None for a step that did not run), in row order. The requests
    are read for each step's `request_figures` and the run's median prompt; or, without them (a run
    analysed a step at a time), `figures` gives each step's by label and `prompt_tokens()` the median
    prompt of every request (asked only when the slot count must be inferred)."""
    if steps.empty:
        return []
    server = server_info(conditions, tel)
    if server["slots"] is None:  # the evidence's own slot count: the running plateau
        # the prompt only counts with a block size (`head_of_line_blocks`): not read without one
        prompt = (math.nan if not _f(server["block_size"]) > 0 else prompt_tokens() if prompt_tokens is not None
                  else _prompt_tokens(requests, in_window=False))
        need = head_of_line_blocks(prompt, _f(server["block_size"]), server["max_num_batched_tokens"])
        slots, _ = infer_slots(server_samples(tel), num_blocks=server["num_gpu_blocks"], need_blocks=need)
        if slots is not None:
            server.update(slots=slots, slots_source=INFERRED_SLOTS)
    baseline = _baseline(steps)
    groups = (requests.groupby(requests["step"].astype(str), sort=False).indices
              if figures is None and requests is not None and len(requests) else {})
    out: list[dict[str, Any] | None] = []
    for _, row in steps.iterrows():
        if row.get("verdict") == "not_run" or row.get("status") == "not_run":
            out.append(None)
            continue
        step = _row_dict(row)
        if figures is not None:
            window = window_figures(step, tel, server["slots"], server=server,
                                    figures=figures.get(str(row["label"])) or request_figures(None, 0.0, 0.0))
        else:
            pos = groups.get(str(row["label"]))
            own = requests.iloc[pos] if pos is not None and requests is not None else None
            window = window_figures(step, tel, server["slots"], own, server=server)
        out.append(classify_limit(step, window, server, baseline=baseline))
    return out


def _pct(value: Any) -> str:
    """A 0-1 share as a percent, with one decimal under 10% unless whole ("0.8%", "3%", "94%"), as the
    charts draw it: a KV cache at 0.008 is "0.8%", never "1%"."""
    pct = _f(value) * 100
    if 0 < abs(pct) < 10 and round(pct) != round(pct, 1):
        return f"{pct:.1f}%"
    return f"{pct:.0f}%"


def _s(value: Any) -> str:
    v = _f(value)
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.1f} s"


def limit_sentence(limit: Mapping[str, Any] | None) -> str:
    """The limit in words with its evidence and its lever, e.g. "all 6 batch slots busy and requests
    waiting 0.9 s on average in the server queue, KV cache at 14%; the lever: raise max_num_seqs ..."."""
    if not limit:
        return ""
    kind, ev = str(limit.get("kind")), limit.get("evidence") or {}
    parts: list[str] = []
    if kind == "batch_slots":
        slots = ev.get("slots")
        parts.append(f"all {slots} batch slots busy" if slots else
                     "the batch slots busy (slot count not recorded)")
        if slots and ev.get("slots_source") == INFERRED_SLOTS:
            parts[-1] += (f" ({slots} is the running plateau while requests waited, inferred: "
                          "conditions.max_num_seqs would confirm it)")
        queue = ev.get("server_queue_mean_s")
        waiting = ev.get("waiting_mean")
        if _known(queue):
            parts[-1] += f" and requests waiting {_s(queue)} on average in the server queue"
        elif _known(waiting):
            parts[-1] += f" and {_f(waiting):.1f} requests waiting on average"
        if _known(ev.get("kv_usage_peak")):
            parts.append(f"KV cache at {_pct(ev['kv_usage_peak'])}")
    elif kind == "kv_cache":
        if ev.get("kv_decided_by") == "head_of_line":
            prompt = f" for a {_f(ev['kv_head_prompt_tokens']):.0f}-token prompt" \
                if _known(ev.get("kv_head_prompt_tokens")) else ""
            parts.append(f"KV cache full: the next waiting request needed {_f(ev.get('kv_head_blocks')):.0f} "
                         f"blocks{prompt} and fewer were free (as few as {_f(ev.get('kv_free_blocks_min')):.0f} "
                         f"of {_f(ev.get('kv_num_gpu_blocks')):.0f}) in {_pct(ev.get('kv_blocked_share'))} "
                         "of the samples with requests waiting")
        if _known(ev.get("kv_usage_peak")):
            parts.append(f"KV cache at {_pct(ev['kv_usage_peak'])} at its peak")
        if _f(ev.get("preemptions")) > 0:
            parts.append(f"{_f(ev['preemptions']):.0f} requests preempted")
        if _known(ev.get("waiting_mean")):
            parts.append(f"{_f(ev['waiting_mean']):.1f} requests waiting on average")
    elif kind == "prefill":
        parts.append(f"prefill to first token {_s(ev.get('prefill_mean_s'))} on average against "
                     f"{_s(ev.get('server_queue_mean_s'))} of server queue")
        if _known(ev.get("input_tokens_mean")):
            parts.append(f"prompts of {_f(ev['input_tokens_mean']):.0f} tokens")
    elif kind == "decode":
        key = str(ev.get("decode_key") or "tpot_p95")
        value, base = (ev.get("decode_value_s"), ev.get("baseline_decode_value_s")) if "decode_key" in ev \
            else (ev.get("tpot_p95_s"), ev.get("baseline_tpot_p95_s"))
        text = f"{_key_text(key)} {_s(value)}"
        if _known(base):
            text += f" against {_s(base)} at the lightest step"
        if _known(ev.get("running_mean")):
            text += f", with {_f(ev['running_mean']):.1f} requests in the batch on average"
        parts.append(text)
    elif kind == "gpu" and _f(ev.get("oom")) > 0:
        parts.append(f"{_f(ev['oom']):.0f} requests failed out of GPU memory")
    elif kind == "gpu":
        parts.append(f"GPU {_pct(ev.get('gpu_utilization_mean'))} busy on average")
    elif kind == "client_cap":
        cap = ev.get("max_concurrency")
        parts.append(f"{_pct(ev.get('capped_share'))} of arrivals waited for one of the client's "
                     f"{cap if cap else ''} connection slots (client wait p95 {_s(ev.get('client_wait_p95_s'))})"
                     .replace("  ", " "))
        if _known(ev.get("received_rate")):
            parts.append(f"the server received {_f(ev['received_rate']):.2f} req/s")
    elif kind == "generator":
        parts.append("the generator did not deliver the load (" + ", ".join(ev.get("invalid") or []) + ")")
    elif kind == "unknown":
        parts.append("the limit cannot be told: missing " + "; ".join(ev.get("missing") or []))
    elif kind == "none":
        return "nothing limited it inside the SLO"
    return ", ".join(parts) + f"; the lever: {limit.get('advice')}"


def add_limits(summary: dict, steps: pd.DataFrame) -> dict:
    """`summary` with each judged step entry given its row's `limit` (JSON-ready); in place, returned."""
    from analysis.summary import json_value

    if "limit" not in steps:
        return summary
    for entry, limit in zip(summary.get("steps", []), steps["limit"], strict=False):
        if isinstance(limit, Mapping):
            entry["limit"] = json_value(dict(limit))
    return summary


def _key_text(key: str) -> str:
    """`tpot_p99` -> "TPOT p99" (the SLO registry's display name and the percentile)."""
    parsed = slo_dims.parse_threshold_key(key)
    dim = slo_dims.by_name(parsed[0]) if parsed else None
    return f"{dim.display} p{parsed[1]:g}" if dim and parsed else key


def _failing_text(key: str) -> str:
    """A failing key's name: `tpot_p95` -> "TPOT p95", `reject_ratio` -> "Reject ratio"."""
    parsed = slo_dims.parse_threshold_key(key)
    dim = slo_dims.by_name(parsed[0] if parsed else key)
    return (f"{dim.display} p{parsed[1]:g}" if parsed else dim.display) if dim else key


def limit_answer(row: Mapping[str, Any], rate: float | None = None) -> str:
    """The answer's sentence for the first failing step: what broke first, at what rate, and its limit,
    e.g. "TTFT p95 broke first at about 4.6 req/s: all 6 batch slots busy ...; the lever: ..."."""
    limit = row.get("limit")
    failing = list(row.get("failing") or [])
    if not isinstance(limit, Mapping):
        return ""
    # the first target that failed, and the one the limit's sentence quotes when that is another one
    # ("Reject ratio and TPOT p95 broke first ...: TPOT p95 91 ms against 46 ms ..."): never a figure
    # for a target not named
    keys = [str(failing[0])] if failing else []
    quoted = (limit.get("evidence") or {}).get("decode_key") if limit.get("kind") == "decode" else None
    if keys and quoted and quoted != keys[0] and quoted in failing:
        keys.append(str(quoted))
    what = " and ".join(_failing_text(key) for key in keys) or "the step"
    rate = _f(row.get("offered_rate")) if rate is None else rate
    at = f" at about {rate:.3g} req/s" if _known(rate) else ""
    return f"{what[:1].upper()}{what[1:]} broke first{at}: {limit_sentence(limit)}"
