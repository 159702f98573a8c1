"""Energy per good output token at the knee, from the step table (METRICS.md "Energy").

Each step has `joules_per_good_output_token` (`analysis.metrics`: the GPUs' energy over the window /
the window's good output tokens). At the knee there is no step, so the figure is interpolated linearly
in realised offered rate between the two judged steps on the rate axis around `knee.rate` (the knee's
own step set: phases `ladder` / `refine`, verdict pass, fail or inconclusive, not `partial`), those with
a known figure; the step itself when one sits at the knee. None when the run has no GPU energy, no knee
rate, or no such step on both sides: an extrapolation would be a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analysis.knee import JUDGED
from llmload.units import finite as _num
from shapes.phases import rate_phases

__all__ = ["energy_at_knee", "energy_sentence"]

#: joules per kWh
KWH_J = 3.6e6


def energy_at_knee(steps: Any, knee: Mapping | None, *, cost_per_hour: Any = None) -> dict | None:
    """`{"rate", "joules_per_good_output_token", "kwh_per_million_good_output_tokens",
    "good_output_tokens_per_s", "cost_per_million_good_output_tokens", "steps", "rates", "basis",
    "method"}` at `knee["rate"]` (module docstring), or None. The good tokens per second are interpolated
    between the same two steps; the cost (`conditions.cost_per_hour` / (good tokens/s x 3600) x 1e6) is
    None without a cost per hour."""
    rate = _num((knee or {}).get("rate"))
    if rate is None:
        return None
    records = steps.to_dict(orient="records") if hasattr(steps, "to_dict") else list(steps)
    phases = set(rate_phases())
    points = sorted(
        (x, y, r) for r in records
        if str(r.get("phase")) in phases and r.get("verdict") in JUDGED and r.get("status") != "partial"
        and (x := _num(r.get("offered_rate"))) is not None
        and (y := _num(r.get("joules_per_good_output_token"))) is not None)
    below = [p for p in points if p[0] <= rate]
    above = [p for p in points if p[0] >= rate]
    if not below or not above:
        return None
    (x0, y0, r0), (x1, y1, r1) = below[-1], above[0]
    def between(a: float, b: float) -> float:
        return a if x1 == x0 else a + (b - a) * (rate - x0) / (x1 - x0)

    value = between(y0, y1)
    t0, t1 = _num(r0.get("good_output_tokens_per_s")), _num(r1.get("good_output_tokens_per_s"))
    tokens = between(t0, t1) if t0 is not None and t1 is not None else None
    cost = _num(cost_per_hour)
    bases = {str(r0.get("energy_basis")), str(r1.get("energy_basis"))}
    return {
        "rate": rate,
        "joules_per_good_output_token": value,
        "kwh_per_million_good_output_tokens": value * 1e6 / KWH_J,
        "good_output_tokens_per_s": tokens,
        "cost_per_million_good_output_tokens": cost / (tokens * 3600) * 1e6 if cost is not None and tokens else None,
        "steps": [str(r0.get("label")), str(r1.get("label"))],
        "rates": [x0, x1],
        "basis": "+".join(sorted(bases)),
        "method": "linear in realised offered rate between the judged steps around the knee rate",
    }


def energy_sentence(energy: Mapping | None) -> str | None:
    """The answer's line: `Energy at the knee: 0.52 J per good output token (0.144 kWh per million, ...)`;
    None without the figure."""
    info: Mapping = energy or {}
    value = _num(info.get("joules_per_good_output_token"))
    if value is None:
        return None
    kwh = value * 1e6 / KWH_J
    steps = info.get("steps") or []
    between = (f"step {steps[0]}" if len(steps) == 2 and steps[0] == steps[1]
               else f"interpolated between steps {steps[0]} and {steps[1]}" if len(steps) == 2 else "")
    cost_per_million = _num(info.get("cost_per_million_good_output_tokens"))
    cost = f"; cost {cost_per_million:.3g} per million good tokens there" if cost_per_million is not None else ""
    return (f"Energy at the knee: {value:.3g} J per good output token ({kwh:.3g} kWh per million, GPUs only, "
            f"{between}, basis {info.get('basis')}){cost}.")
