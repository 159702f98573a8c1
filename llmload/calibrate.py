"""`llmload calibrate`: how much load this machine's generator can offer while its timing stays exact.

It runs the real generator (`llmload run`'s Locust command, constant arrivals, pre-flight skipped)
against a built-in sim (started with a large capacity and a ground-truth log on a free loopback port)
or a given target, in one ramp of short steps (16-token outputs at 10, 30, 100, 200 req/s per worker
process, 0.25 s warm-up and 1.5 s window each; no report.html), stopped at the first step that does
not hold (the steps above it cannot count), in under 30 s.

Per step it reports achieved vs offered rate, send lag p99, TTFT measurement error p99 (the client's
`first_token_at` minus the sim's ground-truth `first_token_at`, joined on `request_id`), token
timestamp error p99 (every token, same join), mean in-flight streams and the busiest worker's CPU.
A step **holds** when it is valid by the same rule as a run's steps (`analysis.validity` with the
default `client` limits and no latency target: send lag p99 under the mean gap between arrivals, no
rate shortfall, worker CPU under its limit) and no request failed. The TTFT error is reported beside
it (it is what a latency target must leave room for), not a condition. The **envelope** per worker
process is the highest rate (and the most mean in-flight streams) of the steps that hold, counting only
from the bottom of the ramp up to its first step that does not; when every step held it is only the
highest rate tried, a lower bound, and it says so (`lower_bound` in the JSON). It is printed and saved as JSON
(default `~/.cache/llmload/envelope.json`); `llmload.envelope.check_plan_against_envelope` is what
`llmload run` calls (re-exported here).

`--quick` runs two steps (10 and 50 req/s per process): a smoke test, not a figure.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from llmload.clock import now
from llmload.envelope import (  # re-exported: the envelope's file and the check `llmload run` makes
    ENVELOPE_PATH,
    ENVELOPE_VERSION,
    RULE,
    UNCALIBRATED,  # noqa: F401 (tests and callers import it from here)
    check_plan_against_envelope,
    load_envelope,
)
from llmload.errors import RunError
from llmload.sim.groundtruth import read_ground_truth
from llmload.sim.process import start_sim_process, stop_process

__all__ = [
    "ENVELOPE_PATH",
    "CalibrationStep",
    "Ramp",
    "check_plan_against_envelope",
    "envelope_from_steps",
    "envelope_sentence",
    "every_step_held",
    "format_table",
    "load_envelope",
    "measure_steps",
    "progress_line",
    "run_calibrate",
    "start_sim",
]

#: the sim used for calibration: effectively unlimited batch, 20 ms per engine step, no load time
CALIBRATION_SIM = {"max_num_seqs": 100000, "max_num_batched_tokens": 10000000, "num_blocks": 10000000,
                   "block_size": 16, "step_base_s": "20ms", "prefill_cost_s": "0ms", "decode_cost_s": "0ms",
                   "load_time_s": "0s", "max_model_len": 100000}


@dataclass(frozen=True)
class Ramp:
    """One `llmload run` of the calibration: its per-process rates and request sizes."""

    name: str
    rates: tuple[float, ...]
    output_tokens: int
    input_tokens: int = 32
    warmup_s: float = 1.0
    duration_s: float = 4.0


RAMPS = (Ramp("rates", (10, 30, 100, 200), output_tokens=16, warmup_s=0.25, duration_s=1.5),)
QUICK_RAMPS = (Ramp("rates", (10, 50), output_tokens=16, warmup_s=0.25, duration_s=1.5),)


@dataclass
class CalibrationStep:
    """What one step of a ramp showed, per worker process where it says so (seconds, req/s)."""

    ramp: str
    label: str
    offered_rate: float
    achieved_rate: float
    requests: int
    failed: int
    send_lag_p50_s: float | None
    send_lag_p99_s: float | None
    ttft_error_p50_s: float | None
    ttft_error_p99_s: float | None
    token_error_p99_s: float | None
    in_flight_mean: float | None
    events_per_s: float
    worker_cpu: float | None
    #: the built-in sim's CPU over the window (it shares the machine's cores with the generator)
    sim_cpu: float | None = None
    holds: bool = False
    why_not: str = ""


# --------------------------------------------------------------------------- the built-in sim

def start_sim(folder: Path, *, settings: dict | None = None, timeout_s: float = 20.0
              ) -> tuple[subprocess.Popen, str, Path]:
    """Start `llmload sim --flavor vllm --port 0` with a ground-truth log; returns (process, URL, log path)."""
    sim = start_sim_process(folder, settings=settings or CALIBRATION_SIM, timeout_s=timeout_s)
    return sim.proc, sim.url, sim.ground_truth


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _target_model(url: str) -> str:
    """The first model an outside OpenAI-compatible target lists (`/v1/models`), else "default".
    RunError (exit 3) when nothing answers HTTP there: a ramp against a dead target measures nothing."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=5) as resp:
            data = json.loads(resp.read())
        return str(data["data"][0]["id"])
    except urllib.error.HTTPError:
        return "default"
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc
        raise RunError(f"{url}: target unreachable ({reason}): start it or fix --target") from None
    except (ValueError, KeyError, IndexError, TypeError):
        return "default"


