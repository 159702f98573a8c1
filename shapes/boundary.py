"""How a rate is stated: a step's realised offered rate when its target label is off the load carried.

The bisection that lived here (between the last passing and the first failing target label) is gone:
the knee search (`shapes.knee_search`) picks refine steps from the knee estimate over realised rates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["REALISED_RATE_TOLERANCE", "realised_rate_note"]

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
