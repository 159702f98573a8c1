"""The `auto` shape's arithmetic: the server's range from a closed-loop probe, where the first rate steps
go, and how long each step's window must be. Pure functions over judged step rows; no Locust, no pandas.

1. The probe (`probe_step`, `next_probe_level`): closed-loop levels of 1, then 4x (while the latency
   is the idle one) or 2x users, each for `probe_requests(c)` requests (two rounds), drained. Level 1 gives the idle latency (E2E, TTFT of a lone request);
   each level's completion throughput rises with the users until the server saturates. The ramp stops
   at the first level whose throughput is under `SATURATED` x the best before it (more users only
   queue), at `max_concurrency`, or when the probe has used its share of the budget. Counting requests
   instead of seconds bounds a level on any server: a slow one (0.5 req/s) saturates in two or three
   levels, a fast one (30 req/s) runs its levels in seconds.
2. The range (`server_range`): idle latency and saturation throughput (the best level's).
3. Placement (`next_placement`): open-loop rates at fractions of the saturation throughput, upward
   (`UP`) while they pass, downward (`DOWN`) when the first one fails, until a pass lies under a fail
   (or an inconclusive step says the knee is near): the knee search takes over from that bracket.
4. Windows (`window_s`): a step at `rate` lasts long enough for the completions its judgement needs,
   `samples` / `rate`, within bounds the budget sets. A placement step needs `TAIL_SAMPLES` values over
   the percentile (200 for a p95: `samples_for`); a refine step needs `REFINE_EFFECTIVE` independent
   samples times the autocorrelation time measured so far near the knee (`autocorrelation_time`, read
   back from the rows' exceedance intervals: `effective_samples`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from llmload.units import finite as _num
from shapes.steps import StepSpec, derive_seed

__all__ = ["DOWN", "UP", "ServerRange", "autocorrelation_time", "cold_transient", "effective_samples", "next_placement",
           "next_probe_level", "probe_level_s", "probe_requests", "probe_step", "relaxation_s", "samples_for",
           "saturation_of", "server_range", "window_s"]

#: a probe level whose throughput is under this share of the best before it: saturated
SATURATED = 1.15
#: requests of the first (one-user) probe level, and per user of the others (rounds)
FIRST_REQUESTS = 3
REQUESTS_PER_USER = 2
#: a level whose median E2E is under this multiple of the idle one is not loaded yet: the next has 4x
#: its users, else 2x (a server of many slots and long answers reaches saturation in few levels)
UNLOADED = 1.3
#: placement fractions of the saturation throughput: upward while steps pass, downward from the first
UP = (0.7, 0.9, 1.0, 1.15, 1.3)
DOWN = (0.45, 0.25, 0.12, 0.06)
#: rates within this share of each other are one placement (a rate rounded to 3 figures stays one)
SAME = 0.02
#: past an inconclusive placement step (near the knee): this share further, for the bracket's other side
NEAR = 0.2
#: values over the percentile a placement step's judgement needs (200 completions for a p95)
TAIL_SAMPLES = 10
#: independent samples a refine step should carry near the knee (times the autocorrelation time)
REFINE_EFFECTIVE = 60
#: an idle-started step shorter than this many relaxation times of its queue read its transient
RELAXATIONS = 1.0


# --------------------------------------------------------------------------- the probe

def probe_requests(concurrency: int) -> int:
    """Requests of the probe level with `concurrency` users (a few rounds of each user).

    >>> probe_requests(1), probe_requests(8)
    (3, 16)
    """
    return FIRST_REQUESTS if concurrency <= 1 else REQUESTS_PER_USER * concurrency


def probe_step(concurrency: int, *, index: int, seed: int, drain_timeout_s: float = 60.0) -> StepSpec:
    """The closed-loop probe level with `concurrency` users (label `probe-c4`, phase `probe`)."""
    return StepSpec(label=f"probe-c{concurrency}", index=index, phase="probe", arrival="closed",
                    concurrency=concurrency, requests=probe_requests(concurrency),
                    drain_timeout_s=drain_timeout_s, seed=derive_seed(seed, index))


@dataclass(frozen=True)
class ProbeLevel:
    """One probe level as judged: users, completion throughput (req/s), median E2E and TTFT (s)."""

    concurrency: int
    throughput: float | None
    e2e_s: float | None
    ttft_s: float | None


def probe_levels(rows: Iterable[Mapping]) -> list[ProbeLevel]:
    """The probe levels among judged `rows` (phase `probe`), in run order."""
    out = []
    for row in rows:
        if row.get("phase") != "probe":
            continue
        c = _num(row.get("concurrency"))
        out.append(ProbeLevel(concurrency=int(c or 0), throughput=_throughput(row),
                              e2e_s=_num(row.get("e2e_p50_s")), ttft_s=_num(row.get("ttft_p50_s"))))
    return out


def _throughput(row: Mapping) -> float | None:
    """A closed-loop level's throughput: its completion throughput, else in-flight / mean E2E (Little)."""
    x = _num(row.get("completion_throughput"))
    if x is not None and x > 0:
        return x
    inflight, e2e = _num(row.get("in_flight_mean")), _num(row.get("e2e_mean_s"))
    return inflight / e2e if inflight and e2e else None