# --------------------------------------------------------------------------- running one ramp

class CpuSampler:
    """Samples the CPU seconds of this process's descendants (the Locust processes) every 0.2 s."""

    def __init__(self, exclude: set[int], interval_s: float = 0.2) -> None:
        import psutil

        self._psutil = psutil
        #: sampled too, but never counted as a Locust process (the sim)
        self.exclude = exclude
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = self._psutil.Process()
        while not self._stop.wait(self.interval_s):
            row: dict[int, float] = {}
            try:
                children = me.children(recursive=True)
            except self._psutil.Error:  # a child ended while being listed
                continue
            for proc in children:
                try:
                    row[proc.pid] = self._sample(proc)
                except self._psutil.Error:
                    continue
            self.samples.append((now(), row))

    def _sample(self, proc: Any) -> float:
        """CPU seconds (user + system) of one process; a subclass may read more of it (bench/: RSS)."""
        cpu = proc.cpu_times()
        return cpu.user + cpu.system

    def worker_cpu(self, t0: float, t1: float) -> float | None:
        """The busiest Locust process's CPU (fraction of one core) over [t0, t1]: the local runner, or
        with --processes the busiest of the master and its workers (a worker, under load)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        used = [(b[pid] - a[pid]) / (tb - ta) for pid in b if pid in a and pid not in self.exclude]
        return max(used) if used else None

    def process_cpu(self, pid: int, t0: float, t1: float) -> float | None:
        """One process's CPU (fraction of one core) over [t0, t1] (the sim's, to explain a step)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1 and pid in s[1]]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        return (b[pid] - a[pid]) / (tb - ta)


def _ramp_config(ramp: Ramp, *, url: str, model: str, processes: int, work: Path) -> dict:
    per_process_peak = max(ramp.rates) * (ramp.output_tokens * 0.02 + 0.1)  # streams at 20 ms per token
    cap = max(256, int(2 * per_process_peak)) * max(1, processes)
    return {
        "target": {"url": url, "api": "openai-chat", "model": model, "server": "vllm", "timeout": "60s"},
        "requests": {"input_tokens": {"dist": "fixed", "value": ramp.input_tokens},
                     "output_tokens": {"dist": "fixed", "value": ramp.output_tokens}, "seed": 1},
        "client": {"max_concurrency": cap},
        "shape": {"ladder": {"arrival": "constant", "warmup": f"{ramp.warmup_s}s", "drain_timeout": "20s",
                             "steps": [{"rate": r * max(1, processes), "duration": f"{ramp.duration_s}s"}
                                       for r in ramp.rates]}},
        "telemetry": {"metrics_url": "off", "gpu": "off"},
        "conditions": {"notes": "llmload calibrate"},
        "output": str(work),
    }


_PROGRESS = re.compile(r"^(r\d|llmload: (warning|error))")
_INVALID_ROW = re.compile(r"^r\S+ .* invalid\b")


def _verdict_at() -> int:
    """Where the live table's verdict column starts (`llmload.runtime.master.live_table.COLUMNS`)."""
    from llmload.runtime.master.live_table import COLUMNS

    return sum(width + 1 for key, _, width, _ in COLUMNS if key != "verdict")


def progress_line(line: str) -> str:
    """A live table row as calibrate echoes it: without the SLO verdict, which means nothing here (no
    targets, a short window: always "insufficient"), except `invalid`, which is why the ramp stops."""
    if not re.match(r"^r\d", line):
        return line.rstrip()
    at = _verdict_at()
    verdict = line[at:].strip()
    return line[:at].rstrip() + (f"  {verdict}" if verdict.startswith("invalid") else "")


def progress_header() -> str:
    """The live table's head without its verdict column (printed once, above the first echoed row)."""
    from llmload.runtime.master.live_table import format_header

    return format_header()[:_verdict_at()].rstrip()


