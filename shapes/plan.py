"""The plan of a run: the steps of each shape kind, built from a validated config. Pure, no Locust.

    ladder       one open-loop step per rate, labels `r0.50`, phase `ladder`; then `refine` steps the
                 master adds from the knee search (`shapes.knee_search.KneeSearch`) with `refine_step`
    concurrency  one closed-loop step per level, labels `c4`, phase `concurrency` (named closed loop)
    trace        phase `burst` (label `burst`): the trace as recorded (after window, speed-up, scaling);
                 then phase `uniform` (label `uniform`) when `uniform_twin`: same requests, evenly spaced.
                 With `scales: [r1, r2, ..]`: per mean rate, ascending, the trace time-scaled to it
                 (label `burst-r3.00`) and its uniform twin (`uniform-r3.00`), for the trace's own knee
    auto         the probe's first closed-loop level (label `probe-c1`, phase `probe`); the rest of the
                 probe, the placement steps and the refine steps come from `shapes.auto.AutoSearch`
    soak         one step per slice (labels `soak-000`, ...), phase `soak`; constant/Poisson/gamma at
                 `rate`, or a trace looped to the duration. Every slice but the last has `drain=False`:
                 the next slice should start as its arrivals end (its requests still finish, within
                 `drain_timeout_s`, while the next slice runs), so the load never pauses

Every step's seed comes from the run seed (`requests.seed`, or `trace.seed`) and its index.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from llmload.config import MAX_STEP_ARRIVALS, ConcurrencyShape, Config, LadderShape, SoakShape, TraceShape
from llmload.errors import ConfigError
from shapes.auto import AutoSearch, auto_steps, spent_before
from shapes.knee_search import KneeSearch, Sizing
from shapes.phases import PHASES
from shapes.steps import StepSpec, derive_seed, rate_label, unique_label

if TYPE_CHECKING:
    import pandas as pd

_PartT = TypeVar("_PartT")

__all__ = ["STEP_BUILDERS", "UNCAPPED_POOL", "pool_size", "ConfigSearch", "StepSpec", "build_plan", "closed_loop_levels", "concurrency_steps", "knee_search", "ladder_steps",
           "rate_label", "refine_step", "soak_steps", "trace_steps", "unique_label"]


def _part(part: _PartT | None, kind: str) -> _PartT:
    """`config.shape.<kind>`; a ConfigError when the config's shape is another kind (a builder of one
    kind called with another's config)."""
    if part is None:
        raise ConfigError(f"the shape is not a {kind}: these steps are built from shape.{kind}", key=f"shape.{kind}")
    return part


def build_plan(config: Config, *, base_dir: str | Path | None = None) -> list[StepSpec]:
    """The steps of `config.shape`, in run order. `base_dir` resolves a relative trace file first."""
    return STEP_BUILDERS[config.shape.kind](config, base_dir)


