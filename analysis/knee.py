"""The knee with its interval (METRICS.md "The knee"): `estimate_knee(step rows, slo) -> Knee`.

Per SLO percentile target, from every judged step on the rate axis (phases `ladder`, `refine`; verdict
pass, fail or inconclusive), with x the step's *realised* offered rate and y its percentile with the
step's interval `[y_low, y_high]` (`analysis.intervals`, at `slo.confidence`):

1. Three monotone (non-decreasing) curves in log(y) against x, by weighted isotonic regression (pool
   adjacent violators): the central one through log(y), the upper one through log(y_high), the lower
   one through log(y_low). Weights are 1 / (half-width of the step's log interval)^2: a long, tight step
   counts more than a short, loose one. Queueing curves rise steeply (a p95 moves ~4x faster than the
   rate near the knee), and a log scale makes them close to linear between neighbouring steps.
2. Each curve's crossing of log(threshold): the first fitted point over it, interpolated linearly in
   log(y) against x from the point before. The central curve gives the target's crossing `rate`; the
   upper curve crosses first and gives `low`, the lower curve `high`. An upper curve already over at the
   lowest rate run: `low` unbounded (None); a lower curve never over: `high` unbounded (None). An upper
   curve never over gives `low` = the highest rate run (the crossing is above it), a lower curve over
   at the lowest rate run `high` = the lowest rate run.
   Where the rows carry `<key>_over` (the share of the step's values over the threshold, with
   `_over_low` / `_over_high`, `analysis.intervals.exceedance_interval`), the crossing and its interval
   come instead from the same three fits of that share (raw scale, weights 1 / half-width^2) and its
   crossing of `1 - q / 100`: a share is a mean, unbiased where a short step's percentile reads low (a
   window that missed the queue's rare long episodes), so the knee is not placed too high. On the demo
   sim (20 seeds, 120 s steps at 4.2 to 5.1 req/s from steady state) the share's interval held the true
   knee 18 times (the percentile's: 12), worst error 7% (8.7%). The percentile fits still give the
   headroom, and the crossing for rows without a share (older summaries, hand-built rows).
   A chained step's TTFT share read against its own arrivals (`<key>_cv_over` and its interval,
   `analysis.share_cv`: a control variate from a queue model fed the run's arrivals) stands in for its
   raw share wherever the row has one (`_adjusted_shares`).
   The interval spans the interpolation too: each share fit's crossing is taken on the chord in the
   share and on the chord in log share (a queue's share grows faster than linearly and at most
   exponentially between two steps: the truth lies between them); the point is the share's chord.
   Near that crossing, with 3 or more steps within `LOCAL_SPAN` of it on both sides, a local binomial
   fit of their shares replaces it (`_local_fit`: effective trials from each step's interval, the
   longest autocorrelation time there pooled, a profile-likelihood interval scaled by the dispersion;
   the counts carry Kerman's neutral prior, a third of an effective exceedance over the steps' own
   trials, `_neutral`: a share near the knee is a few queue episodes, a count whose median lies under
   its mean, and without it the point leaned high, +5% median on bench/user_config_case.py).
   An end of that interval its steps cannot bound (the profile reaches past them) takes the end of the
   same binomial fit over every step instead (`_bounded`), and an end that one leaves open too (one
   slope cannot follow a share from 0 far under the knee to 0.9 far over it: the dispersion widens its
   profile past every step) the monotone fits' end over the steps' intervals at the family-wise
   confidence 1 - (1 - c) / steps (`_step_bounds`: one step's own 90% is not enough where several lie
   near the knee), so the interval is open only where no step decisively bounds it (bench/user_config_case.py
   seed 9: a failure at 5.0 closes its high end; the answer had said "not bounded by the steps run");
   once two refine steps ran, that fit over every step also places the
   crossing when the steps within `LOCAL_SPAN` do not lie on both sides of the first estimate.
   Ladder steps (started on an idle server) inside the refine steps' range are left out.
   In a run with a closed-loop probe (`shape: auto`), a drained step shorter than its queue's relaxation
   time at the probe's saturation throughput read an idle start's transient (`shapes.probe.cold_transient`,
   `_transients`): under the threshold it leaves the fits (a queue started empty sits under its steady
   state: no exceedance there says nothing), over it its share bounds the curve from below only, and
   the point's (central) fit takes it at its interval's high end: a reading just over the level would
   put the chord's crossing at the transient's own rate (bench/knee_accuracy.py auto-slow, +20%).
   A calm step (no value over a target) takes the longest autocorrelation time of the steps near its rate
   that had some (`_calm_steps`: its window cannot show how long the queue's episodes over the target last).
   A share curve that pooled a failure away (a step wholly over the level, yet the fitted curve never
   crosses it: a later step at a higher rate read under it) takes the binomial fit over every step
   instead, so a failing step is weighed, never dropped.
3. The knee is the lowest crossing, its interval the lowest of the targets' lows and highs (a target
   never crossed whose high-end fit is over at the lowest rate already leaves the low alone); the target
   with the lowest crossing binds. `headroom`: each other target's central fit at the knee rate /
   its threshold (0.41 = at 41% of its target there).

`failed_at` / `failed_on`: the lowest realised rate of a judged step that failed and its failing
dimensions; where no latency target crossed but a step failed (a reject ratio, an error ratio) the
sentence says the knee is below it, never that every target held.

`knee_of(summary)` is the one reader every surface calls: summary.json's `knee`, or (an older summary
without one) the estimate from its `steps` and thresholds. `knee_sentence` words it with no more
precision than its interval has.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from analysis.intervals import effective_trials, wilson
from llmload import slo as slo_dims
from llmload.config import SLO
from llmload.units import finite as _num
from shapes.phases import PHASES, rate_phases
from shapes.probe import SAME, cold_transient, saturation_of

__all__ = ["Crossing", "Knee", "estimate_knee", "knee_of", "knee_sentence", "target_label"]

#: step verdicts whose percentiles the knee uses (invalid/insufficient/not_run are ignored, and so is a
#: `partial` step, stopped inside its window)
JUDGED = ("pass", "fail", "inconclusive")
BASIS = "realised_offered_rate"


@dataclass(frozen=True)
class Crossing:
    """One target's crossing rate, in realised offered req/s."""

    rate: float | None  # None: not crossed inside the rates run (see low/high)
    low: float | None  # None: unbounded below (crossed at/below the lowest rate run)
    high: float | None  # None: unbounded above (never crossed: the target holds at every rate run)

    def to_dict(self) -> dict:
        return {"rate": self.rate, "low": self.low, "high": self.high}

    @classmethod
    def from_dict(cls, d: Mapping) -> Crossing:
        return cls(_num(d.get("rate")), _num(d.get("low")), _num(d.get("high")))


