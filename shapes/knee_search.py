"""The knee search after a ladder: refine steps where the knee estimate says, until it is precise enough.

Pure: it sees judged step rows (dicts with `label`, `target_rate`, the realised `offered_rate`, `verdict`
and the percentile figures with their `_low` / `_high` interval) and asks an injected `estimate`
(`analysis.knee.estimate_knee` bound to the run's SLO) for the knee over every judged step so far. The
clock is injected too, so a test drives a whole search against a synthetic server in milliseconds:

    search = KneeSearch(ladder_rows, estimate=..., precision=0.05, budget_s=600, max_steps=6,
                        max_extensions=2, step_s=lambda rate: 12.0, clock=time.monotonic)
    while (ask := search.next_step()) is not None:
        row = judge(run_step(ask.rate))          # a refine step at ask.rate
        search.record(row, wall_s=seconds_it_took, nominal_s=its_warmup_plus_window)
    search.answer                                 # SearchAnswer: knee, stopped, steps, extensions

A chained search (the controller's: refine steps back to back, no drain between them) asks for the
next step while the last one still settles: `pending` counts the steps asked for and not yet recorded
(they count towards `max_steps`).

Each `next_step`, in this order:
1. no knee at all (no judged step): stop `no_verdict`;
2. `max_steps` refine steps ran: stop `max_steps`;
   with a `prior` (where a twin or an earlier run puts the knee; `refine.prior`), the first two refine
   steps bracket it, at `prior` x (1 - `precision`) and x (1 + `precision`), so the steps that decide the
   precision stop run first; a prior outside the interval of the knee estimated so far (the server is not
   the one the prior knew) is dropped (`prior_note` says so) and the search goes on as without one. The
   prior places steps only: the knee is estimated from the judged steps alone;
3. an `inconclusive` step whose realised rate lies inside the knee's interval and within `precision` of
   its point (its target straddles the threshold just where the answer is decided; an unbounded end of
   the interval counts as 10% from the knee) is run again at the same target rate, at most
   `max_extensions` times per rate, only while no step at that rate passed or failed, and not while a
   repeat of it still settles (a chained search decides its next step before the one before is judged)
   (`Ask.extends` names it). The repeat is an extra point of the same rate, not a longer window: the
   estimate fits every point, so the repeats pool where they agree. It comes before the precision stop:
   an undecided step inside the interval says the interval is not to be trusted yet (every step inside a
   precise interval lies within `precision` of its point). One farther from the point is not repeated: a
   step at the estimate tells more of the crossing (bench/knee_accuracy.py: auto-4slot's placement steps,
   read cold, were repeated 20-30% from the knee, median error 27%; 11% since; bench/user_config_case.py
   seed 28 ran its ladder's 4.0 req/s twice more against a knee at 3.47, -13.5%; -2.3% since);
4. the knee's relative half-width (`Knee.half_width_rel`) is at most `precision`, at least one refine
   step ran, and judged steps ran within 2 x `precision` of the knee on both sides of it: stop
   `precision` (an interval from the ladder alone, interpolated across a wide gap between its steps, or
   from steps all on one side of the knee, does not know the curve's bend there: bench/knee_accuracy.py
   found such intervals too narrow). With a step still settling (`pending`: the answer will include
   it), the estimate at the decision before must have met this too (bench/knee_accuracy.py: a stop
   made one step early was followed by a last step that moved the knee 12%). When the steps settling
   then are recorded and the estimate over all of them is no longer precise, `reopen` takes the stop
   back and the search goes on (the runner asks it once its last step drained);
5. no target was crossed at any rate run: stop `no_failure` (extend the ladder upward); a target was
   crossed at or below the lowest rate run: stop `no_pass` (extend it downward);
6. the next rate: the knee's point estimate (rounded to 3 significant figures); after `PROBE_AFTER`
   refine steps, moved by `precision` towards a side of it on which no refine step ran yet (by at least
   half the precision), so the estimate's local fit has steps on both sides;
7. the window: fixed (`step_s(rate)`, the config's `refine.duration`), or, for a search that sizes its
   steps (`size`: no `refine.duration` written), from the samples it needs near the knee: the
   completions the nearest undecided step within `NEAR_SHARE` of the rate said would decide it
   (`needs_completions`: its share's interval and the effective trials per completion it showed, its
   autocorrelation), at this rate, but no more than `shapes.probe.REFINE_EFFECTIVE` (60) independent
   samples times the largest autocorrelation time of the judged steps near the rate, which is the
   window without such a step (none judged near: the base window). A step at the knee itself never
   decides, so its need has no bound: uncapped, budgets of 7-44 minutes went into four to six steps of
   up to 6 minutes each, some of them far over the knee (bench/README.md, session 8); at
   most an even share of what is left of the budget among `SHARE_STEPS` steps, at least the base window
   (a step near the knee needs more samples than any other: bench/knee_accuracy.py found 90 s steps at
   4 req/s held the truth 19 of 20 times where 30 s steps held it 13). The last step that fits takes
   what is left;
8. the budget: a step whose projected wall time (its warm-up + window, plus the largest overrun of a
   step recorded so far: drain, judging) does not fit in what is left of `budget_s` since the search
   began is not started: stop `budget`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmload.units import finite as _number

__all__ = ["JUDGED", "STOP_REASONS", "Ask", "KneeSearch", "SearchAnswer", "Sizing", "duration_text", "round_rate",
           "search_stop_text", "steps_text", "stop_text"]

#: an unbounded end of the knee's interval, for "near the knee": this share of the knee away
NEAR_OPEN_END = 0.10
#: steps to the estimate before probing either side of it, and how far (x precision)
PROBE_AFTER = 2
PROBE = 1.0
#: a sizing search shares what is left of its budget among this many steps (`_window`)
SHARE_STEPS = 4
#: an undecided step this close to the rate (relative) tells how many samples a step there needs
NEAR_SHARE = 0.2
#: a budget stop's interval is projected (`KneeSearch.budget_needed_s`) only up to this many times the
#: precision: a wider one is mostly the interpolation across a gap between steps, which the next step near
#: the knee narrows at once, not sampling noise (examples/vllm-openai-chat.yaml's 3-minute search: +-37%,
#: projected 103 minutes; 12 minutes gave +-6%); the projections checked in bench/README.md (session 8)
#: were 1.1 to 2.8 times
PROJECT_WIDTH = 3.0
#: the verdicts that place a step on the curve (as `analysis.knee` reads them)
JUDGED = ("pass", "fail", "inconclusive")

#: why a search stopped (plan.json and summary.json `search.stopped`)
STOP_REASONS = ("precision", "budget", "max_steps", "no_failure", "no_pass", "no_verdict", "stopped")

_STOP_TEXT = {
    "precision": "the knee's interval is within the precision asked",
    "budget": "the search's time budget would run out before another step",
    "max_steps": "the refine step cap (max_steps) was reached",
    "no_failure": "no target was crossed at any rate judged (invalid and insufficient steps do not count); "
                  "extend the ladder upward",
    "no_pass": "the targets were crossed already at the lowest rate run; extend the ladder downward",
    "no_verdict": "no step gave a verdict to estimate from",
    "stopped": "the run was stopped",
}
#: the `auto` shape places its own rates (fractions of the probe's saturation throughput): its ends are
#: the server's, not a ladder the user can extend
_AUTO_STOP_TEXT = {
    "no_failure": "no target was crossed at any rate judged, up to the highest placement (past the probe's "
                  "saturation throughput): the targets are looser than anything this server's queue reaches; "
                  "check the reject and error ratios",
    "no_pass": "the targets were crossed already at the lowest rate placed (a small fraction of the probe's "
               "saturation throughput): the server misses them at light load; compare its idle latency "
               "(the probe's one-user level) with the targets",
    "no_verdict": "no step gave a verdict to estimate from: the budget left the rate steps too few completions "
                  "at this server's speed (each insufficient step says the window it needs: give more "
                  "--budget / shape.auto.budget), or the probe's levels completed nothing",
}


def steps_text(steps: int, extensions: int = 0) -> str:
    """How many refine steps a search ran, and how many of them repeated an undecided step, e.g. "4 refine
    steps (2 of them repeats of an inconclusive step near the knee)".

    >>> steps_text(1), steps_text(4, 2), steps_text(1, 1)
    ('1 refine step', '4 refine steps (2 of them repeats of an inconclusive step near the knee)', '1 refine step (a repeat of an inconclusive step near the knee)')
    """
    text = f"{steps} refine step{'s' if steps != 1 else ''}"
    if extensions and extensions >= steps:
        text += f" ({'a repeat' if steps == 1 else 'all repeats'} of an inconclusive step near the knee)"
    elif extensions:
        text += (f" ({extensions} of them {'repeats' if extensions != 1 else 'a repeat'} of an inconclusive "
                 "step near the knee)")
    return text


def stop_text(stopped: str | None, *, auto: bool = False, short_s: float | None = None,
              needed_s: float | None = None, precision: float | None = None) -> str:
    """A short phrase for a stop reason ("" for None); `auto`: the search of an `auto` shape, whose
    rates the tool placed (the advice is about the server, not a ladder to extend); `short_s`: for a
    budget stop, the seconds the next step lacked (summary.json `search.short_s`); `needed_s` and
    `precision`: the budget projected to bring the interval within the precision (`search.budget_needed_s`).

    >>> stop_text("no_pass").endswith("extend the ladder downward"), "ladder" in stop_text("no_pass", auto=True)
    (True, False)
    >>> stop_text("budget", short_s=46.2)
    "the search's time budget would run out before another step; the next one needed 47 s more"
    >>> stop_text("budget", auto=True, short_s=10, needed_s=1430, precision=0.05)[-59:]
    'needed 10 s more; ±5% would take a budget of 24 min or more'
    """
    if not stopped:
        return ""
    text = (auto and _AUTO_STOP_TEXT.get(stopped)) or _STOP_TEXT.get(stopped, stopped)
    if stopped == "budget" and short_s is not None and short_s > 0:
        text += f"; the next one needed {math.ceil(round(short_s, 3)):d} s more"
    if stopped == "budget" and needed_s is not None and needed_s > 0 and precision:
        budget = "a budget" if auto else "a refine budget"  # shape.auto.budget (find's --budget), refine.budget
        text += f"; ±{100 * precision:g}% would take {budget} of {duration_text(needed_s)} or more"
    return text


def search_stop_text(search: Mapping[str, Any], *, auto: bool | None = None) -> str:
    """`stop_text` of a plan.json / summary.json `search` (its `stopped`, `short_s`, `budget_needed_s` and
    `precision`); `auto` defaults to whether the search is an `auto` shape's (it has `auto`)."""
    return stop_text(search.get("stopped"), auto="auto" in search if auto is None else auto,
                     short_s=search.get("short_s"), needed_s=search.get("budget_needed_s"),
                     precision=search.get("precision"))


