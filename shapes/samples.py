"""What each step's window can give against what its judgement needs, said before load starts (issue 41).

    llmload: samples: the windows give about r1.00 30, r2.00 60, r3.00 90, r4.00 120 completions at most; a
    percentile is judged from 20 (min_samples) and a p95 pass rests on fewer than 52 only through the
    sample's largest values (near the knee, where requests queue together, several times more decide it)
    llmload: warning: step r0.50 gives about 10 completions, under min_samples 20: it will be insufficient;
    a window of at least 40 s judges it

A rate step's completions at most: its rate x its window (`StepSpec.target_rate x duration_s`; fewer when
the server falls behind). The floor is `slo.min_samples` (no interval below it: `analysis.verdict`). The
independent completions a pass needs when none is over the target: where the Wilson interval of a share of 0
falls under `1 - q / 100` (`analysis.intervals.completions_to_decide`; 52 for a p95 at 90%). Pure, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from llmload.config import Config
from shapes.steps import StepSpec

__all__ = ["independent_for_pass", "sample_lines"]

#: at most this many steps are named in the line (the rest as "...")
NAMED = 8


def independent_for_pass(percentile: float, confidence: float) -> int:
    """The independent completions, none over the target, whose share's interval lies under 1 - q/100.

    >>> independent_for_pass(95, 0.9), independent_for_pass(99, 0.9), independent_for_pass(50, 0.9)
    (52, 268, 3)
    """
    from statistics import NormalDist

    from analysis.intervals import completions_to_decide, wilson

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    level = 1.0 - percentile / 100.0
    n = 10.0
    return int(completions_to_decide(0.0, wilson(0.0, n, z)[1], n, level, confidence))


def _completions(step: StepSpec) -> tuple[float, float] | None:
    """(rate, completions in the window) of an open-loop rate step; None for any other step."""
    if step.arrival in ("closed", "trace") or not step.target_rate or not step.duration_s:
        return None
    rate = float(step.target_rate)
    return rate, rate * float(step.duration_s)


def sample_lines(config: Config, steps: Sequence[StepSpec]) -> list[str]:
    """The sample-size line and a warning per step under the floor ([] without a percentile target or a
    rate step)."""
    slo = config.slo
    if not slo.thresholds:
        return []
    sized = [(s, *found) for s in steps if (found := _completions(s)) is not None]
    if not sized:
        return []
    q = max(t.percentile for t in slo.thresholds)
    need = independent_for_pass(q, slo.confidence)
    named = ", ".join(f"{s.label} {n:,.0f}" for s, _, n in sized[:NAMED]) + (", ..." if len(sized) > NAMED else "")
    lines = [f"samples: the windows give about {named} completions at most; a percentile is judged from "
             f"{slo.min_samples} (min_samples) and a p{q:g} pass rests on fewer than {need} only through the "
             "sample's largest values (near the knee, where requests queue together, several times more decide it)"]
    for step, rate, n in sized:
        if n < slo.min_samples:
            longer = math.ceil(slo.min_samples / rate)
            lines.append(f"warning: step {step.label} gives about {n:,.0f} completions, under min_samples "
                         f"{slo.min_samples}: it will be insufficient; a window of at least {longer} s judges it")
    return lines
