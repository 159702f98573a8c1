"""Locust glue shared by `locustfiles/` and `shapes/`: the open-loop runtime.

    messages    the step / results / drained / cancel messages between master and workers
    planning    a step spec -> this worker's jobs (open-loop shard, or closed-loop share)
    worker      scheduler greenlet, arrival queue, in-flight tracking, record shipping
    controller  the master's step controller: steps, drain, cancel, live judging, boundary search
    planfile    plan.json as it goes
    table       the live terminal table and progress line
    sending     the client library behind a worker (mix, transport, send)
    preflight   reachability, model, cold load, quality cases, manifest, telemetry start
    judging     live verdicts with analysis.judge_step
    finish      merge records, telemetry, analysis, report, exit code
    session     the Locust glue of one process (options, init, test start/stop, the shape's tick)
    webui       the web UI's LLM tab (charts, status, verdict, report link), header box, start form values
    webform     the start form's rates and SLO options -> the config as run
    live        the LLM tab's per-second series (percentiles, rates, server samples)
    launcher    `llmload run`: the Locust command line
    demo        `llmload demo`
"""

__all__ = ["run_config", "run_demo"]


def __getattr__(name: str):
    """`run_config` / `run_demo` on first use: importing a submodule (a worker's) loads neither."""
    if name == "run_config":
        from llmload.runtime.launcher import run_config

        return run_config
    if name == "run_demo":
        from llmload.runtime.demo import run_demo

        return run_demo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
