"""The phases a step can belong to, each with its traits declared once. Pure: no Locust, no gevent.

A step's `phase` (StepSpec, plan.json, the per-step tables) names one `Phase` here. The analysis, the
report and the runtime read the traits (`PHASES[name].closed_loop`, `phases_where(sustained=True)`),
never a list of phase names of their own, so a new phase is one `Phase` below.

    phase        made by                       closed  drained  rate axis  sustained  burst pair  slices
    ladder       ladder steps                  -       yes      yes        yes        -           -
    refine       the knee search               -       no       yes        yes        -           -
    concurrency  concurrency levels            yes     yes      -          -          -           -
    probe        `auto`'s range probe          yes     yes      -          -          -           -
    burst        trace replay, as recorded     -       yes      -          -          burst       -
    uniform      trace replay, evenly spaced   -       yes      -          -          uniform     -
    soak         soak slices                   -       no       -          yes        -           yes
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PHASES", "Phase", "closed_loop_phases", "is_closed_loop", "phases_where", "rate_phases",
           "sustained_phases"]


@dataclass(frozen=True)
class Phase:
    """What a step of this phase is, for every part that treats steps differently.

    - `closed_loop`: a fixed number of users each send the next request when the last ends: no
      schedule and no offered rate (the window is known once the requests ran); the concurrency
      level is its x axis and its own capacity result (`last_passing_concurrency`).
    - `drained`: the next step waits until this step's requests finish (or its drain deadline). Not
      drained: steps run back to back so the load never pauses (their requests finish in the
      background); the last step of the run drains all the same. A step that is not drained is
      judged in the report only (`judged_live` is False): pandas on the master would delay arrivals;
      except a rate-axis one (the knee search's refine steps, chained so that each meets the queue
      the one before left): the search needs its verdict to choose the next rate.
    - `rate_axis`: an open-loop step at a target rate, drawn on the capacity curves by offered rate.
    - `sustained`: a pass says the rate can be held: it counts in the ladder result
      (`last_passing_rate`, `first_failing_rate`) and the capacity plan.
    - `burst_pair`: `"burst"` or `"uniform"`: one side of the burst-vs-uniform comparison (steps of
      the two sides are paired in plan order).
    - `slices`: the steps are consecutive slices of one long run, compared for drift (soak).
    """

    name: str
    closed_loop: bool = False
    drained: bool = True
    rate_axis: bool = False
    sustained: bool = False
    burst_pair: str | None = None
    slices: bool = False

    @property
    def judged_live(self) -> bool:
        """Judged by the step controller as it drains (else in the report, from the records)."""
        return self.drained or self.rate_axis


PHASES: dict[str, Phase] = {p.name: p for p in (
    Phase("ladder", rate_axis=True, sustained=True),
    Phase("refine", drained=False, rate_axis=True, sustained=True),
    Phase("concurrency", closed_loop=True),
    Phase("probe", closed_loop=True),
    Phase("burst", burst_pair="burst"),
    Phase("uniform", burst_pair="uniform"),
    Phase("soak", drained=False, sustained=True, slices=True),
)}


def phases_where(**traits: object) -> tuple[str, ...]:
    """The names of the phases whose traits equal all of `traits`, in declaration order.

    >>> phases_where(sustained=True)
    ('ladder', 'refine', 'soak')
    """
    unknown = set(traits) - set(Phase.__dataclass_fields__)
    if unknown:
        raise TypeError(f"no such phase trait: {', '.join(sorted(unknown))}")
    return tuple(p.name for p in PHASES.values() if all(getattr(p, k) == v for k, v in traits.items()))


def is_closed_loop(phase: object) -> bool:
    """Whether a step of `phase` (a name; unknown names are open loop) is a closed loop."""
    known = PHASES.get(str(phase))
    return known is not None and known.closed_loop


def rate_phases() -> tuple[str, ...]:
    """Phases drawn on the capacity curves by offered rate."""
    return phases_where(rate_axis=True)


def sustained_phases() -> tuple[str, ...]:
    """Phases whose passing rates are sustainable rates (ladder result, capacity plan)."""
    return phases_where(sustained=True)


def closed_loop_phases() -> tuple[str, ...]:
    """Phases of fixed users sending back to back (concurrency levels)."""
    return phases_where(closed_loop=True)