def duration_text(seconds: float) -> str:
    """A budget, rounded up: whole seconds under two minutes, whole minutes from there.

    >>> duration_text(46.2), duration_text(119.5), duration_text(1430), duration_text(7200)
    ('47 s', '120 s', '24 min', '120 min')
    """
    if seconds < 120:
        return f"{math.ceil(round(seconds, 3)):d} s"
    return f"{math.ceil(round(seconds / 60, 3)):d} min"


def round_rate(rate: float, digits: int = 3) -> float:
    """`rate` to `digits` significant figures (a step label stays short: r4.63, not r4.6271...).

    >>> round_rate(4.62718), round_rate(12.345), round_rate(0.0123456)
    (4.63, 12.3, 0.0123)
    """
    if not rate > 0 or not math.isfinite(rate):
        return rate
    return round(rate, digits - 1 - math.floor(math.log10(rate)))


@dataclass(frozen=True, slots=True)
class Ask:
    """The next refine step: its target `rate`, the label of the inconclusive step it repeats
    (`extends`, None for a step at the knee estimate), and its window when the search sized it
    (`window_s`, None: the step's own)."""

    rate: float
    extends: str | None = None
    window_s: float | None = None


@dataclass(frozen=True, slots=True)
class Sizing:
    """How a search sizes its steps: `base_s(rate)`, the shortest window (the ladder's); `warmup_s`;
    `max_arrivals`, the most arrivals one step may plan (warm-up and window)."""

    base_s: Callable[[float], float]
    warmup_s: float
    max_arrivals: float = math.inf
    #: the interval confidence of the rows' shares (to read their effective trials back)
    confidence: float = 0.9


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """The search's result: the last knee estimate (an `analysis.knee.Knee` or None), why it stopped,
    the refine steps it ran (`steps`), how many of them repeated an inconclusive step (`extensions`),
    the wall time it took, and the prior it was given (req/s, None without one) with why it was dropped
    (`prior_note`, "" when it placed the first two steps)."""

    knee: Any
    stopped: str
    steps: int
    extensions: int
    elapsed_s: float
    prior: float | None = None
    prior_note: str = ""
    #: precision stops taken back (`KneeSearch.reopen`)
    reopened: int = 0
    #: a budget stop: the seconds the next step's projected cost exceeded what was left (None otherwise)
    short_s: float | None = None
    #: a budget stop with the knee's interval bounded but wider than the precision: the least search budget
    #: projected to narrow it to `precision` (`KneeSearch.budget_needed_s`; None otherwise)
    budget_needed_s: float | None = None
    precision: float | None = None

    def to_dict(self) -> dict:
        """plan.json's `search` (summary.json copies it); `prior` and `prior_note` only with a prior,
        `reopened` only when a precision stop was taken back, `short_s` only with a budget stop,
        `budget_needed_s` (with the `precision` it is for) only with a budget stop that projected one."""
        out = {"stopped": self.stopped, "steps": self.steps, "extensions": self.extensions,
               "elapsed_s": round(self.elapsed_s, 3)}
        if self.reopened:
            out["reopened"] = self.reopened
        if self.stopped == "budget" and self.short_s is not None:
            out["short_s"] = round(self.short_s, 1)
        if self.stopped == "budget" and self.budget_needed_s is not None:
            out.update(budget_needed_s=round(self.budget_needed_s, 1), precision=self.precision)
        if self.prior is not None:
            out.update(prior=round(self.prior, 6), prior_note=self.prior_note)
        return out


