"""The Locust shape for llmload runs: keeps the user pool alive while the step controller works.

Load with the users: `locust -f locustfiles/llm.py,shapes/llm.py --llmload-config run.yaml`.

Arrival times never come from `tick()` (ticks run about once a second and can be seconds late,
NOTES.md): the master's step controller (`llmload.runtime.controller`) sends each worker its plan.
`tick()` only returns the pool (size = client concurrency cap, or the largest closed-loop level; the
class chosen by `target.api`) and None once the controller has drained the last step and finalised
the run directory, so no late result is lost when Locust quits.

The shape reaches the run's session through the Locust environment (`environment.llmload_session`,
put there by the locustfile's `init` listener); it imports nothing from `llmload.runtime`, which
imports `shapes` (the plans it runs).
"""

from locust import LoadTestShape

__all__ = ["LLMShape"]


class LLMShape(LoadTestShape):
    """Ladder, concurrency, trace, soak: whatever `shape:` in `--llmload-config` says."""

    use_common_options = False

    def reset_time(self):
        """Locust calls this when a shaped run starts (again, from the web UI): a new run directory."""
        super().reset_time()
        session = self._session()
        if session is not None:
            session.new_shape_run()

    def tick(self):
        session = self._session()
        return session.tick() if session is not None else None

    def _session(self):
        """The run's session on the Locust environment (None before the locustfile's init ran)."""
        runner = getattr(self, "runner", None)
        return getattr(getattr(runner, "environment", None), "llmload_session", None)
