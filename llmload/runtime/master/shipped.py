"""The master's tally of a run's steps: routes what the workers ship to the step it belongs to.

Each step's shipped summaries, drained notices, arrivals sent and its workers' highest CPU while
sending it live on its `Step` (`llmload.runtime.master.step`); the tally finds the step by label. Across the
run it keeps each worker's latest CPU sample (`worker_cpu`, the live metrics), the server's queue from
the telemetry (`server_waiting`, `step_waiting`), and on a master a copy of the shipped records in
`records/master.jsonl`; worker CPU samples go to `telemetry-workers.jsonl`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.clocks import REAL_CLOCK
from llmload.config import Config
from llmload.records import RecordWriter, row_json
from llmload.redaction import redact_text
from llmload.runtime.master.step import Step
from llmload.runtime.master.step_records import SPILL_DIR, StepRecords, remove_spill
from llmload.runtime.wire.messages import DrainedMessage, ResultsMessage, unpack_record

__all__ = ["CPU_WARN", "StepTally"]

log = logging.getLogger("llmload.controller")

#: a worker's CPU (fraction of one core) while sending above which a step's judgement warns
CPU_WARN = 0.8


class StepTally:
    """Routes shipped summaries, drained notices, sent counts and CPU to their `Step`."""

    def __init__(self, run_dir: Path, *, local: bool, telemetry: Any = None,
                 out: Callable[[str], None] = print, clock: Callable[[], float] = REAL_CLOCK.now,
                 slo: Any = None) -> None:
        self.run_dir = Path(run_dir)
        #: the run's SLO: which shipped requests count to a step's live goodput (`StepRecords.good`)
        self.slo = slo
        #: the master's time source (the controller's `clock`)
        self._clock = clock
        self.local = local
        self.telemetry = telemetry
        self.out = out
        #: the run's steps by label
        self.steps: dict[str, Step] = {}
        #: the step sent last (a CPU sample that names no step is counted to it)
        self.current: Step | None = None
        #: per worker name, its latest CPU sample (fraction of one core)
        self.worker_cpu: dict[str, float] = {}
        self._cpu_seen: dict[str, float | None] = {}
        self._cpu_sink: Any = None
        self._master_file: _JsonLines | None = None
        self._closed = False
        #: records the workers shipped over the run (finished requests: what must be on disk at the end)
        self.finished = 0

    def add(self, step: Step) -> None:
        """A step of the run: its shipped summaries go to a spill file of its own (`StepRecords`)."""
        if step.label not in self.steps and not step.rows:
            step.rows = StepRecords(self.run_dir / SPILL_DIR / f"step-{len(self.steps):04d}.jsonl")
        self.steps[step.label] = step

    @property
    def recent(self) -> Any:
        """The collector's in-memory samples (`RecentSamples`), or None without a collector."""
        return getattr(self.telemetry, "recent", None)

    # ------------------------------------------------------------------ messages from workers

    def on_results(self, results: ResultsMessage) -> None:
        """A batch of per-request summaries from one worker."""
        worker, cpu = results.worker, results.cpu
        if cpu is not None and results.cpu_at != self._cpu_seen.get(worker):
            # the worker's CPU while sending a step's arrivals (`WorkerRuntime.sample_cpu`); a warning
            # about it comes with the step's judgement (`cpu_warning`), never from one sample
            self._cpu_seen[worker] = results.cpu_at
            self.worker_cpu[worker] = float(cpu)
            label = results.cpu_step or (self.current.label if self.current is not None else None)
            self._write_cpu(worker, float(cpu), results.cpu_at or self._clock(), label)
            step = self.steps.get(label) if label is not None else None
            if step is not None:
                step.cpu[worker] = max(step.cpu.get(worker, 0.0), float(cpu))
        for label, count in results.sent.items():
            if label in self.steps:
                self.steps[label].sent[worker] = int(count)
        rows = [unpack_record(r) for r in results.rows]
        self.finished += len(rows)
        if not rows:
            return
        lines = [row_json(row) for row in rows]  # once: the master's copy and the steps' spill files
        text = redact_text("\n".join(lines))
        if not self.local:
            if self._master_file is None:
                self._master_file = _JsonLines(self.run_dir / "records" / "master.jsonl")
            self._master_file.write_text(text)
        label = rows[0]["step"]
        if all(row["step"] == label for row in rows):  # a batch is one step's, but for a step's last
            self._to_step(label, rows, text)
            return
        by_step: dict[str, list[int]] = {}
        for i, row in enumerate(rows):
            by_step.setdefault(row["step"], []).append(i)
        for label, positions in by_step.items():
            self._to_step(label, [rows[i] for i in positions], redact_text("\n".join(lines[i] for i in positions)))

    def _to_step(self, label: str, rows: list[dict], text: str) -> None:
        step = self.steps.get(label)
        if step is None:
            log.debug("%d summaries of an unknown step %r were dropped", len(rows), label)
            return
        if not self._closed:
            step.rows.add(rows, text, bounds=step.bounds, slo=self.slo)

    def _write_cpu(self, worker: str, cpu: float, t: float, label: str | None) -> None:
        """Worker CPU (0-1 of one core) as telemetry `worker_cpu` from `worker:<id>`."""
        from llmload.telemetry.sink import Point, TelemetrySink

        if self._closed:
            return
        if self._cpu_sink is None:
            self._cpu_sink = TelemetrySink(self.run_dir / "telemetry-workers.jsonl")
        points = [Point(f"worker:{worker}", "worker_cpu", cpu)]
        self._cpu_sink.write(t, label, points)
        if self.recent is not None:
            self.recent.add(t, label, f"worker:{worker}", points)

    def on_drained(self, drained: DrainedMessage) -> None:
        step = self.steps.get(drained.label)
        if step is None:
            if drained.label:  # a notice naming no step is the controller's (`StepController.on_drained`)
                log.warning("a drained notice of an unknown step %r was dropped", drained.label)
            return
        step.drained[drained.worker] = drained
        step.drain_event.set()

    # ------------------------------------------------------------------ live figures

    def server_waiting(self) -> float | None:
        if self.telemetry is None:
            return None
        latest = self.telemetry.latest()
        values = [v["waiting"] for source, v in latest.items() if source.startswith("server:") and "waiting" in v]
        return float(sum(values)) if values else None

    def step_waiting(self, step: Step) -> float | None:
        """The step's mean server `waiting` so far (its window, else since its start), from the
        collector's samples; the latest value when there are none."""
        recent = self.recent
        t0 = step.window_start or step.start_at
        if recent is not None and t0 is not None:
            t = self._clock()
            t1 = min(t, step.window_end or t)
            mean = recent.gauge_mean("waiting", t0, t1) if t1 > t0 else None
            if mean is None and t0 != step.start_at and step.start_at is not None:
                mean = recent.gauge_mean("waiting", step.start_at, t1)
            if mean is not None:
                return mean
        return self.server_waiting()

    # ------------------------------------------------------------------ judged steps

    def forget(self, step: Step) -> None:
        """A judged step's summaries are done with (the records are on disk)."""
        step.forget()
        if self.recent is not None and step.window_end is not None:
            self.recent.trim(before=float(step.window_end))  # later steps' windows start after it

    def cpu_warning(self, step: Step, failing: list[str], config: Config) -> None:
        """One line when a worker's CPU while sending this step came near its limit (an invalid step
        says it in its own line)."""
        from analysis.validity import suggested_processes

        peaks, step.cpu = step.cpu, {}
        if not peaks or "worker_cpu" in failing:
            return
        worker, cpu = max(peaks.items(), key=lambda kv: kv[1])
        limit = config.client.max_worker_cpu
        if cpu <= min(CPU_WARN, limit):
            return
        n = suggested_processes(len(peaks), cpu, config.client)
        self.out(f"llmload: warning: step {step.label}: worker {worker} CPU at {cpu:.0%} of a core while sending "
                 f"(the step is invalid over client.max_worker_cpu {limit:.0%}): the generator may fall behind; "
                 f"run with --processes {n}")

    def close(self) -> None:
        """The run is over: close the master's record copy and the CPU telemetry (late samples are dropped)."""
        self._closed = True
        if self._master_file is not None:
            self._master_file.close()
        if self._cpu_sink is not None:
            self._cpu_sink.close()
        for step in self.steps.values():
            step.rows.discard()
        remove_spill(self.run_dir)


class _JsonLines(RecordWriter):
    """A record file fed with already-unpacked dicts (the master's copy of shipped records)."""

    def write_rows(self, rows: list[dict]) -> None:
        """One shipped batch: one write and one flush (bench/fan_in.py: a `json.dumps` and a flush per
        row were most of the master's CPU per record at 10,000 records/s)."""
        if rows:
            self.write_text(redact_text("\n".join([row_json(row) for row in rows])))

    def write_text(self, text: str) -> None:
        """A batch's redacted lines, joined by newlines."""
        if self._file.closed or not text:  # a late batch after the run ended: the worker's own file has it
            return
        self._write_line(text)  # a full disk: kept, one line
