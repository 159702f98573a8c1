"""`shape: {auto: ...}`: the knee from a URL and targets alone, no rates and no durations.

Three stages, one search object (`AutoSearch`, KneeSearch's interface: next_step / record / pending /
stop / answer / use_clock), all within `shape.auto.budget` of wall time counted from the run's start:

1. probe      closed-loop levels of 1, 4, 16, ... users (phase `probe`, drained; `shapes.probe`): the idle
              latency and the saturation throughput. The plan holds the first level; the search asks
              for the others while the throughput still grows.
2. placement  open-loop steps (phase `ladder`, drained, started on an idle server as a ladder's are) at
              fractions of the saturation throughput, upward while they pass, downward from a first
              failure, until a pass lies under a fail (`shapes.probe.next_placement`). Each window is
              sized from the completions a judgement of the SLO's highest percentile needs at its rate.
              A pass of a step shorter than its queue's relaxation time (`shapes.probe.cold_transient`:
              near saturation, minutes) read its idle start's transient: the walk takes it as
              inconclusive and goes on past it, and the estimate leaves it out (`analysis.knee`).
3. refine     `shapes.knee_search.KneeSearch` over the placement steps, unchanged: chained refine steps
              at the knee estimate until `precision` or the budget. Each refine window is sized from
              the effective samples wanted near the knee times the autocorrelation time measured so far
              (`shapes.probe.autocorrelation_time`).

Steps of stage 1 and 2 are drained (their phases say so); the controller runs a search step of a
drained phase as it runs a planned one and hands its judged row back at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shapes.knee_search import Ask, KneeSearch, SearchAnswer, round_rate
from shapes.phases import rate_phases
from shapes.probe import (
    REFINE_EFFECTIVE,
    ServerRange,
    autocorrelation_time,
    cold_transient,
    next_placement,
    next_probe_level,
    probe_level_s,
    probe_levels,
    probe_step,
    samples_for,
    server_range,
    window_s,
)
from shapes.steps import StepSpec, derive_seed, rate_label, unique_label

__all__ = ["AutoAnswer", "AutoSearch", "AutoSizing", "auto_steps"]

#: the probe's share of the budget: no probe level that would end past it (`probe_level_s`)
PROBE_SHARE = 0.3
#: placement steps at most
MAX_PLACEMENT = 5
#: seconds between a drained step's end and the next one's start (lead, judging), and the run's tail
#: after the last step (drain, analysis, report), counted against the budget
STEP_GAP_S = 2.0
CLOSING_S = 10.0
#: a drained step's expected tail, in idle requests' time (its last requests finishing)
DRAIN_IDLE = 3.0


def auto_steps(config: Any, base_dir: Any = None) -> list[StepSpec]:
    """The planned steps of `shape.auto`: the probe's first level (one user); the search asks the rest."""
    auto = config.shape.auto
    return [probe_step(1, index=0, seed=int(config.requests.seed), drain_timeout_s=float(auto.drain_timeout))]


@dataclass(frozen=True)
class AutoSizing:
    """Warm-up and window bounds from the probe's range and the budget: a step's warm-up is a few idle
    requests' time; a window holds at least ten idle requests' time (and 10 s); a placement window is at
    most `PLACE_SHARE` of the budget, a refine window `REFINE_SHARE`."""

    warmup_s: float
    min_window_s: float
    max_place_s: float
    max_refine_s: float

    PLACE_SHARE = 0.12
    REFINE_SHARE = 0.25
    WARMUP_IDLE = 3.0  # idle requests' time
    WARMUP_MAX_S = 20.0

    @classmethod
    def of(cls, rng: ServerRange, budget_s: float) -> AutoSizing:
        e2e = max(rng.idle_e2e_s, 1e-3)
        minimum = min(max(10.0, 10.0 * e2e), 0.1 * budget_s)
        return cls(warmup_s=min(max(2.0, cls.WARMUP_IDLE * e2e), cls.WARMUP_MAX_S), min_window_s=minimum,
                   max_place_s=max(minimum, cls.PLACE_SHARE * budget_s),
                   max_refine_s=max(minimum, cls.REFINE_SHARE * budget_s))


