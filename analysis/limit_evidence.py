"""Limits read from the server's gauges alone, with no `conditions` (METRICS.md "What limited a step").

Two facts the evidence gives without a word from the user:

- **The slot count** is the running plateau: while requests wait and the KV cache could hold the next
  one, a server runs as many requests as it has slots, so the highest `running` sample is the slot
  count when running sits on it in at least `PLATEAU_SHARE` of the samples with requests waiting
  (`infer_slots`). "On it" allows `plateau_floor`: the gauges are set once per engine step, so a
  sample taken after a request finished and before the next step admitted a waiting one reads a slot
  short (an eighth of the slots, rounded down, for the many finishes per step of a large batch). It is said to be inferred; `conditions.max_num_seqs` (or the server's own figure)
  replaces it.
- **A full KV cache** is one whose free blocks cannot hold the head-of-line request: vLLM admits a
  waiting request only when the blocks of its first chunk (its prompt, up to `max_num_batched_tokens`)
  are free, so with `num_gpu_blocks` and `block_size` (`vllm:cache_config_info`) the cache is full at
  a sample where requests wait and `num_gpu_blocks x (1 - kv_cache_usage_perc)` is under
  `ceil(prompt tokens / block_size)`, whatever the percentage (`kv_head_of_line`). The prompt is the
  median of the step's own requests (the records' `input_tokens`, the server's count); prefix-cache hits,
  which would need fewer blocks, are not counted.

Pure functions over the telemetry index: `server_samples` aligns `running`, `waiting` and `kv_usage` of
one scrape (same time and source) in a frame, and the rules read that frame.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.telemetry_stats import TelemetryIndex

__all__ = ["KV_BLOCKED_SHARE", "PLATEAU_MIN_SAMPLES", "PLATEAU_SHARE", "head_of_line_blocks", "infer_slots",
           "kv_blocked", "kv_head_of_line", "plateau_floor", "server_samples"]

#: share of the samples with requests waiting in which running sits at its peak for that peak to be the
#: slot count
PLATEAU_SHARE = 0.5
#: samples with requests waiting needed before a plateau is read at all
PLATEAU_MIN_SAMPLES = 4
#: share of the window's samples with requests waiting in which the head-of-line request did not fit the
#: free KV blocks for the cache to count as full
KV_BLOCKED_SHARE = 0.5

_COLUMNS = ["t", "source", "running", "waiting", "kv_usage"]


def plateau_floor(slots: float) -> float:
    """The least `running` that counts as all `slots` busy: a slot short per eight slots (none under 8)."""
    return slots - math.floor(slots / 8) - 1e-9


def server_samples(tel: TelemetryIndex, t0: float = -math.inf, t1: float = math.inf) -> pd.DataFrame:
    """One row per scrape in [t0, t1) (time and source): `running`, `waiting`, `kv_usage` (0-1 share of
    KV blocks), NaN where that scrape lacked one. Empty when the server gave neither gauge."""
    got = {metric: tel.samples(metric, t0, t1) for metric in ("running", "waiting", "kv_usage")}
    if not len(got["running"][0]) and not len(got["waiting"][0]):  # no frames built for nothing (a run without telemetry)
        return pd.DataFrame(columns=_COLUMNS)
    frames = [pd.DataFrame({"t": t, "source": source, metric: value}).set_index(["t", "source"])
              for metric, (t, value, source) in got.items()]
    joined = frames[0].join(frames[1], how="outer").join(frames[2], how="left")
    return joined.reset_index()[_COLUMNS]


def head_of_line_blocks(prompt_tokens: float, block_size: float,
                        max_num_batched_tokens: float | None = None) -> int | None:
    """KV blocks a waiting request needs before it is admitted: its prompt (its first chunk when the
    prompt is over the token budget) over the block size, rounded up; None when a figure is unknown."""
    if not (prompt_tokens > 0 and block_size > 0):
        return None
    tokens = prompt_tokens
    if max_num_batched_tokens is not None and max_num_batched_tokens > 0:
        tokens = min(tokens, max_num_batched_tokens)
    return int(math.ceil(tokens / block_size))


def kv_blocked(samples: pd.DataFrame, *, num_blocks: float, need_blocks: float) -> np.ndarray:
    """Per sample: requests waited and the free blocks could not hold the head-of-line request."""
    waiting = samples["waiting"].to_numpy(dtype=float)
    free = num_blocks * (1.0 - samples["kv_usage"].to_numpy(dtype=float))
    return (waiting >= 1) & (free < need_blocks)  # NaN KV usage compares False: not blocked


def kv_head_of_line(samples: pd.DataFrame, *, num_blocks: float | None, block_size: float | None,
                    prompt_tokens: float, max_num_batched_tokens: float | None = None) -> dict[str, float]:
    """The head-of-line figures of a window: `kv_blocked_share` (of the samples with requests waiting,
    the share where the free blocks could not hold the next request), `kv_free_blocks_min`,
    `kv_head_blocks` (what that request needs), `kv_head_prompt_tokens`; NaN where not readable."""
    nan = math.nan
    out = {"kv_blocked_share": nan, "kv_free_blocks_min": nan, "kv_head_blocks": nan,
           "kv_head_prompt_tokens": prompt_tokens if prompt_tokens > 0 else nan}
    need = head_of_line_blocks(prompt_tokens, block_size or nan, max_num_batched_tokens)
    if need is None or not num_blocks or samples.empty:
        return out
    out["kv_head_blocks"] = float(need)
    known = samples[samples["kv_usage"].notna() & samples["waiting"].notna()]
    if known.empty:
        return out
    out["kv_free_blocks_min"] = float(np.floor(num_blocks * (1.0 - known["kv_usage"].max()) + 1e-9))
    waited = known["waiting"].to_numpy(dtype=float) >= 1
    if waited.any():
        out["kv_blocked_share"] = float(kv_blocked(known, num_blocks=num_blocks, need_blocks=need)[waited].mean())
    return out


def infer_slots(samples: pd.DataFrame, *, num_blocks: float | None = None,
                need_blocks: float | None = None) -> tuple[int | None, float]:
    """`(slots, share)`: the running plateau of a run and the share of its samples with requests waiting
    that sat on it, or `(None, share)` when there is no plateau (too few samples with requests waiting,
    or running below its peak in most of them). Samples where the head-of-line request did not fit the
    free KV blocks (when the cache size is known) never count as on the plateau: there the KV cache,
    not the slots, held running down."""
    if samples.empty:
        return None, math.nan
    rows = samples[samples["running"].notna() & (samples["waiting"].fillna(0) >= 1)]
    if len(rows) < PLATEAU_MIN_SAMPLES:
        return None, math.nan
    peak = float(samples["running"].max())
    if not peak >= 1:
        return None, math.nan
    on = rows["running"].to_numpy(dtype=float) >= plateau_floor(peak)
    if num_blocks and need_blocks:
        on &= ~kv_blocked(rows, num_blocks=num_blocks, need_blocks=need_blocks)
    share = float(on.mean())
    return (int(round(peak)) if share >= PLATEAU_SHARE else None), share
