"""A step's share of TTFTs over its target, read against its own arrivals (METRICS.md "The knee", 2c).

Near the knee a step's share of TTFTs over the threshold `L` is carried by a few queue episodes, and
which episodes a window holds is decided by its arrival times, which the tool itself drew. So the share
is read against a model of the queue fed with the same arrivals (a control variate):

    share' = Y - C + E[C]

`Y` the step's share (its `<key>_over`: completed window requests, TTFT over `L`), `C` the share of the
same requests whose wait in the model is over `L`, `E[C]` the model's share in the window over `REPS`
replays: Poisson arrivals at the window's realised rate from the step's start (its warm-up), from the
model's state there (every request the run sent before it). A model that follows the server takes
out of `Y` the luck of the step's arrivals (a window that missed a queue episode, or met two), and
moves a window of `poisson_exact` arrivals (a fixed count: the tail reads lighter than the steady
state) to the steady state of Poisson arrivals, the truth's process; a model that follows it badly
narrows nothing, and the raw share stands.

Only chained steps are read so (the knee search's refine steps, which follow on without draining: the
steps that place the knee), with Poisson arrivals. A drained step starts on an idle server: how fast a
queue fills from empty is where a model of deterministic servers and a batching server differ most, and
the replays' count spread moves such a step's share by the model's reading alone (bench/knee_accuracy.py
auto-slow: a one-server model read a placement step at 0.49 req/s, 0 of 28 TTFTs over, as 0.076, over
the level, and 4 of 10 searches gave no point; 1 of 10 with the drained steps' raw shares). A chained
step starts from the queue the steps before it left, which the model followed arrival by arrival.

The model (`Queue`): `slots` deterministic servers, first come first served, `service_s` a request,
fed with the sent times of every request of the run's rate steps. It is fitted on the run's own judged
requests (`fit_queue`): the one-server service rate on the `MUS` grid (relative to the Poisson steps'
highest realised rate) whose waits over `L` disagree with
`TTFT > L` on the fewest judged requests, then each server count of `SLOTS` at 0.6 to 1.6 times that
throughput, taken only with under `SLOT_MARGIN` x the one server's disagreements. No TTFT over `L`:
no model, the raw shares stand.

Per step the adjusted share's variance is the autocorrelation-aware variance of the mean of
`1[TTFT > L] - 1[wait > L]` (`analysis.intervals.autocorrelation_time`) plus the replays' own; where that
is not under the raw share's (from its Wilson interval's effective trials) the step keeps its raw share,
and it is floored at `RAW_FLOOR` x the raw one (an interval at least half as wide). The row gets
`<key>_cv_over`, `_cv_over_low`, `_cv_over_high` (the raw `<key>_over` stays what the step measured), and
`analysis.knee.estimate_knee` places the knee with them where present.

Measured in virtual time against the sim engine's truth (bench/README.md, knee41c; bench/user_config_case.py,
bench/knee_accuracy.py): the user config of issue 41, 60 seeds: 59 of 59 answers within 10% (1.0% median
error; 48 of 59 with the raw shares), auto-fast 10 of 10 intervals (9), the demo 100 of 100 (90).
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.intervals import _z, autocorrelation_time, effective_trials, wilson
from llmload.units import finite as _num
from shapes.phases import PHASES

__all__ = ["History", "Queue", "adjust_rows", "adjust_searched", "fit_queue", "history_of"]

#: the service rates tried when fitting the model, as multiples of the highest realised rate of the run's
#: Poisson steps: a 2% geometric grid (relative, so that a server k times faster at k times the rates gets the
#: same model, k times faster)
MUS = 1.02 ** np.arange(-152, 153)
#: the server counts the model is fitted with (one server on the whole grid, the others near its throughput)
SLOTS = (1, 2, 4, 8, 16, 32)
#: another server count is taken only with fewer disagreements than this share of the one server's
SLOT_MARGIN = 0.6
#: the adjusted share's variance is at least this share of the raw share's (its interval at least half as wide)
RAW_FLOOR = 0.25
#: replays of a step's arrivals that give `E[C]`
REPS = 400
#: trial queues' waits held at once when fitting (64 MB an array: the one-server grid of a 30,000-request run
#: in two parts)
FIT_CELLS = 8_000_000
#: replayed arrivals held at once (a step of 30,000 arrivals is replayed some rows at a time: 16 MB an array)
REPLAY_CELLS = 2_000_000
#: a step adjusted needs at least this many judged requests
MIN_JUDGED = 5
#: a run with more requests than this is not modelled, its raw shares stand: the fit walks every arrival for
#: each of its ~550 trial queues (0.6 CPU s at 30,000), and the live search refits before each decision in
#: the master's loop; a run this long has thousands of samples a step near the knee anyway
MAX_REQUESTS = 50_000
#: the arrival processes whose steps are adjusted (the replays draw Poisson arrivals)
POISSON = ("poisson", "poisson_exact")
#: the key of a judged step row that holds its requests' `History` (the live search's rows: `adjust_searched`)
SHARE_HISTORY = "_share_history"
#: the suffix of the adjusted share's columns: `<key>_cv_over`, `_cv_over_low`, `_cv_over_high`
CV = "_cv"


@dataclass(frozen=True)
class History:
    """The requests of the run's steps so far, as the model reads them: each one's step label, when it was
    planned (`scheduled_s`: its step's window counts it by this) and sent (`sent_s`, NaN: never sent), its
    TTFT (NaN: none), and whether its step's share counts it (`judged`: finished, in its window)."""

    step: np.ndarray
    scheduled_s: np.ndarray
    sent_s: np.ndarray
    ttft_s: np.ndarray
    judged: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[History]) -> History:
        if not parts:
            empty = np.array([], dtype=float)
            return cls(np.array([], dtype=object), empty, empty, empty, np.array([], dtype=bool))
        return cls(*(np.concatenate([getattr(p, name) for p in parts]) for name in
                     ("step", "scheduled_s", "sent_s", "ttft_s", "judged")))

    def __len__(self) -> int:
        return len(self.step)


