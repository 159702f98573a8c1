"""The Locust shape for llmload runs: plans what `shape:` in `--llmload-config` says.

Load with the users: `locust -f locustfiles/llm.py,shapes/llm.py --llmload-config run.yaml`.

`LLMShape` follows the config: `config.shape.kind` picks the class that plans the steps
(`shapes.loadshapes.shape_for_config`: ladder, knee search, concurrency, trace replay, soak). To
run a shape of your own, load your locustfile with a subclass of `shapes.loadshapes.LLMLoadShape`
instead of (or beside) this file: a shape of your own plans the run in place of the config's kind.

Arrival times never come from `tick()` (ticks run about once a second and can be seconds late,
NOTES.md): the master's step controller (`llmload.runtime.master.controller`) sends each worker its plan.
`tick()` only returns the pool (size = client concurrency cap, or the largest closed-loop level; the
class chosen by `target.api`) and None once the controller has drained the last step and finalised
the run directory, so no late result is lost when Locust quits.

The shape reaches the run's session through the Locust environment (`environment.llmload_session`,
put there by the locustfile's `init` listener: `LLMLoadShape._session`); it imports nothing from
`llmload.runtime`, which imports `shapes` (the plans it runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from shapes.loadshapes import LLMLoadShape, shape_for_config

if TYPE_CHECKING:
    from llmload.config import Config
    from shapes.auto import AutoSearch
    from shapes.knee_search import KneeSearch
    from shapes.steps import StepSpec

__all__ = ["LLMShape"]


class LLMShape(LLMLoadShape):
    """Ladder, concurrency, trace, soak: whatever `shape:` in `--llmload-config` says."""

    #: plans with the class of the config's kind; a user's own shape, if loaded, goes first
    follows_config = True

    #: the class of the config's kind, made once per config (`_planner`)
    _planning: tuple[Config, LLMLoadShape] | None = None

    def _planner(self, config: Config) -> LLMLoadShape:
        """The shape of `config`'s kind, one instance per config: the search it starts in `search()` is
        the one `search_step()` asks for its steps (`auto` keeps its stage there)."""
        if self._planning is None or self._planning[0] is not config:
            self._planning = (config, shape_for_config(config))
        return self._planning[1]

    def steps(self, config: Config, base_dir: str | Path | None = None) -> list[StepSpec]:
        return self._planner(config).steps(config, base_dir)

    def search(self, config: Config, rows: Iterable[Mapping]) -> KneeSearch | AutoSearch | None:
        return self._planner(config).search(config, rows)

    def search_step(self, config: Config, rate: float, *, index: int, seed: int,
                    taken: Iterable[str]) -> StepSpec:
        return self._planner(config).search_step(config, rate, index=index, seed=seed, taken=taken)

    def users(self, config: Config) -> int:
        return self._planner(config).users(config)