def _run_ramp(ramp: Ramp, *, url: str, model: str, processes: int, work: Path, exclude: set[int]
              ) -> tuple[Path, CpuSampler]:
    """Run one ramp with the real generator; returns its run directory and the CPU samples."""
    from llmload.runtime.launcher.run import locust_command

    run_dir = work / ramp.name
    config_path = work / f"{ramp.name}.yaml"
    config_path.write_text(yaml.safe_dump(_ramp_config(ramp, url=url, model=model, processes=processes,
                                                       work=work), sort_keys=False), encoding="utf-8")
    cmd = locust_command(config_path, run_dir, processes=processes if processes > 1 else 0)
    cmd += ["--llmload-skip-preflight", "--llmload-no-report"]
    if processes > 1:  # forked workers join the master on this port; Locust's default 5557 may be taken
        port = str(_free_port())
        cmd += ["--master-bind-port", port, "--master-port", port]
    log_path = work / f"{ramp.name}.log"
    with CpuSampler(exclude) as sampler, open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        stopping, headed = False, False
        try:
            for line in proc.stdout:  # the live table, one row per step as it ends: the progress
                log.write(line)
                if _PROGRESS.match(line):
                    if not headed and line.startswith("r"):
                        headed = True
                        print(f"  {progress_header()}", flush=True)
                    print(f"  {progress_line(line)}", flush=True)
                if not stopping and _INVALID_ROW.match(line):
                    # the envelope ends at the first step that does not hold: the steps above it cannot
                    # count, so stop (SIGTERM: the run is finalised, later steps stay not_run)
                    stopping = True
                    proc.send_signal(signal.SIGTERM)
            proc.wait()
        finally:  # interrupted: the generator goes before its work folder does
            stop_process(proc)
    if not (run_dir / "records.parquet").exists():
        lines = [ln for ln in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        last = f": {lines[-1].strip()[:300]}" if lines else ""
        raise RunError(f"calibration run {ramp.name!r} wrote no records (exit {proc.returncode}){last}")
    return run_dir, sampler


# --------------------------------------------------------------------------- measuring

def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q))


def measure_steps(run_dir: Path, *, ramp: str, processes: int, ground_truth: dict[str, dict] | None,
                  cpu: CpuSampler | None = None, sim_pid: int | None = None) -> list[CalibrationStep]:
    """Per-step figures of one calibration run (see the module docstring); rates are per process."""
    import pandas as pd

    records = pd.read_parquet(run_dir / "records.parquet")
    plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    summary_path = run_dir / "summary.json"
    in_flight: dict[str, Any] = {}
    sending_cpu: dict[str, Any] = {}
    if summary_path.exists():
        judged = json.loads(summary_path.read_text(encoding="utf-8")).get("steps", [])
        in_flight = {s["label"]: s.get("in_flight_mean") for s in judged}
        sending_cpu = {s["label"]: s.get("worker_cpu_max") for s in judged}
    share = max(1, processes)
    steps = []
    for spec in plan["steps"]:
        if spec.get("status") != "run":
            continue
        t0, t1 = spec["window_start"], spec["window_end"]
        window_s = t1 - t0
        rows = records[(records["step"] == spec["label"]) & (records["scheduled_at"] >= t0)
                       & (records["scheduled_at"] < t1)]
        sent = rows[rows["sent_at"].notna()]
        lags = (sent["sent_at"] - sent["scheduled_at"])[~sent["capped"].fillna(False).astype(bool)].tolist()
        ttft_err: list[float] = []
        token_err: list[float] = []
        if ground_truth is not None:
            for rid, first, times in zip(sent["request_id"], sent["first_token_at"], sent["token_times"],
                                         strict=True):
                truth = ground_truth.get(rid)
                if truth is None or truth.get("first_token_at") is None or first is None or math.isnan(first):
                    continue
                ttft_err.append(abs(first - truth["first_token_at"]))
                token_err.extend(abs(c - s) for c, s in zip(times, truth.get("token_times") or [], strict=False))
        events = _events_between(records["token_times"], t0, t1)
        mean_in_flight = in_flight.get(spec["label"])
        steps.append(CalibrationStep(
            ramp=ramp, label=spec["label"], offered_rate=len(rows) / window_s / share,
            achieved_rate=len(sent[(sent["sent_at"] >= t0) & (sent["sent_at"] < t1)]) / window_s / share,
            requests=len(rows), failed=int((rows["outcome"] != "ok").sum()),
            send_lag_p50_s=_pct(lags, 50), send_lag_p99_s=_pct(lags, 99),
            ttft_error_p50_s=_pct(ttft_err, 50), ttft_error_p99_s=_pct(ttft_err, 99),
            token_error_p99_s=_pct(token_err, 99),
            in_flight_mean=None if mean_in_flight is None else mean_in_flight / share,
            events_per_s=events / window_s / share,
            worker_cpu=sending_cpu.get(spec["label"]) or (cpu.worker_cpu(t0, t1) if cpu is not None else None),
            sim_cpu=cpu.process_cpu(sim_pid, t0, t1) if cpu is not None and sim_pid is not None else None))
    for step in steps:
        _judge(step, share)
    return steps