def history_of(req: Any) -> History:
    """The `History` of derived requests (`analysis.requests.derive_requests`: `step`, `scheduled_at`,
    `sent_at`, `ttft_s`, `finished`, `in_window`)."""
    def floats(name: str) -> np.ndarray:
        return req[name].to_numpy(dtype=float) if name in req else np.full(len(req), np.nan)

    judged = req["finished"].to_numpy(dtype=bool) & req["in_window"].to_numpy(dtype=bool)
    return History(req["step"].astype(str).to_numpy(dtype=object), floats("scheduled_at"), floats("sent_at"),
                   floats("ttft_s"), judged)


def slot_waits(arrivals: np.ndarray, service_s: np.ndarray | float, slots: int,
               free_s: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(waits, free): first come first served over `slots` deterministic servers, each row of `arrivals`
    ((M, n) sorted seconds) with its own `service_s` ((M,) or a scalar), from the servers free at `free_s`
    ((slots,) or (M, slots) absolute seconds, as `free` of the same queue before; all free by default);
    `free` the servers' free times after the last arrival, ascending.

    Every request takes the same time, so requests end in the order they start, and request j starts when
    it arrives or when request j - `slots` ends, whichever is later (Kiefer and Wolfowitz's recursion for
    equal service times): `slots` columns at a time, no search for the free server.

    The same float operations in the same order either way: one row (a queue's own requests, its state) in a
    loop over Python floats, ~40x fewer calls than numpy's per-column ones; several rows (the fit's trial
    queues, the replays) a block of columns at a time over the transposed rows, each block one contiguous
    slice (a third less CPU than strided columns)."""
    arr = np.atleast_2d(np.asarray(arrivals, dtype=float))
    m, n = arr.shape
    s = np.broadcast_to(np.asarray(service_s, dtype=float), (m,))
    start = np.full((m, slots), -np.inf) if free_s is None else np.sort(np.broadcast_to(free_s, (m, slots)), axis=1)
    if m == 1 and not (np.isnan(arr).any() or np.isnan(start).any()):  # (Python's max() keeps no NaN as np.maximum)
        each, ends_row = float(s[0]), start[0].tolist()
        for at in arr[0].tolist():
            ends_row.append(max(at, ends_row[-slots]) + each)
        ends = np.array([ends_row])
    else:
        by_column = np.empty((n + slots, m))  # ends, transposed: row j is request j - slots of every queue
        by_column[:slots] = start.T
        arr_by_column = np.ascontiguousarray(arr.T)
        for first in range(0, n, slots):
            last = min(first + slots, n)
            block = by_column[slots + first:slots + last]
            np.maximum(arr_by_column[first:last], by_column[first:last], out=block)
            block += s
        ends = by_column.T
    return ends[:, slots:] - s[:, None] - arr, ends[:, n:]


@dataclass(frozen=True)
class Queue:
    """The model: `slots` deterministic servers, first come first served, `service_s` a request each."""

    service_s: float
    slots: int = 1

    def state(self, history: np.ndarray) -> np.ndarray | None:
        """The servers' free times after the sorted arrivals `history` (None: idle)."""
        return slot_waits(history, self.service_s, self.slots)[1][0] if history.size else None

    def waits(self, arrivals: np.ndarray, state: np.ndarray | None) -> np.ndarray:
        """The waits ((M, n)) of each row of sorted `arrivals` from `state` (`state` of earlier arrivals)."""
        return slot_waits(arrivals, self.service_s, self.slots, state)[0]

    def describe(self) -> str:
        return f"{self.slots} server{'s' if self.slots > 1 else ''} of {self.service_s:.4g} s a request"


def fit_queue(sent_s: np.ndarray, ttft_s: np.ndarray, judged: np.ndarray, limit_s: float, rate: float,
              slots: tuple[int, ...] = SLOTS) -> tuple[Queue, int, int] | None:
    """(queue, disagreements, over): the model whose waits over `limit_s` disagree with `TTFT > limit_s` on
    the fewest `judged` requests (`sent_s` sorted, every request sent; the grid of one-server rates `MUS` x
    `rate`); None when no judged TTFT is over."""
    over = ttft_s[judged] > limit_s
    if not over.any():
        return None
    def misses(service_s: np.ndarray, servers: int) -> np.ndarray:
        """Each trial queue's disagreements, some trial queues at a time (`FIT_CELLS`: bounded memory)."""
        rows = max(1, FIT_CELLS // max(len(sent_s), 1))
        return np.concatenate([
            ((slot_waits(np.broadcast_to(sent_s, (len(part), len(sent_s))), part, servers)[0][:, judged]
              > limit_s) != over).sum(axis=1) for part in np.array_split(service_s, -(-len(service_s) // rows))])

    grid = MUS * rate
    miss = misses(1.0 / grid, 1)
    best = int(np.argmin(miss))
    queue, fewest = Queue(float(1.0 / grid[best])), int(miss[best])
    bar = SLOT_MARGIN * fewest  # more servers only where they follow the exceedances clearly better
    for c in (c for c in slots if c > 1):
        mus = grid[best] * np.exp(np.linspace(math.log(0.6), math.log(1.6), 49))
        miss = misses(c / mus, c)
        i = int(np.argmin(miss))
        if miss[i] < min(fewest, bar):
            queue, fewest = Queue(float(c / mus[i]), c), int(miss[i])
    return queue, fewest, int(over.sum())


def _replay_share(seed: int, start_s: float, window: tuple[float, float], rate: float, queue: Queue,
                  state: Any, limit_s: float) -> tuple[float, float]:
    """(E[C], its Monte Carlo variance): the model's share over `limit_s` in the window, over `REPS`
    replays of Poisson arrivals at `rate` from `start_s`, from the model's `state` there."""
    ws, we = window
    rng = np.random.default_rng(seed)
    columns = int(rate * (we - start_s) * 1.5) + 30
    chunk = max(1, min(REPS, REPLAY_CELLS // columns))  # replays at a time: the same draws, bounded memory
    over_n = inside_n = 0
    each = []
    for first in range(0, REPS, chunk):
        times = start_s + np.cumsum(rng.exponential(1.0 / rate, (min(chunk, REPS - first), columns)), axis=1)
        inside = (times >= ws) & (times < we)
        over = (queue.waits(times, state) > limit_s) & inside
        over_n += int(over.sum())
        inside_n += int(inside.sum())
        each.append(over.sum(axis=1) / np.maximum(inside.sum(axis=1), 1))
    return over_n / max(inside_n, 1), float(np.concatenate(each).var()) / REPS


def _adjusted(row: dict, index: int, sent: History, queue: Queue, key: str, limit_s: float,
              confidence: float) -> dict:
    """`row` with `<key>_cv_over` (and its interval): its share read with the control variate; the row
    as it was where the model does not narrow its interval (module docstring)."""
    raw_share, raw_high = _num(row.get(f"{key}_over")), _num(row.get(f"{key}_over_high"))
    ws, we = _num(row.get("window_start")), _num(row.get("window_end"))
    if raw_share is None or raw_high is None or ws is None or we is None or not we > ws:
        return row
    start_s = ws - (_num(row.get("warmup_s")) or 0.0)
    mine = sent.step == str(row.get("label"))
    done = mine & sent.judged
    n = int(done.sum())
    if n < MIN_JUDGED:
        return row
    arrivals = int((mine & (sent.scheduled_s >= ws) & (sent.scheduled_s < we)).sum())
    rate = arrivals / (we - ws)
    if not rate > 0:
        return row
    state = queue.state(sent.sent_s[sent.sent_s < start_s])
    own = queue.waits(sent.sent_s[mine], state)[0][done[mine]]
    exceed = (sent.ttft_s[done] > limit_s).astype(float)
    model = (own > limit_s).astype(float)
    expected, mc_var = _replay_share(7919 + index, start_s, (ws, we), rate, queue, state, limit_s)
    share = min(1.0, max(0.0, float(exceed.mean() - model.mean() + expected)))
    diff = exceed - model
    var = float(diff.var()) * autocorrelation_time(diff) / n + mc_var
    z = _z(confidence)
    raw_var = max(share * (1.0 - share), 1.0 / n) / (effective_trials(raw_share, raw_high, z) or n)
    if var >= raw_var:
        return row  # the model does not narrow this step's share: the raw one stands
    var = max(var, RAW_FLOOR * raw_var)
    low, high = wilson(share, max(share * (1.0 - share), 0.25 / n) / var, z)
    return {**row, f"{key}{CV}_over": share, f"{key}{CV}_over_low": min(low, share),
            f"{key}{CV}_over_high": max(high, share)}


def _seed(row: Mapping, position: int) -> int:
    """The replays' seed of a step: from its plan index (the same step, the same replays, wherever its share
    is read: the live search and the final analysis), else its position."""
    index = _num(row.get("index"))
    return 7919 + (int(index) if index is not None else position)


def adjust_rows(rows: Sequence[Mapping], history: History, slo: Any,
                poisson: Container[str]) -> tuple[list[dict], dict[str, str]]:
    """(rows, models): the step rows, the chained ones (a phase not drained) of `poisson` (labels of steps
    with Poisson arrivals, `poisson_exact` or `poisson`: what the replays draw) with each TTFT target's
    share read with the control variate where the model narrows it (`<key>_cv_over` and its interval), and per target key the
    model fitted (its description; a target without one is absent). `history`: the requests of every step
    so far (each one the server was sent is the model's, from the run's start), `slo` the run's (its TTFT
    targets are adjusted)."""
    out = [dict(r) for r in rows]
    targets = [t for t in slo.thresholds if t.metric == "ttft"]
    if not targets or not len(history) or len(history) > MAX_REQUESTS:
        return out, {}
    sent = np.isfinite(history.sent_s)
    order = np.argsort(history.sent_s[sent], kind="stable")
    h = History(*(getattr(history, name)[sent][order] for name in ("step", "scheduled_s", "sent_s", "ttft_s",
                                                                    "judged")))
    h = History(h.step, h.scheduled_s, h.sent_s, h.ttft_s, h.judged & np.isfinite(h.ttft_s))
    def read(row: Mapping) -> bool:  # a chained step of Poisson arrivals
        phase = PHASES.get(str(row.get("phase")))
        return str(row.get("label")) in poisson and phase is not None and not phase.drained

    if not any(read(r) for r in out):
        return out, {}
    rates = [x for r in out if str(r.get("label")) in poisson and (x := _num(r.get("offered_rate"))) and x > 0]
    if not rates:
        return out, {}
    models = {}
    for t in targets:
        fitted = fit_queue(h.sent_s, h.ttft_s, h.judged, t.value_s, max(rates))
        if fitted is None:
            continue  # no TTFT over the target: nothing to fit a model by, the raw shares stand
        queue = fitted[0]
        models[t.key] = queue.describe()
        out = [_adjusted(r, _seed(r, i), h, queue, t.key, t.value_s, slo.confidence) if read(r) else r
               for i, r in enumerate(out)]
    return out, models


def adjust_searched(rows: Sequence[Mapping], slo: Any) -> list[dict]:
    """`adjust_rows` over a search's judged rows that carry their requests (`SHARE_HISTORY`, with the
    step's `arrival`), as the run's analysis will read them; the rows unchanged where none does."""
    parts = [h for r in rows if isinstance(h := r.get(SHARE_HISTORY), History)]
    if not parts:
        return [dict(r) for r in rows]
    poisson = {str(r.get("label")) for r in rows if r.get("arrival") in POISSON}
    return adjust_rows(rows, History.concat(parts), slo, poisson)[0]
