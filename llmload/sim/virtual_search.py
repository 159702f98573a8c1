"""A whole knee search in virtual time: the tool's own steps, search and judging against the sim's engine.

`virtual_search(config, sim_settings, request_sizes)` runs what `llmload run` does for a ladder with
`refine:` (issue 27), with the engine of `llmload sim` (`llmload.sim.engine`) in virtual time and no
sockets, in well under a second per search:

- the steps are the tool's: `shapes.plan.ladder_steps` and `refine_step` (labels, seeds, warm-up,
  window), their arrivals `llmload.arrivals.step_offsets` (the schedule every worker plans), the ladder
  stopped after `stop_after_failures` failing steps as the controller does;
- the timing is the controller's (`llmload.runtime.master.controller`): a drained step starts on an idle
  server `gap_s` (lead time, judging) after its predecessor's last request finished; a refine step of
  a chained search (`chain=True`, the controller's default) starts the moment its predecessor's
  arrivals end, the predecessor still settling, and the next rate is decided then from the steps
  judged so far (the one still settling is not: a one-step lag); only the last refine step drains;
- every step is judged as the live judge does (`analysis.verdict.judge` on the figures
  `analysis.metrics` computes: each threshold's percentile, its interval `analysis.intervals
  .percentile_interval` and the exceedance share `exceedance_interval`, from the window's requests in
  arrival order); the search is `shapes.knee_search.KneeSearch` with a virtual clock, and the answer
  `analysis.knee.estimate_knee` over every judged step, as the run's summary.json has it.

The engine serves all arrivals so far from the run's start (`run_virtual`, whose rules the live sim
follows within 20 ms on TTFT p95, `llmload.sim.truth`), so a chained step meets the queue its
predecessor left. `knee_accuracy(...)` scores many seeds against `llmload.sim.truth.true_knee`: how
often the interval holds the true knee, the point's median and worst relative error, and the
virtual wall time per search (bench/knee_accuracy.py `--virtual`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from llmload.sim.settings import SimSettings
from llmload.sim.truth import RequestSizes, _sizes, engine_limits, run_virtual

if TYPE_CHECKING:
    from shapes.auto import AutoAnswer

__all__ = ["VirtualSearch", "knee_accuracy", "step_table", "virtual_search"]

#: seconds between a drained step's last request and the next step's first arrival (lead, judging)
GAP_S = 1.0
_FIGURES = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


@dataclass
class VirtualSearch:
    """One search's result: the final knee (`analysis.knee.Knee` or None), why the search stopped,
    every judged step row (in run order), the virtual seconds of the whole run and of the search."""

    knee: Any
    stopped: str
    rows: list[dict]
    run_s: float
    search_s: float
    steps: list[Any] = field(default_factory=list)
    #: the `auto` search's own answer (range, probe and placement steps); None for a knee search
    answer: AutoAnswer | None = None

    @property
    def refine_steps(self) -> int:
        return sum(1 for r in self.rows if r.get("phase") == "refine")


class _Server:
    """The engine fed every arrival so far (time order), re-run from the start whenever asked."""

    def __init__(self, limits: Any, request_sizes: RequestSizes, seed: int) -> None:
        self.limits = limits
        self.sizes = request_sizes
        self.rng = np.random.default_rng([int(seed), 7919])
        self.arrivals: list[np.ndarray] = []
        self.inputs: list[np.ndarray] = []
        self.outputs: list[np.ndarray] = []
        self.owner: list[np.ndarray] = []
        self._frame: Any = None

    def add(self, times_s: np.ndarray, step: int) -> None:
        inputs, outputs = _sizes(self.sizes, self.rng, len(times_s))
        self.arrivals.append(np.asarray(times_s, dtype=float))
        self.inputs.append(inputs)
        self.outputs.append(outputs)
        self.owner.append(np.full(len(times_s), step))
        self._frame = None

    def frame(self) -> Any:
        """Every request so far: arrival, latencies, step index (arrival order)."""
        if self._frame is None:
            arrivals = np.concatenate(self.arrivals)
            order = np.argsort(arrivals, kind="stable")
            frame = run_virtual(self.limits, arrivals[order], np.concatenate(self.inputs)[order],
                                np.concatenate(self.outputs)[order])
            frame["step"] = np.concatenate(self.owner)[order]
            frame["end_s"] = frame["arrival_s"] + frame["e2e_s"]
            self._frame = frame
        return self._frame

    def history(self, specs: Sequence[Any], rows: Sequence[Mapping], origin: float = 0.0) -> Any:
        """The requests so far as `analysis.share_cv` reads them (`History`), on the rows' clock (this
        engine's time plus `origin`): judged where its step's row windows it and it completed."""
        from analysis.share_cv import History

        frame = self.frame()
        labels = {int(s.index): str(s.label) for s in specs}
        step = np.array([labels.get(int(i), "") for i in frame["step"].to_numpy()], dtype=object)
        arrival = frame["arrival_s"].to_numpy(dtype=float) + origin
        ttft = frame["ttft_s"].to_numpy(dtype=float)
        judged = np.zeros(len(frame), dtype=bool)
        for row in rows:
            ws, we = float(row["window_start"]), float(row["window_end"])
            judged |= (step == str(row.get("label"))) & (arrival >= ws) & (arrival < we)
        judged &= np.isfinite(ttft) & np.isfinite(frame["e2e_s"].to_numpy(dtype=float))
        return History(step, arrival, arrival, ttft, judged)

    def last_end(self) -> float:
        frame = self.frame()
        return float(np.nanmax(frame["end_s"].to_numpy())) if len(frame) else 0.0


def knee_estimate(slo: Any, server: Callable[[], _Server | None], specs: Sequence[Any],
                  origin: Callable[[], float] = lambda: 0.0) -> Callable[[list[dict]], Any]:
    """The knee over judged rows as the run's analysis places it: `analysis.knee.estimate_knee` with each
    Poisson step's TTFT share read against its arrivals (`analysis.share_cv`), from the engine's requests
    so far (`server()`, None before any open-loop step; its time plus `origin()` is the rows' clock)."""
    def estimate(rows: list[dict]) -> Any:
        from analysis.knee import estimate_knee
        from analysis.share_cv import POISSON, adjust_rows

        engine = server()
        if engine is not None and engine.arrivals:
            poisson = {str(s.label) for s in specs if s.arrival in POISSON}
            rows, _ = adjust_rows(rows, engine.history(specs, rows, origin()), slo, poisson)
        return estimate_knee(rows, slo)

    return estimate


def judge_row(frame: Any, spec: Any, start_s: float, slo: Any) -> dict:
    """The judged row of step `spec` started at `start_s`: its window's requests (by arrival) judged as
    the live judge judges them (module docstring)."""
    from analysis.intervals import exceedance_interval, percentile_interval
    from analysis.metrics import empty_metrics
    from analysis.stats import quantiles
    from analysis.verdict import judge
    from llmload import slo as slo_dims

    window_start = start_s + spec.warmup_s
    window_end = window_start + float(spec.duration_s)
    step = {"label": spec.label, "index": spec.index, "phase": spec.phase, "status": "run",
            "target_rate": spec.target_rate, "warmup_s": spec.warmup_s, "window_start": window_start,
            "window_end": window_end}
    mine = frame[(frame["step"] == spec.index) & (frame["arrival_s"] >= window_start)
                 & (frame["arrival_s"] < window_end)]
    done = mine[np.isfinite(mine["e2e_s"].to_numpy())]
    row = empty_metrics(step)
    n = len(mine)
    window_s = window_end - window_start
    row.update(arrivals=n, sent=n, completed=len(done), ok=len(done), outcomes={"ok": len(done)},
               offered_rate=n / window_s, achieved_rate=n / window_s, reject_ratio=0.0, error_ratio=0.0, oom=0,
               send_lag_p99_s=0.0, capped_share=0.0)
    for t in slo.thresholds:
        column = _FIGURES.get(t.metric)
        if column is None:
            continue
        values = done[column].to_numpy(dtype=float)
        values = values[~np.isnan(values)]
        figure = slo_dims.latency(t.metric).figure_of(t.percentile)
        row[figure] = quantiles(values, (t.percentile,))[t.percentile]
        row[f"{figure}_low"], row[f"{figure}_high"] = percentile_interval(
            values, t.percentile, slo.confidence, blocks=slo.sub_windows, alpha=slo.trend_alpha)
        row[f"{t.key}_over"], row[f"{t.key}_over_low"], row[f"{t.key}_over_high"] = exceedance_interval(
            values, t.value_s, slo.confidence, blocks=slo.sub_windows, alpha=slo.trend_alpha)
    verdict, failing, _details = judge(row, step, slo)
    row.update(verdict=verdict, failing=failing, start_at=start_s)
    return row


def virtual_search(config: Any, sim_settings: SimSettings | Mapping[str, Any] | None,
                   request_sizes: RequestSizes, *, chain: bool | None = None, flavor: str = "vllm",
                   gap_s: float = GAP_S, estimate: Callable[[list[dict]], Any] | None = None) -> VirtualSearch:
    """The search `config` (a ladder with `refine:`; `llmload.config.Config`) runs against a sim with
    `sim_settings`, in virtual time (module docstring). `chain`: refine steps follow on without
    draining (default True: as the controller runs them); `estimate`: the knee
    over judged rows (default `knee_estimate`: the run's analysis' knee)."""
    from llmload.arrivals import step_offsets
    from shapes.plan import knee_search, ladder_steps, refine_step

    ladder = config.shape.ladder
    chain = True if chain is None else chain
    slo = config.slo
    server = _Server(engine_limits(sim_settings, flavor), request_sizes, int(config.requests.seed))
    specs: list[Any] = []
    estimate = estimate or knee_estimate(slo, lambda: server, specs)
    rows: list[dict] = []
    now = 0.0

    def launch(spec: Any, start_s: float) -> float:
        specs.append(spec)
        server.add(start_s + step_offsets(spec), spec.index)
        return start_s + float(spec.arrivals_s)

    failures = 0
    limit = ladder.stop_after_failures
    for spec in ladder_steps(config):
        if limit is not None and failures >= limit:
            break
        launch(spec, now)
        row = judge_row(server.frame(), spec, now, slo)
        rows.append(row)
        failures += row["verdict"] == "fail"
        now = server.last_end() + gap_s
    clock = [now]
    search = knee_search(config, rows, estimate=estimate, clock=lambda: clock[0])
    if search is None:
        return VirtualSearch(estimate(rows), "none", rows, now, 0.0, specs)
    search_started = now
    taken = [s.label for s in specs]

    def refine(ask: Any) -> Any:
        spec = refine_step(ladder, ask.rate, index=len(specs), seed=int(config.requests.seed), taken=taken)
        if ask.window_s is not None:  # the search sized it (no refine.duration)
            spec = replace(spec, duration_s=float(ask.window_s))
        taken.append(spec.label)
        return replace(spec, drain=not chain)

    pending: list[tuple[Any, float]] = []  # launched refine steps not yet judged: (spec, start)
    start = now
    while True:
        while (ask := search.next_step()) is not None:
            spec = refine(ask)
            if chain and pending:
                start = pending[-1][1] + float(pending[-1][0].arrivals_s)
            end = launch(spec, start)
            pending.append((spec, start))
            if chain:
                clock[0] = end  # the next rate is decided as this step's arrivals end, from the steps judged
                while len(pending) > 1:  # the one before this step has settled (its queue drained meanwhile)
                    done, at = pending.pop(0)
                    search.record(judge_row(server.frame(), done, at, slo))
            else:
                clock[0] = server.last_end() + gap_s
                done, at = pending.pop(0)
                search.record(judge_row(server.frame(), done, at, slo), wall_s=clock[0] - at,
                              nominal_s=float(done.arrivals_s))
                start = clock[0]
        for done, at in pending:  # the last chained step drains
            clock[0] = server.last_end() + gap_s
            search.record(judge_row(server.frame(), done, at, slo), wall_s=clock[0] - at,
                          nominal_s=float(done.arrivals_s))
        pending = []
        if not search.reopen():  # a precision stop the last step undid: on from the drained server
            break
        start = clock[0]
    now = max(clock[0], server.last_end() + gap_s)
    rows = search.rows
    return VirtualSearch(estimate(rows), search.stopped or "running", rows, now, now - search_started, specs)


def step_table(rows: Sequence[Mapping], keys: Sequence[str]) -> list[dict]:
    """A run's judged steps, one compact dict each (what a bench keeps to show why a search landed where
    it did): label, phase, target and realised rate, completions, window, verdict, and for each target
    key in `keys` its exceedance share with its interval (`<key>_over`, `_low`, `_high`)."""

    def num(value: Any, digits: int = 4) -> float | None:
        try:
            v = float(value)
        except (TypeError, ValueError):
            return None
        return round(v, digits) if math.isfinite(v) else None

    table = []
    for row in rows:
        entry = {"label": row.get("label"), "phase": row.get("phase"), "verdict": row.get("verdict"),
                 "target_rate": num(row.get("target_rate")), "offered_rate": num(row.get("offered_rate")),
                 "concurrency": row.get("concurrency"), "completed": row.get("completed"),
                 "window_start": num(row.get("window_start"), 1), "window_end": num(row.get("window_end"), 1)}
        for key in keys:
            for tail in ("_over", "_over_low", "_over_high"):
                entry[key + tail] = num(row.get(key + tail))
        table.append(entry)
    return table


def knee_accuracy(config_of: Callable[[int], Any], sim_settings: Any, request_sizes: RequestSizes, true_rate: float,
                  seeds: Sequence[int], **options: Any) -> dict:
    """`virtual_search` for each seed (`config_of(seed)` the run config) scored against `true_rate`:
    `covered` (the interval holds it; an open end holds), `median_error` / `worst_error` (relative, of
    the point), `bias` (median signed relative error), run and search virtual seconds, the runs."""
    runs = []
    for seed in seeds:
        found = virtual_search(config_of(seed), sim_settings, request_sizes, **options)
        knee = found.knee
        rate = None if knee is None else knee.rate
        low = None if knee is None else knee.low
        high = None if knee is None else knee.high
        runs.append({"seed": seed, "rate": rate, "low": low, "high": high, "stopped": found.stopped,
                     "refine_steps": found.refine_steps, "run_s": found.run_s, "search_s": found.search_s,
                     "binding": None if knee is None else knee.binding,
                     "steps": step_table(found.rows, [t.key for t in config_of(seed).slo.thresholds])})
    return score(runs, true_rate)


def score(runs: list[dict], true_rate: float) -> dict:
    """Coverage, point errors and times of `runs` (dicts with rate, low, high, run_s) against the truth."""
    found = [r for r in runs if r["rate"] is not None]
    signed = [(r["rate"] - true_rate) / true_rate for r in found]
    errors = [abs(e) for e in signed]
    covered = [r for r in found if (r["low"] is None or r["low"] <= true_rate)
               and (r["high"] is None or true_rate <= r["high"])]
    widths = [(r["high"] - r["low"]) / 2 / r["rate"] for r in found if r["low"] is not None and r["high"] is not None]
    return {"searches": len(runs), "covered": len(covered),
            "median_error": statistics.median(errors) if errors else math.nan,
            "worst_error": max(errors, default=math.nan), "bias": statistics.median(signed) if signed else math.nan,
            "median_half_width": statistics.median(widths) if widths else math.nan,
            "worst_run_s": max((r.get("run_s", math.nan) for r in runs), default=math.nan),
            "median_run_s": statistics.median(r.get("run_s", math.nan) for r in runs) if runs else math.nan,
            "runs": runs}
