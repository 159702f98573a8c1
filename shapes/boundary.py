"""Boundary search: bisect between the last passing and the first failing rate of a ladder.

Pure: it sees only `(rate, verdict, samples)` results. The master runs each rate it proposes as a
`refine` step, judges it live with the analysis rules, and records the verdict:

    search = BoundarySearch(ladder_results, resolution=0.1, max_steps=6)
    while (rate := search.next_rate()) is not None:
        search.record(rate, judge(run_step(rate)), samples)
    search.answer  # highest rate that passed below the first failure, and its samples

The bounds: `low` is the highest passing rate below the lowest failing rate (`high`). The search
ends when `high - low <= resolution`, after `max_steps` refine steps, when there is no pass below a
fail or no fail at all (nothing to bisect), or at an `invalid` / `insufficient` refine step (it moves
neither bound: the generator or the sample count must be fixed first). Any verdict other than
`pass` and `fail` (`invalid`, `insufficient`, `not_run`, a runtime's `unjudged`) decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["REALISED_RATE_TOLERANCE", "BoundaryAnswer", "BoundarySearch", "realised_rate_note"]

#: a step whose realised offered rate is more than this share off its target (a short Poisson step
#: draws fewer or more arrivals than the rate times the window) is stated with the realised rate, so that
#: a target label is never read as the load the server carried
REALISED_RATE_TOLERANCE = 0.10


def realised_rate_note(target: float, offered: Iterable[float | None]) -> str:
    """` (offered 4.1 req/s realised)` for the realised offered rates (METRICS.md `offered_rate`) of the
    passing steps at `target` that are more than `REALISED_RATE_TOLERANCE` off it, else ""."""
    off = [float(v) for v in offered
           if v is not None and not math.isnan(float(v)) and abs(float(v) - target) > REALISED_RATE_TOLERANCE * target]
    return f" (offered {', '.join(f'{v:.3g}' for v in off)} req/s realised)" if off else ""


@dataclass(frozen=True, slots=True)
class BoundaryAnswer:
    """The result: `rate` (None if no rate passed below the first failure) and its `samples`.

    `failing_rate` is the lowest failing rate (None if nothing failed); `stopped` says why the
    search ended: `resolution`, `max_steps`, `no_failure`, `no_pass`, `inconclusive`, or `running`.
    """

    rate: float | None
    samples: int | None
    failing_rate: float | None
    refine_steps: int
    stopped: str


class BoundarySearch:
    """Bisection over (rate, verdict) results; see the module docstring."""

    def __init__(self, results: Iterable[tuple] = (), *, resolution: float, max_steps: int = 6) -> None:
        if not resolution > 0:
            raise ValueError(f"resolution must be > 0, got {resolution}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.resolution = float(resolution)
        self.max_steps = int(max_steps)
        self.results: list[tuple[float, str, int | None]] = []
        self.refine_steps = 0
        self._inconclusive = False
        self._digits = max(2, 1 - math.floor(math.log10(self.resolution)))
        for item in results:
            rate, verdict, *rest = item
            self._add(rate, verdict, rest[0] if rest else None)

    def _add(self, rate: float, verdict: str, samples: int | None) -> None:
        if not isinstance(verdict, str):
            raise ValueError(f"verdict must be a string like pass or fail, got {verdict!r}")
        self.results.append((float(rate), verdict, samples))

    def record(self, rate: float, verdict: str, samples: int | None = None) -> None:
        """The verdict of a refine step the search proposed (or any extra result)."""
        self._add(rate, verdict, samples)
        self.refine_steps += 1
        if verdict not in ("pass", "fail"):
            self._inconclusive = True

    def _bounds(self) -> tuple[tuple[float, int | None] | None, float | None]:
        fails = [rate for rate, verdict, _ in self.results if verdict == "fail"]
        high = min(fails) if fails else None
        passes = [(rate, samples) for rate, verdict, samples in self.results
                  if verdict == "pass" and (high is None or rate < high)]
        low = max(passes, key=lambda p: p[0]) if passes else None
        return low, high

    def _stopped(self) -> str | None:
        low, high = self._bounds()
        if high is None:
            return "no_failure"
        if low is None:
            return "no_pass"
        if self._inconclusive:
            return "inconclusive"
        if high - low[0] <= self.resolution + 1e-12:
            return "resolution"
        if self.refine_steps >= self.max_steps:
            return "max_steps"
        return None

    def next_rate(self) -> float | None:
        """The next rate to try (the midpoint of the bounds, rounded), or None when the search is done."""
        low, high = self._bounds()
        if self._stopped() is not None or low is None or high is None:
            return None
        mid = round((low[0] + high) / 2, self._digits)
        if not low[0] < mid < high:  # rounding collapsed the interval
            return None
        return mid

    @property
    def done(self) -> bool:
        return self.next_rate() is None

    @property
    def answer(self) -> BoundaryAnswer:
        """The highest rate that passed below the first failure, and how many samples back it."""
        low, high = self._bounds()
        stopped = self._stopped() or ("resolution" if self.next_rate() is None else "running")
        return BoundaryAnswer(rate=low[0] if low else None, samples=low[1] if low else None,
                              failing_rate=high, refine_steps=self.refine_steps, stopped=stopped)
