"""The user pool the shape keeps alive: its size (users are idle slots that take planned arrivals).

Here rather than in `llmload.runtime.session` so that the web UI can show it without importing the
session (which installs the web UI).
"""

from __future__ import annotations

from llmload.config import Config

__all__ = ["UNCAPPED_POOL", "pool_size"]

#: users in the pool when the client has no concurrency cap
UNCAPPED_POOL = 512
#: the pool's users start all at once (spawn rate = pool size): they are idle greenlets that take planned
#: arrivals, so ramping them at Locust's usual rate (100/s) only delayed the plan's first arrival by
#: pool / 100 seconds. Locust's "spawn rate is very high" warning is filtered (`_QuietSpawnWarning`).


def pool_size(config: Config) -> int:
    """Total users (split across workers by Locust): the client cap, or the largest closed-loop level."""
    cap = config.client.max_concurrency or UNCAPPED_POOL
    if config.shape.kind == "concurrency":
        return max(config.shape.concurrency.levels)
    return cap
