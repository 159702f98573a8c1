"""A load shape of your own: a sawtooth of arrival rates, as a subclass of llmload's LoadTestShape.

Run it with the users in place of `shapes/llm.py` (the config still names a target, an SLO and some
`shape:`; a shape of your own plans the run instead of that kind):

    locust -f locustfiles/llm.py,examples/locustfiles/custom_shape.py --headless --llmload-config run.yaml

Each tooth climbs from `low` to `high` req/s in `rise` steps and then drops back: the first tooth
finds where latency starts to fail, the next ones show whether the server recovers after a drop
(a queue that does not drain between teeth fails the low steps of the later teeth).

How a shape works in llmload: `steps()` returns the plan, a list of `StepSpec` (one open-loop step
per rate here, phase `ladder`: drained before the next step, judged against the SLO, drawn on the
capacity curve). The master's step controller releases every planned arrival on time; `tick()` is
not the clock (Locust calls it about once a second, sometimes late) and is left to the base class,
which keeps the user pool alive and ends the run once the last step is drained and finalised.
"""

from __future__ import annotations

from shapes.loadshapes import LLMLoadShape
from shapes.plan import rate_label, unique_label
from shapes.steps import StepSpec, derive_seed

__all__ = ["SawtoothShape"]


class SawtoothShape(LLMLoadShape):
    """`teeth` teeth of `rise` constant-rate steps each, from `low` to `high` req/s."""

    low = 2.0
    high = 6.0
    rise = 3
    teeth = 2
    #: each step's measurement window and warm-up (its arrivals also cover the warm-up), seconds
    step_s = 3.0
    warmup_s = 1.0
    drain_timeout_s = 20.0
    #: `constant` (evenly spaced), `poisson` or `gamma`
    arrival = "constant"

    def rates(self) -> list[float]:
        """The target rate of every step, in run order."""
        tooth = [self.low + (self.high - self.low) * i / max(1, self.rise - 1) for i in range(self.rise)]
        return [round(rate, 6) for rate in tooth] * self.teeth

    def steps(self, config, base_dir=None) -> list[StepSpec]:
        steps: list[StepSpec] = []
        for i, rate in enumerate(self.rates()):
            steps.append(StepSpec(
                label=unique_label(rate_label(rate), (s.label for s in steps)), index=i, phase="ladder",
                arrival=self.arrival, target_rate=rate, warmup_s=self.warmup_s, duration_s=self.step_s,
                drain_timeout_s=self.drain_timeout_s, seed=derive_seed(config.requests.seed, i)))
        return steps
