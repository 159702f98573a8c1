"""The load shapes as Locust `LoadTestShape` classes: each plans the steps the step controller runs.

    LLMLoadShape         the base: `steps(config)` is the plan; `tick()` keeps the user pool alive
    LadderLoadShape      `shape: {ladder: ...}`: one open-loop step per rate (phase `ladder`)
    BoundarySearchShape  a ladder with `refine:`: then the knee search's refine steps
    ConcurrencyLoadShape `shape: {concurrency: ...}`: one closed-loop step per level
    TraceLoadShape       `shape: {trace: ...}`: the trace as recorded (`burst`), then its uniform twin
    SoakLoadShape        `shape: {soak: ...}`: back-to-back slices of one long load
    AutoLoadShape        `shape: {auto: ...}`: a probe, placement steps and the knee search (`shapes.auto`)

`config.shape.kind` picks the class (`shape_for_config`; the registry is `SHAPES`). A shape of your own
is a subclass of `LLMLoadShape` in your locustfile that overrides `steps()` (see
examples/locustfiles/custom_shape.py); when a locustfile defines one, it plans the run instead of the
config's kind (`planning_shape`).

Arrival times never come from `tick()`: Locust calls it about once a second and it can be seconds
late (NOTES.md). The shape only plans; the master's step controller sends each worker its steps and
the workers release every planned arrival on time. `tick()` returns the user pool (the client
concurrency cap, or the largest closed-loop level) while the run is on and None once the controller
has drained the last step and finalised the run directory, so no late result is lost when Locust quits.

The base classes here are `abstract` (Locust does not load them from a locustfile that imports them);
phases and their traits are in `shapes.phases` (pure, for the analysis).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeGuard

from locust import LoadTestShape

from llmload.config import SHAPE_KINDS
from llmload.errors import ConfigError
from shapes.plan import STEP_BUILDERS, ConfigSearch, pool_size
from shapes.steps import StepSpec

if TYPE_CHECKING:
    from llmload.config import Config
    from shapes.auto import AutoSearch
    from shapes.knee_search import KneeSearch

__all__ = ["SHAPES", "AutoLoadShape", "BoundarySearchShape", "ConcurrencyLoadShape", "LLMLoadShape", "LadderLoadShape",
           "SoakLoadShape", "TraceLoadShape", "planning_shape", "register_shape", "shape_for_config"]


class LLMLoadShape(LoadTestShape):
    """Base of every llmload shape. Subclass it and override `steps()` to plan a run of your own.

    `steps(config)` returns the steps in run order (`shapes.steps.StepSpec`: label, index, phase,
    arrival process, target rate or concurrency, warm-up, window, drain timeout, seed, or a trace
    slice). `plan()` checks them. Use a phase of `shapes.phases.PHASES`: the analysis reads its traits
    (e.g. phase `ladder`: an open-loop rate step on the capacity curve, drained, judged, sustained).

    Override `users(config)` if your steps need more users than the client concurrency cap (a closed
    loop above it). `search()` / `search_step()` add steps after the plan, from the judged step rows
    (the knee search); by default there are none. Keep `tick()` and `reset_time()` as they are.
    """

    abstract = True
    use_common_options = False
    #: the config's `shape:` kind this class plans ("" for a shape of its own)
    kind: ClassVar[str] = ""

    # ------------------------------------------------------------------ planning (no Locust needed)

    @classmethod
    def serves(cls, config: Config) -> bool:
        """Whether this class plans `config` when registered (`register_shape`): the config's shape is
        of this class's `kind`. Override to narrow it (e.g. a ladder with `refine:`)."""
        return config.shape.kind == cls.kind

    def steps(self, config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
        """The steps of the run in order. `base_dir` resolves relative files (the config's folder)."""
        raise NotImplementedError(f"{type(self).__name__} must define steps(config)")

    def plan(self, config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
        """`steps()`, checked: at least one, each a StepSpec, indexes 0, 1, ... and unique labels.

        A wrong plan is a ConfigError naming the class (one line, exit code 2)."""
        steps = list(self.steps(config, base_dir))
        name = type(self).__name__
        if not steps:
            raise ConfigError(f"shape {name} planned no steps", key="shape")
        seen: set[str] = set()
        for i, step in enumerate(steps):
            if not isinstance(step, StepSpec):
                raise ConfigError(f"shape {name}: step {i} is a {type(step).__name__}, not a StepSpec", key="shape")
            if step.index != i:
                raise ConfigError(f"shape {name}: step {step.label} has index {step.index}, expected {i}",
                                  key="shape")
            if step.label in seen:
                raise ConfigError(f"shape {name}: label {step.label} is used twice", key="shape")
            seen.add(step.label)
        return steps

    def search(self, config: Config, rows: Iterable[Mapping]) -> KneeSearch | AutoSearch | None:
        """A search that adds steps after the plan (`shapes.knee_search.KneeSearch`), given the judged
        rows of the steps run (label, target and realised offered rate, verdict, figures); None: no steps."""
        return None

    def search_step(self, config: Config, rate: float, *, index: int, seed: int,
                    taken: Iterable[str]) -> StepSpec:
        """The step the search asks for at `rate`, the `index`-th step of the run."""
        raise NotImplementedError(f"{type(self).__name__} has no search steps")

    def users(self, config: Config) -> int:
        """Users in the pool (split across workers by Locust): the client concurrency cap, or the largest
        closed-loop level of the config's shape (`shapes.plan.pool_size`). Idle users cost
        nothing; an arrival put when no user is free is recorded `capped`."""
        return pool_size(config)

    # ------------------------------------------------------------------ Locust

    def reset_time(self) -> None:
        """Locust calls this when a shaped run starts (again, from the web UI): a new run directory."""
        super().reset_time()
        session = self._session()
        if session is not None:
            session.new_shape_run()

    def tick(self) -> tuple | None:
        """(users, spawn rate, [user class]) while the run is on; None once it is finalised."""
        session = self._session()
        return session.tick(self) if session is not None else None

    def _session(self) -> Any:
        """The run's session on the Locust environment (`environment.llmload_session`, put there by the
        locustfile's init listener; None before it ran). Imported here, not at the top: the runtime imports
        `shapes` (the plans it runs)."""
        from llmload.runtime.locustglue.seams import session_of

        return session_of(getattr(getattr(self, "runner", None), "environment", None))


#: the class for each `shape:` kind; `register_shape` adds one (most recent first within a kind)
SHAPES: dict[str, list[type[LLMLoadShape]]] = {}


def register_shape(cls: type[LLMLoadShape]) -> type[LLMLoadShape]:
    """Class decorator: `cls` plans configs of `cls.kind` (where `cls.serves(config)` says so)."""
    if cls.kind not in SHAPE_KINDS:
        raise ValueError(f"{cls.__name__}.kind must be one of {', '.join(SHAPE_KINDS)}, got {cls.kind!r}")
    SHAPES.setdefault(cls.kind, []).insert(0, cls)
    return cls


def shape_for_config(config: Config) -> LLMLoadShape:
    """A new instance of the class that plans `config.shape` (e.g. BoundarySearchShape for a ladder
    with `refine:`)."""
    for cls in SHAPES.get(config.shape.kind, []):
        if cls.serves(config):
            return cls()
    raise ConfigError(f"no shape class for kind {config.shape.kind}", key="shape")


class _ConfigShape(LLMLoadShape):
    """A built-in shape: plans `shape.<kind>` of the config."""

    abstract = True

    def steps(self, config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
        return STEP_BUILDERS[self.kind](config, base_dir)


@register_shape
class LadderLoadShape(_ConfigShape):
    """Open-loop rate ladder: one step per rate of `shape.ladder.steps` (labels `r0.50`, phase `ladder`),
    each with its warm-up and window, drained before the next."""

    abstract = True
    kind = "ladder"


@register_shape
class BoundarySearchShape(ConfigSearch, LadderLoadShape):
    """A ladder with `refine:`: after the ladder, `refine` steps at the knee estimate
    (`shapes.knee_search.KneeSearch`) until `precision`, `budget` or `max_steps`."""

    abstract = True

    @classmethod
    def serves(cls, config: Config) -> bool:
        ladder = config.shape.ladder
        return super().serves(config) and ladder is not None and ladder.refine is not None


@register_shape
class ConcurrencyLoadShape(_ConfigShape):
    """Closed loop: one step per level of `shape.concurrency.levels` (labels `c4`, phase `concurrency`):
    that many users each send the next request when the last ends, for a count or a duration."""

    abstract = True
    kind = "concurrency"


@register_shape
class TraceLoadShape(_ConfigShape):
    """Trace replay: the recorded arrivals and sizes of `shape.trace` (phase `burst`), then, with
    `uniform_twin`, the same requests evenly spaced (phase `uniform`) for the burst-vs-uniform pair."""

    abstract = True
    kind = "trace"


@register_shape
class SoakLoadShape(_ConfigShape):
    """Soak: `shape.soak.duration` cut into slices (labels `soak-000`, phase `soak`) that run back to
    back (not drained but the last), at a rate or a looped trace, compared for drift."""

    abstract = True
    kind = "soak"


@register_shape
class AutoLoadShape(ConfigSearch, _ConfigShape):
    """The knee from a URL and targets: a closed-loop probe of the server's range (phase `probe`), open-loop
    steps placed across it (phase `ladder`), then refine steps at the knee estimate, every window sized
    from the samples its judgement needs, within `shape.auto.budget` (`shapes.auto.AutoSearch`)."""

    abstract = True
    kind = "auto"


def _own_shape(shape: Any) -> TypeGuard[LLMLoadShape]:
    """A shape a user wrote: an LLMLoadShape that does not just follow the config (`LLMShape`)."""
    return isinstance(shape, LLMLoadShape) and not getattr(shape, "follows_config", False)


def planning_shape(environment: Any, config: Config) -> LLMLoadShape:
    """The shape that plans this run: a shape of the user's own if a locustfile defined one (the one
    Locust runs, e.g. chosen with `--class-picker`, else the first loaded, as Locust picks), otherwise
    the class of `config.shape.kind`. A shape that is not an LLMLoadShape cannot drive the step
    controller: a ConfigError."""
    running = getattr(environment, "shape_class", None)
    if running is not None and not isinstance(running, LLMLoadShape):
        raise ConfigError(f"shape class {type(running).__name__} is not an llmload shape: subclass "
                          "shapes.loadshapes.LLMLoadShape (its tick() keeps the user pool; steps() plans)",
                          key="shape")
    if _own_shape(running):
        return running
    loaded = (getattr(environment, "available_shape_classes", None) or {}).values()
    own = next((s for s in loaded if _own_shape(s)), None)
    return own if own is not None else shape_for_config(config)
