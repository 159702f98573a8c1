"""Open-loop arrival processes and their split across workers: pure, seeded, no Locust.

A step's whole arrival sequence is generated from the step's own seed (`StepSpec.seed`), the same in
every process, and worker `shard` of `shards` takes the arrivals `[shard::shards]`. So the union over
the shards is exactly the plan (none lost, none doubled) for every process, traces included, and a
forked worker never depends on numpy's global state.

Processes (offsets in seconds from the step start, covering warm-up + window):

    constant   i / rate
    poisson    exponential gaps, mean 1 / rate (CV 1): the count in a window is itself random
               (a 10 s step at 4 req/s carries 28 to 52 arrivals one time in twenty)
    poisson_exact  a Poisson process conditioned on its count (the ladder's default): exactly
               round(rate x warm-up) arrivals at sorted uniform times in the warm-up and exactly
               round(rate x window) in the window, so the step carries its stated rate while its
               gaps stay exponential-like (the order statistics of uniforms)
    gamma      gamma gaps, shape = burstiness, scale = 1 / (rate * burstiness) (vLLM's convention:
               burstiness 1 is Poisson, < 1 burstier; CV = 1 / sqrt(burstiness))
    trace      the step's own offsets (`StepSpec.trace`)

A closed loop (`arrival="closed"`) has no schedule: its users send the next request when the last ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from shapes.steps import StepSpec

__all__ = [
    "Arrival",
    "closed_loop_arrival",
    "closed_loop_users",
    "constant_offsets",
    "gamma_offsets",
    "plan_arrivals",
    "planned_count",
    "poisson_exact_offsets",
    "poisson_offsets",
    "request_id",
    "shard_indices",
    "step_offsets",
]


@dataclass(slots=True)
class Arrival:
    """One planned request. `scheduled_at` is wall-clock seconds (`llmload.clock.now()` base).

    Sizes are None unless the plan fixes them (trace steps); then the request mix decides.
    `prefix_id` / `prefix_tokens`: the shared prompt prefix this request starts with, where known.
    """

    request_id: str
    step: str
    index: int
    scheduled_at: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    prefix_id: int | None = None
    prefix_tokens: int | None = None
    prompt: str | None = None


def request_id(label: str, index: int) -> str:
    """The id of request `index` of step `label`, unique within a run because labels are.

    >>> request_id("r0.50", 7)
    'r0.50-000007'
    """
    return f"{label}-{index:06d}"


def constant_offsets(rate: float, span_s: float) -> np.ndarray:
    """Evenly spaced arrivals `i / rate` in `[0, span_s)`.

    >>> constant_offsets(2.0, 2.0).tolist()
    [0.0, 0.5, 1.0, 1.5]
    """
    _check(rate, span_s)
    count = max(0, math.ceil(rate * span_s - 1e-9))
    return np.arange(count, dtype=np.float64) / rate


def poisson_offsets(rate: float, span_s: float, rng: np.random.Generator) -> np.ndarray:
    """A Poisson process of `rate` in `[0, span_s)`: exponential gaps, the first one from 0."""
    _check(rate, span_s)
    return _renewal(lambda n: rng.exponential(1.0 / rate, n), rate, span_s)


def poisson_exact_offsets(rate: float, spans_s: tuple[float, ...], rng: np.random.Generator) -> np.ndarray:
    """Exactly `round(rate x span)` arrivals at sorted uniform times in each consecutive span (warm-up,
    window), from 0: a Poisson process of `rate` conditioned on its count in each span.

    >>> len(poisson_exact_offsets(4.0, (2.0, 10.0), np.random.default_rng(1)))
    48
    """
    out, start = [], 0.0
    for span_s in spans_s:
        _check(rate, span_s)
        count = int(round(rate * span_s))
        out.append(start + np.sort(rng.uniform(0.0, span_s, count)))
        start += span_s
    offsets = np.concatenate(out) if out else np.empty(0)
    return offsets[offsets < start]  # uniform(0, span) < span, but keep the bound explicit


def gamma_offsets(rate: float, span_s: float, burstiness: float, rng: np.random.Generator) -> np.ndarray:
    """A gamma renewal process of mean `rate` in `[0, span_s)`; gap CV is `1 / sqrt(burstiness)`."""
    _check(rate, span_s)
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness}")
    scale = 1.0 / (rate * burstiness)
    return _renewal(lambda n: rng.gamma(burstiness, scale, n), rate, span_s)


def _check(rate: float, span_s: float) -> None:
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a positive number, got {rate}")
    if not span_s >= 0 or not math.isfinite(span_s):
        raise ValueError(f"span must be a non-negative number of seconds, got {span_s}")


def _renewal(gaps, rate: float, span_s: float) -> np.ndarray:
    """Cumulative sums of `gaps(n)` draws until past `span_s`, drawn in chunks of about the need."""
    chunks, total = [], 0.0
    chunk = int(rate * span_s * 1.1) + 16
    while total < span_s:
        times = total + np.cumsum(gaps(chunk))
        chunks.append(times)
        total = float(times[-1])
    offsets = np.concatenate(chunks) if chunks else np.empty(0)
    return offsets[offsets < span_s]


def step_offsets(step: StepSpec) -> np.ndarray:
    """Every arrival offset of an open-loop or trace step, the same in every process (seeded by the step).

    `len(step_offsets(step))` is the step's planned arrival count (plan.json `planned_arrivals`).
    """
    if step.arrival == "trace":
        return np.asarray(step.trace.offsets_s if step.trace else [], dtype=np.float64)
    if step.arrival == "closed":
        raise ValueError(f"step {step.label} is a closed loop: it has no arrival schedule")
    span_s = step.warmup_s + (step.duration_s or 0.0)
    rate = float(step.target_rate or 0.0)
    if step.arrival == "constant":
        return constant_offsets(rate, span_s)
    rng = np.random.default_rng(step.seed)
    if step.arrival == "poisson":
        return poisson_offsets(rate, span_s, rng)
    if step.arrival == "poisson_exact":
        return poisson_exact_offsets(rate, (step.warmup_s, step.duration_s or 0.0), rng)
    return gamma_offsets(rate, span_s, step.burstiness, rng)


def planned_count(step: StepSpec) -> int | None:
    """How many arrivals `step` plans (plan.json `planned_arrivals`); None for a time-bound closed loop."""
    if step.arrival == "closed":
        return step.requests
    return len(step_offsets(step))


def shard_indices(count: int, shard: int, shards: int) -> range:
    """The indices of `count` items that shard `shard` of `shards` takes: `shard, shard + shards, ...`."""
    if shards < 1 or not 0 <= shard < shards:
        raise ValueError(f"shard must be in [0, {shards}), got {shard}")
    return range(shard, count, shards)


def plan_arrivals(step: StepSpec, start_at: float, shard: int, shards: int) -> list[Arrival]:
    """The arrivals worker `shard` of `shards` sends for `step` started at wall time `start_at`.

    Open-loop and trace steps: `[shard::shards]` of the whole step's schedule. A closed loop with a
    request count: its requests, spread over the shards as its users are (see `closed_loop_users`),
    all scheduled at `start_at`; the user that takes one restamps `scheduled_at` with the time it
    takes it, since a closed loop has no schedule. A time-bound closed loop: none (the users make
    theirs with `closed_loop_arrival`).
    """
    shard_indices(0, shard, shards)  # validates shard and shards
    if step.arrival == "closed":
        if step.requests is None:
            return []
        concurrency = int(step.concurrency or 1)
        mine = [j for j in range(step.requests) if (j % concurrency) % shards == shard]
        return [Arrival(request_id(step.label, j), step.label, j, start_at) for j in mine]
    offsets = step_offsets(step)
    picked = shard_indices(len(offsets), shard, shards)
    if step.arrival != "trace" or step.trace is None:
        return [Arrival(request_id(step.label, i), step.label, i, start_at + float(offsets[i])) for i in picked]
    trace = step.trace
    prompts = trace.prompt
    return [
        Arrival(request_id(step.label, i), step.label, i, start_at + float(offsets[i]),
                input_tokens=trace.input_tokens[i], output_tokens=trace.output_tokens[i],
                prefix_id=trace.prefix_id[i], prefix_tokens=trace.prefix_tokens[i],
                prompt=prompts[i] if prompts else None)
        for i in picked
    ]


def closed_loop_users(step: StepSpec, shard: int, shards: int) -> int:
    """How many of a closed-loop step's `concurrency` users run on shard `shard` (user u on u % shards)."""
    return len(shard_indices(int(step.concurrency or 0), shard, shards))


def closed_loop_arrival(step: StepSpec, shard: int, shards: int, n: int, at: float) -> Arrival:
    """The `n`-th request (0-based, counted on this shard) of a time-bound closed loop, taken at `at`.

    Its index `n * shards + shard` keeps ids unique across shards without any coordination.
    """
    shard_indices(0, shard, shards)
    index = n * shards + shard
    return Arrival(request_id(step.label, index), step.label, index, at)
