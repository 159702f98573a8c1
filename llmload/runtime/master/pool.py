"""The user pool the shape keeps alive: its size (users are idle slots that take planned arrivals).

The rule is the shapes' (`shapes.plan.pool_size`); here so that the web UI can show it without
importing the session (which installs the web UI).
"""

from __future__ import annotations

from shapes.plan import UNCAPPED_POOL, pool_size

__all__ = ["UNCAPPED_POOL", "pool_size"]
