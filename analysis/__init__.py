"""Analysis of a run directory: pure pandas, no Locust (usable from a notebook).

    run = analysis.load_run("runs/2026-11-29-1050")
    result = analysis.analyze(run, slo)            # Analysis: steps, summary, worksheet, split, ...
    analysis.write_outputs(result, run.path)       # summary.json, worksheet.csv
    analysis.exit_code(result.summary)             # 0 pass, 1 fail, 3 invalid, insufficient, inconclusive
    analysis.knee_sentence(analysis.knee_of(result.summary))   # "knee 4.6 req/s (4.4 to 4.8, 90%): ..."

`judge_step(step_records, step, slo, client, telemetry)` applies the same rules to one step, live.
Definitions: METRICS.md; which requests each number uses: `analysis.metrics`.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analysis.knee import Knee, estimate_knee, knee_of, knee_sentence
    from analysis.outputs import write_outputs
    from analysis.pipeline import Analysis, analyze
    from analysis.planning import plan_in_flight
    from analysis.run import Run, load_run
    from analysis.summary import exit_code
    from analysis.verdict import judge_step

__all__ = [
    "Analysis",
    "Knee",
    "Run",
    "analyze",
    "estimate_knee",
    "exit_code",
    "judge_step",
    "knee_of",
    "knee_sentence",
    "load_run",
    "plan_in_flight",
    "write_outputs",
]

#: where each public name lives: imported on first use, so `import analysis` (the Locust child pins the
#: installed package at start, `llmload.runtime.launcher.run.BOOT`) loads no pandas in a process that only sends
_HOMES = {"Analysis": "pipeline", "analyze": "pipeline", "Run": "run", "load_run": "run",
          "exit_code": "summary", "judge_step": "verdict", "plan_in_flight": "planning",
          "write_outputs": "outputs", "Knee": "knee", "estimate_knee": "knee", "knee_of": "knee",
          "knee_sentence": "knee"}


def __getattr__(name: str) -> object:
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"analysis.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
