"""Locust's import in the Locust child (`launcher.run.BOOT`), with the installed packages' entry points
read once instead of once per gevent event.

`import locust` monkey-patches the standard library with gevent (`gevent.monkey.patch_all`), and gevent
announces each step of that (about 25 events: the patching of each module, before and after) to its
plugins: `gevent.events.notify_and_call_entry_points` asks `importlib.metadata.entry_points(group=...)`
each time, and each ask reads the `entry_points.txt` of every installed distribution again (4,275
file reads with 171 distributions: about 0.25 s of CPU in every Locust process, master and workers).
`import_locust` answers those asks from one reading. Nothing can install a distribution in the middle
of an import, so gevent finds the same plugins (none, unless one is installed) and patches the same
modules; once Locust is imported, `importlib.metadata.entry_points` is the standard library's again.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from importlib import metadata
from typing import Any

__all__ = ["entry_points_read_once", "import_locust"]


@contextlib.contextmanager
def entry_points_read_once() -> Iterator[None]:
    """Within the block, `importlib.metadata.entry_points(**selection)` selects from one reading of every
    distribution's entry points (made on entry) instead of reading them all again; restored after."""
    real = metadata.entry_points
    every: Any = real()  # all groups: `SelectableGroups` on Python 3.10-3.11, `EntryPoints` from 3.12

    def entry_points(**selection: Any) -> Any:
        return every.select(**selection) if selection else every

    metadata.entry_points = entry_points  # type: ignore[assignment]
    try:
        yield
    finally:
        metadata.entry_points = real


def import_locust() -> None:
    """`import locust` (gevent's monkey-patching included), reading the entry points once."""
    with entry_points_read_once():
        importlib.import_module("locust")
