"""An experiment for issue 41 (bench only, not the product): each step's share of TTFTs over the target
read with an arrival-only control variate, measured in virtual time.

Near the knee a step's share over the threshold is carried by a few queue episodes, and which episodes a
window sees is decided by its arrival times, which the tool itself drew. So the share is read against a
model of the queue fed with the same arrivals (`Queue`: `slots` deterministic servers, first come first
served, over every arrival the run sent, from the run's start),

    share' = Y - (C - E[C | history])

`Y` the step's share of completed TTFTs over the threshold `L`, `C` the share of the same requests whose
model wait is over `L`, `E[C | history]` the model's share over `reps` replays of the step's arrivals from
the model's state at the step's start. `replay="exact"`: the same count in the warm-up and the window at
sorted uniform times (the tool's `poisson_exact` given its counts), so for any model the correction has mean
zero and `share'` is unbiased for the step's own share, with less spread the better the model follows the
server. `replay="poisson"` (the default): a Poisson process at the window's realised rate, counts free:
`E[C]` is then the model's share under the truth's process, and the correction also carries the model's
estimate of how much lighter a window of fixed count reads than the steady state (bench/README.md: 30%
at 3.47 req/s on the user config's sim); unbiased only as far as the model is right.

The model is fitted on the run's own requests (`fit_queue`): the one-server throughput on the `MUS` grid
whose waits over `L` disagree with `TTFT > L` on the fewest judged requests, then each server count of
`SLOTS` near it, taken only with under `SLOT_MARGIN` x the one server's disagreements; with fewer than
`min_over` judged TTFTs over `L` (`MIN_OVER`, 0: always fitted) the raw shares stand.
A step keeps its raw share where the adjusted one's variance (the autocorrelation-aware variance of the
mean of `1[TTFT > L] - 1[wait > L]`, plus the replays' own) is not under the raw share's (from its Wilson
interval's effective trials); the adjusted variance is floored at `RAW_FLOOR` x the raw one (an interval
at least half as wide). The adjusted share enters `estimate_knee` in place of the raw one with a Wilson
interval on the trials `f (1 - f) / variance`; nothing else in the estimator changes.

`install()` wraps `virtual_search.judge_row` (and `virtual_auto`'s) to keep each row's arrivals; pass
`estimate(slo)` as the searches' `estimate=` (bench/user_config_case.py and bench/knee_accuracy.py
`--control-variate`). bench/README.md (2026-12-07, knee41c) has what it measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.intervals import _z, autocorrelation_time, effective_trials, wilson
from analysis.knee import estimate_knee

#: the key a wrapped `judge_row` keeps (frame, spec, start) under in its row
CTX = "_cv_ctx"
#: the service rates tried when fitting the model (req/s), a 2% geometric grid
MUS = np.exp(np.arange(math.log(0.05), math.log(200.0), math.log(1.02)))

#: the adjusted share's variance is at least this share of the raw share's (its interval at least half as wide)
RAW_FLOOR = 0.25
#: the model is fitted only with at least this many judged TTFTs over the target, else the raw shares stand
MIN_OVER = 0
#: the server counts the model is fitted with (one server on the whole grid, the others near its throughput)
SLOTS = (1, 2, 4, 8, 16, 32)
#: another server count is taken only with fewer disagreements than this share of the one server's
SLOT_MARGIN = 0.6

_installed = False
_DEBUG = bool(os.environ.get('CV_DEBUG'))  # prints each fit and adjusted step


def virtual_waits(arrivals: np.ndarray, service_s: np.ndarray | float, work_s: float = 0.0,
                  prev_s: float | None = None) -> np.ndarray:
    """Lindley's waits of a single deterministic server: each row of `arrivals` (sorted seconds, (M, n)) with
    its own `service_s` ((M,) or a scalar), from `work_s` seconds of work left just after `prev_s`."""
    arr = np.atleast_2d(np.asarray(arrivals, dtype=float))
    s = np.broadcast_to(np.asarray(service_s, dtype=float), (arr.shape[0],))
    waits = np.empty_like(arr)
    work = np.full(arr.shape[0], work_s)
    prev = np.full(arr.shape[0], arr[0, 0] if prev_s is None and arr.size else (prev_s or 0.0))
    for j in range(arr.shape[1]):
        work = np.maximum(0.0, work - (arr[:, j] - prev))
        waits[:, j] = work
        work = work + s
        prev = arr[:, j]
    return waits


def slot_waits(arrivals: np.ndarray, service_s: np.ndarray | float, slots: int,
               free_s: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(waits, free): first-come first-served over `slots` deterministic servers, each row of `arrivals`
    ((M, n) sorted seconds) with its own `service_s` per request ((M,) or a scalar), from the servers free at
    `free_s` ((slots,) or (M, slots) absolute seconds; all free by default); `free` the times after the last."""
    arr = np.atleast_2d(np.asarray(arrivals, dtype=float))
    m = arr.shape[0]
    s = np.broadcast_to(np.asarray(service_s, dtype=float), (m,))
    free = np.full((m, slots), -np.inf) if free_s is None else np.array(np.broadcast_to(free_s, (m, slots)), dtype=float)
    waits = np.empty_like(arr)
    rows = np.arange(m)
    for j in range(arr.shape[1]):
        k = np.argmin(free, axis=1)
        start = np.maximum(arr[:, j], free[rows, k])
        waits[:, j] = start - arr[:, j]
        free[rows, k] = start + s
    return waits, free


