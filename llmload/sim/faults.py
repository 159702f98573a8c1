"""Per-request draws: the EOS length and the faults, from one generator seeded by (seed, arrival index).

The same requests in the same order get the same lengths and the same faults. Draws happen in a fixed
order (http_429, http_503, http_500, oom, disconnect, stall, malformed, their positions, then EOS), so a
probability of 0 still consumes its draw and changing one fault rate does not reshuffle the others.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from llmload.sim.settings import Faults

__all__ = ["RequestDraws", "draw_request"]


@dataclass(frozen=True, slots=True)
class RequestDraws:
    """What happens to one request. `*_at` are 0-based output token indexes (None: no such fault)."""

    error: str | None  # "http_429" | "http_503" | "http_500" | "oom" | None
    disconnect_at: int | None
    stall_at: int | None
    malformed_at: int | None
    output_tokens: int
    eos: bool
    max_tokens: int = 0  # the cap the request ran under (its max_tokens, else the context limit)


def draw_request(seed: int, index: int, faults: Faults, *, max_tokens: int, eos_probability: float,
                 ignore_eos: bool, eos_at: int | None = None) -> RequestDraws:
    """The draws for the `index`-th request the server received. `eos_at`: where the model stops by
    itself when the request set no output cap (the sim's `default_max_tokens`), unless `ignore_eos`."""
    rng = random.Random(f"llmload-sim/{seed}/{index}")
    error = None
    for name in ("http_429", "http_503", "http_500", "oom"):
        hit = rng.random() < getattr(faults, name)
        if hit and error is None:
            error = name
    hits = [rng.random() < p for p in (faults.disconnect, faults.stall, faults.malformed)]
    positions = [rng.random() for _ in hits]
    u = rng.random()
    length, eos = max_tokens, False
    if not ignore_eos and eos_probability > 0.0:
        drawn = 1 + int(math.log(1.0 - u) / math.log(1.0 - eos_probability)) if eos_probability < 1 else 1
        if drawn < max_tokens:
            length, eos = drawn, True
    if eos_at is not None and not ignore_eos and eos_at < length:
        length, eos = eos_at, True
    at = [min(length - 1, 1 + int(p * max(length - 2, 0))) if hit else None
          for hit, p in zip(hits, positions, strict=True)]
    return RequestDraws(error=error, disconnect_at=at[0], stall_at=at[1], malformed_at=at[2],
                        output_tokens=length, eos=eos, max_tokens=max_tokens)