@dataclass(frozen=True)
class Knee:
    """The knee: the lowest target crossing, its interval at `confidence`, the binding target."""

    rate: float | None
    low: float | None
    high: float | None
    confidence: float
    binding: str | None
    targets: dict[str, Crossing] = field(default_factory=dict)
    headroom: dict[str, float] = field(default_factory=dict)
    basis: str = BASIS
    steps_used: int = 0
    #: the lowest realised rate of a judged step that failed (on any dimension: a percentile target, or
    #: a count one such as the reject ratio), and that step's failing dimensions; None when none failed
    failed_at: float | None = None
    failed_on: tuple[str, ...] = ()
    #: the lowest realised rate of a step that passed on an idle server but is no evidence that its rate
    #: holds: it read its transient (`TRANSIENT`, a bound from below only) or ran at the chained steps'
    #: rates (`_without_cold_steps`, left out); None when no such step passed
    cold_pass_at: float | None = None

    def to_dict(self) -> dict:
        """summary.json's `knee` (`cold_pass_at` only when an idle-started pass was set aside)."""
        out = {"rate": self.rate, "low": self.low, "high": self.high, "confidence": self.confidence,
               "binding": self.binding, "targets": {k: c.to_dict() for k, c in self.targets.items()},
               "headroom": dict(self.headroom), "basis": self.basis, "steps_used": self.steps_used,
               "failed_at": self.failed_at, "failed_on": list(self.failed_on)}
        if self.cold_pass_at is not None:
            out["cold_pass_at"] = self.cold_pass_at
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> Knee:
        return cls(rate=_num(d.get("rate")), low=_num(d.get("low")), high=_num(d.get("high")),
                   confidence=float(d.get("confidence") or 0.9), binding=d.get("binding"),
                   targets={str(k): Crossing.from_dict(v) for k, v in (d.get("targets") or {}).items()},
                   headroom={str(k): float(v) for k, v in (d.get("headroom") or {}).items() if v is not None},
                   basis=str(d.get("basis") or BASIS), steps_used=int(d.get("steps_used") or 0),
                   failed_at=_num(d.get("failed_at")), failed_on=tuple(str(v) for v in d.get("failed_on") or ()),
                   cold_pass_at=_num(d.get("cold_pass_at")))

    @property
    def half_width_rel(self) -> float | None:
        """(high - low) / 2 / rate; None when an end is unbounded or there is no rate."""
        if self.rate is None or self.low is None or self.high is None or not self.rate > 0:
            return None
        return (self.high - self.low) / 2.0 / self.rate


# --------------------------------------------------------------------------- fitting