def _events_between(token_times: Any, t0: float, t1: float) -> int:
    """Output events (any request's) that arrived in [t0, t1)."""
    return sum(1 for times in token_times if times is not None for t in times if t0 <= t < t1)


def _judge(step: CalibrationStep, processes: int) -> None:
    """Holds: valid by a run step's rule (`analysis.validity`, default limits, no latency target) and
    no failed request. Rates in `step` are per process; the rule reads the whole generator's."""
    from analysis.validity import generator_checks
    from llmload.config import SLO, Client

    metrics = {"offered_rate": step.offered_rate * processes, "achieved_rate": step.achieved_rate * processes,
               "send_lag_p99_s": math.inf if step.send_lag_p99_s is None else step.send_lag_p99_s,
               "worker_cpu_max": math.nan if step.worker_cpu is None else step.worker_cpu,
               "outcomes": {}, "workers": processes}
    why = [c["check"].replace("_", " ") for c in generator_checks(metrics, SLO(), Client())]
    if step.failed:
        why.append("failed requests")
    step.holds, step.why_not = not why, ", ".join(why)


def _error_at_envelope(steps: list[CalibrationStep]) -> float | None:
    """The TTFT measurement error p99 of the highest step that held (None: none held, or no ground truth)."""
    held = [s for s in steps if s.holds and s.ramp == "rates"]
    if not held:
        return None
    return max(held, key=lambda s: s.offered_rate).ttft_error_p99_s


def envelope_from_steps(steps: list[CalibrationStep]) -> dict[str, float | None]:
    """The highest rate and mean stream count per process that hold, each ramp read from the bottom up
    to its first step that does not (a lucky step above a failing one does not count)."""
    max_rate: float | None = None
    max_streams: float | None = None
    for ramp in dict.fromkeys(s.ramp for s in steps):
        for step in sorted((s for s in steps if s.ramp == ramp), key=lambda s: s.offered_rate):
            if not step.holds:
                break
            if ramp == "rates":
                max_rate = max(max_rate or 0.0, step.offered_rate)
            if step.in_flight_mean is not None:
                max_streams = max(max_streams or 0.0, step.in_flight_mean)
    return {"max_rate_per_process": max_rate, "max_streams_per_process": max_streams}


# --------------------------------------------------------------------------- the command

def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.2f}"


def format_table(steps: list[CalibrationStep]) -> str:
    """The per-step table the command prints (per worker process; the unit of every column in its head:
    rates in req/s, send lag and the TTFT / token-time measurement errors p99 in ms, CPU in % of a core)."""
    head = (f"{'ramp':<8} {'step':<9} {'offered/s':>9} {'achieved/s':>10} {'lag p99 ms':>10} "
            f"{'TTFT err p99 ms':>15} {'tok err p99 ms':>14} {'streams':>7} {'events/s':>9} {'CPU %':>5} "
            f"{'sim %':>5}  holds")
    lines = [head, "-" * len(head)]
    for s in steps:
        cpu = "-" if s.worker_cpu is None else f"{s.worker_cpu * 100:.0f}"
        sim = "-" if s.sim_cpu is None else f"{s.sim_cpu * 100:.0f}"
        streams = "-" if s.in_flight_mean is None else f"{s.in_flight_mean:.0f}"
        lines.append(f"{s.ramp:<8} {s.label:<9} {s.offered_rate:>9.1f} {s.achieved_rate:>10.1f} "
                     f"{_ms(s.send_lag_p99_s):>10} {_ms(s.ttft_error_p99_s):>15} {_ms(s.token_error_p99_s):>14} "
                     f"{streams:>7} {s.events_per_s:>9.0f} {cpu:>5} {sim:>5}  "
                     f"{'yes' if s.holds else 'no (' + s.why_not + ')'}")
    return "\n".join(lines)


def every_step_held(steps: list[CalibrationStep]) -> bool:
    """Every step of the rate ramp held: the envelope is only the highest rate tried, a lower bound."""
    rates = [s for s in steps if s.ramp == "rates"]
    return bool(rates) and all(s.holds for s in rates)


