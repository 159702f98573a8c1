"""A whole `shape: auto` run in virtual time against the sim's engine: probe, placement, knee search.

`virtual_auto(config, sim_settings, request_sizes)` runs what `llmload run` (or `llmload find`) does for
`shape: {auto: ...}` with the engine of `llmload sim` in virtual time and no sockets, as
`llmload.sim.virtual_search` does for a ladder with `refine:`:

- the steps and the search are the tool's: `shapes.auto.auto_steps` (the planned probe level) and
  `shapes.auto.AutoSearch` (its probe levels, placement steps and the knee search, with the run's budget
  on a virtual clock started at the run's start);
- a probe level is a closed loop on an idle engine: its users each send their next request the moment
  the last one's final token is written, until the level's requests are sent (`run_closed`); its row
  has the level's completion throughput (completed / the span from the first send to the last end) and
  median TTFT and E2E, as the live judge computes them;
- placement steps are drained (started on an idle server `gap_s` after the last request before them
  ended); refine steps are chained and judged with the controller's one-step lag, as
  `virtual_search` runs them; open-loop steps are judged by `virtual_search.judge_row`.

`auto_accuracy(...)` scores many seeds against `llmload.sim.truth.true_knee` (`virtual_search.score`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from llmload.sim.engine import Engine, EngineLimits
from llmload.sim.engine import Sequence as EngineSequence
from llmload.sim.settings import SimSettings
from llmload.sim.truth import RequestSizes, _sizes, engine_limits
from llmload.sim.virtual_search import (
    GAP_S,
    VirtualSearch,
    _Server,
    judge_row,
    knee_estimate,
    score,
    step_table,
)

__all__ = ["auto_accuracy", "run_closed", "virtual_auto"]


def run_closed(limits: EngineLimits, request_sizes: RequestSizes, rng: np.random.Generator, *,
               concurrency: int, requests: int) -> dict:
    """A closed loop of `concurrency` users on an idle engine from t = 0 until `requests` were sent and
    answered: per request `sent_s`, `ttft_s`, `e2e_s` (send order) and the span of the whole level."""
    inputs, outputs = _sizes(request_sizes, rng, requests)
    engine = Engine(limits)
    sent = np.full(requests, math.nan)
    first = np.full(requests, math.nan)
    last = np.full(requests, math.nan)
    issued = 0
    t = 0.0

    def send(at: float) -> None:
        nonlocal issued
        engine.add(EngineSequence(seq_id=issued, prompt_tokens=int(inputs[issued]),
                                  output_tokens=max(1, int(outputs[issued]))))
        sent[issued] = at
        issued += 1

    for _ in range(min(concurrency, requests)):
        send(0.0)
    while not engine.idle:
        result = engine.step(t)
        if not result.batch:
            break
        t += result.cost_s
        for seq in result.emitted:
            if seq.generated == 1:
                first[seq.seq_id] = t
            last[seq.seq_id] = t
        for _ in result.finished:
            if issued < requests:
                send(t)
    return {"sent_s": sent, "ttft_s": first - sent, "e2e_s": last - sent, "span_s": t}


def probe_row(spec: Any, level: dict, start_s: float) -> dict:
    """The judged row of probe level `spec` run from `start_s` (`run_closed`'s result)."""
    e2e = level["e2e_s"][np.isfinite(level["e2e_s"])]
    ttft = level["ttft_s"][np.isfinite(level["ttft_s"])]
    span = level["span_s"]
    return {"label": spec.label, "index": spec.index, "phase": spec.phase, "status": "run",
            "concurrency": spec.concurrency, "target_rate": None, "window_start": start_s,
            "window_end": start_s + span, "completed": len(e2e), "ok": len(e2e),
            "completion_throughput": len(e2e) / span if span > 0 else math.nan,
            "e2e_p50_s": float(np.median(e2e)) if len(e2e) else math.nan,
            "e2e_mean_s": float(np.mean(e2e)) if len(e2e) else math.nan,
            "ttft_p50_s": float(np.median(ttft)) if len(ttft) else math.nan,
            "offered_rate": math.nan, "verdict": "pass", "failing": []}


def virtual_auto(config: Any, sim_settings: SimSettings | Mapping[str, Any] | None, request_sizes: RequestSizes,
                 *, flavor: str = "vllm", gap_s: float = GAP_S,
                 estimate: Callable[[list[dict]], Any] | None = None) -> VirtualSearch:
    """The run `config` (`shape: auto`) makes against a sim with `sim_settings`, in virtual time (module
    docstring); `estimate`: the knee over judged rows (default `virtual_search.knee_estimate`: the run's
    analysis' knee)."""
    from llmload.arrivals import step_offsets
    from shapes.auto import AutoSearch, auto_steps

    slo = config.slo
    seed = int(config.requests.seed)
    limits = engine_limits(sim_settings, flavor)
    rng = np.random.default_rng([seed, 104729])
    clock = [0.0]
    specs: list[Any] = []
    rows: list[dict] = []

    def probe(spec: Any) -> dict:
        level = run_closed(limits, request_sizes, rng, concurrency=int(spec.concurrency), requests=int(spec.requests))
        specs.append(spec)
        row = probe_row(spec, level, clock[0])
        clock[0] += level["span_s"] + gap_s
        return row

    for spec in auto_steps(config):
        rows.append(probe(spec))
    server: _Server | None = None  # the open-loop steps' engine (idle after the probe); time from `origin`
    origin = 0.0
    estimate = estimate or knee_estimate(slo, lambda: server, specs, lambda: origin)
    search = AutoSearch(config, rows, estimate=estimate, clock=lambda: clock[0])

    def launch(spec: Any, start_s: float) -> float:
        nonlocal server, origin
        if server is None:
            server, origin = _Server(limits, request_sizes, seed), start_s
        specs.append(spec)
        server.add(start_s - origin + step_offsets(spec), spec.index)
        return start_s + float(spec.arrivals_s)

    def running() -> _Server:
        """The open-loop steps' engine: launched by the first of them, before any is judged."""
        if server is None:
            raise RuntimeError("an open-loop step was judged before one was launched")
        return server

    def judged(spec: Any, start_s: float) -> dict:
        row = judge_row(running().frame(), spec, start_s - origin, slo)
        return {**row, "window_start": row["window_start"] + origin, "window_end": row["window_end"] + origin}

    def settled_at() -> float:
        return origin + running().last_end() + gap_s

    pending: list[tuple[Any, float]] = []  # chained refine steps launched, not yet judged: (spec, start)
    taken: list[str] = [s.label for s in specs]
    while True:
        while (ask := search.next_step()) is not None:
            spec = search.step_spec(ask.rate, index=len(specs), seed=seed, taken=taken)
            taken.append(spec.label)
            if spec.phase == "probe":
                search.record(probe(spec))
                continue
            if spec.drain:  # a placement step: on an idle server, after every step before it ended
                start = clock[0] if server is None else max(clock[0], settled_at())
                launch(spec, start)
                search.record(judged(spec, start))
                clock[0] = settled_at()
                continue
            start = pending[-1][1] + float(pending[-1][0].arrivals_s) if pending else clock[0]
            end = launch(replace(spec, drain=False), start)
            pending.append((spec, start))
            clock[0] = end  # the next rate is decided as this step's arrivals end (a one-step lag)
            while len(pending) > 1:
                done, at = pending.pop(0)
                search.record(judged(done, at))
        for done, at in pending:  # the last chained step drains
            clock[0] = settled_at()
            search.record(judged(done, at))
        pending = []
        if not search.reopen():  # a precision stop the last step undid: on from the drained server
            break
    run_s = max(clock[0], settled_at() if server is not None else clock[0])
    rated = [r for r in search.rows if r.get("phase") in ("ladder", "refine")]
    return VirtualSearch(estimate(search.rows) if rated else None, search.stopped or "running", search.rows, run_s,
                         run_s, specs, answer=search.answer)


def auto_accuracy(config_of: Callable[[int], Any], sim_settings: Any, request_sizes: RequestSizes,
                  true_rate: float, seeds: Sequence[int], **options: Any) -> dict:
    """`virtual_auto` for each seed (`config_of(seed)` the run config) scored against `true_rate`
    (`virtual_search.score`: coverage, median / worst error, run seconds), with each run's steps."""
    runs = []
    for seed in seeds:
        config = config_of(seed)
        found = virtual_auto(config, sim_settings, request_sizes, **options)
        knee = found.knee
        if found.answer is None:  # virtual_auto always gives its search's own answer
            raise RuntimeError("virtual_auto gave no auto answer")
        answer = found.answer.to_dict()
        runs.append({"seed": seed, "rate": None if knee is None else knee.rate,
                     "low": None if knee is None else knee.low, "high": None if knee is None else knee.high,
                     "binding": None if knee is None else knee.binding, "stopped": found.stopped,
                     "refine_steps": found.refine_steps, "run_s": found.run_s, "search_s": found.search_s,
                     "range": answer["auto"]["range"], "probe_steps": answer["auto"]["probe_steps"],
                     "placement_steps": answer["auto"]["placement_steps"],
                     "steps": step_table(found.rows, [t.key for t in config.slo.thresholds])})
    return score(runs, true_rate)
