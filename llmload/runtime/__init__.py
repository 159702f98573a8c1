"""Locust glue shared by `locustfiles/` and `shapes/`: the open-loop runtime.

    messages    the typed step / cancel / results / drained / clock messages between master and workers
    jobs        a step spec -> this worker's jobs (open-loop shard, or closed-loop share)
    worker      scheduler greenlet, arrival queue, in-flight tracking, record shipping
    controller  the master's step controller: runs the plan's steps, then the knee search's
    step        the typed step on the master (`Step`, `StepStatus`) and the events it fires (`StepEvents`)
    steps_run   one step on every worker: send, drain, cancel at the deadline, judge live
    tally       routes what the workers ship to its step; worker CPU, the server's queue
    lost        arrivals of workers lost mid-step, recorded `cancelled` (worker lost)
    states      the named states of a run and of its steps, and their transitions
    pool        the user pool's size
    plan_json   plan.json as it goes
    table       the live terminal table and progress line
    console     one output style for log lines; Locust's request tables dropped under `llmload run`
    sending     the client library behind a worker (mix, transport, send)
    preflight   reachability, model, cold load, quality cases, manifest, telemetry start
    judging     live verdicts with analysis.judge_step
    finish      merge records, telemetry, analysis, report, exit code
    lifecycle   one run apart from Locust: start, stop(reason), finalise (`RunLifecycle`)
    session     the Locust glue of one process, kept on the Locust environment (options, init, the
                Locust events and stop signals turned into lifecycle calls, the shape's tick)
    webui       the web UI's LLM tab (charts, status, verdict, report link), header box, start form values
    webform     the start form's rates and SLO options -> the config as run
    live        the LLM tab's per-second series (percentiles, rates, server samples)
    launcher    `llmload run`: the Locust command line
    gate        `llmload run` starts the Locust child during its checks and releases it once they pass
    signals     `llmload run`'s stop signals: forwarded once to the Locust child, nothing outlives it
    recover     finishing a run directory whose master died (`llmload report` calls it)
    demo        `llmload demo`
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
