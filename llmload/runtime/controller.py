"""The master's step controller: runs the plan step by step, drains, judges live, refines.

It runs as one greenlet on the master (or the local runner), never inside `tick()` (ticks come late,
NOTES.md). For each step it sends every worker one self-contained `llmload:step` message with an
absolute `start_at` a little in the future, sleeps until the arrivals end, then waits for every
worker's `llmload:drained` or the drain deadline, after which it sends `llmload:cancel` (the workers
record their in-flight requests as `cancelled`). It judges the step with `analysis.judge_step` from
the summaries the workers shipped, prints the live table row, and goes on; after a ladder it runs the
boundary search's refine steps. `plan.json` is rewritten as it goes; steps not run stay `not_run`.

A step with `drain=False` (every soak slice but the last) does not pause the load: the next step is
sent so that it starts exactly when this one's arrivals end, and this one's in-flight requests finish
(or are cancelled at its own drain deadline) in a background greenlet that then judges it. When this
process also runs the users (local runner), such a step gets only its quick numbers live, verdict
`unjudged`: pandas here would hold up the next step's arrivals (send lag); the report judges it.

When it is done it finalises the run directory (`llmload.runtime.finish`) and sets `done`, which
makes the shape's `tick()` return None (after a short drain phase so late results are not lost).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from gevent.event import Event

from llmload.clock import now
from llmload.config import Config
from llmload.records import RecordWriter
from llmload.redaction import redact_text
from llmload.runtime.messages import CANCEL, STEP, step_message, unpack_record
from llmload.runtime.planfile import PlanFile
from llmload.runtime.table import format_header, format_progress, format_row, quick_stats, step_row
from shapes.steps import StepSpec, step_bounds

__all__ = ["StepController", "WorkerLink"]

log = logging.getLogger("llmload.controller")

#: lead time between sending a step and its first arrival (messages, clock skew, pool start). Measured
#: (bench/startup.py, bench/README.md): the step message reaches a worker and `on_step` has scheduled
#: its arrivals 1-11 ms after sending (2 processes, 512 users); planning a 36,000-arrival step takes
#: 0.15-0.2 s on a slow 2-core VM. It is wall time before every run's first request.
LEAD_S = 0.25
#: how long to wait for workers after a cancel before judging anyway
CANCEL_GRACE_S = 3.0
PROGRESS_EVERY_S = 5.0
CPU_WARN = 0.8


class WorkerLink:
    """How the controller reaches workers: Locust's runner (master or local) behind three calls."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner

    @property
    def local(self) -> bool:
        return not hasattr(self.runner, "clients")

    def workers(self) -> list[tuple[str | None, str]]:
        """(client id, worker name) of each worker that can take a step now."""
        if self.local:
            return [(None, "0")]
        alive = [c for c in self.runner.clients.all if c.state != "missing"]
        return [(c.id, str(self.runner.get_worker_index(c.id))) for c in alive]

    def missing(self, client_id: str | None) -> bool:
        if self.local or client_id is None:
            return False
        node = self.runner.clients.get(client_id) if hasattr(self.runner.clients, "get") else None
        return node is None or node.state == "missing"

    def send(self, msg_type: str, data: dict, client_id: str | None) -> None:
        self.runner.send_message(msg_type, data, client_id=client_id)


