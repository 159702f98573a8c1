"""Pure planning for the load shapes: steps, plans, trace replay options, boundary search.

Nothing here imports Locust: `shapes/llm.py` (the LoadTestShape) and `llmload/runtime/` call these.
"""

from shapes.boundary import BoundaryAnswer, BoundarySearch
from shapes.plan import boundary_search, build_plan, rate_label, refine_step
from shapes.steps import PHASES, StepBounds, StepSpec, TraceArrivals, active_step, derive_seed, step_bounds

__all__ = [
    "PHASES",
    "BoundaryAnswer",
    "BoundarySearch",
    "Replay",
    "StepBounds",
    "StepSpec",
    "TraceArrivals",
    "active_step",
    "boundary_search",
    "build_plan",
    "derive_seed",
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