def install() -> None:
    """Wrap the virtual searches' `judge_row` so each judged row keeps (frame, spec, start) under `CTX`."""
    global _installed
    if _installed:
        return
    import llmload.sim.virtual_auto as va
    import llmload.sim.virtual_search as vs

    original = vs.judge_row

    def judge_row(frame: Any, spec: Any, start_s: float, slo: Any) -> dict:
        row = original(frame, spec, start_s, slo)
        row[CTX] = (frame, spec, start_s)
        return row

    vs.judge_row = judge_row
    va.judge_row = judge_row
    _installed = True


def _windows(rows: list[Mapping], frame: Any) -> np.ndarray:
    """A mask over `frame`'s requests: those inside a judged row's window (by arrival), completed."""
    arrival = frame["arrival_s"].to_numpy()
    step = frame["step"].to_numpy()
    mask = np.zeros(len(frame), dtype=bool)
    for row in rows:
        _, spec, start_s = row[CTX]
        ws = start_s + spec.warmup_s
        mask |= (step == spec.index) & (arrival >= ws) & (arrival < ws + float(spec.duration_s))
    return mask & np.isfinite(frame["ttft_s"].to_numpy()) & np.isfinite(frame["e2e_s"].to_numpy())


@dataclass(frozen=True)
class Queue:
    """The model: `slots` deterministic servers, first come first served, `service_s` a request each."""

    service_s: float
    slots: int = 1

    def state(self, history: np.ndarray) -> Any:
        """The model's state after the sorted arrivals `history` (None: idle)."""
        if not history.size:
            return None
        if self.slots == 1:
            return float(virtual_waits(history, self.service_s)[0][-1]) + self.service_s, float(history[-1])
        return slot_waits(history, self.service_s, self.slots)[1][0]

    def waits(self, arrivals: np.ndarray, state: Any, start_s: float) -> np.ndarray:
        """The waits ((M, n)) of each row of sorted `arrivals` from `state` (taken at or before `start_s`)."""
        if self.slots == 1:
            return virtual_waits(arrivals, self.service_s, *(state or (0.0, start_s)))
        return slot_waits(arrivals, self.service_s, self.slots, state)[0]


def fit_queue(frame: Any, judged: np.ndarray, limit_s: float,
              slots: tuple[int, ...] = (1,)) -> tuple[Queue, int, int] | None:
    """(queue, disagreements, over): the model whose waits over `limit_s` disagree with `TTFT > limit_s` on
    the fewest `judged` requests: one server on the `MUS` grid, then each other count of `slots` at
    throughputs from 0.6 to 1.6 times the one server's; None when no judged TTFT is over."""
    over = frame["ttft_s"].to_numpy()[judged] > limit_s
    if not over.any():
        return None
    arrival = frame["arrival_s"].to_numpy()
    waits = virtual_waits(np.broadcast_to(arrival, (len(MUS), len(arrival))), 1.0 / MUS)
    miss = ((waits[:, judged] > limit_s) != over).sum(axis=1)
    best = int(np.argmin(miss))
    queue, fewest = Queue(float(1.0 / MUS[best])), int(miss[best])
    bar = SLOT_MARGIN * fewest  # more servers only where they follow the exceedances clearly better
    for c in (c for c in slots if c > 1):
        mus = MUS[best] * np.exp(np.linspace(math.log(0.6), math.log(1.6), 49))
        waits = slot_waits(np.broadcast_to(arrival, (len(mus), len(arrival))), c / mus, c)[0]
        miss = ((waits[:, judged] > limit_s) != over).sum(axis=1)
        i = int(np.argmin(miss))
        if miss[i] < min(fewest, bar):
            queue, fewest = Queue(float(c / mus[i]), c), int(miss[i])
    return queue, fewest, int(over.sum())