def next_probe_level(levels: Sequence[ProbeLevel], *, max_concurrency: int) -> int | None:
    """The next probe level's users (4x the last while its latency is still the idle one, else 2x, at
    most `max_concurrency`), or None: saturated, at `max_concurrency` already, or a level that completed
    nothing (a server that does not answer has no range to probe)."""
    if not levels:
        return 1
    last = levels[-1]
    if last.throughput is None:
        return None
    before = [lv.throughput for lv in levels[:-1] if lv.throughput is not None]
    if before and last.throughput < SATURATED * max(before):
        return None
    if last.concurrency >= max_concurrency:
        return None
    idle = levels[0].e2e_s
    unloaded = idle is not None and last.e2e_s is not None and last.e2e_s < UNLOADED * idle
    return min(last.concurrency * (4 if unloaded else 2), max_concurrency)


def probe_level_s(levels: Sequence[ProbeLevel], concurrency: int) -> float:
    """The expected wall time of the probe level with `concurrency` users after `levels`: its rounds of
    the last level's median E2E, scaled by the users' growth once the last level was loaded (its
    requests queue: the latency grows with the users)."""
    last = levels[-1]
    e2e = last.e2e_s or 0.0
    idle = levels[0].e2e_s
    loaded = idle is not None and e2e >= UNLOADED * idle
    grow = concurrency / max(last.concurrency, 1) if loaded else 1.0
    return probe_requests(concurrency) / max(concurrency, 1) * e2e * grow


@dataclass(frozen=True)
class ServerRange:
    """What the probe measured: the idle latency (a lone request's median E2E and TTFT) and the
    saturation throughput (the best probe level's completion throughput, req/s)."""

    idle_e2e_s: float
    idle_ttft_s: float | None
    saturation_rps: float
    levels: int

    def to_dict(self) -> dict:
        return {"idle_e2e_s": round(self.idle_e2e_s, 4),
                "idle_ttft_s": None if self.idle_ttft_s is None else round(self.idle_ttft_s, 4),
                "saturation_rps": round(self.saturation_rps, 4), "levels": self.levels}


def server_range(levels: Sequence[ProbeLevel]) -> ServerRange | None:
    """The range the probe levels measured, or None when no level completed a request."""
    throughputs = [lv.throughput for lv in levels if lv.throughput is not None]
    if not throughputs:
        return None
    idle = next((lv for lv in levels if lv.e2e_s is not None), None)
    best = max(throughputs)
    e2e = idle.e2e_s if idle is not None and idle.e2e_s is not None else 1.0 / best
    return ServerRange(idle_e2e_s=float(e2e), idle_ttft_s=idle.ttft_s if idle is not None else None,
                       saturation_rps=float(best), levels=len(levels))


def saturation_of(rows: Iterable[Mapping]) -> float | None:
    """The saturation throughput (req/s) the run's probe levels measured (`server_range`), None without."""
    found = server_range(probe_levels(rows))
    return found.saturation_rps if found is not None else None


# --------------------------------------------------------------------------- a step's transient

def relaxation_s(rate: float, saturation_rps: float) -> float:
    """The time scale on which a queue fed at `rate` forgets its start, for a server that completes at
    most `saturation_rps`: 1 / (mu (1 - sqrt(rho))^2), the relaxation time of a single-server queue of
    service rate mu = `saturation_rps` at utilisation rho (Morse 1955; Cohen), infinite at or past
    saturation. A scale, not an exact figure: near capacity it grows as 1 / (mu - rate)^2 x mu.

    >>> round(relaxation_s(0.5, 0.687), 1), round(relaxation_s(0.625, 0.687)), relaxation_s(0.7, 0.687)
    (67.5, 682, inf)
    """
    if not saturation_rps > 0 or not rate >= 0:
        return math.inf
    rho = rate / saturation_rps
    if rho >= 1.0:
        return math.inf
    return 1.0 / (saturation_rps * (1.0 - math.sqrt(rho)) ** 2)


def cold_transient(row: Mapping, saturation_rps: float | None) -> bool:
    """A drained rate step (started on an idle server: phase `ladder`) that lasted (warm-up and window)
    less than the queue's relaxation time at its realised rate (`relaxation_s`): it read its transient.

    An idle start holds the queue under its steady state (a queue started empty is stochastically
    smaller than the stationary one at every moment), so such a step's exceedances are real but its
    lack of them says nothing of the steady state: a pass there is no evidence that the rate holds
    (bench/README.md, the slow `auto` sims: idle-started 57 s windows at 0.625 req/s read shares from 0
    to 0.42 against a steady state of about 0.4). False without a saturation (no probe in the run).
    """
    if saturation_rps is None or row.get("phase") != "ladder":
        return False
    rate, begin, end = (_num(row.get(k)) for k in ("offered_rate", "window_start", "window_end"))
    if rate is None or end is None or begin is None:
        return False
    lasted = end - begin + (_num(row.get("warmup_s")) or 0.0)  # from its first arrival to its window's end
    return lasted < RELAXATIONS * relaxation_s(rate, saturation_rps)


