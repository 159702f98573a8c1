"""One step of a plan (`StepSpec`) and pure queries about step timing.

A step is validated data that travels from the master to every worker in a Locust message, so it
converts to and from a plain dict of lists, numbers and strings (msgpack-able; no numpy values).

Timing of a step started at `start_at` (METRICS.md, "Per step"):

    start_at ── warm-up ──> window_start ── measurement window ──> window_end ── drain ──> drain_deadline

Open-loop arrivals cover warm-up + window; requests belong to the window by `scheduled_at`. A closed
loop (`phase="concurrency"`) has no schedule: its window is known only once its requests have run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from shapes.phases import PHASES as _PHASES

__all__ = [
    "ARRIVALS",
    "PHASES",
    "StepBounds",
    "StepSpec",
    "TraceArrivals",
    "active_step",
    "derive_seed",
    "rate_label",
    "step_bounds",
    "unique_label",
]

#: the phase names a step may carry (their traits: `shapes.phases.PHASES`)
PHASES = tuple(_PHASES)
#: how a step's arrivals are made: a process of `llmload.arrivals`, a trace, or a closed loop
ARRIVALS = ("constant", "poisson", "poisson_exact", "gamma", "trace", "closed")


@dataclass
class TraceArrivals:
    """A trace slice as a step carries it: offsets from the step start and each request's size.

    Lists are parallel; a None size means "let the request mix decide". `prompt` is None when the
    trace has no prompts.
    """

    offsets_s: list[float]
    input_tokens: list[int | None]
    output_tokens: list[int | None]
    prefix_id: list[int | None]
    prefix_tokens: list[int | None]
    prompt: list[str | None] | None = None
    #: Mooncake `hash_ids` per request (None: the trace has none): the mix builds each prompt from them
    hash_ids: list[list[int] | None] | None = None
    #: conversation traces: each session's later turns (`new_tokens`, `output_tokens`, `think_s`)
    session_turns: list[list[dict] | None] | None = None

    def __len__(self) -> int:
        return len(self.offsets_s)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TraceArrivals:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class StepSpec:
    """What one step asks of the load generator; self-contained, so a worker needs nothing else.

    `target_rate` is requests per second for open-loop steps (for trace steps: the trace's mean rate
    over the step); `concurrency` and `requests` describe a closed loop; `trace` holds a trace step's
    arrivals. `drain` False means the next step should start as this one's arrivals end, without
    waiting for its in-flight requests (they still get `drain_timeout_s` to finish): soak slices,
    whose load must not pause. `seed` is this step's own seed (see `derive_seed`).
    """

    label: str
    index: int
    phase: str
    arrival: str
    target_rate: float | None = None
    burstiness: float = 1.0
    warmup_s: float = 0.0
    duration_s: float | None = None
    drain_timeout_s: float = 60.0
    drain: bool = True
    concurrency: int | None = None
    requests: int | None = None
    trace: TraceArrivals | None = None
    seed: int = 0
    #: requests of the source trace that failed there (BurstGPT), counted but not replayed
    failed_in_source: int = 0

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f'step {self.label}: phase must be one of {", ".join(PHASES)}, got "{self.phase}"')
        if self.arrival not in ARRIVALS:
            raise ValueError(f'step {self.label}: arrival must be one of {", ".join(ARRIVALS)}, '
                             f'got "{self.arrival}"')
        if self.arrival in ("constant", "poisson", "poisson_exact", "gamma") and not (self.target_rate and self.duration_s):
            raise ValueError(f"step {self.label}: an open-loop step needs target_rate and duration_s")
        if self.arrival == "trace" and (self.trace is None or self.duration_s is None):
            raise ValueError(f"step {self.label}: a trace step needs trace and duration_s")
        if self.arrival == "closed" and not self.concurrency:
            raise ValueError(f"step {self.label}: a closed-loop step needs concurrency")
        if self.arrival == "closed" and self.requests is None and self.duration_s is None:
            raise ValueError(f"step {self.label}: a closed-loop step needs requests or duration_s")

    @property
    def closed_loop(self) -> bool:
        return self.arrival == "closed"

    @property
    def arrivals_s(self) -> float | None:
        """Length of the arrival schedule (warm-up + window) in seconds; None for a count-bound closed loop."""
        return None if self.duration_s is None else self.warmup_s + self.duration_s

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (lists, numbers, strings, None): what a Locust message and plan.json carry."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["trace"] = None if self.trace is None else self.trace.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepSpec:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if values.get("trace") is not None:
            values["trace"] = TraceArrivals.from_dict(values["trace"])
        return cls(**values)


def derive_seed(run_seed: int, index: int) -> int:
    """A step's own seed from the run seed and the step index (independent streams per step)."""
    return int(np.random.SeedSequence([int(run_seed) & 0xFFFFFFFF, int(index)]).generate_state(1)[0])


@dataclass(frozen=True, slots=True)
class StepBounds:
    """Wall-clock times of one step started at `start_at` (None where a closed loop cannot know)."""

    start_at: float
    window_start: float
    window_end: float | None
    drain_deadline: float | None

    def part_at(self, t: float) -> str:
        """`before`, `warmup`, `window`, `drain` or `after` (past the drain deadline) at time `t`."""
        if t < self.start_at:
            return "before"
        if t < self.window_start:
            return "warmup"
        if self.window_end is None or t < self.window_end:
            return "window"
        if self.drain_deadline is None or t < self.drain_deadline:
            return "drain"
        return "after"


def step_bounds(step: StepSpec, start_at: float) -> StepBounds:
    """The warm-up, window and drain deadline of `step` if it starts at `start_at`."""
    window_start = start_at + step.warmup_s
    if step.duration_s is None:
        return StepBounds(start_at, window_start, None, None)
    window_end = window_start + step.duration_s
    return StepBounds(start_at, window_start, window_end, window_end + step.drain_timeout_s)


def active_step(steps: Sequence[StepSpec], starts: Sequence[float | None], t: float) -> StepSpec | None:
    """The step running at time `t`, given each step's start time (None: not started yet).

    A step is active from its start until the next step starts; before the first start and after the
    last step's drain deadline there is none.
    """
    current: tuple[StepSpec, float] | None = None
    for step, start in zip(steps, starts, strict=False):
        if start is None or t < start:
            break
        current = step, start
    if current is None:
        return None
    step, start_at = current
    return None if step_bounds(step, start_at).part_at(t) == "after" else step


def rate_label(rate: float) -> str:
    """`r` and the rate with the fewest decimals (at least 2, at most 6) that write it exactly.

    >>> rate_label(0.5), rate_label(12), rate_label(3.3125)
    ('r0.50', 'r12.00', 'r3.3125')
    """
    for digits in range(2, 7):
        text = f"{rate:.{digits}f}"
        if float(text) == rate:
            return f"r{text}"
    return f"r{rate:.6f}"


def unique_label(label: str, taken: Iterable[str]) -> str:
    """`label`, or `label-2`, `label-3`, ... if already taken (labels are unique in a run)."""
    used = set(taken)
    if label not in used:
        return label
    n = 2
    while f"{label}-{n}" in used:
        n += 1
    return f"{label}-{n}"