def isotonic(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted non-decreasing least-squares fit of `y` (in its order), pool adjacent violators.

    >>> isotonic(np.array([1.0, 3.0, 2.0, 4.0]), np.ones(4)).tolist()
    [1.0, 2.5, 2.5, 4.0]
    """
    values: list[float] = []
    weights: list[float] = []
    counts: list[int] = []
    for v, wt in zip(y.tolist(), w.tolist(), strict=True):
        values.append(v)
        weights.append(wt)
        counts.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            wsum = weights[-2] + weights[-1]
            merged = (values[-2] * weights[-2] + values[-1] * weights[-1]) / wsum
            count = counts[-2] + counts[-1]
            del values[-1], weights[-1], counts[-1]
            values[-1], weights[-1], counts[-1] = merged, wsum, count
    return np.repeat(values, counts)


def _crossing(x: np.ndarray, f: np.ndarray, level: float) -> tuple[float | None, str]:
    """Where the increasing piecewise-linear curve (x, f) first goes over `level`:
    (rate, "inside") | (None, "below": over at the lowest x) | (None, "never")."""
    over = np.flatnonzero(f > level)
    if over.size == 0:
        return None, "never"
    i = int(over[0])
    if i == 0:
        return None, "below"
    x0, x1, f0, f1 = x[i - 1], x[i], f[i - 1], f[i]
    if x1 <= x0:
        return float(x1), "inside"
    return float(x0 + (level - f0) / (f1 - f0) * (x1 - x0)), "inside"


def _at(x: np.ndarray, f: np.ndarray, rate: float) -> float:
    """The curve's value at `rate`, linear between points, flat past the ends."""
    return float(np.interp(rate, x, f))


@dataclass
class _Fit:
    key: str
    x: np.ndarray
    central: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    level: float
    crossing: Crossing
    where: str  # "inside" | "below" | "never" (the central curve)


def _points(rows: list[Mapping], figure: str, scale: float, threshold_s: float) -> tuple[np.ndarray, ...] | None:
    xs, ys, lows, highs = [], [], [], []
    for row in rows:
        x, y = _num(row.get("offered_rate")), _num(row.get(figure))
        if x is None or y is None or y <= 0 or (row.get(TRANSIENT) and y <= threshold_s):
            continue  # an idle start's transient under the threshold says nothing of the steady state
        low, high = _num(row.get(f"{figure}_low")), _num(row.get(f"{figure}_high"))
        low = y if low is None or low <= 0 else min(low, y)
        high = y if high is None else max(high, y)
        # rescale the interval to the asked confidence (symmetric in log around the point)
        xs.append(x)
        ys.append(math.log(y))
        lows.append(math.log(y) - scale * (math.log(y) - math.log(low)))
        highs.append(math.log(y) + scale * (math.log(high) - math.log(y)))
    if not xs:
        return None
    order = np.argsort(np.asarray(xs), kind="stable")
    xa, ya, lo, hi = (np.asarray(v, dtype=float)[order] for v in (xs, ys, lows, highs))
    half = np.maximum((hi - lo) / 2.0, 0.02)  # a point interval (no interval known) weighs as +-2%
    return xa, ya, lo, hi, 1.0 / half**2


def _fit(rows: list[Mapping], key: str, figure: str, threshold_s: float, scale: float) -> _Fit | None:
    points = _points(rows, figure, scale, threshold_s)
    if points is None:
        return None
    x, y, lo, hi, w = points
    central, upper, lower = isotonic(y, w), isotonic(hi, w), isotonic(lo, w)
    level = math.log(threshold_s)
    crossing, where = _crossings(x, central, upper, lower, level)
    return _Fit(key, x, central, upper, lower, level, crossing, where)


def _share_points(rows: list[Mapping], key: str, scale: float, figure: str, threshold_s: float,
                  level: float, *, clip_scale: float = 1.0) -> tuple[np.ndarray, ...] | None:
    """(x, share, low, high, weight) of the rows with the share of values over `key`'s threshold.

    A share's bounds are kept consistent with the step's percentile interval, which also weighs how far
    the values are from the threshold: a step whose whole percentile interval is under the threshold
    has its share's high end at most `level` (30 values all far under a target cannot exclude a 5% share
    by counting alone, but their percentile does); one wholly over has its low end over `level`
    (`clip_scale`: the percentile interval rescaled by it first, symmetric in log around the step's
    percentile, as `_points` rescales it)."""
    xs, fs, lows, highs = [], [], [], []
    for row in rows:
        x, f = _num(row.get("offered_rate")), _num(row.get(f"{key}_over"))
        if x is None or f is None or (row.get(TRANSIENT) and f <= level):
            continue  # an idle start's transient under the level: no bound on the steady state's share
        low, high = _num(row.get(f"{key}_over_low")), _num(row.get(f"{key}_over_high"))
        low = f if low is None else min(low, f)
        high = f if high is None else max(high, f)
        p_low, p_high = _num(row.get(f"{figure}_low")), _num(row.get(f"{figure}_high"))
        y = _num(row.get(figure))
        if clip_scale != 1.0 and y is not None and y > 0:
            p_low = None if p_low is None or p_low <= 0 else y * (min(p_low, y) / y) ** clip_scale
            p_high = None if p_high is None else y * (max(p_high, y) / y) ** clip_scale
        point = f
        if row.get(TRANSIENT):  # an idle start's transient over the level bounds the share from below only;
            # its reading is low by an amount its window cannot tell: the point's fit takes the highest
            # share the window allows (its interval's high end), not a reading that puts the crossing at it
            point, high, p_high = high, 1.0, None
        if p_high is not None and p_high <= threshold_s and f <= level and not row.get(f"{CALM}{key}"):
            high = min(high, level)
        if p_low is not None and p_low > threshold_s and f > level:
            low = max(low, float(np.nextafter(level, 1.0)))
        xs.append(x)
        fs.append(point)
        lows.append(max(0.0, f - scale * (f - low)))
        highs.append(min(1.0, f + scale * (high - f)))
    if not xs:
        return None
    order = np.argsort(np.asarray(xs), kind="stable")
    xa, fa, lo, hi = (np.asarray(v, dtype=float)[order] for v in (xs, fs, lows, highs))
    half = np.maximum((hi - lo) / 2.0, 0.005)
    return xa, fa, lo, hi, 1.0 / half**2


#: a share under this part of its level counts as this much in the log chord (a share of 0 has no log)
SHARE_FLOOR = 0.1
#: where the point sits between the chord in the share (0) and the chord in log share (1)
POINT_BLEND = 0.0


def _log_chord(x: np.ndarray, f: np.ndarray, level: float) -> float | None:
    """Where the chord in log(f), between the fitted points on each side of `level`, crosses it (None:
    the curve is never over it, or already at the lowest x)."""
    over = np.flatnonzero(f > level)
    if over.size == 0 or over[0] == 0:
        return None
    i = int(over[0])
    floor = SHARE_FLOOR * level
    x0, x1 = x[i - 1], x[i]
    g0, g1 = math.log(max(f[i - 1], floor)), math.log(max(f[i], floor))
    if x1 <= x0 or g1 <= g0:
        return float(x1)
    return float(x0 + (math.log(level) - g0) / (g1 - g0) * (x1 - x0))


def _band(x: np.ndarray, f: np.ndarray, level: float, share: bool) -> tuple[float | None, float | None, str]:
    """The crossing of the curve (x, f) as (lowest, highest, where) over the interpolants between the
    fitted points that bracket it: the chord in f alone, and for a share also the chord in log f."""
    rate, where = _crossing(x, f, level)
    if rate is None or not share:
        return rate, rate, where
    other = _log_chord(x, f, level)
    if other is None:
        return rate, rate, where
    return min(rate, other), max(rate, other), where


def _crossings(x: np.ndarray, central: np.ndarray, upper: np.ndarray, lower: np.ndarray,
               level: float, *, share: bool = False) -> tuple[Crossing, str]:
    c_low, c_high, where = _band(x, central, level, share)
    rate = None if c_low is None or c_high is None else c_low + POINT_BLEND * (c_high - c_low)
    low, _, low_where = _band(x, upper, level, share)
    _, high, high_where = _band(x, lower, level, share)
    if low_where == "never":
        low = float(x[-1])  # the upper bound holds at every rate run: the crossing is above them all
    if high_where == "below":
        high = float(x[0])  # even the lower bound is over at the lowest rate run
    if c_low is not None and c_high is not None:  # the central curve crossed (rate is not None)
        low = min(low, c_low) if low is not None else None
        high = max(high, c_high) if high is not None else None
    return Crossing(rate, low, high), where


def _fit_share(rows: list[Mapping], key: str, percentile: float, scale: float, figure: str,
               threshold_s: float, confidence: float) -> tuple[Crossing, str] | None:
    """The crossing from the share of values over the threshold: where it passes 1 - q / 100."""
    level = 1.0 - percentile / 100.0
    points = _share_points(rows, key, scale, figure, threshold_s, level)
    if points is None:
        return None
    x, f, lo, hi, w = points
    crossing, where = _crossings(x, isotonic(f, w), isotonic(hi, w), isotonic(lo, w), level, share=True)
    if crossing.rate is None and where == "never" and (lo > level).any():
        # a step was wholly over the level, yet the pooled curve never crosses it (a later step at a
        # higher rate read under it: near the knee one step is a noisy draw): every step weighs in
        # through the binomial fit over all of them, instead of a curve that pooled the failure away
        overall = _local_fit(rows, key, level, float(np.mean(x)), confidence, span=None)
        if overall is not None:
            return overall, "inside"
    if crossing.rate is not None:
        local = _local_fit(rows, key, level, crossing.rate, confidence)
        if local is None and sum(1 for r in rows if _chained(r)) >= 2:
            # the search's steps do not bracket the chord's estimate closely: the same fit over every step
            local = _local_fit(rows, key, level, crossing.rate, confidence, span=None)
        elif local is not None and (local.low is None or local.high is None):
            wide = _local_fit(rows, key, level, crossing.rate, confidence, span=None)
            if wide is not None:
                local = _bounded(local, wide)
        if local is not None:
            # an end even the fit over every step leaves open (one slope cannot follow the share from far
            # under the knee to far over it: its dispersion widens the profile past every step) is closed
            # where the steps themselves close it: a step whose share interval lies wholly on that side of
            # the level at the family-wise confidence over the steps (`_step_bounds`), so an interval is
            # open only where no step bounds it
            bounds = _step_bounds(rows, key, scale, figure, threshold_s, level, confidence, len(x))
            crossing = local if bounds is None else _bounded(local, bounds)
    return crossing, where


def _step_bounds(rows: list[Mapping], key: str, scale: float, figure: str, threshold_s: float, level: float,
                 confidence: float, steps: int) -> Crossing | None:
    """The monotone fits' ends over the steps' intervals (share and percentile) at confidence
    1 - (1 - c) / `steps`: a step closes an end only if it is decisive however many steps were run. At `c` a
    step just over the knee passes one time in a few (its interval is its own 90%), and with several steps
    there one of them did: bench/knee_accuracy.py auto-slow-2slot, a refine step at 0.55 req/s with 0 of 66
    TTFTs over the target closed the low end over the true 0.502 in 17 of 20 seeds."""
    family = 1.0 - (1.0 - confidence) / max(steps, 1)
    strict = scale * _z(family) / _z(confidence)
    points = _share_points(rows, key, strict, figure, threshold_s, level, clip_scale=strict / scale)
    if points is None:
        return None
    x, f, lo, hi, w = points
    crossing, _ = _crossings(x, isotonic(f, w), isotonic(hi, w), isotonic(lo, w), level, share=True)
    return crossing


def _bounded(local: Crossing, wide: Crossing) -> Crossing:
    """The local fit's crossing, an end its steps leave open (the profile interval reaches past the
    steps near the knee: too few, too close together or too noisy to bound it there) closed by
    `wide`'s end: the same fit over every step, or the monotone fits' crossing (`_crossings`: open
    only where no step's interval lies wholly on that side of the level). The point stays the local fit's."""
    if local.rate is None:  # a local fit always places its point; nothing to bound without one
        return local
    low = local.low if local.low is not None else wide.low
    high = local.high if local.high is not None else wide.high
    return Crossing(local.rate, None if low is None else min(low, local.rate),
                    None if high is None else max(high, local.rate))


#: pseudo-exceedances (and as many pseudo-passes) the local fit adds over its steps' trials (`_neutral`)
NEUTRAL = 1.0 / 3.0
#: the local fit uses the steps within this share of the first estimate
LOCAL_SPAN = 0.2
#: the grid of candidate crossings the profile likelihood is evaluated on
_GRID = 241


def _profiles(d: np.ndarray, k: np.ndarray, n: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray]:
    """(deviance, slope) per row of `d` (a candidate crossing a row): the best slope b >= 0 of logit p =
    c + b d by Newton steps (from b = 1, at most 30, stopping where the Hessian is not positive or a step
    is under 1e-8), every row at once with the arithmetic of one row alone (the same floats)."""
    b = np.ones(len(d))
    active = np.arange(len(d))
    for _ in range(30):
        if not active.size:
            break
        da, ba = d[active], b[active]
        eta = np.clip(c + ba[:, np.newaxis] * da, -30, 30)
        p = 1.0 / (1.0 + np.exp(-eta))
        grad = np.sum((k - n * p) * da, axis=1)
        hess = np.sum(n * p * (1 - p) * da * da, axis=1)
        go = ~(hess <= 0)  # NaN goes on, as `hess <= 0` is False for it
        step = grad[go] / hess[go]
        moved = active[go]
        b[moved] = np.maximum(ba[go] + step, 1e-6)
        active = moved[~(np.abs(step) < 1e-8)]
    eta = np.clip(c + b[:, np.newaxis] * d, -30, 30)
    p = 1.0 / (1.0 + np.exp(-eta))
    return -2.0 * np.sum(k * np.log(p) + (n - k) * np.log1p(-p), axis=1), b


def _neutral(ks: list[float], ns: list[float], trials: float) -> tuple[list[float], list[float]]:
    """The counts with Kerman's neutral prior, Beta(1/3, 1/3), on the steps' pooled share: `NEUTRAL`
    pseudo-exceedances and as many pseudo-passes over `trials` effective trials (the steps' own, before
    the local fit pools their autocorrelation times: that pooling widens the interval, it does not see
    more episodes), added to each step as the same share of its trials (`ns`).

    The logistic fit matches the steps' total effective exceedances near the knee: a handful of queue
    episodes over the threshold, a skewed (Poisson-like) count whose median lies about 1/3 under its
    mean (a Poisson mean's median-unbiased estimate from a count k is about k + 1/3). The fit of the raw
    counts so placed the crossing high in most searches, even where each window's share was unbiased
    on average (bench/README.md, "Where the +5% comes from")."""
    if trials <= 0:
        return ks, ns
    return ([k + NEUTRAL * n / trials for k, n in zip(ks, ns, strict=True)],
            [n + 2 * NEUTRAL * n / trials for n in ns])


def _local_fit(rows: list[Mapping], key: str, level: float, guess: float, confidence: float,
               span: float | None = LOCAL_SPAN) -> Crossing | None:
    """The crossing from a binomial (logistic) fit of the steps near `guess`: each step's share `f` is
    `k` of `n` effective trials (`n` from its Wilson interval, which counts its autocorrelation), the
    model logit(share) = logit(level) + b (rate - crossing), b > 0; the crossing's interval is where the
    profile deviance stays within the chi-square(1) quantile at `confidence`, scaled by the fit's
    dispersion (Pearson chi-square / (steps - 2), at least 1: steps that scatter more than their
    counts say, e.g. a queue still settling, widen it). None without a step on each side of `guess`.
    `span`: the steps within this share of `guess` (None: every step)."""
    z = _z(confidence)
    xs, fs, ns, taus = [], [], [], []
    for row in rows:
        x, f, high = _num(row.get("offered_rate")), _num(row.get(f"{key}_over")), _num(row.get(f"{key}_over_high"))
        if x is None or f is None or high is None or row.get(TRANSIENT) or (
                span is not None and abs(x - guess) > span * guess):
            continue
        n = effective_trials(f, high, z)
        if n is None:
            continue
        count = _num(row.get("completed"))
        xs.append(x)
        fs.append(f)
        ns.append(n)
        taus.append(max(1.0, count / n) if count else 1.0)
    own = list(ns)  # each step's effective trials from its own autocorrelation, before the pooling below
    if any(f > 0 for f in fs):
        # a window with no value over the threshold cannot see how long the queue's episodes over it
        # last: every step near the knee is given the longest autocorrelation time measured there
        # (the steps near the knee only: one far under it, whose queue never built, keeps its own)
        near = [abs(x - guess) <= LOCAL_SPAN * guess for x in xs]
        pooled = max((t for t, f, m in zip(taus, fs, near, strict=True) if f > 0 and m), default=1.0)
        ns = [n * t / max(t, pooled) if m else n for n, t, m in zip(ns, taus, near, strict=True)]
    ks = [f * n for f, n in zip(fs, ns, strict=True)]
    if NEUTRAL:
        ks, ns = _neutral(ks, ns, sum(own))
    if len(xs) < 3:
        return None
    xa, k, n_eff = (np.asarray(v, dtype=float) for v in (xs, ks, ns))
    if not (xa < guess).any() or not (xa > guess).any() or np.ptp(xa) <= 0:
        return None
    c = math.log(level / (1.0 - level))
    grid = np.linspace(xa.min(), xa.max(), _GRID)
    dev, slopes = _profiles(xa[np.newaxis, :] - grid[:, np.newaxis], k, n_eff, c)
    best = int(np.argmin(dev))
    b = float(slopes[best])
    eta = np.clip(c + b * (xa - grid[best]), -30, 30)
    p = 1.0 / (1.0 + np.exp(-eta))
    pearson = float(np.sum((k - n_eff * p) ** 2 / np.maximum(n_eff * p * (1 - p), 1e-12)))
    dispersion = max(1.0, pearson / max(1, len(xa) - 2))
    inside = np.flatnonzero(dev - dev[best] <= dispersion * z * z)
    low = None if inside[0] == 0 else float(grid[inside[0]])
    high = None if inside[-1] == len(grid) - 1 else float(grid[inside[-1]])
    return Crossing(float(grid[best]), low, high)


#: the prefix `_adjusted_shares` keeps a row's raw share under (its own window's count and interval)
RAW = "_raw_"


def _adjusted_shares(rows: list[Mapping], slo: SLO) -> list[Mapping]:
    """`rows`, each target's share and its interval taken from the control variate's (`<key>_cv_over`,
    `analysis.share_cv`: the chained steps) where the row has one."""
    out = []
    for row in rows:
        keys = [t.key for t in slo.thresholds if _num(row.get(f"{t.key}_cv_over")) is not None]
        if keys:
            row = {**row, **{f"{k}_over{end}": row.get(f"{k}_cv_over{end}") for k in keys
                             for end in ("", "_low", "_high")},
                   **{f"{RAW}{k}_over{end}": row.get(f"{k}_over{end}") for k in keys for end in ("", "_high")}}
        out.append(row)
    return out


def _chained(row: Mapping) -> bool:
    """A step of a phase that follows on without draining (the knee search's refine steps)."""
    phase = PHASES.get(str(row.get("phase")))
    return phase is not None and not phase.drained


def _without_cold_steps(rows: list[Mapping]) -> list[Mapping]:
    """`rows` less the drained steps (each started on an idle server: the ladder's) whose realised rate
    lies inside the range of the chained steps' rates: once two of those bracket them, their low
    reading only biases. A drained step that failed stays: a queue started empty reads under its steady
    state, so its failure is one the steady state has too (bench/user_config_case.py seed 25: the ladder's
    failure at 3.0 req/s left out, the answer said `no step failed a target`)."""
    chained = [x for r in rows if _chained(r) and (x := _num(r.get("offered_rate"))) is not None]
    if len(chained) < 2:
        return rows
    # the range's ends widened by `shapes.probe.SAME` (rates that close are one rate): a drained step at a chained one's rate (4.0600 against two
    # chained steps at 4.0583 req/s) is the same rate read cold, and the curve would cross between them
    lo, hi = min(chained) * (1.0 - SAME), max(chained) * (1.0 + SAME)
    return [r for r in rows if _chained(r) or r.get("verdict") == "fail"
            or not lo <= (_num(r.get("offered_rate")) or 0.0) <= hi]


#: the mark `_calm_steps` puts on a step row (with the target's key after it) whose window saw no value over
#: the target, with the autocorrelation time of a step near it that did
CALM = "_calm_"
#: steps within this share of a calm step's rate lend it their autocorrelation time (`_calm_steps`)
CALM_SPAN = 0.3


def _calm_steps(rows: list[Mapping], slo: SLO) -> list[Mapping]:
    """`rows`, each step with no value over a percentile target (share 0) given the longest autocorrelation
    time of the steps within `CALM_SPAN` of its rate that had some: its share's high end is the Wilson
    interval's with that many fewer trials. A window with no value over the target cannot show how long the
    queue's episodes over it last, and near the knee of a server of few slots a whole window can be calm:
    bench/knee_accuracy.py auto-4slot, 0 of 114 TTFTs over 2 s in 216 s at 0.528 req/s (p95 0.33 s), where
    the steady state has 7% over and the steps at 0.662 req/s showed 3 to 6 requests per independent value;
    its own count made it a decisive bound under the knee (0.58 to 0.66 against 0.487). Where the trials
    left are too few for an order statistic to bound the percentile at the interval's confidence, the row
    is marked (`CALM` + key): its percentile, which reads far under the target, no longer caps its share
    at the level (`_share_points`)."""
    z = _z(slo.confidence)
    out: list[dict] = [dict(r) for r in rows]
    for t in slo.thresholds:
        key = t.key
        p = t.percentile / 100.0
        order_min = math.log((1.0 - slo.confidence) / 2.0) / math.log(p) if 0 < p < 1 else 0.0
        taus = []  # from each window's own count (a share read against its arrivals is narrower by the model)
        for r in out:
            raw = RAW if r.get(f"{RAW}{key}_over") is not None else ""
            x, f, high, n = (_num(r.get(k)) for k in ("offered_rate", f"{raw}{key}_over", f"{raw}{key}_over_high",
                                                       "completed"))
            if x is None or f is None or high is None or not n or f <= 0 or r.get(TRANSIENT):
                continue
            trials = effective_trials(f, high, z)
            if trials:
                taus.append((x, max(1.0, n / trials)))
        for r in out:
            x, f, high, n = (_num(r.get(k)) for k in ("offered_rate", f"{key}_over", f"{key}_over_high", "completed"))
            if x is None or f is None or f > 0 or high is None or not n:
                continue
            near = [tau for at, tau in taus if abs(at - x) <= CALM_SPAN * x]
            own = effective_trials(0.0, high, z) if high > 0 else None
            if not near or own is None or n / max(near) >= own:
                continue
            trials = n / max(near)
            r[f"{key}_over_high"] = max(high, wilson(0.0, trials, z)[1])
            if trials < order_min:
                r[f"{CALM}{key}"] = True
    return list(out)


#: the mark `_transients` puts on a step row that read an idle start's transient (`shapes.probe.cold_transient`)
TRANSIENT = "_transient"


def _transients(rows: list[Mapping], records: list[Mapping]) -> list[Mapping]:
    """`rows`, each drained step that read its transient (started on an idle server, shorter than the
    queue's relaxation time at its rate and the saturation throughput the run's probe measured:
    `shapes.probe.cold_transient`) marked `TRANSIENT`: its share bounds the curve from below only (its
    upper end is open) and the local binomial fit leaves it out. A run without a probe (a ladder) has
    no saturation to judge by: its rows are unchanged."""
    saturation = saturation_of(records)
    if saturation is None:
        return rows
    return [{**r, TRANSIENT: True} if cold_transient(r, saturation) else r for r in rows]


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def estimate_knee(steps: Sequence[Mapping] | Any, slo: SLO, *, confidence: float | None = None) -> Knee | None:
    """The knee from step rows (module docstring); None when no usable step or no percentile target.

    `steps`: step rows (dicts, or a DataFrame of them) with `phase`, `verdict`, `offered_rate` and each
    target's figure with `_low` / `_high`. `confidence`: of the interval (default `slo.confidence`;
    the steps' intervals are rescaled from `slo.confidence` to it).
    """
    records = steps.to_dict(orient="records") if hasattr(steps, "to_dict") else list(steps)
    phases = set(rate_phases())
    rows = [r for r in records if str(r.get("phase")) in phases and r.get("verdict") in JUDGED
            and r.get("status") != "partial" and _num(r.get("offered_rate")) is not None]
    confidence = slo.confidence if confidence is None else confidence
    judged = rows
    rows = _calm_steps(_transients(_without_cold_steps(_adjusted_shares(rows, slo)), records), slo)
    scale = _z(confidence) / _z(slo.confidence)
    fits = []
    for t in slo.thresholds:
        figure = slo_dims.latency(t.metric).figure_of(t.percentile)
        fit = _fit(rows, t.key, figure, t.value_s, scale)
        if fit is None:
            continue
        share = _fit_share(rows, t.key, t.percentile, scale, figure, t.value_s, confidence)
        if share is not None:  # the unbiased statistic places the crossing; the percentile fit the headroom
            fit.crossing, fit.where = share
        fits.append(fit)
    if not fits:
        return None
    used = sum(1 for r in rows if any(_num(r.get(slo_dims.latency(t.metric).figure_of(t.percentile)))
                                      is not None for t in slo.thresholds))

    def order(fit: _Fit) -> float:
        if fit.where == "below":
            return -math.inf
        return fit.crossing.rate if fit.crossing.rate is not None else math.inf

    binding_fit = min(fits, key=order)
    crossed = order(binding_fit) < math.inf
    rate = binding_fit.crossing.rate
    # a target never crossed at any rate run whose upper fit is over already at the lowest one (a loose
    # interval there: few samples) says nothing of where the knee is: it leaves the knee's low alone
    lows = [f.crossing.low for f in fits if not (f.where == "never" and f.crossing.low is None)]
    known_lows = [v for v in lows if v is not None]
    low = min(known_lows) if known_lows and len(known_lows) == len(lows) else None  # one open low: open
    highs = [f.crossing.high for f in fits if f.crossing.high is not None]
    high = min(highs) if highs else None
    if rate is not None:
        low = min(low, rate) if low is not None else None
        high = max(high, rate) if high is not None else None
    failed = [(x, list(r.get("failing") or [])) for r in rows
              if r.get("verdict") == "fail" and (x := _num(r.get("offered_rate"))) is not None]
    failed_at, failed_on = min(failed, key=lambda item: item[0]) if failed else (None, [])
    # passes on an idle server set aside: read as transients, or left out beside the chained steps
    kept = {str(r.get("label")) for r in rows if not r.get(TRANSIENT)}
    cold_passes = [x for r in judged if r.get("verdict") == "pass" and str(r.get("label")) not in kept
                   and (x := _num(r.get("offered_rate"))) is not None]
    headroom = {}
    if rate is not None:
        for f in fits:
            if f is not binding_fit:
                headroom[f.key] = math.exp(_at(f.x, f.central, rate) - f.level)
    return Knee(rate=rate, low=low, high=high, confidence=confidence,
                binding=binding_fit.key if crossed else None,
                targets={f.key: f.crossing for f in fits}, headroom=headroom, steps_used=used,
                failed_at=failed_at, failed_on=tuple(str(d) for d in failed_on),
                cold_pass_at=min(cold_passes, default=None))


# --------------------------------------------------------------------------- readers

def _slo_of(summary: Mapping) -> SLO | None:
    thresholds = ((summary.get("slo") or {}).get("thresholds") or {})
    keys = {k[:-2]: v for k, v in thresholds.items() if k.endswith("_s") and slo_dims.parse_threshold_key(k[:-2])}
    try:
        return SLO(**keys) if keys else None
    except ValueError:
        return None


def knee_of(summary: Mapping) -> Knee | None:
    """The knee of a run from its summary.json: its `knee` entry (null: None), or, for a summary written
    before the knee existed, the estimate from its `steps` and thresholds."""
    if "knee" in summary:
        entry = summary.get("knee")
        return Knee.from_dict(entry) if isinstance(entry, Mapping) else None
    slo = _slo_of(summary)
    if slo is None:
        return None
    return estimate_knee(summary.get("steps") or [], slo)


def _decimals(knee: Knee) -> int:
    """Decimals for the knee's numbers: the interval's half-width sets the last digit shown; with an end
    open, two significant figures of the point, as a one-sided bound has (`_bound`: `knee 0.7 req/s (at
    most 0.67)` put the point over its own bound)."""
    if knee.low is not None and knee.high is not None and knee.high > knee.low:
        half = (knee.high - knee.low) / 2.0
        return max(0, min(3, -math.floor(math.log10(half))))
    if knee.rate is not None and knee.rate > 0:
        return max(1, min(3, 1 - math.floor(math.log10(knee.rate))))
    return 1


def _bound(value: float, decimals: int, *, up: bool) -> str:
    """A one-sided bound in words: at least 2 significant figures, rounded away from the side it bounds
    (a lower bound down, an upper bound up), so the figure never claims more than the steps do: a knee
    above 0.486 req/s is "above 0.48", never "above 0.5".

    >>> _bound(0.486, 1, up=False), _bound(4.41, 1, up=True), _bound(29.2, 1, up=False), _bound(2.0, 1, up=True)
    ('0.48', '4.5', '29.2', '2.0')
    """
    if value > 0:
        decimals = min(6, max(decimals, 1 - math.floor(math.log10(value))))
    scale = 10.0**decimals
    scaled = value * scale
    near = round(scaled)
    if abs(scaled - near) < 1e-6:  # already on the grid: no float crumbs pushed a step over
        rounded = near / scale
    else:
        rounded = (math.ceil(scaled) if up else math.floor(scaled)) / scale
    return f"{rounded:.{decimals}f}"


def target_label(key: str) -> str:
    """A target key as the answer names it: `ttft_p95` -> `TTFT p95`."""
    parsed = slo_dims.parse_threshold_key(key)
    if parsed is None:
        return key.replace("_", " ")
    dim = slo_dims.by_name(parsed[0])
    return f"{dim.display if dim else parsed[0]} p{parsed[1]:g}"


def knee_sentence(knee: Knee | None, slo: SLO | None = None) -> str:
    """The knee in words, e.g. "knee 4.6 req/s (4.4 to 4.8, 90%): TTFT p95 binds; TPOT p95 at 41% of its
    target there"; never more digits than the interval supports. `slo` is accepted for the callers'
    convenience (the wording needs only the knee).

    >>> knee_sentence(Knee(4.63, 4.41, 4.82, 0.9, "ttft_p95", headroom={"tpot_p95": 0.41}))
    'knee 4.6 req/s (4.4 to 4.8, 90%): TTFT p95 binds; TPOT p95 at 41% of its target there'
    """
    del slo
    if knee is None:
        return "knee: not estimated (no judged step on the rate axis with a percentile target)"
    d = _decimals(knee)
    conf = f"{knee.confidence * 100:g}%"

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.{d}f}"

    # every claim is one the steps make: a one-sided bound is rounded away from its side (`_bound`), and
    # a sentence says only what its branch establishes (no step failed; no fit crossed; an end no step
    # bounds): "every target held" was said over inconclusive steps (a slow server's transients)
    if knee.rate is None:
        if knee.binding is not None:  # crossed at or below the lowest rate run
            bound = (f"below {_bound(knee.high, d, up=True)} req/s ({conf})" if knee.high is not None
                     else "below the rates run")
            cold = knee.cold_pass_at
            if cold is not None and (knee.high is None or cold <= knee.high):
                # a step under it passed, but on an idle server (a transient, or beside the chained steps at
                # its rate): never "over at the lowest rate run" above a pass in the step table
                return (f"knee {bound}: {target_label(knee.binding)} is over its target at the lowest rate "
                        f"that read its steady state (the pass at {_bound(cold, d, up=False)} req/s started on "
                        "an idle server: no evidence that rate holds)")
            return f"knee {bound}: {target_label(knee.binding)} is over its target at the lowest rate run"
        if knee.failed_at is not None:  # no percentile target crossed, yet a step failed: never "held"
            dims = ", ".join(target_label(d) for d in knee.failed_on) or "a target"
            latency = any(slo_dims.parse_threshold_key(d) for d in knee.failed_on)
            why = ("a step at a higher rate read under it: near the knee one step is a noisy draw; longer "
                   "steps there place it" if latency else "no latency target crossed its threshold at the rates run")
            return f"knee below {_bound(knee.failed_at, d, up=True)} req/s: {dims} failed there ({why})"
        if knee.low is not None:
            return f"knee above {_bound(knee.low, d, up=False)} req/s ({conf}): no step failed a target"
        return "knee not reached: no step failed a target"
    # an open end: no step bounds the knee on that side (crossed at the lowest rate, or never crossed:
    # `_fit_share` closes every end a step's interval bounds): said as such, no number
    if knee.low is not None and knee.high is not None:
        interval = f"{fmt(knee.low)} to {fmt(knee.high)}"
    elif knee.low is not None:
        interval = f"at least {_bound(knee.low, d, up=False)}"
    elif knee.high is not None:
        interval = f"at most {_bound(knee.high, d, up=True)}"
    else:
        interval = "not bounded by the steps run"
    text = f"knee {fmt(knee.rate)} req/s ({interval}, {conf}): {target_label(knee.binding or '')} binds"
    others = [f"{target_label(k)} at {v * 100:.0f}% of its target there" for k, v in knee.headroom.items()]
    return text + ("; " + "; ".join(others) if others else "")
