"""Little's law as a planning aid (seed 003): what a user population would offer, never "N users supported".

A population of `users` each alternating a think time Z and a request of response time R offers, in a
steady state, `arrival_rate = users / (Z + R)` requests per second and keeps `expected_in_flight =
arrival_rate * R` requests in flight (Little's law, L = lambda W). R is the mean user E2E measured on
a passing step: the lowest-rate passing sustained step whose rate covers that arrival rate, else the
highest passing one (then the rate is beyond what was shown to pass and R is optimistic).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from shapes.phases import sustained_phases

if TYPE_CHECKING:
    from analysis.pipeline import Analysis

__all__ = ["plan_in_flight"]

_ASSUMPTION = ("steady state: users alternate think time and one request; the response time measured at "
               "the reference step holds at this load; arrivals from the population behave like the "
               "tested arrival process. This is expected load, not a number of users supported.")


def plan_in_flight(analysis: Analysis, users: int, think_time_s: float) -> dict[str, Any]:
    """Expected arrival rate and in-flight requests for `users` with `think_time_s`, and whether the
    rate lies within what passed."""
    if users < 1 or think_time_s < 0:
        raise ValueError("users must be >= 1 and think_time_s >= 0")
    steps = analysis.steps
    passing = steps[(steps["verdict"] == "pass") & steps["phase"].isin(sustained_phases())
                    & steps["target_rate"].notna()].sort_values("target_rate")
    out: dict[str, Any] = {"users": users, "think_time_s": think_time_s, "assumption": _ASSUMPTION,
                           "reference_step": None, "response_time_s": math.nan, "arrival_rate": math.nan,
                           "expected_in_flight": math.nan, "last_passing_rate": math.nan,
                           "within_passing_rate": False}
    if passing.empty:
        out["note"] = "no passing sustained step: nothing to plan from"
        return out
    last = passing.iloc[-1]
    out["last_passing_rate"] = _realised(last)
    req = analysis.requests
    ref = last
    for _, step in passing.iterrows():
        r = _mean_user_e2e(req, step["label"])
        rate = users / (think_time_s + r) if think_time_s + r > 0 else math.inf
        if rate <= _realised(step):
            ref = step
            break
    r = _mean_user_e2e(req, ref["label"])
    rate = users / (think_time_s + r) if think_time_s + r > 0 else math.inf
    out.update(reference_step=str(ref["label"]), response_time_s=r, arrival_rate=rate,
               expected_in_flight=rate * r, within_passing_rate=bool(rate <= out["last_passing_rate"]))
    if not out["within_passing_rate"]:
        out["note"] = ("the population's arrival rate exceeds the last passing rate: response times would "
                       "grow; test that rate before relying on these figures")
    return out


def _realised(step: Any) -> float:
    """A step's realised offered rate (its target label when nothing was offered)."""
    offered = step.get("offered_rate")
    return float(offered) if offered is not None and offered == offered else float(step["target_rate"])


def _mean_user_e2e(requests, label: str) -> float:
    mask = (requests["step"] == label) & requests["in_window"] & (requests["outcome"] == "ok")
    return float(requests.loc[mask, "user_e2e_s"].mean())
