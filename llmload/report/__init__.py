"""Reports: the self-contained `report.html` of a run, `llmload report` (re-analyse with another SLO)
and `llmload compare` (runs of different deployments side by side, with goodput per GPU and cost).

matplotlib is imported only inside this package (`llmload.report.plots`, object API, SVG output, no
pyplot and no global backend). The names below are loaded on first use, so that a command that needs
one module of the package (`llmload plan`: `llmload.report.planning`) does not import matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmload.report.compare import compare_runs
    from llmload.report.page import render_report, write_report
    from llmload.report.rereport import rereport

__all__ = ["compare_runs", "render_report", "rereport", "write_report"]

_WHERE = {"compare_runs": "llmload.report.compare", "render_report": "llmload.report.page",
          "write_report": "llmload.report.page", "rereport": "llmload.report.rereport"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'llmload.report' has no attribute {name!r}")