# --------------------------------------------------------------------------- placement

def next_placement(saturation_rps: float, placed: Sequence[tuple[float, str]]) -> float | None:
    """The next placement rate (req/s) after the `(rate, verdict)` steps `placed`, or None when a pass
    lies under a fail (the knee search takes over from that bracket) or the walk is spent.

    Upward from `UP[0]` x saturation while steps pass; downward through `DOWN` from a first failure. An
    inconclusive step is near the knee: the walk steps `NEAR` past it (down when no step passed yet, up
    when none failed) for the bracket's other side. Invalid and insufficient steps say nothing.

    >>> next_placement(10.0, []), next_placement(10.0, [(7.0, "pass")]), next_placement(10.0, [(7.0, "fail")])
    (7.0, 9.0, 4.5)
    >>> next_placement(10.0, [(7.0, "pass"), (9.0, "fail")]) is None
    True
    >>> round(next_placement(10.0, [(7.0, "fail"), (4.5, "inconclusive")]), 6)
    3.6
    """
    passes = [r for r, v in placed if v == "pass"]
    fails = [r for r, v in placed if v == "fail"]
    near = [r for r, v in placed if v == "inconclusive"]
    if any(p < f for p in passes for f in fails):
        return None
    if fails or (near and not passes and min(near) <= min(placed)[0]):  # no pass under them yet: down
        lowest = min(fails + near)
        if lowest in near:
            return lowest * (1.0 - NEAR)
        options = [f for f in DOWN if f < lowest / saturation_rps * (1.0 - SAME)]
        return saturation_rps * options[0] if options else None
    highest = max((r for r, _ in placed), default=0.0)
    if highest in near:
        return highest * (1.0 + NEAR) if highest * (1.0 + NEAR) <= UP[-1] * saturation_rps else None
    options = [f for f in UP if f > highest / saturation_rps * (1.0 + SAME)]
    return saturation_rps * options[0] if options else None


# --------------------------------------------------------------------------- window sizing

def samples_for(percentile: float) -> int:
    """Completions a judgement of the `percentile`-th percentile needs: `TAIL_SAMPLES` values over it.

    >>> samples_for(95), samples_for(99), samples_for(50)
    (200, 1000, 20)
    """
    return math.ceil(TAIL_SAMPLES / (1.0 - percentile / 100.0) - 1e-9)


def window_s(rate: float, samples: float, *, min_s: float, max_s: float) -> float:
    """The window in which `samples` completions arrive at `rate`, within `[min_s, max_s]`.

    >>> window_s(5.0, 200, min_s=10, max_s=60), window_s(0.5, 200, min_s=10, max_s=60)
    (40.0, 60.0)
    """
    return float(min(max(samples / rate, min_s), max(max_s, min_s)))


def effective_samples(share: float, high: float, confidence: float) -> float | None:
    """The effective sample size behind an exceedance share whose interval reaches up to `high`: the
    Wilson interval at `confidence` with that many trials (`analysis.intervals.exceedance_interval`
    uses `n / tau`) has this upper end. None when the interval says nothing (high at 1, or under the share).

    >>> round(effective_samples(0.05, 0.0750155, 0.9))  # 0.0750155: the 90% Wilson upper end of 5% in 300
    300
    """
    if not 0.0 <= share < high < 1.0:
        return None
    from analysis.intervals import effective_trials  # the one reading of a Wilson interval's trials

    return effective_trials(share, high, NormalDist().inv_cdf(0.5 + confidence / 2.0))


def autocorrelation_time(rows: Iterable[Mapping], keys: Sequence[str], confidence: float, *,
                         near: float | None = None, span: float = 0.25) -> float:
    """The largest autocorrelation time (completions / effective samples, >= 1) of the rows' exceedance
    shares (`<key>_over` and `_over_high`) for `keys`, over rows on the rate axis whose realised rate
    lies within `span` of `near` (all such rows when `near` is None or none lies there); 1.0 when no
    row carries a share with a usable interval."""
    rated = [r for r in rows if _num(r.get("offered_rate")) is not None and _num(r.get("completed"))]
    if near is not None:
        close = [r for r in rated if abs(float(r["offered_rate"]) - near) <= span * near]
        rated = close or rated
    taus = []
    for row in rated:
        n = float(row["completed"])
        for key in keys:
            share, high = _num(row.get(f"{key}_over")), _num(row.get(f"{key}_over_high"))
            if share is None or high is None:
                continue
            n_eff = effective_samples(share, high, confidence)
            if n_eff:
                taus.append(max(1.0, n / n_eff))
    return max(taus, default=1.0)
