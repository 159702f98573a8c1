"""The load runtime, in rooms whose names say who runs them (docs/ARCHITECTURE.md "The rooms"):

    launcher/    the parent process of `llmload run` / `llmload demo`: checks, the Locust child, stop signals
                 (no gevent, no Locust)
    master/      the master (or local runner): the step controller, one step on every worker, what the
                 workers shipped, lost workers, states, pre-flight, live verdicts, the live table and series
    worker/      each worker: the scheduler, this worker's jobs, sending (time from the `llmload.clocks.Clock` it is handed)
    wire/        what the master and the workers say to each other: messages, the clock exchange
    locustglue/  the one room that imports Locust: the session on the environment, every Locust seam
                 (seams.py), the web UI, live Prometheus metrics, the worker token, the console
    virtual/     `llmload run CONFIG --virtual`: the whole run in one process on a virtual clock, the sim's
                 engine answering, an in-process link between the master's controller and the workers
    (llmload/rundir/: the run directory: its layout, plan.json, finalisation, recovery)
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmload.runtime.launcher.demo import run_demo
    from llmload.runtime.launcher.run import run_config

__all__ = ["run_config", "run_demo"]


def __getattr__(name: str) -> object:
    # imported on first use: `llmload run bad.yaml` reports a config error before Locust and pandas load
    if name in __all__:
        import importlib

        module = "llmload.runtime.launcher.demo" if name == "run_demo" else "llmload.runtime.launcher.run"
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module 'llmload.runtime' has no attribute {name!r}")