def _inside(rate: float, low: float | None, high: float | None) -> bool:
    return (low is None or rate >= low) and (high is None or rate <= high)


class KneeSearch:
    """Refine steps chosen from the knee estimate; see the module docstring."""

    def __init__(self, rows: Iterable[Mapping] = (), *, estimate: Callable[[list[dict]], Any],
                 precision: float = 0.05, budget_s: float = 600.0, max_steps: int = 6, max_extensions: int = 2,
                 step_s: Callable[[float], float] | float = 0.0, clock: Callable[[], float] = time.monotonic,
                 size: Sizing | None = None, prior: float | None = None) -> None:
        if not 0 < precision < 1:
            raise ValueError(f"precision must be in (0, 1), got {precision}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.rows: list[dict] = [dict(r) for r in rows]
        self._first_refine = len(self.rows)
        self.estimate = estimate
        self.precision = float(precision)
        self.budget_s = float(budget_s)
        self.max_steps = int(max_steps)
        self.max_extensions = int(max_extensions)
        self._step_s = step_s if callable(step_s) else (lambda _rate, s=float(step_s): s)
        #: sizes each step's window from the samples it needs (None: `step_s` as given)
        self.size = size
        self.clock = clock
        self.started = clock()
        self.refine_steps = 0
        #: the target rates of the refine steps asked for (`next_step`) and not yet recorded, oldest first: a
        #: chained search decides the next rate while the step before it still settles (`pending`), and a
        #: rate settling is not repeated again (`_extension`)
        self._settling: list[float] = []
        self.extensions: dict[float, int] = {}
        self.overrun_s = 0.0
        self.stopped: str | None = None
        #: at a budget stop, how many seconds the next step's projected cost exceeded what was left
        self.short_s: float | None = None
        self._knee: Any = None
        self._fresh = False
        self._was_precise = False  # the last decision's estimate met the precision stop
        #: precision stops the steps settling then undid (`reopen`)
        self.reopened = 0
        #: where the knee is expected (req/s): the first two refine steps bracket it (None: no prior, or
        #: dropped); `given_prior` keeps it for the answer
        self.prior = float(prior) if prior is not None and prior > 0 else None
        self.given_prior = self.prior
        #: why the prior was dropped ("" while used, or with none)
        self.prior_note = ""

    # ------------------------------------------------------------------ state

    @property
    def knee(self) -> Any:
        """The knee over every judged step so far (estimated once per new step)."""
        if not self._fresh:
            self._knee = self.estimate(self.rows)
            self._fresh = True
        return self._knee

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    @property
    def pending(self) -> int:
        """Refine steps asked for and not yet recorded."""
        return len(self._settling)

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Measure the budget on `clock` from now (the controller's: a search a shape made with the default
        clock runs on the run's clock, virtual in tests)."""
        self.clock = clock
        self.started = clock()

    def record(self, row: Mapping, *, wall_s: float | None = None, nominal_s: float | None = None) -> None:
        """A refine step's judged row; `wall_s` (sent to judged) and `nominal_s` (warm-up + window) teach
        the budget how much a step costs beyond its schedule."""
        self.rows.append(dict(row))
        self.refine_steps += 1
        if self._settling:
            self._settling.pop(0)
        self._fresh = False
        if wall_s is not None and nominal_s is not None:
            self.overrun_s = max(self.overrun_s, float(wall_s) - float(nominal_s))

    def stop(self, reason: str = "stopped") -> None:
        """End the search from outside (the run was stopped)."""
        if self.stopped is None:
            self.stopped = reason

    # ------------------------------------------------------------------ the next step

    def next_step(self) -> Ask | None:
        """The next refine step, or None when the search is done (`stopped` says why)."""
        if self.stopped is not None:
            return None
        ask, reason = self._decide()
        if ask is None:
            self.stopped = reason
            return None
        if self.size is not None:
            ask = Ask(ask.rate, ask.extends, self._window(ask.rate))
        cost, left = self.step_cost_s(ask.rate, ask.window_s), self.budget_s - self.elapsed_s
        if cost > left:
            self.stopped, self.short_s = "budget", cost - left
            return None
        if ask.extends is not None:
            key = round(ask.rate, 9)
            self.extensions[key] = self.extensions.get(key, 0) + 1
        self._settling.append(round(ask.rate, 9))
        return ask

    def budget_needed_s(self) -> float | None:
        """At a budget stop whose knee's interval is bounded but wider than `precision`, after at least one
        refine step: the least budget (this search's, `refine.budget`) projected to narrow it to `precision`.
        An interval's half-width narrows at most as fast as one over the square root of the load near the
        knee, where the refine steps run (sampling noise alone), so the time spent so far x (half-width /
        precision)^2; bench/README.md (session 8) reran searches at it in virtual time. None otherwise: a
        knee open at an end needs a step beyond it, not more time, and a half-width over `PROJECT_WIDTH` x
        the precision is not projected either (see there)."""
        if self.stopped != "budget" or not self.refine_steps:
            return None
        width = getattr(self.knee, "half_width_rel", None)  # over every step recorded, the last settled one too
        if width is None or not self.precision < width <= PROJECT_WIDTH * self.precision:
            return None
        return self.elapsed_s * (width / self.precision) ** 2

    def step_cost_s(self, rate: float, window_s: float | None = None) -> float:
        """The projected wall time of a step at `rate` (with `window_s`, a sized one): its schedule plus
        the largest overrun so far."""
        schedule = float(self._step_s(rate)) if window_s is None or self.size is None else self.size.warmup_s + window_s
        return schedule + max(0.0, self.overrun_s)

    def _window(self, rate: float) -> float:
        """The window of a sized step at `rate` (module docstring, 7)."""
        if self.size is None:
            return float(self._step_s(rate))
        base = float(self.size.base_s(rate))
        per_step = self.size.warmup_s + max(0.0, self.overrun_s)
        left = self.budget_s - self.elapsed_s
        steps_left = max(1, SHARE_STEPS - self.refine_steps - self.pending)
        share = left / steps_left - per_step
        window = share
        needs = self._needs_near(rate)
        near = [row for row in self.rows if row.get("verdict") in JUDGED
                and (at := _number(row.get("offered_rate"))) is not None and abs(at - rate) <= NEAR_SHARE * rate]
        keys = sorted({str(k)[:-5] for row in near for k in row if str(k).endswith("_over")})
        if near and (keys or needs is None):  # independent samples x the autocorrelation time there, at most
            from shapes.probe import REFINE_EFFECTIVE, autocorrelation_time

            effective = REFINE_EFFECTIVE * autocorrelation_time(near, keys, self.size.confidence)
            needs = effective if needs is None else min(needs, effective)
        if needs is None:  # nothing judged near the rate: the base window
            window = base
        elif rate > 0:
            window = min(share, needs / rate)
        window = max(base, window)
        if left - (per_step + window) < per_step + base:  # no step would fit after this one: take it all
            window = max(base, left - per_step)
        if rate > 0:
            window = min(window, max(base, self.size.max_arrivals / rate - self.size.warmup_s))
        return float(window)

    def _needs_near(self, rate: float) -> float | None:
        """The completions the undecided step nearest `rate` (within `NEAR_SHARE`) said would decide it."""
        near = []
        for row in self.rows:
            at, needs = _number(row.get("offered_rate")), _number(row.get("needs_completions"))
            if row.get("verdict") == "inconclusive" and at is not None and needs is not None \
                    and abs(at - rate) <= NEAR_SHARE * rate:
                near.append((abs(at - rate), needs))
        return min(near)[1] if near else None

    def _decide(self) -> tuple[Ask | None, str]:
        knee = self.knee
        if knee is None:
            return None, "no_verdict"
        if self.refine_steps + self.pending >= self.max_steps:
            return None, "max_steps"
        bracket = self._prior_step(knee)
        if bracket is not None:
            return bracket, ""
        repeat = self._extension(knee)  # before the precision stop: an undecided step inside the interval
        if repeat is not None:          # says the interval is not yet to be trusted
            return repeat, ""
        precise = self._precise(knee)
        # with a step still settling (a chained search), the answer will include it: the estimate
        # without it must have been precise at the decision before too, or that step may still move it
        confirmed = precise and (self.pending == 0 or self._was_precise)
        self._was_precise = precise
        if confirmed:
            return None, "precision"
        if knee.rate is None:  # a binding target without a crossing rate was over at the lowest rate
            return None, "no_failure" if knee.binding is None else "no_pass"
        return Ask(round_rate(float(knee.rate) * (1.0 + self._probe(float(knee.rate))))), ""

    def _precise(self, knee: Any) -> bool:
        """The precision stop's test (module docstring, 4) on `knee`."""
        width = knee.half_width_rel
        return bool(knee.rate is not None and width is not None and width <= self.precision
                    and self.refine_steps and self._measured_near(knee.rate))

    def reopen(self) -> bool:
        """After the steps still settling at a precision stop are recorded: when they undid it (the
        estimate over every step is no longer precise), the search goes on (True; `next_step` asks again,
        within the budget and `max_steps` as before), else it stays stopped (False). A chained search
        decides to stop while its last step settles; bench/user_config_case.py seed 25 stopped at 2.75 to
        2.94 req/s, and the step that settled then (inconclusive at 3.0) left the interval open above."""
        if self.stopped != "precision" or self.pending or self._precise(self.knee):
            return False
        self.stopped = None
        self._was_precise = False
        self.reopened += 1
        return True

    def _prior_step(self, knee: Any) -> Ask | None:
        """The next of the two steps bracketing the prior (module docstring, 2), or None."""
        n = self.refine_steps + self.pending
        if self.prior is None or n >= 2:
            return None
        if not _inside(self.prior, knee.low, knee.high):
            low, high = ("-" if v is None else f"{v:.3g}" for v in (knee.low, knee.high))
            self.prior_note = (f"the prior {self.prior:.3g} req/s lies outside the knee's interval [{low}, {high}] "
                               "from the steps judged: not used (is the server the one the prior knew?)")
            self.prior = None
            return None
        return Ask(round_rate(self.prior * (1.0 + (-1.0 if n == 0 else 1.0) * self.precision)))

    def _probe(self, rate: float) -> float:
        """The relative offset of the next step from the estimate `rate`: 0 for the first `PROBE_AFTER`
        refine steps; then, when no refine step judged so far ran on one side of it (by at least half
        the precision), `PROBE` x precision towards that side, so chained steps bracket the knee."""
        n = self.refine_steps + self.pending
        if n < PROBE_AFTER or not PROBE:
            return 0.0
        near = self.precision * rate / 2
        refine = [x for row in self.rows[self._first_refine:] if row.get("verdict") in JUDGED
                  and (x := _number(row.get("offered_rate"))) is not None]
        below = any(x <= rate - near for x in refine)
        above = any(x >= rate + near for x in refine)
        if not below:
            return -PROBE * self.precision
        if not above:
            return PROBE * self.precision
        return 0.0

    def _measured_near(self, rate: float) -> bool:
        """Judged steps ran at realised rates within 2 x `precision` of `rate` on both sides of it (an
        interval from steps all on one side extrapolates the curve's bend: bench/knee_accuracy.py found
        such intervals too narrow, e.g. two steps 12% over a flat TPOT curve's knee)."""
        near = [at for row in self.rows if row.get("verdict") in JUDGED
                and (at := _number(row.get("offered_rate"))) is not None
                and abs(at - rate) <= 2 * self.precision * rate]
        return any(at < rate for at in near) and any(at > rate for at in near)

    def _extension(self, knee: Any) -> Ask | None:
        """The inconclusive step nearest the knee, inside its interval, not yet repeated
        `max_extensions` times (None if there is none)."""
        if self.max_extensions < 1:
            return None
        centre = knee.rate if knee.rate is not None else (
            (knee.low + knee.high) / 2 if knee.low is not None and knee.high is not None else None)
        low = knee.low if knee.low is not None or centre is None else centre * (1 - NEAR_OPEN_END)
        high = knee.high if knee.high is not None or centre is None else centre * (1 + NEAR_OPEN_END)
        if centre is not None:  # within the precision of the point: only there can it hold a precise interval open
            low, high = (max(low, centre * (1 - self.precision)) if low is not None else None,
                         min(high, centre * (1 + self.precision)) if high is not None else None)
        decided = {round(t, 9) for row in self.rows if row.get("verdict") in ("pass", "fail")
                   and (t := _number(row.get("target_rate"))) is not None}
        candidates = []
        for row in self.rows:
            if row.get("verdict") != "inconclusive":
                continue
            target, offered = _number(row.get("target_rate")), _number(row.get("offered_rate"))
            if target is None:
                continue
            at = offered if offered is not None else target
            if not _inside(at, low, high) or round(target, 9) in decided or round(target, 9) in self._settling:
                continue  # decided, or a step at its rate still settles (a chained search): its verdict first
            if self.extensions.get(round(target, 9), 0) >= self.max_extensions:
                continue
            candidates.append((abs(at - centre) if centre is not None else 0.0, target, str(row.get("label"))))
        if not candidates:
            return None
        _, target, label = min(candidates)
        return Ask(target, extends=label)

    # ------------------------------------------------------------------ the result

    @property
    def answer(self) -> SearchAnswer:
        """The result; `knee` is the last estimate made (None if none was): at a budget stop that projects a
        budget, the estimate over every step recorded, which the projection reads."""
        needed = self.budget_needed_s()
        return SearchAnswer(knee=self._knee, stopped=self.stopped or "running", steps=self.refine_steps,
                            extensions=sum(self.extensions.values()), elapsed_s=self.elapsed_s,
                            prior=self.given_prior, prior_note=self.prior_note, reopened=self.reopened,
                            short_s=self.short_s, budget_needed_s=needed, precision=self.precision)
