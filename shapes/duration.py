"""How long a plan takes, said as a run starts (`llmload: plan: ...`). Pure, no Locust.

    5 steps + knee search, about 12 min (steps 8 min 20 s, drains up to 5 min, knee search up to 4 min 30 s
    of its 5 min budget)

The figure is the steps' warm-up plus window (`StepSpec.warmup_s + duration_s`) plus what the knee search
can run (`shape.ladder.refine`): as many refine steps as fit in its budget (`refine_window_s`, the cost the
search counts, `shapes.knee_search`), at most `max_steps`, plus one drain to its bound. A drained step waits
for its answers after its arrivals, at most `drain_timeout` and never longer than a request may last
(`target.timeout`): under capacity about one answer's length (seconds), past the knee up to that bound, and a
ladder keeps one step past the knee (`stop_after_failures`). The sum of every drain's bound is said apart.
Measured once (the vLLM example against `llmload sim --flavor vllm`, `target.timeout: 30s`, on a busy
2-core machine): about 7 min 30 s printed; 8 min 9 s from the command's start to its end when every ladder
step ran (the other drains, start-up, judging and the report), 6 min 18 s in a run whose third step failed
(the fourth not run). Where the run ends sooner (the ladder stops after a failing step, which the line
says; the search reaches its precision), the figure is an upper bound. A closed-loop level of so many requests has no
fixed length: it is counted apart and the figure is then a lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from llmload.config import Config
from shapes.plan import refine_window_s
from shapes.steps import StepSpec

__all__ = ["PlanDuration", "format_span", "plan_duration"]


@dataclass(frozen=True, slots=True)
class PlanDuration:
    """A plan's expected wall time, in parts (seconds)."""

    #: steps of the plan (the knee search's refine steps not included)
    steps: int
    #: warm-up plus window of every step with a fixed length
    scheduled_s: float
    #: closed-loop steps of a request count, whose length depends on the server
    open_ended: int
    #: the most the drains can add: each drained step's bound (`drain_timeout_s`, at most `target.timeout`)
    drain_max_s: float
    #: one drain to its bound: the step past the knee
    drain_s: float = 0.0
    #: the knee search's refine steps that fit its budget, and what they take
    search_steps: int = 0
    search_s: float = 0.0
    #: the search's budget (None: no search)
    search_budget_s: float | None = None
    #: the ladder ends at a failing step before its last (`stop_after_failures`): the run may be shorter
    may_stop_early: bool = False

    @property
    def expected_s(self) -> float:
        """The steps' schedule, the search's and one drain to its bound (open-ended levels excluded)."""
        return self.scheduled_s + self.search_s + self.drain_s

    def line(self) -> str:
        """One line: `4 steps + knee search, about 12 min (...)`."""
        what = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        if self.search_budget_s is not None:
            what += " + knee search"
        if self.open_ended == self.steps:
            about = "as long as the server takes (closed-loop levels of a request count)"
        elif self.open_ended:
            about = (f"at least {format_span(self.expected_s)} ({self.open_ended} closed-loop level(s) of a request "
                     "count take what the server takes)")
        else:
            about = f"about {format_span(self.expected_s)}"
        if self.may_stop_early:
            about += ", less if a step fails before the last"
        parts = [f"steps {format_span(self.scheduled_s)}"] if self.scheduled_s else []
        if self.search_budget_s is not None:
            parts.append(f"knee search up to {format_span(self.search_s)} ({self.search_steps} refine "
                         f"step{'s' if self.search_steps != 1 else ''}) of its {format_span(self.search_budget_s)} "
                         "budget")
        if self.drain_max_s:
            more = f"; all drains up to {format_span(self.drain_max_s)}" if self.drain_max_s > self.drain_s else ""
            parts.append(f"a drain {format_span(self.drain_s)}{more}")
        return f"{what}, {about} ({', '.join(parts)})"


def format_span(seconds: float) -> str:
    """`45 s`, `3 min 20 s`, `12 min`, `2 h 5 min`: whole seconds under ten minutes, minutes above."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{math.ceil(seconds):.0f} s"
    if seconds < 600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    minutes = round(seconds / 60)
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def plan_duration(config: Config, steps: Sequence[StepSpec], *, search: bool = True) -> PlanDuration:
    """The expected wall time of `steps` (the plan `shapes.plan.build_plan` made, or a locustfile shape's),
    plus the config's knee search when `search` (False: a locustfile's own shape plans the run)."""
    timeout_s = float(config.target.timeout)
    scheduled = sum(s.warmup_s + s.duration_s for s in steps if s.duration_s is not None)
    open_ended = sum(1 for s in steps if s.duration_s is None)
    bounds = [min(s.drain_timeout_s, timeout_s) for s in steps if s.drain]
    ladder = config.shape.ladder
    stop_after = ladder.stop_after_failures if ladder is not None else None
    early = search and stop_after is not None and len(steps) > stop_after
    if not search or ladder is None or ladder.refine is None:
        return PlanDuration(len(steps), scheduled, open_ended, sum(bounds), max(bounds, default=0.0),
                            may_stop_early=early)
    refine = ladder.refine
    step_s = max(refine_window_s(ladder, s.rate) for s in ladder.steps)  # the rate is not known yet
    count = min(refine.max_steps, int(refine.budget // step_s))
    if count:  # the last refine step drains
        bounds.append(min(ladder.drain_timeout, timeout_s))
    return PlanDuration(len(steps), scheduled, open_ended, sum(bounds), max(bounds, default=0.0),
                        search_steps=count, search_s=count * step_s, search_budget_s=refine.budget,
                        may_stop_early=early)