def _replay_share(spec: Any, start_s: float, step_arrivals: np.ndarray, window: tuple[float, float],
                  queue: Queue, state: Any, limit_s: float, *, reps: int, replay: str) -> tuple[float, float]:
    """(E[C | history], its Monte Carlo variance): the model's share over `limit_s` in the window, over
    `reps` replays of the step's arrivals from the model's `state` at the step's start."""
    ws, we = window
    rng = np.random.default_rng(int(spec.index) + 7919)
    n_warm, n_win = int((step_arrivals < ws).sum()), int(((step_arrivals >= ws) & (step_arrivals < we)).sum())
    if replay == "exact":  # the counts fixed, uniform times: the tool's own process given its counts
        times = np.concatenate([start_s + np.sort(rng.uniform(0.0, spec.warmup_s, (reps, n_warm)), axis=1),
                                ws + np.sort(rng.uniform(0.0, we - ws, (reps, n_win)), axis=1)], axis=1)
        each = (queue.waits(times, state, start_s)[:, n_warm:] > limit_s).mean(axis=1)
        return float(each.mean()), float(each.var()) / reps
    rate = n_win / (we - ws)  # a Poisson process at the window's realised rate, counts free (the truth's)
    times = start_s + np.cumsum(rng.exponential(1.0 / rate, (reps, int(rate * (we - start_s) * 1.5) + 30)), axis=1)
    inside = (times >= ws) & (times < we)
    over = (queue.waits(times, state, start_s) > limit_s) & inside
    each = over.sum(axis=1) / np.maximum(inside.sum(axis=1), 1)
    return float(over.sum() / max(inside.sum(), 1)), float(each.var()) / reps


def adjusted(row: dict, frame: Any, queue: Queue, key: str, limit_s: float, confidence: float, *, reps: int,
             raw_floor: float, replay: str) -> dict:
    """`row` with `<key>_over` (and its interval) read with the control variate (module docstring); the
    row as it was where that would not narrow its interval."""
    _, spec, start_s = row[CTX]
    raw_share, raw_high = _num(row.get(f"{key}_over")), _num(row.get(f"{key}_over_high"))
    if raw_share is None or raw_high is None:
        return row
    arrival = frame["arrival_s"].to_numpy()
    mine = frame["step"].to_numpy() == spec.index
    ws, we = start_s + spec.warmup_s, start_s + spec.warmup_s + float(spec.duration_s)
    state = queue.state(arrival[arrival < start_s])
    step_arrivals = arrival[mine]
    ttft = frame["ttft_s"].to_numpy()[mine]
    done = ((step_arrivals >= ws) & (step_arrivals < we) & np.isfinite(ttft)
            & np.isfinite(frame["e2e_s"].to_numpy()[mine]))
    n = int(done.sum())
    if n < 5:
        return row
    own = queue.waits(step_arrivals, state, start_s)[0]
    exceed = (ttft[done] > limit_s).astype(float)
    model = (own[done] > limit_s).astype(float)
    expected, mc_var = _replay_share(spec, start_s, step_arrivals, (ws, we), queue, state, limit_s, reps=reps,
                                     replay=replay)
    share = min(1.0, max(0.0, float(exceed.mean() - model.mean() + expected)))
    diff = exceed - model
    var = float(diff.var()) * autocorrelation_time(diff) / n + mc_var
    z = _z(confidence)
    raw_var = max(share * (1.0 - share), 1.0 / n) / (effective_trials(raw_share, raw_high, z) or n)
    if var >= raw_var:
        return row  # the model does not narrow this step's share: the raw one stands
    var = max(var, raw_floor * raw_var)
    low, high = wilson(share, max(share * (1.0 - share), 0.25 / n) / var, z)
    if _DEBUG:
        print(f"CVROW {row.get('label')} Y {exceed.mean():.4f} C {model.mean():.4f} E {expected:.4f} -> {share:.4f} "
              f"({low:.4f}, {high:.4f}) n {n} {queue}", flush=True)
    return {**row, f"{key}_over": share, f"{key}_over_low": min(low, share), f"{key}_over_high": max(high, share),
            f"{key}_over_raw": raw_share}


def _num(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def estimate(slo: Any, *, replay: str = "poisson", raw_floor: float = RAW_FLOOR, min_over: int = MIN_OVER,
             slots: tuple[int, ...] = SLOTS, reps: int = 400) -> Callable[[list[dict]], Any]:
    """The searches' `estimate=`: `estimate_knee` over the rows with each TTFT target's share read with the
    control variate (module docstring)."""

    def knee(rows: list[dict]) -> Any:
        carried = [r for r in rows if CTX in r]
        if not carried:
            return estimate_knee(rows, slo)
        frame = max((r[CTX][0] for r in carried), key=len)  # every arrival sent so far
        judged = _windows(carried, frame)
        out = list(rows)
        for t in slo.thresholds:
            if t.metric != "ttft":
                continue
            fitted = fit_queue(frame, judged, t.value_s, slots)
            if _DEBUG:
                print("CVFIT", len(rows), fitted, flush=True)
            if fitted is None or fitted[2] < min_over:
                continue  # too few values over the target to fit a model by: the raw shares stand
            out = [adjusted(r, frame, fitted[0], t.key, t.value_s, slo.confidence, reps=reps, raw_floor=raw_floor,
                            replay=replay) if CTX in r else r for r in out]
        return estimate_knee(out, slo)

    return knee
