"""Reports: the self-contained `report.html` of a run, `llmload report` (re-analyse with another SLO)
and `llmload compare` (runs of different deployments side by side, with goodput per GPU and cost).

matplotlib is imported only here (`llmload.report.plots`, object API, SVG output), lazily: importing
this package does not import it until a plot is drawn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["compare_runs", "render_report", "rereport", "write_report"]


def __getattr__(name: str) -> Any:
    if name in ("write_report", "render_report"):
        from llmload.report import page

        return getattr(page, name)
    if name == "rereport":
        from llmload.report.rereport import rereport

        return rereport
    if name == "compare_runs":
        from llmload.report.compare import compare_runs

        return compare_runs
    raise AttributeError(f"module 'llmload.report' has no attribute {name!r}")