def ladder_steps(config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
    """`shape.ladder`'s steps (the knee search's `refine` steps come later, `refine_step`)."""
    return _ladder(_part(config.shape.ladder, "ladder"), config.requests.seed)


def concurrency_steps(config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
    """`shape.concurrency`'s closed-loop levels."""
    return _concurrency(_part(config.shape.concurrency, "concurrency"), config.requests.seed)


def trace_steps(config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
    """`shape.trace`'s replay (and its uniform twin). Loads pandas."""
    return _trace(_part(config.shape.trace, "trace"), config.requests.seed, base_dir)


def soak_steps(config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
    """`shape.soak`'s slices."""
    return _soak(_part(config.shape.soak, "soak"), config.requests.seed, base_dir)


def closed_loop_levels(config: Config) -> list[int]:
    """The closed-loop user counts the config's shape asks for ([] for open-loop shapes): the pool of
    users and connections holds the largest (the client cap does not apply to a closed loop)."""
    shape = config.shape
    return list(shape.concurrency.levels) if shape.concurrency is not None else []


#: the steps of each `shape:` kind of the config (`shapes.loadshapes` has the LoadTestShape classes)
STEP_BUILDERS = {"ladder": ladder_steps, "concurrency": concurrency_steps, "trace": trace_steps,
                 "soak": soak_steps, "auto": auto_steps}


#: users in the pool when the client has no concurrency cap
UNCAPPED_POOL = 512


def pool_size(config: Config) -> int:
    """Total users (split across workers by Locust): the client cap, or the largest closed-loop level.
    Users are idle slots that take planned arrivals; the pool's users start all at once (spawn rate =
    pool size): ramping them at Locust's usual rate (100/s) only delayed the plan's first arrival."""
    levels = closed_loop_levels(config)
    return max(levels) if levels else config.client.max_concurrency or UNCAPPED_POOL


def _ladder(ladder: LadderShape, seed: int) -> list[StepSpec]:
    steps: list[StepSpec] = []
    for i, item in enumerate(ladder.steps):
        steps.append(StepSpec(
            label=unique_label(rate_label(item.rate), (s.label for s in steps)), index=i, phase="ladder",
            arrival=ladder.arrival, target_rate=item.rate, burstiness=ladder.burstiness,
            warmup_s=ladder.warmup, duration_s=item.duration, drain_timeout_s=ladder.drain_timeout,
            seed=derive_seed(seed, i)))
    return steps


def refine_step(ladder: LadderShape, rate: float, *, index: int, seed: int, taken: Iterable[str]) -> StepSpec:
    """A `refine` step at `rate` (from `KneeSearch.next_step`), the `index`-th step of the run.

    Its window is `refine.duration`, else that of the ladder step with the highest rate at or below
    `rate`; warm-up, arrival process and drain are the ladder's.
    """
    below = [s for s in ladder.steps if s.rate <= rate] or ladder.steps[:1]
    duration = (ladder.refine.duration if ladder.refine and ladder.refine.duration
                else max(below, key=lambda s: s.rate).duration)
    return StepSpec(label=unique_label(rate_label(rate), taken), index=index, phase="refine",
                    arrival=ladder.arrival, target_rate=rate, burstiness=ladder.burstiness,
                    warmup_s=ladder.warmup, duration_s=duration, drain_timeout_s=ladder.drain_timeout,
                    seed=derive_seed(seed, index))


def refine_window_s(ladder: LadderShape, rate: float) -> float:
    """Warm-up plus window of a refine step at `rate` (`refine_step`): what the search's budget counts."""
    below = [s for s in ladder.steps if s.rate <= rate] or ladder.steps[:1]
    duration = (ladder.refine.duration if ladder.refine and ladder.refine.duration
                else max(below, key=lambda s: s.rate).duration)
    return float(ladder.warmup) + float(duration)


def knee_estimator(config: Config) -> Callable[[list[dict]], Any]:
    """`analysis.knee.estimate_knee` over step rows, with the config's SLO (and its confidence), each TTFT
    share read against its step's arrivals where the rows carry their requests (`analysis.share_cv
    .adjust_searched`), as the run's analysis reads them."""
    def estimate(rows: list[dict]) -> Any:
        from analysis.knee import estimate_knee  # pandas/scipy: only once a search runs
        from analysis.share_cv import adjust_searched

        return estimate_knee(adjust_searched(rows, config.slo), config.slo)

    return estimate


def knee_search(config: Config, rows: Iterable[Mapping] = (), *, estimate: Callable | None = None,
                clock: Callable[[], float] = time.monotonic) -> KneeSearch | AutoSearch | None:
    """The knee search a ladder config asks for (`shape.ladder.refine`), or None when it asks none; for
    `shape.auto`, its whole search after the planned probe level (`shapes.auto.AutoSearch`).
    `rows`: the judged rows of the steps run so far; `estimate`: default `knee_estimator(config)`."""
    if config.shape.auto is not None:
        rows = [dict(r) for r in rows]
        return AutoSearch(config, rows, estimate=estimate or knee_estimator(config), clock=clock,
                          spent_s=spent_before(rows))
    ladder = config.shape.ladder
    if ladder is None or ladder.refine is None:
        return None
    refine = ladder.refine
    # no `refine.duration` written: the search sizes each step from the samples it needs near the knee
    size = None if refine.duration else Sizing(base_s=lambda rate: refine_window_s(ladder, rate) - ladder.warmup,
                                               warmup_s=float(ladder.warmup), max_arrivals=MAX_STEP_ARRIVALS,
                                               confidence=config.slo.confidence)
    return KneeSearch(rows, estimate=estimate or knee_estimator(config), precision=refine.precision,
                      budget_s=refine.budget, max_steps=refine.max_steps, max_extensions=refine.max_extensions,
                      step_s=lambda rate: refine_window_s(ladder, rate), clock=clock, size=size,
                      prior=prior_rate(config))


def prior_rate(config: Config) -> float | None:
    """The knee search's prior in req/s (`refine.prior`): the rate written, or the knee a twin predicts for
    the config's mix, SLO and arrivals (`llmload.sim.whatif.twin_prior`, computed once per twin and config;
    a few seconds); None without one, or when the twin predicts no knee."""
    refine = config.shape.ladder.refine if config.shape.ladder is not None else None
    prior = None if refine is None else refine.prior
    if prior is None or isinstance(prior, float | int):
        return prior
    from llmload.sim.whatif import twin_prior

    return twin_prior(prior, config)


class ConfigSearch:
    """The steps a config's knee search adds after the plan, as a shape offers them (`search`,
    `search_step`: `shapes.loadshapes.BoundarySearchShape`); pure, for a controller given no shape."""

    _search: KneeSearch | AutoSearch | None = None

    def search(self, config: Config, rows: Iterable[Mapping] = ()) -> KneeSearch | AutoSearch | None:
        self._search = knee_search(config, rows)
        return self._search

    def search_step(self, config: Config, rate: float, *, index: int, seed: int, taken: Iterable[str]) -> StepSpec:
        """The step the search asked for at `rate` (a refine step; `auto`: the step of its stage)."""
        if isinstance(self._search, AutoSearch):
            return self._search.step_spec(rate, index=index, seed=seed, taken=taken)
        return refine_step(_part(config.shape.ladder, "ladder"), rate, index=index, seed=seed, taken=taken)


def _concurrency(shape: ConcurrencyShape, seed: int) -> list[StepSpec]:
    steps: list[StepSpec] = []
    for i, level in enumerate(shape.levels):
        steps.append(StepSpec(
            label=unique_label(f"c{level}", (s.label for s in steps)), index=i, phase="concurrency",
            arrival="closed", concurrency=level,
            requests=None if shape.duration else shape.requests_per_level,
            duration_s=shape.duration, drain_timeout_s=shape.drain_timeout, seed=derive_seed(seed, i)))
    return steps


def _trace(shape: TraceShape, run_seed: int, base_dir: str | Path | None) -> list[StepSpec]:
    seed = run_seed if shape.seed is None else shape.seed
    from shapes.replay import prepare_replay, scale_to_rate, to_trace_arrivals, uniform_twin  # noqa: I001 (pandas)

    replay = prepare_replay(shape, seed=seed, base_dir=base_dir)
    if shape.warmup >= replay.span_s:
        raise ConfigError(f"warmup {shape.warmup:g}s is not shorter than the trace ({replay.span_s:g}s)",
                          key="shape.trace.warmup")
    # (label, phase, frame, span): the trace as prepared, or time-scaled to each of `scales`' mean rates
    frames: list[tuple[str, str, pd.DataFrame, float]] = []
    if shape.scales:
        for rate in shape.scales:
            frame, span = scale_to_rate(replay.frame, replay.span_s, rate)
            if shape.warmup >= span:
                raise ConfigError(f"warmup {shape.warmup:g}s is not shorter than the trace at {rate:g} req/s "
                                  f"({span:g}s)", key="shape.trace.warmup")
            suffix = rate_label(rate)[1:]
            frames.append((f"burst-r{suffix}", "burst", frame, span))
            frames.append((f"uniform-r{suffix}", "uniform", uniform_twin(frame, span), span))
    else:
        frames.append(("burst", "burst", replay.frame, replay.span_s))
        if shape.uniform_twin:
            frames.append(("uniform", "uniform", uniform_twin(replay.frame, replay.span_s), replay.span_s))
    return [
        StepSpec(label=label, index=i, phase=phase, arrival="trace", target_rate=len(frame) / span,
                 warmup_s=shape.warmup, duration_s=span - shape.warmup,
                 drain_timeout_s=shape.drain_timeout, trace=to_trace_arrivals(frame, use_sizes=shape.use_sizes),
                 seed=derive_seed(seed, i), failed_in_source=replay.failed_in_source)
        for i, (label, phase, frame, span) in enumerate(frames)
    ]


#: soak slices run back to back (`Phase.drained`); the last one drains
_SOAK_DRAINED = PHASES["soak"].drained


def _soak_slices(soak: SoakShape) -> list[tuple[float, float]]:
    count = max(1, math.ceil(soak.duration / soak.slice - 1e-9))
    return [(i * soak.slice, min(soak.slice, soak.duration - i * soak.slice)) for i in range(count)]


def _soak(soak: SoakShape, run_seed: int, base_dir: str | Path | None) -> list[StepSpec]:
    slices = _soak_slices(soak)
    last = len(slices) - 1
    if soak.trace is None:
        return [
            StepSpec(label=f"soak-{i:03d}", index=i, phase="soak", arrival=soak.arrival, target_rate=soak.rate,
                     burstiness=soak.burstiness, duration_s=length, drain=_SOAK_DRAINED or i == last,
                     drain_timeout_s=soak.drain_timeout, seed=derive_seed(run_seed, i))
            for i, (_, length) in enumerate(slices)
        ]
    if soak.trace.uniform_twin or soak.trace.warmup:
        key = "uniform_twin" if soak.trace.uniform_twin else "warmup"
        raise ConfigError("does not apply to a soak (its slices run back to back)", key=f"shape.soak.trace.{key}")
    seed = run_seed if soak.trace.seed is None else soak.trace.seed
    from shapes.replay import loop_trace, prepare_replay, slice_trace, to_trace_arrivals  # noqa: I001 (pandas)

    replay = prepare_replay(soak.trace, seed=seed, base_dir=base_dir, key="shape.soak.trace")
    looped = loop_trace(replay.frame, replay.span_s, soak.duration)
    steps = []
    for i, (start, length) in enumerate(slices):
        part = slice_trace(looped, start, start + length)
        steps.append(StepSpec(
            label=f"soak-{i:03d}", index=i, phase="soak", arrival="trace", target_rate=len(part) / length,
            duration_s=length, drain=_SOAK_DRAINED or i == last, drain_timeout_s=soak.drain_timeout,
            trace=to_trace_arrivals(part, use_sizes=soak.trace.use_sizes), seed=derive_seed(seed, i),
            failed_in_source=replay.failed_in_source if i == 0 else 0))
    return steps
