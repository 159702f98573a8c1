"""The master's tally of a run's steps: what the workers shipped for each step until it is judged, and
the rows of the steps judged so far.

Per step: the workers' per-request summaries (`rows`), their `llmload:drained` notices, the arrivals of
the measurement window sent so far (the web UI's running rate), the planned arrival offsets (open loop),
and each worker's highest CPU while sending it. Across the run: the live table's rows (`table_rows`,
also the web UI's LLM tab) and the judged rows the knee search reads (`judged`). On a master the
shipped records are also copied to `records/master.jsonl`; worker CPU samples go to
`telemetry-workers.jsonl`. A judged step's summaries are dropped (`forget`): hours of soak slices do not
pile up in the master's memory.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gevent.event import Event

from llmload.clock import now
from llmload.config import Config
from llmload.records import RecordWriter, row_json
from llmload.redaction import redact_text
from llmload.runtime.messages import unpack_record
from llmload.runtime.table import format_row, step_row

__all__ = ["CPU_WARN", "StepTally"]

#: a worker's CPU (fraction of one core) while sending above which a step's judgement warns
CPU_WARN = 0.8


class StepTally:
    """Shipped summaries, drained notices, sent counts and CPU per step; the judged steps' rows."""

    def __init__(self, run_dir: Path, *, local: bool, telemetry: Any = None,
                 out: Callable[[str], None] = print, clock: Callable[[], float] = now) -> None:
        self.run_dir = Path(run_dir)
        #: the master's time source (the controller's `clock`)
        self._clock = clock
        self.local = local
        self.telemetry = telemetry
        self.out = out
        self.rows: dict[str, list[dict]] = defaultdict(list)
        self.drained: dict[str, dict[str, dict]] = defaultdict(dict)
        #: per step: set when a worker's drained notice arrives
        self.events: dict[str, Event] = defaultdict(Event)
        self.worker_cpu: dict[str, float] = {}
        #: per step, per worker: arrivals of the measurement window sent so far (the web UI's running rate)
        self.sent: dict[str, dict[str, int]] = defaultdict(dict)
        #: per step: its arrival offsets from its start (open loop), for the planned arrivals so far
        self.offsets: dict[str, Any] = {}
        #: per step, per worker: the highest CPU sample while sending it
        self.step_cpu: dict[str, dict[str, float]] = defaultdict(dict)
        #: the live table's rows of judged steps (also shown by the web UI's LLM tab)
        self.table_rows: list[dict] = []
        #: label, target rate, verdict, failing, samples, realised offered rate of each judged step
        self.results: list[dict] = []
        #: the judged row of each step (`judge_step`'s stats with its verdict): the knee search's input
        self.judged: list[dict] = []
        self._cpu_seen: dict[str, float | None] = {}
        self._cpu_sink: Any = None
        self._master_file: _JsonLines | None = None
        self._closed = False

    @property
    def recent(self) -> Any:
        """The collector's in-memory samples (`RecentSamples`), or None without a collector."""
        return getattr(self.telemetry, "recent", None)

    # ------------------------------------------------------------------ messages from workers

    def on_results(self, data: dict, current_label: str | None) -> None:
        """A batch of per-request summaries from one worker (`current_label`: the step running now)."""
        worker = str(data.get("worker"))
        cpu = data.get("cpu")
        if cpu is not None and data.get("cpu_at") != self._cpu_seen.get(worker):
            # the worker's CPU while sending a step's arrivals (`WorkerRuntime.sample_cpu`); a warning
            # about it comes with the step's judgement (`cpu_warning`), never from one sample
            self._cpu_seen[worker] = data.get("cpu_at")
            self.worker_cpu[worker] = float(cpu)
            label = data.get("cpu_step") or current_label
            self._write_cpu(worker, float(cpu), data.get("cpu_at") or self._clock(), label)
            if label is not None:
                peak = self.step_cpu[label]
                peak[worker] = max(peak.get(worker, 0.0), float(cpu))
        for label, count in (data.get("sent") or {}).items():
            self.sent[label][worker] = int(count)
        rows = [unpack_record(r) for r in data.get("rows", [])]
        if not self.local:
            if self._master_file is None:
                self._master_file = _JsonLines(self.run_dir / "records" / "master.jsonl")
            self._master_file.write_rows(rows)
        for row in rows:
            self.rows[row["step"]].append(row)

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

    def on_drained(self, data: dict) -> None:
        label = data["label"]
        self.drained[label][str(data["worker"])] = data
        self.events[label].set()

    def errors(self, label: str) -> list[str]:
        """The errors the workers' drained notices of `label` carry (a worker greenlet that failed)."""
        return [str(d["error"]) for d in self.drained[label].values() if d.get("error")]

    # ------------------------------------------------------------------ live figures

    def server_waiting(self) -> float | None:
        if self.telemetry is None:
            return None
        latest = self.telemetry.latest()
        values = [v["waiting"] for source, v in latest.items() if source.startswith("server:") and "waiting" in v]
        return float(sum(values)) if values else None

    def step_waiting(self, row: dict) -> float | None:
        """The step's mean server `waiting` so far (its window, else since its start), from the
        collector's samples; the latest value when there are none."""
        recent = self.recent
        t0 = row.get("window_start") or row.get("start_at")
        if recent is not None and t0 is not None:
            t = self._clock()
            t1 = min(t, row.get("window_end") or t)
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
        t = self._clock()
        t = min(t, row.get("window_end") or t)
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

    # ------------------------------------------------------------------ judged steps

    def add_judged(self, label: str, target_rate: float | None, row: dict, verdict: str, failing: list[str],
                   stats: dict) -> None:
        """A judged step: its table row (printed), its result, its invalid reasons."""
        table_row = step_row(label, stats, verdict, list(failing), self.step_waiting(row))
        self.results.append({"label": label, "target_rate": target_rate, "verdict": verdict,
                             "failing": list(failing), "samples": stats.get("completed", stats.get("ok")),
                             "offered_rate": stats.get("offered_rate")})
        self.table_rows.append({**stats, **table_row})
        self.judged.append({**stats, "label": label, "target_rate": target_rate, "verdict": verdict,
                            "failing": list(failing)})
        self.out(format_row(table_row))
        for reason in stats.get("invalid_reasons") or []:
            self.out(f"  {label} invalid: {reason['message']}")
        from analysis.validity import client_cap_line

        capped = client_cap_line(label, stats)
        if capped:
            self.out(f"  {capped}")

    def forget(self, label: str, row: dict) -> None:
        """A judged step's summaries are done with (the records are on disk)."""
        self.rows.pop(label, None)
        self.offsets.pop(label, None)
        self.sent.pop(label, None)
        if self.recent is not None and row.get("window_end") is not None:
            self.recent.trim(before=float(row["window_end"]))  # later steps' windows start after it

    def cpu_warning(self, label: str, failing: list[str], config: Config) -> None:
        """One line when a worker's CPU while sending this step came near its limit (an invalid step
        says it in its own line)."""
        from analysis.validity import suggested_processes

        peaks = self.step_cpu.pop(label, {})
        if not peaks or "worker_cpu" in failing:
            return
        worker, cpu = max(peaks.items(), key=lambda kv: kv[1])
        limit = config.client.max_worker_cpu
        if cpu <= min(CPU_WARN, limit):
            return
        n = suggested_processes(len(peaks), cpu, config.client)
        self.out(f"llmload: warning: step {label}: worker {worker} CPU at {cpu:.0%} of a core while sending "
                 f"(the step is invalid over client.max_worker_cpu {limit:.0%}): the generator may fall behind; "
                 f"run with --processes {n}")

    def close(self) -> None:
        """The run is over: close the master's record copy and the CPU telemetry (late samples are dropped)."""
        self._closed = True
        if self._master_file is not None:
            self._master_file.close()
        if self._cpu_sink is not None:
            self._cpu_sink.close()


class _JsonLines(RecordWriter):
    """A record file fed with already-unpacked dicts (the master's copy of shipped records)."""

    def write_rows(self, rows: list[dict]) -> None:
        """One shipped batch: one write and one flush (bench/fan_in.py: a `json.dumps` and a flush per
        row were most of the master's CPU per record at 10,000 records/s)."""
        if self._file.closed or not rows:  # a late batch after the run ended: the worker's own file has it
            return
        self._write_line(redact_text("\n".join([row_json(row) for row in rows])))  # a full disk: kept, one line