def envelope_sentence(envelope: dict[str, Any], *, lowest_rate: float) -> str:
    """What the command says of the envelope it measured (after the table)."""
    rate, streams = envelope["max_rate_per_process"], envelope["max_streams_per_process"]
    if rate is None:
        return (f"llmload calibrate: no step held ({RULE}): this machine's generator is not exact even at "
                f"{lowest_rate:g} req/s per process")
    error = envelope.get("ttft_error_p99_s")
    figures = (f"{rate:g} req/s, {'-' if streams is None else f'{streams:.0f}'} concurrent streams"
               + ("" if error is None else f"; TTFT measurement error p99 there {error * 1000:.1f} ms"))
    if envelope.get("lower_bound"):
        return (f"safe envelope per worker process ({RULE}): at least {figures}. Every step held, so this is "
                f"the highest rate tried, a lower bound: the generator may hold more (`llmload run` warns "
                f"only beyond it)")
    return f"safe envelope per worker process ({RULE}): {figures}"


def run_calibrate(*, processes: int, target: str | None, out: Path | None, quick: bool) -> int:
    """Calibrate this machine's generator (see the module docstring); 0 when an envelope was saved."""
    processes = max(1, processes)
    ramps = QUICK_RAMPS if quick else RAMPS
    work = Path(tempfile.mkdtemp(prefix="llmload-calibrate-"))
    try:
        return _calibrate(processes=processes, target=target, out=out, quick=quick, ramps=ramps, work=work)
    finally:  # the work folder (runs, sim log) goes, whatever happened: success, failure or Ctrl-C
        shutil.rmtree(work, ignore_errors=True)


def _calibrate(*, processes: int, target: str | None, out: Path | None, quick: bool, ramps: tuple,
               work: Path) -> int:
    total_s = sum(len(r.rates) * (r.warmup_s + r.duration_s + 1.5) + 8 for r in ramps)
    print(f"llmload calibrate: {processes} worker process(es), {len(ramps)} ramp(s), about {total_s:.0f} s; "
          f"work folder {work} (removed at the end)", flush=True)
    sim = None
    try:
        if target is None:
            sim, url, truth_path = start_sim(work / "sim")
            model = "sim-model"
            print(f"llmload calibrate: built-in sim at {url} (ground truth: {truth_path})", flush=True)
        else:
            url, truth_path, model = target.rstrip("/"), None, _target_model(target)
            print(f"llmload calibrate: target {url} (model {model}); TTFT error is unknown: an outside "
                  "target has no ground-truth log", flush=True)
        steps: list[CalibrationStep] = []
        for i, ramp in enumerate(ramps, 1):
            rates = ", ".join(f"{r:g}" for r in ramp.rates)
            print(f"llmload calibrate: ramp {i}/{len(ramps)} '{ramp.name}': {rates} req/s per process, "
                  f"{ramp.output_tokens}-token outputs", flush=True)
            exclude = {sim.pid} if sim is not None else set()
            run_dir, cpu = _run_ramp(ramp, url=url, model=model, processes=processes, work=work, exclude=exclude)
            truth = read_ground_truth(truth_path) if truth_path is not None else None
            steps += measure_steps(run_dir, ramp=ramp.name, processes=processes, ground_truth=truth, cpu=cpu,
                                   sim_pid=sim.pid if sim is not None else None)
    finally:
        if sim is not None:
            stop_process(sim)
    envelope = _envelope_document(steps, processes=processes, target=target, quick=quick)
    path = Path(out) if out is not None else ENVELOPE_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(envelope, indent=1) + "\n", encoding="utf-8")
    print("\n" + format_table(steps))
    print("\n" + envelope_sentence(envelope, lowest_rate=min(r for ramp in ramps for r in ramp.rates)))
    if quick:
        print("llmload calibrate: --quick is a smoke test; run without it for figures to rely on")
    print(f"llmload calibrate: envelope saved to {path}")
    return 0


def _envelope_document(steps: list[CalibrationStep], *, processes: int, target: str | None,
                       quick: bool) -> dict[str, Any]:
    from llmload import __version__

    return {
        "version": ENVELOPE_VERSION,
        "created_at": time.time(),
        "llmload": __version__,
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "processes": processes,
        "target": target or "built-in sim",
        "ttft_error_known": target is None,
        "quick": quick,
        "rule": RULE,
        **envelope_from_steps(steps),
        "lower_bound": every_step_held(steps),  # the highest rate tried held: the envelope may be higher
        "ttft_error_p99_s": _error_at_envelope(steps),
        "steps": [asdict(s) for s in steps],
    }
