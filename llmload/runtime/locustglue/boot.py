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

`import locust` also imports its web UI (`locust.env` imports `locust.web` for `create_web_ui` alone:
Flask, Werkzeug, Jinja2, about 0.06 s of CPU), which a headless master and every worker never start.
`import_locust` puts a stand-in for `locust.web` in its place (`defer_web_ui`): its `WebUI` imports the
real module when a web UI is made (`llmload run --web`), and any other name is the real module's.
Likewise `locust.main` imports Locust's HTML report (`locust.html`: Jinja2, about 0.024 s of CPU) for
`--html` alone, which `llmload run` never passes: `defer_html_report` stands in for it until a report is
made (or the real web UI, which renders its page with it, is imported).

It also keeps numpy's OpenBLAS to one thread unless the environment asks for more (`llmload.blas`): its
thread pool's start-up spin was ~0.07 s of CPU in every Locust process.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

from llmload.blas import one_blas_thread

__all__ = ["HTML_MODULE", "WEB_MODULE", "defer_html_report", "defer_web_ui", "entry_points_read_once",
           "import_locust"]

#: Locust's web UI module (Flask and its kin), imported by `locust.env` for `Environment.create_web_ui` only
WEB_MODULE = "locust.web"
#: Locust's HTML report (Jinja2), imported by `locust.main` for `--html` only, and by its web UI
HTML_MODULE = "locust.html"
#: the names `locust.main` imports from it: functions, each the real one's when called
HTML_NAMES = ("get_html_report", "process_html_filename")


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


def _stand_in(name: str, doc: str, after: Callable[[types.ModuleType], None] | None = None,
              ) -> tuple[types.ModuleType, Callable[[], types.ModuleType]]:
    """(stand_in, real): a module put in `sys.modules` as `name`; `real()` imports the real module (it takes
    the stand-in's place) and hands it to `after`; any name read from the stand-in that is not set on it is
    the real module's."""
    stand_in = types.ModuleType(name, doc)

    def real() -> types.ModuleType:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        module = importlib.import_module(name)
        if after is not None:
            after(module)
        return module

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):  # the import system's questions (`__path__`, `__file__`): a plain module's
            raise AttributeError(attr)
        return getattr(real(), attr)

    stand_in.__getattr__ = getattr_  # type: ignore[method-assign]
    sys.modules[name] = stand_in
    return stand_in, real


def defer_web_ui() -> None:
    """Put a stand-in for `locust.web` in `sys.modules` (before `import locust`): Locust's environment
    module binds its `WebUI` at import and calls it only in `create_web_ui`; the stand-in's `WebUI` imports
    the real module then (and puts the real class where Locust looks), and any other name read from the
    stand-in is the real module's. Nothing happens when Locust is imported already."""
    if "locust" in sys.modules or WEB_MODULE in sys.modules:
        return

    def where_locust_looks(module: types.ModuleType) -> None:
        env = sys.modules.get("locust.env")
        if env is not None and getattr(env, "WebUI", None) is WebUI:
            env.WebUI = module.WebUI  # type: ignore[attr-defined]

    stand_in, real = _stand_in(WEB_MODULE, "Locust's web UI, imported when a web UI is made (llmload boot)",
                               where_locust_looks)

    class WebUI:
        """Locust's `WebUI`, made from the real module on first use."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            return real().WebUI(*args, **kwargs)

    stand_in.WebUI = WebUI  # type: ignore[attr-defined]


def defer_html_report() -> None:
    """Put a stand-in for `locust.html` in `sys.modules` (after `import locust`, before `locust.main`): its
    `get_html_report` and `process_html_filename` call the real module's, imported on the first call (it
    then takes the stand-in's place, and `locust.html` is set to it); any other name read from the
    stand-in is the real module's. Nothing happens when `locust.main` or `locust.html` is imported already."""
    if "locust.main" in sys.modules or HTML_MODULE in sys.modules:
        return
    stand_in, real = _stand_in(HTML_MODULE, "Locust's HTML report, imported when one is made (llmload boot)")

    def calling_the_real(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            return getattr(real(), name)(*args, **kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    for name in HTML_NAMES:
        setattr(stand_in, name, calling_the_real(name))
    package = sys.modules.get("locust")
    if package is not None:
        package.html = stand_in  # type: ignore[attr-defined]


def import_locust() -> None:
    """`import locust` (gevent's monkey-patching included), reading the entry points once, its web UI
    imported only when one is made (`defer_web_ui`), its HTML report only when one is made
    (`defer_html_report`). First, before the child's imports reach numpy: one BLAS thread unless the
    environment asks for more (`llmload.blas`: ~0.07 s of CPU per Locust process)."""
    one_blas_thread()
    defer_web_ui()
    with entry_points_read_once():
        importlib.import_module("locust")
    defer_html_report()