@dataclass(frozen=True)
class AutoAnswer(SearchAnswer):
    """The search's answer (`SearchAnswer`) with what the probe measured and the placement steps run."""

    range: ServerRange | None = None
    probe_steps: int = 0
    placement_steps: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """plan.json's `search`: the knee search's fields, plus `auto` (range, probe and placement steps)."""
        return {**super().to_dict(), "auto": {"range": None if self.range is None else self.range.to_dict(),
                                              "probe_steps": self.probe_steps,
                                              "placement_steps": self.placement_steps, **self.extra}}


class AutoSearch:
    """The `auto` shape's steps after its planned probe level; see the module docstring."""

    def __init__(self, config: Any, rows: Iterable[Mapping] = (), *, estimate: Callable[[list[dict]], Any],
                 clock: Callable[[], float] = time.monotonic, spent_s: float = 0.0) -> None:
        self.config = config
        self.auto = config.shape.auto
        self.slo = config.slo
        self.rows: list[dict] = [dict(r) for r in rows]
        self._estimate = estimate
        self.clock = clock
        self.started = clock() - spent_s
        self.stage = "probe"
        self.range: ServerRange | None = None
        self.sizing: AutoSizing | None = None
        self.knee_search: KneeSearch | None = None
        self.stopped: str | None = None
        self._pending = 0
        self._asked: tuple[str, float] | None = None  # the stage and value of the last ask
        self._knee: Any = None
        #: the placement walk ended on the budget with a rate still to run (not on a bracket or its end)
        self._walk_cut = False
        #: the seconds a placement step that did not fit lacked (the answer's `short_s` when the walk's end
        #: was the budget's)
        self._short_s: float | None = None
        self.probe_max = min(int(self.auto.probe_max_concurrency),
                             int(config.client.max_concurrency or self.auto.probe_max_concurrency))

    def estimate(self, rows: list[dict]) -> Any:
        """The knee over `rows` and the probe levels (the estimate reads the saturation throughput from
        them, to know which idle-started steps read their transient: `shapes.probe.cold_transient`)."""
        probe = [r for r in self.rows if r.get("phase") == "probe"]
        return self._estimate([*probe, *(r for r in rows if r.get("phase") != "probe")])

    # ------------------------------------------------------------------ KneeSearch's interface

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    @property
    def pending(self) -> int:
        return self.knee_search.pending if self.knee_search is not None else self._pending

    @property
    def refine_steps(self) -> int:
        return self.knee_search.refine_steps if self.knee_search is not None else 0

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Count the budget on `clock` from now on, the time spent so far kept."""
        spent = self.elapsed_s
        self.clock = clock
        self.started = clock() - spent
        if self.knee_search is not None:
            self.knee_search.use_clock(clock)

    def record(self, row: Mapping, *, wall_s: float | None = None, nominal_s: float | None = None) -> None:
        """A judged step this search asked for."""
        self.rows.append(dict(row))
        if self.knee_search is not None:
            self.knee_search.record(row, wall_s=wall_s, nominal_s=nominal_s)
        else:
            self._pending = max(0, self._pending - 1)

    def stop(self, reason: str = "stopped") -> None:
        if self.knee_search is not None:
            self.knee_search.stop(reason)
        if self.stopped is None:
            self.stopped = reason

    def reopen(self) -> bool:
        """`KneeSearch.reopen`: a precision stop the steps settling then undid is taken back (True)."""
        if self.knee_search is None or self.stopped != "precision" or not self.knee_search.reopen():
            return False
        self.stopped = None
        return True

    def next_step(self) -> Ask | None:
        """The next step (`Ask.rate`: users for a probe level, req/s otherwise), or None when done."""
        if self.stopped is not None:
            return None
        if self.stage == "probe":
            ask = self._next_probe()
            if ask is not None:
                return ask
        if self.stage == "place":
            ask = self._next_placement()
            if ask is not None:
                return ask
        return self._next_refine()

    # ------------------------------------------------------------------ the stages

    def _ask(self, stage: str, value: float) -> Ask:
        self._asked = (stage, value)
        self._pending += 1
        return Ask(value)

    def _next_probe(self) -> Ask | None:
        levels = probe_levels(self.rows)
        level = next_probe_level(levels, max_concurrency=self.probe_max)
        if level is not None and (self.elapsed_s + probe_level_s(levels, level) + STEP_GAP_S
                                  <= PROBE_SHARE * self.auto.budget):
            return self._ask("probe", float(level))
        self.range = server_range(levels)
        if self.range is None:
            self.stopped = "no_verdict"
            return None
        self.sizing = AutoSizing.of(self.range, float(self.auto.budget))
        self.stage = "place"
        return None

    def _placed(self) -> list[tuple[float, str]]:
        """The placement steps as `(target rate, verdict)`; a pass that read an idle start's transient
        (`shapes.probe.cold_transient`: shorter than the queue's relaxation time there) is only
        `inconclusive`: the walk goes on past it for a step whose verdict says something."""
        saturation = self.range.saturation_rps if self.range is not None else None
        return [(float(r["target_rate"]), "inconclusive" if r.get("verdict") == "pass"
                 and cold_transient(r, saturation) else str(r.get("verdict"))) for r in self.rows
                if r.get("phase") == "ladder" and r.get("target_rate") is not None]

    def _measured(self) -> tuple[ServerRange, AutoSizing]:
        """The probe's range and the window sizing from it, set when the probe stage ends (the placement
        and refine stages, and their steps, come after it)."""
        if self.range is None or self.sizing is None:
            raise RuntimeError("the auto search sized a rate step before its probe measured the server")
        return self.range, self.sizing

    def _next_placement(self) -> Ask | None:
        server, sizing = self._measured()
        placed = self._placed()
        rate = None if len(placed) >= MAX_PLACEMENT else next_placement(server.saturation_rps, placed)
        if rate is not None:
            rate = round_rate(rate)
            short = self._short_by(sizing.warmup_s + self.place_window_s(rate) + self._drain_s(rate))
            if short <= 0:
                return self._ask("place", rate)
            self._short_s = short
            if not placed:  # not one rate step fits in what the probe left of the budget
                self.stopped = "budget"
                return None
            self._walk_cut = True  # the walk wanted another step: its end is the budget's, not the server's
        self.stage = "refine"
        left = float(self.auto.budget) - self.elapsed_s - CLOSING_S - self._drain_s(rate or 0.0)
        self.knee_search = KneeSearch(
            [r for r in self.rows if r.get("phase") in rate_phases()], estimate=self.estimate,
            precision=float(self.auto.precision), budget_s=max(0.0, left), max_steps=int(self.auto.max_steps),
            max_extensions=int(self.auto.max_extensions), step_s=self.refine_step_s, clock=self.clock)
        return None

    def _next_refine(self) -> Ask | None:
        if self.knee_search is None:
            return None
        ask = self.knee_search.next_step()
        if ask is None:
            self.stopped = self.knee_search.stopped
            if self._walk_cut and self.stopped in ("no_failure", "no_pass"):
                self.stopped = "budget"  # the walk had not reached the server's end of the range
            return None
        self._asked = ("refine", ask.rate)
        return ask

    def _short_by(self, cost_s: float) -> float:
        """The seconds a step costing `cost_s` (and its gap, and the run's closing) would overrun the
        budget by; at most 0 when it fits."""
        return self.elapsed_s + cost_s + STEP_GAP_S + CLOSING_S - float(self.auto.budget)

    def _drain_s(self, rate: float) -> float:
        """A drained step's expected tail: a few idle requests (more near saturation)."""
        e2e = self.range.idle_e2e_s if self.range is not None else 1.0
        return DRAIN_IDLE * e2e

    # ------------------------------------------------------------------ window sizing

    def _percentile(self) -> float:
        return max((t.percentile for t in self.slo.thresholds), default=95.0)

    def place_window_s(self, rate: float) -> float:
        """A placement step's window: the completions a judgement needs at `rate`, within the sizing."""
        _, s = self._measured()
        return window_s(rate, samples_for(self._percentile()), min_s=s.min_window_s, max_s=s.max_place_s)

    def refine_window_s(self, rate: float) -> float:
        """A refine step's window: `REFINE_EFFECTIVE` independent samples times the autocorrelation time
        measured so far near `rate`, at `rate`, within the sizing; shortened to what the budget has left
        when that is at least half of it (and the minimum window)."""
        keys = [t.key for t in self.slo.thresholds]
        tau = autocorrelation_time([r for r in self.rows if r.get("phase") in rate_phases()], keys,
                                   float(self.slo.confidence), near=rate)
        _, s = self._measured()
        window = window_s(rate, REFINE_EFFECTIVE * tau, min_s=s.min_window_s, max_s=s.max_refine_s)
        # the last step takes what the budget has left, when that is at least half its window
        left = (float(self.auto.budget) - self.elapsed_s - s.warmup_s - self._drain_s(rate) - STEP_GAP_S
                - CLOSING_S)
        return left if max(s.min_window_s, window / 2) <= left < window else window

    def refine_step_s(self, rate: float) -> float:
        """Warm-up plus window of a refine step at `rate` (what the knee search's budget counts)."""
        return self._measured()[1].warmup_s + self.refine_window_s(rate)

    # ------------------------------------------------------------------ the steps

    def step_spec(self, rate: float, *, index: int, seed: int, taken: Iterable[str]) -> StepSpec:
        """The step of the last ask (`rate` as asked), the `index`-th step of the run."""
        stage = self._asked[0] if self._asked is not None else "refine"
        auto = self.auto
        if stage == "probe":
            return probe_step(int(rate), index=index, seed=seed, drain_timeout_s=float(auto.drain_timeout))
        window = self.place_window_s(rate) if stage == "place" else self.refine_window_s(rate)
        return StepSpec(label=unique_label(rate_label(rate), taken), index=index,
                        phase="ladder" if stage == "place" else "refine", arrival=auto.arrival,
                        target_rate=rate, burstiness=auto.burstiness, warmup_s=self._measured()[1].warmup_s,
                        duration_s=round(window, 3), drain_timeout_s=float(auto.drain_timeout),
                        drain=stage == "place", seed=derive_seed(seed, index))

    # ------------------------------------------------------------------ the result

    @property
    def answer(self) -> AutoAnswer:
        ks = self.knee_search
        short, needed = self._short_s, None
        if ks is not None:
            search = ks.answer
            knee, steps, ext = search.knee, ks.refine_steps, sum(ks.extensions.values())
            if ks.stopped == "budget":
                short = ks.short_s
            if search.budget_needed_s is not None:  # the whole run's budget: what came before the search too
                needed = self.elapsed_s - search.elapsed_s + search.budget_needed_s + CLOSING_S
        else:
            rated = [r for r in self.rows if r.get("phase") in rate_phases()]
            knee, steps, ext = (self.estimate(rated) if rated else None), 0, 0
        extra = {}
        if self.sizing is not None:
            extra["sizing"] = {k: round(getattr(self.sizing, k), 3) for k in
                               ("warmup_s", "min_window_s", "max_place_s", "max_refine_s")}
        return AutoAnswer(knee=knee, stopped=self.stopped or "running", steps=steps, extensions=ext,
                          elapsed_s=self.elapsed_s, reopened=ks.reopened if ks is not None else 0,
                          short_s=short if self.stopped == "budget" else None,
                          budget_needed_s=needed,
                          precision=float(self.auto.precision), range=self.range,
                          probe_steps=sum(1 for r in self.rows if r.get("phase") == "probe"),
                          placement_steps=sum(1 for r in self.rows if r.get("phase") == "ladder"), extra=extra)


def spent_before(rows: Iterable[Mapping]) -> float:
    """Wall seconds the planned steps took (their windows plus a gap each), for the budget."""
    total = 0.0
    for row in rows:
        start, end = row.get("window_start"), row.get("window_end")
        try:
            span = float(end) - float(start) if start is not None and end is not None else math.nan
        except (TypeError, ValueError):
            span = math.nan
        total += (span if math.isfinite(span) and span > 0 else 0.0) + STEP_GAP_S
    return total