class StepController:
    """Runs the steps of one run on the master. `start()` spawns it; `done` is set when it ends."""

    def __init__(self, config: Config, run_dir: Path, link: WorkerLink, steps: list[StepSpec], *,
                 judge: Callable | None = None, telemetry: Any = None, out: Callable[[str], None] = print,
                 wait_ready: Callable[[], bool] | None = None, base_dir: str = ".") -> None:
        self.config = config
        self.config_dict = config.model_dump(mode="json")
        self.run_dir = Path(run_dir)
        self.link = link
        self.specs = steps
        self.judge = judge
        self.telemetry = telemetry
        self.out = out
        self.wait_ready = wait_ready
        self.base_dir = base_dir
        self.seed = int(config.requests.seed)
        self.rows: dict[str, list[dict]] = defaultdict(list)
        self.drained: dict[str, dict[str, dict]] = defaultdict(dict)
        self.results: list[dict] = []
        self.worker_cpu: dict[str, float] = {}
        #: per step, per worker: arrivals of the measurement window sent so far (the web UI's running rate)
        self.sent: dict[str, dict[str, int]] = defaultdict(dict)
        #: per step: its arrival offsets from its start (open loop), for the planned arrivals so far
        self.offsets: dict[str, Any] = {}
        #: per step, per worker: the highest CPU sample while sending it
        self.step_cpu: dict[str, dict[str, float]] = defaultdict(dict)
        self._cpu_seen: dict[str, float | None] = {}
        self._cpu_sink: Any = None
        self._events: dict[str, Event] = defaultdict(Event)
        self._master_file: RecordWriter | None = None
        self.plan = PlanFile(self.run_dir, kind=config.shape.kind, workers=len(link.workers()),
                             seed=self.seed, started_at=now())
        self.current: dict | None = None
        #: the live table's rows of judged steps (also shown by the web UI's LLM tab)
        self.table_rows: list[dict] = []
        self.done = Event()
        self.stopped = False
        #: when the run was stopped from outside: a partial step's window ends here
        self.stopped_at: float | None = None
        self.greenlet: gevent.Greenlet | None = None
        #: background greenlets draining and judging `drain=False` steps, in step order
        self._tails: list[gevent.Greenlet] = []
        self._unjudged_said = False
        #: (spec, plan row, {lost worker: shard}, shards, start_at) of steps that lost a worker
        self._lost: list[tuple] = []

    # ------------------------------------------------------------------ messages from workers

    def on_results(self, data: dict) -> None:
        """A batch of per-request summaries from one worker."""
        worker = str(data.get("worker"))
        cpu = data.get("cpu")
        if cpu is not None and data.get("cpu_at") != self._cpu_seen.get(worker):
            # the worker's CPU while sending a step's arrivals (`WorkerRuntime.sample_cpu`); a warning
            # about it comes with the step's judgement (`_cpu_warning`), never from one sample
            self._cpu_seen[worker] = data.get("cpu_at")
            self.worker_cpu[worker] = float(cpu)
            label = data.get("cpu_step") or (self.current["label"] if self.current is not None else None)
            self._write_cpu(worker, float(cpu), data.get("cpu_at") or now(), label)
            if label is not None:
                peak = self.step_cpu[label]
                peak[worker] = max(peak.get(worker, 0.0), float(cpu))
        for label, count in (data.get("sent") or {}).items():
            self.sent[label][worker] = int(count)
        rows = [unpack_record(r) for r in data.get("rows", [])]
        if not self.link.local:
            if self._master_file is None:
                self._master_file = _JsonLines(self.run_dir / "records" / "master.jsonl")
            for row in rows:
                self._master_file.write_row(row)
        for row in rows:
            self.rows[row["step"]].append(row)

    def _write_cpu(self, worker: str, cpu: float, t: float, label: str | None) -> None:
        """Worker CPU (0-1 of one core) as telemetry `worker_cpu` from `worker:<id>`."""
        from llmload.telemetry.sink import Point, TelemetrySink

        if self.done.is_set():
            return
        if self._cpu_sink is None:
            self._cpu_sink = TelemetrySink(self.run_dir / "telemetry-workers.jsonl")
        points = [Point(f"worker:{worker}", "worker_cpu", cpu)]
        self._cpu_sink.write(t, label, points)
        if self.recent is not None:
            self.recent.add(t, label, f"worker:{worker}", points)

    def on_drained(self, data: dict) -> None:
        label = data["label"]
        self.drained[label][str(data["worker"])] = data
        self._events[label].set()

    # ------------------------------------------------------------------ the run

    @property
    def recent(self) -> Any:
        """The collector's in-memory samples (`RecentSamples`), or None without a collector."""
        return getattr(self.telemetry, "recent", None)

    def start(self) -> None:
        if self.greenlet is None:
            self.greenlet = gevent.spawn(self.run)

    def run(self) -> None:
        """Every planned step, then refine steps; marks the run done either way."""
        try:
            rows = [self.plan.add(spec.to_dict() | _plan_fields(spec)) for spec in self.specs]
            if self.wait_ready is not None:
                self.wait_ready()
            self.out(format_header())
            next_start: float | None = None
            for spec, row in zip(self.specs, rows, strict=True):
                if self.stopping:
                    break
                if not spec.drain and spec.arrivals_s is not None:
                    next_start = self._run_undrained(spec, row, next_start)
                else:
                    self.run_step(spec, row, start_at=next_start)
                    next_start = None
            gevent.joinall(self._tails)
            if not self.stopping:
                self._refine()
        except gevent.GreenletExit:
            gevent.killall([g for g in self._tails if not g.dead], block=True, timeout=5)
            raise
        except Exception:
            log.exception("step controller failed")
            self.out("llmload: error: the step controller failed (see the log); finishing the run")
        finally:
            try:
                self._record_lost_arrivals()
            except Exception:
                log.exception("could not record the arrivals of lost workers")
            self.plan.finish(now(), **({"stopped": True} if self.stopped else {}))
            if self._master_file is not None:
                self._master_file.close()
            if self._cpu_sink is not None:
                self._cpu_sink.close()
            self.done.set()

    def run_step(self, spec: StepSpec, row: dict, *, start_at: float | None = None) -> tuple[str, list[str], dict]:
        """Run one step on every worker, drain it, judge it; returns (verdict, failing, stats)."""
        workers, start_at, bounds = self._launch(spec, row, start_at)
        gevent.joinall(self._tails)  # earlier undrained steps are judged first: the table stays in order
        return self._settle(spec, row, workers, start_at, bounds)

    def _run_undrained(self, spec: StepSpec, row: dict, start_at: float | None) -> float:
        """Send a `drain=False` step, return when the next step must be sent; returns the time its
        arrivals end (the next step's start). Its drain and judging go on in a background greenlet."""
        workers, start_at, bounds = self._launch(spec, row, start_at)
        arrivals_end = start_at + float(spec.arrivals_s or 0.0)
        last_progress = now()
        while not self.stopped and now() < arrivals_end - LEAD_S:
            gevent.sleep(min(0.5, arrivals_end - LEAD_S - now()))
            if now() - last_progress >= PROGRESS_EVERY_S:
                last_progress = now()
                self._progress(spec, start_at, row)
        previous = self._tails[-1] if self._tails else None

        def settle() -> None:
            if previous is not None:
                previous.join()
            self._settle(spec, row, workers, start_at, bounds, threaded=True)

        self._tails.append(gevent.spawn(settle))
        return arrivals_end

    def _launch(self, spec: StepSpec, row: dict, start_at: float | None) -> tuple[list, float, Any]:
        """Send `spec` to every worker to start at `start_at` (default: `LEAD_S` from now)."""
        workers = self.link.workers()
        start_at = max(start_at, now() + 0.05) if start_at is not None else now() + LEAD_S
        bounds = step_bounds(spec, start_at)
        self.current = row
        if not spec.closed_loop:
            from llmload.arrivals import step_offsets

            self.offsets[spec.label] = step_offsets(spec)
        if self.telemetry is not None:
            self.telemetry.set_step(spec.label)
        self.plan.update(row, start_at=start_at, window_start=bounds.window_start,
                         window_end=bounds.window_end, drain_deadline=bounds.drain_deadline,
                         status="running", workers=len(workers))
        step_dict = spec.to_dict()
        for shard, (client_id, name) in enumerate(workers):
            self.link.send(STEP, step_message(step=step_dict, start_at=start_at, seed=spec.seed, shard=shard,
                                              shards=len(workers), run_dir=str(self.run_dir),
                                              config=self.config_dict, worker=name, base_dir=self.base_dir),
                           client_id)
        return workers, start_at, bounds

    def _settle(self, spec: StepSpec, row: dict, workers: list, start_at: float, bounds: Any, *,
                threaded: bool = False) -> tuple[str, list[str], dict]:
        """Wait for `spec` to drain (cancel at its deadline), record it in the plan, judge it."""
        cancelled = self._wait_drained(spec, row, workers, start_at, progress=not threaded)
        drained_at = now()
        if not threaded and self.telemetry is not None and hasattr(self.telemetry, "sample_now"):
            try:  # the server's counters at the drained end: the step's evidence ends here (served period)
                self.telemetry.sample_now()
            except Exception:
                log.exception("telemetry sample at the end of %s failed", spec.label)
        window_end = bounds.window_end if bounds.window_end is not None else drained_at
        if self.stopping:
            window_end = self._cut_window(row, window_end)
        lost = [name for cid, name in workers if name not in self.drained[spec.label]]
        self.plan.update(row, drained_at=drained_at, window_end=window_end,
                         status="partial" if self.stopping else "run", cancelled=cancelled,
                         lost_workers=lost)
        if lost and not self.stopping and not spec.closed_loop:
            shards = {name: shard for shard, (_, name) in enumerate(workers)}
            lost_shards = {name: shards[name] for name in lost}
            self._lost.append((spec, row, lost_shards, len(workers), start_at))
            # judge live on what the final analysis will see: the lost workers' flushed records and a
            # `cancelled` ("worker lost") record for each of their arrivals that left none
            self.rows[spec.label].extend(self._lost_rows(spec, lost_shards, len(workers), start_at))
        return self._judge(spec, row, lost, threaded=threaded)

    def _lost_rows(self, spec: StepSpec, lost: dict[str, int], shards: int, start_at: float) -> list[dict]:
        """Rows of lost workers that the master was never shipped, as `_record_lost_arrivals` and the
        merge will write them: their record files' rows of this step, then their unrecorded arrivals."""
        from llmload.records import read_record_files
        from llmload.runtime.planning import plan_jobs

        known = {r.get("request_id") for r in self.rows[spec.label]}
        extra: list[dict] = []
        for name in lost:
            path = self.run_dir / "records" / f"worker-{name}.jsonl"
            for r in read_record_files([path]) if path.exists() else []:
                if r.get("step") == spec.label and r.get("request_id") not in known:
                    known.add(r.get("request_id"))
                    extra.append(r)
        for name, shard in lost.items():
            jobs, _ = plan_jobs(spec, start_at=start_at, shard=shard, shards=shards)
            for job in jobs:
                if job.arrival.request_id not in known:
                    record = job.record(name)
                    record.outcome, record.error = "cancelled", "worker lost"
                    extra.append(record.as_dict())
        return extra

    def _wait_drained(self, spec: StepSpec, row: dict, workers: list, start_at: float, *,
                      progress: bool = True) -> bool:
        """Block until every live worker drained `spec`; cancel stragglers at the deadline."""
        arrivals_end = start_at + spec.arrivals_s if spec.arrivals_s is not None else None
        last_progress = now()
        last_count = -1
        event = self._events[spec.label]
        while True:
            pending = [(cid, n) for cid, n in workers
                       if n not in self.drained[spec.label] and not self.link.missing(cid)]
            if not pending:
                return False
            if self.stopped:  # stopped (a signal): what is queued or in flight is cancelled and recorded
                self._cancel(spec, pending, why="the run was stopped")
                return True
            t = now()
            count = len(self.rows[spec.label])
            if count != last_count:
                last_count, last_change = count, t
            deadline = (arrivals_end + spec.drain_timeout_s if arrivals_end is not None
                        else last_change + spec.drain_timeout_s)
            if t >= deadline:
                self._cancel(spec, pending)
                return True
            if progress and t - last_progress >= PROGRESS_EVERY_S:
                last_progress = t
                self._progress(spec, start_at, row)
            event.clear()
            event.wait(timeout=min(0.5, max(0.01, deadline - t)))

    def _cancel(self, spec: StepSpec, pending: list, *, why: str = "") -> None:
        why = why or f"drain timeout ({spec.drain_timeout_s:g}s)"
        self.out(f"  {spec.label}: {why}: cancelling queued and in-flight requests")
        for cid, _ in pending:
            self.link.send(CANCEL, {"label": spec.label}, cid)
        deadline = now() + CANCEL_GRACE_S
        while now() < deadline and any(n not in self.drained[spec.label] for _, n in pending):
            self._events[spec.label].clear()
            self._events[spec.label].wait(timeout=0.2)

    def _progress(self, spec: StepSpec, start_at: float, row: dict) -> None:
        stats = quick_stats(self.rows[spec.label])
        pending = max(0, _planned_so_far(spec, start_at, row) - stats["done"]) if row.get("planned_arrivals") else 0
        self.out(format_progress(spec.label, now() - start_at, spec.arrivals_s, row.get("planned_arrivals"),
                                 stats, pending, self.server_waiting()))

    def step_waiting(self, row: dict) -> float | None:
        """The step's mean server `waiting` so far (its window, else since its start), from the
        collector's samples; the latest value when there are none."""
        recent = self.recent
        t0 = row.get("window_start") or row.get("start_at")
        if recent is not None and t0 is not None:
            t1 = min(now(), row.get("window_end") or now())
            mean = recent.gauge_mean("waiting", t0, t1) if t1 > t0 else None
            if mean is None and t0 != row.get("start_at") and row.get("start_at") is not None:
                mean = recent.gauge_mean("waiting", row["start_at"], t1)
            if mean is not None:
                return mean
        return self.server_waiting()

    def running_rates(self, spec_label: str, row: dict) -> tuple[float | None, float | None]:
        """(offered, achieved) so far of a running step: planned arrivals of its window so far and
        arrivals sent, each over the elapsed window (None before the window starts)."""
        ws, start_at = row.get("window_start"), row.get("start_at")
        if ws is None or start_at is None:
            return None, None
        t = min(now(), row.get("window_end") or now())
        elapsed = t - ws
        if elapsed <= 0:
            return None, None
        offsets = self.offsets.get(spec_label)
        offered = None
        if offsets is not None:
            import numpy as np

            due = np.count_nonzero((offsets >= ws - start_at) & (offsets < t - start_at))
            offered = float(due) / elapsed
        achieved = sum(self.sent.get(spec_label, {}).values()) / elapsed
        return offered, achieved

    def server_waiting(self) -> float | None:
        if self.telemetry is None:
            return None
        latest = self.telemetry.latest()
        values = [v["waiting"] for source, v in latest.items() if source.startswith("server:") and "waiting" in v]
        return float(sum(values)) if values else None

    def _judge(self, spec: StepSpec, row: dict, lost: list[str], *,
               threaded: bool = False) -> tuple[str, list[str], dict]:
        step_rows = self.rows[spec.label]
        verdict, failing, stats = "insufficient", [], quick_stats(step_rows)
        if threaded and self.link.local:  # the next step's arrivals run in this process: stay light
            verdict = "unjudged"
            if not self._unjudged_said:
                self._unjudged_said = True
                self.out("  (slices that run back to back are judged in the report, not live: judging here "
                         "would delay the arrivals)")
        elif self.judge is not None:
            try:
                verdict, failing, stats = self.judge(step_rows, dict(row), self.config)
            except Exception:
                log.exception("live judging of %s failed", spec.label)
                verdict = "unjudged"
        if lost:
            failing = [*failing, f"lost worker(s) {', '.join(lost)}"]
        table_row = step_row(spec.label, stats, verdict, list(failing), self.step_waiting(row))
        self.results.append({"label": spec.label, "target_rate": spec.target_rate, "verdict": verdict,
                             "failing": list(failing), "samples": stats.get("completed", stats.get("ok"))})
        self.plan.update(row, live_verdict=verdict, live_failing=list(failing))
        self.table_rows.append({**stats, **table_row})
        self.out(format_row(table_row))
        for reason in stats.get("invalid_reasons") or []:
            self.out(f"  {spec.label} invalid: {reason['message']}")
        self._cpu_warning(spec.label, failing)
        # judged: its summaries are done with (the records are on disk), so hours of soak slices do not
        # pile up in the master's memory
        self.rows.pop(spec.label, None)
        self.offsets.pop(spec.label, None)
        self.sent.pop(spec.label, None)
        if self.recent is not None and row.get("window_end") is not None:
            self.recent.trim(before=float(row["window_end"]))  # later steps' windows start after it
        return verdict, list(failing), stats

    def _cpu_warning(self, label: str, failing: list[str]) -> None:
        """One line when a worker's CPU while sending this step came near its limit (an invalid step
        says it in its own line)."""
        from analysis.validity import suggested_processes

        peaks = self.step_cpu.pop(label, {})
        if not peaks or "worker_cpu" in failing:
            return
        worker, cpu = max(peaks.items(), key=lambda kv: kv[1])
        limit = self.config.client.max_worker_cpu
        if cpu <= min(CPU_WARN, limit):
            return
        n = suggested_processes(len(peaks), cpu, self.config.client)
        self.out(f"llmload: warning: step {label}: worker {worker} CPU at {cpu:.0%} of a core while sending "
                 f"(the step is invalid over client.max_worker_cpu {limit:.0%}): the generator may fall behind; "
                 f"run with --processes {n}")

    def _record_lost_arrivals(self) -> None:
        """A record `cancelled` ("worker lost") for every planned arrival of a lost worker that left
        none (its in-flight and queued requests died with it), so the step's counts stay whole; the
        number goes into the step's `lost_requests`. The plan is the one the worker ran (seeded)."""
        if not self._lost:
            return
        import json

        from llmload.runtime.planning import plan_jobs

        known: set[str] = set()
        for path in sorted((self.run_dir / "records").glob("*.jsonl")):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    try:
                        known.add(json.loads(line)["request_id"])
                    except (ValueError, KeyError, TypeError):
                        continue
        writer = RecordWriter(self.run_dir / "records" / "lost.jsonl")
        try:
            for spec, row, lost, shards, start_at in self._lost:
                count = 0
                for name, shard in lost.items():
                    jobs, _ = plan_jobs(spec, start_at=start_at, shard=shard, shards=shards)
                    for job in jobs:
                        if job.arrival.request_id in known:
                            continue
                        record = job.record(name)
                        record.outcome, record.error = "cancelled", "worker lost"
                        writer.write(record)
                        count += 1
                self.plan.update(row, lost_requests=count)
                if count:
                    self.out(f"  {spec.label}: {count} request(s) of lost worker(s) {', '.join(lost)} "
                             "recorded as cancelled (worker lost)")
        finally:
            writer.close()

    def _refine(self) -> None:
        """After a ladder with `refine:`, bisect between the last pass and the first fail."""
        shape = self.config.shape
        if shape.kind != "ladder" or shape.ladder.refine is None:
            return
        from shapes.plan import boundary_search, refine_step

        search = boundary_search(self.config, [(r["target_rate"], r["verdict"], r["samples"])
                                               for r in self.results if r["target_rate"] is not None])
        while not self.stopping and (rate := search.next_rate()) is not None:
            spec = refine_step(shape.ladder, rate, index=len(self.plan.steps), seed=self.seed,
                               taken=[s["label"] for s in self.plan.steps])
            row = self.plan.add(spec.to_dict() | _plan_fields(spec))
            verdict, _, stats = self.run_step(spec, row)
            search.record(rate, verdict, stats.get("completed", stats.get("ok")))
        answer = search.answer
        self.plan.data["boundary"] = {"rate": answer.rate, "samples": answer.samples,
                                      "failing_rate": answer.failing_rate, "stopped": answer.stopped}
        self.out(f"  boundary search: highest passing rate {answer.rate} req/s "
                 f"(first failing {answer.failing_rate}, stopped: {answer.stopped})")

    @property
    def stopping(self) -> bool:
        """A stop was asked for (`mark_stopping`) or done (`stop`)."""
        return self.stopped or self.stopped_at is not None

    def mark_stopping(self) -> None:
        """A stop is coming (a signal arrived): note its time now, so that workers dying of the same
        signal before `stop()` runs end the step as `partial` at this time, not as lost workers."""
        if self.stopped_at is None:
            self.stopped_at = now()

    def stop(self) -> None:
        """The run was stopped from outside: the current step is `partial`, the rest stay `not_run`.
        A partial step's measurement window ends at the stop (its planned end is kept as
        `planned_window_end`), so its rates divide by the time it ran, whichever process judges it. A step
        the controller is waiting on has its queued and in-flight requests cancelled (recorded
        `cancelled`), then the run ends as usual (`done`)."""
        self.mark_stopping()
        self.stopped = True
        for row in self.plan.steps:  # the current step, and undrained steps still finishing
            if row.get("status") == "running":
                self.plan.update(row, status="partial", window_end=self._cut_window(row, row.get("window_end")))

    def _cut_window(self, row: dict, window_end: float | None) -> float | None:
        """`window_end` cut at the stop (never before the window's start)."""
        if self.stopped_at is None:
            return window_end
        row.setdefault("planned_window_end", window_end)
        end = self.stopped_at if window_end is None else min(window_end, self.stopped_at)
        start = row.get("window_start")
        return max(end, start) if start is not None else end


class _JsonLines(RecordWriter):
    """A record file fed with already-unpacked dicts (the master's copy of shipped records)."""

    def write_row(self, row: dict) -> None:
        import json

        if self._file.closed:  # a late batch after the run ended: the worker's own file has it
            return
        self._file.write(redact_text(json.dumps(row, separators=(",", ":"))) + "\n")
        self._file.flush()
        self.count += 1


def _plan_fields(spec: StepSpec) -> dict:
    """plan.json's per-step fields that come from the spec alone."""
    planned = None
    if not spec.closed_loop:
        from llmload.arrivals import step_offsets

        planned = len(step_offsets(spec))
    elif spec.requests is not None:
        planned = spec.requests
    fields = {"planned_arrivals": planned}
    if spec.trace is not None:
        fields["trace"] = None  # the arrivals travel in the step message, not in plan.json
        fields["trace_requests"] = len(spec.trace)
    return fields


def _planned_so_far(spec: StepSpec, start_at: float, row: dict) -> int:
    total = row.get("planned_arrivals") or 0
    if not spec.arrivals_s:
        return total
    return int(total * min(1.0, max(0.0, (now() - start_at) / spec.arrivals_s)))

