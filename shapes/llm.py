"""The Locust shape for llmload runs: keeps the user pool alive while the step controller works.

Load with the users: `locust -f locustfiles/llm.py,shapes/llm.py --llmload-config run.yaml`.

Arrival times never come from `tick()` (ticks run about once a second and can be seconds late,
NOTES.md): the master's step controller (`llmload.runtime.controller`) sends each worker its plan.
`tick()` only returns the pool (size = client concurrency cap, or the largest closed-loop level; the
class chosen by `target.api`) and None once the controller has drained the last step and finalised
the run directory, so no late result is lost when Locust quits.
"""

from locust import LoadTestShape

from llmload.runtime.session import new_shape_run, pool_tick

__all__ = ["LLMShape"]


class LLMShape(LoadTestShape):
    """Ladder, concurrency, trace, soak: whatever `shape:` in `--llmload-config` says."""

    use_common_options = False

    def reset_time(self):
        """Locust calls this when a shaped run starts (again, from the web UI): a new run directory."""
        super().reset_time()
        new_shape_run()

    def tick(self):
        return pool_tick()
