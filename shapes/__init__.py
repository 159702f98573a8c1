"""Pure planning for the load shapes: steps, plans, trace replay options, knee search, phases.

Nothing imported here imports Locust: `shapes/loadshapes.py` (the LoadTestShape classes, which do),
`shapes/llm.py` and `llmload/runtime/` call these; `shapes/phases.py` declares each phase's traits.
"""

from shapes.knee_search import Ask, KneeSearch, SearchAnswer
from shapes.plan import build_plan, knee_search, rate_label, refine_step
from shapes.steps import PHASES, StepBounds, StepSpec, TraceArrivals, active_step, derive_seed, step_bounds

__all__ = [
    "PHASES",
    "Ask",
    "KneeSearch",
    "Replay",
    "SearchAnswer",
    "StepBounds",
    "StepSpec",
    "TraceArrivals",
    "active_step",
    "build_plan",
    "derive_seed",
    "knee_search",
    "prepare_replay",
    "rate_label",
    "refine_step",
    "step_bounds",
]


def __getattr__(name: str):
    """`Replay` and `prepare_replay` load pandas: imported on first use, not with the package."""
    if name in ("Replay", "prepare_replay"):
        from shapes import replay

        return getattr(replay, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
