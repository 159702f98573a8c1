"""Reports: the self-contained `report.html` of a run, `llmload report` (re-analyse with another SLO)
and `llmload compare` (runs of different deployments side by side, with goodput per GPU and cost).

matplotlib is imported only inside this package (`llmload.report.plots`, object API, SVG output, no
pyplot and no global backend).
"""

from llmload.report.compare import compare_runs
from llmload.report.page import render_report, write_report
from llmload.report.rereport import rereport

__all__ = ["compare_runs", "render_report", "rereport", "write_report"]
