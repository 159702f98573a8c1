"""Reports: the self-contained `report.html` of a run, `llmload report` (re-analyse with another SLO)
and `llmload compare` (runs of different deployments side by side, with goodput per GPU and cost).

matplotlib is imported only inside this package (`llmload.report.plots`, object API, SVG output, no
pyplot and no global backend). The names below are imported when first used, so that a module of the
package that needs no plot (`llmload.report.answer`: the run's answer, made for every run, with or
without a report) does not pull matplotlib in. No module of the package
is named like one of these names: importing a submodule binds its name on the package, which would hide
the lazily imported function (`llmload report` lives in `llmload.report.reanalyse`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmload.report.compare import compare_runs
    from llmload.report.page import render_report, write_report
    from llmload.report.reanalyse import rereport

__all__ = ["compare_runs", "render_report", "rereport", "write_report"]

_HOMES = {"compare_runs": "llmload.report.compare", "render_report": "llmload.report.page",
          "write_report": "llmload.report.page", "rereport": "llmload.report.reanalyse"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
