"""Does llmload see GPU memory as it really moves? A check for a machine with an NVIDIA GPU.

A child process (torch) allocates GPU memory in known steps, holds each, then frees it step by step
(`torch.cuda.empty_cache()` after each free, so the memory goes back to the driver); it prints the wall
time at which each step was done (after `torch.cuda.synchronize()`). Meanwhile two recorders sample
the GPU every `--interval` seconds:

- `nvml`: llmload's NVML sampler (`llmload.telemetry.gpu.NvmlSampler`), as `llmload run` polls it;
- `gpu-agent`: `llmload gpu-agent --interval INTERVAL` started as its own process on a free port,
  scraped through llmload's DCGM poller (`llmload.telemetry.gpu.DcgmPoller`) every `INTERVAL / 4`.

The recorded memory must follow the steps within one sample interval (`follow_steps`): for each step
done at `t`, a sample taken in `[t, t + interval + slack]` is at the new level (the baseline before the
first step plus the child's memory at that step, within `--tolerance-mib`), and no sample taken between
that and the next step leaves it. The agent's pages are one agent interval old at most, so its limit is
one agent interval plus one scrape period. Energy is printed beside (not judged): each recorder's GPU
energy over the span it sampled, from the energy counter and from the integrated power where the board
reports them (`energy_over`, the analysis' own `TelemetryIndex.energy`), and how far the two agree. Writes, next to `--out` (default
bench/results/gpu_telemetry_check.json): `gpu_telemetry_series.csv` (t, recorder, used bytes, the child's
steps) and `gpu_telemetry_chart.svg`, the report's GPU memory timeline panel drawn from the series.

Exit codes: 0 the recorded memory followed every step, or there is no NVIDIA GPU here (NVML finds none:
the message says "no NVIDIA GPU here" and nothing is checked); 1 a recorder did not follow the steps;
2 bad arguments, or a GPU but no torch with CUDA to drive it (the check cannot run: install torch).

    python bench/gpu_telemetry_check.py [--steps-mib 1024 1024 2048] [--hold-s 3] [--interval 0.5]

The step detection and comparison are pure functions (`expected_levels`, `follow_steps`,
`detect_steps`, `energy_over`), unit-tested on a synthetic series in tests/telemetry/test_gpu_telemetry_check.py.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

RESULT = REPO / "bench" / "results" / "gpu_telemetry_check.json"
MIB = 1024 * 1024
NO_GPU = "no NVIDIA GPU here"

#: the child: allocates the steps (MiB, cumulative), holds each, frees them in reverse; one JSON line per
#: step done: {"step": i, "t": wall time, "held_bytes": bytes the child holds now}
CHILD = r"""
import json, sys, time
import torch
steps = [int(s) for s in sys.argv[1].split(",")]
hold = float(sys.argv[2])
torch.cuda.init()
torch.zeros(1, device="cuda")  # the CUDA context: part of the baseline
torch.cuda.synchronize()
def say(i, held, began):
    print(json.dumps({"step": i, "began": began, "t": time.time(), "held_bytes": held}), flush=True)
say(0, 0, time.time())
time.sleep(hold)
blocks, i = [], 0
for mib in steps:
    began = time.time()
    block = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    blocks.append(block)
    torch.cuda.synchronize()
    i += 1
    say(i, sum(b.numel() for b in blocks), began)
    time.sleep(hold)
while blocks:
    began = time.time()
    blocks.pop()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    i += 1
    say(i, sum(b.numel() for b in blocks), began)
    time.sleep(hold)
"""


@dataclass(frozen=True)
class StepCheck:
    """One step of the child as one recorder saw it."""

    step: int
    done_at: float  # the child's wall time when the step was done
    expected_bytes: float  # baseline + what the child held then
    first_at_level: float | None  # time of the first sample at the level, from done_at on
    lag_s: float | None  # first_at_level - done_at
    left_level: int  # samples before the next step off the level
    followed: bool


# --------------------------------------------------------------------------- pure parts (unit-tested)

def expected_levels(events: Sequence[dict], baseline_bytes: float) -> list[tuple[int, float, float]]:
    """(step, done_at, expected used bytes) per child event: the baseline plus what the child held."""
    return [(int(e["step"]), float(e["t"]), baseline_bytes + float(e["held_bytes"])) for e in events]


def baseline_of(times: Sequence[float], used: Sequence[float], events: Sequence[dict]) -> float | None:
    """The GPU's used bytes with the child's context but no step yet: the median of the samples taken
    after event 0 (the context is up) and before event 1 (the first allocation); None without one."""
    if len(events) < 2:
        return None
    t0, t1 = float(events[0]["t"]), float(events[1]["t"])
    inside = sorted(u for t, u in zip(times, used, strict=True) if t0 <= t < t1)
    # leave the samples right next to the allocation out: the malloc may land before its mark
    return inside[len(inside) // 2] if inside else None


def follow_steps(times: Sequence[float], used: Sequence[float], events: Sequence[dict], *, baseline_bytes: float,
                 limit_s: float, tolerance_bytes: float, ends: Sequence[float] | None = None) -> list[StepCheck]:
    """Per child step after the first: did the recorded series reach the new level within `limit_s` of
    the step being done, and stay there until the next step began? `times` are each sample's time (taken
    before the read), `ends` when its read returned (default: `times`), `used` its used bytes. A sample
    belongs to a step only if its whole read lies between the step being done and the next step's
    `began` (the child's mark before it allocates or frees): a read that overlaps the next allocation
    may see either level, and judges nothing."""
    ends = times if ends is None else ends
    samples = sorted(zip(times, ends, used, strict=True))
    levels = expected_levels(events, baseline_bytes)
    began = [float(e.get("began", e["t"])) for e in events]
    out = []
    for k, (step, done_at, expected) in enumerate(levels):
        if k == 0:
            continue
        until = began[k + 1] if k + 1 < len(levels) else float("inf")
        window = [(t, u) for t, end, u in samples if done_at <= t and end < until]
        at_level = [t for t, u in window if abs(u - expected) <= tolerance_bytes]
        first = at_level[0] if at_level else None
        lag = None if first is None else first - done_at
        left = sum(1 for t, u in window if first is not None and t > first and abs(u - expected) > tolerance_bytes)
        followed = lag is not None and lag <= limit_s and left == 0
        out.append(StepCheck(step, done_at, expected, first, lag, left, followed))
    return out


def detect_steps(times: Sequence[float], used: Sequence[float], *, min_jump_bytes: float) -> list[tuple[float, float]]:
    """(time, jump in bytes) wherever consecutive samples differ by at least `min_jump_bytes`: the steps
    a recorder saw, independent of the child's marks (for the report of a failure)."""
    pairs = sorted(zip(times, used, strict=True))
    return [(t1, u1 - u0) for (_, u0), (t1, u1) in zip(pairs, pairs[1:], strict=False) if abs(u1 - u0) >= min_jump_bytes]


def energy_over(samples: Sequence[tuple[float, str, float]]) -> dict:
    """`{"span_s", "counter_j", "power_j", "counter_vs_power"}` of one GPU's `(t, metric, value)` samples
    (`gpu_energy_joules`, `gpu_power_watts`) over the span both cover, each None where not reported."""
    import pandas as pd

    from analysis.telemetry_stats import TelemetryIndex

    out: dict = {"span_s": None, "counter_j": None, "power_j": None, "counter_vs_power": None}
    frame = pd.DataFrame([{"t": t, "source": "gpu", "metric": m, "value": v} for t, m, v in samples],
                         columns=["t", "source", "metric", "value"])
    spans = [(g["t"].min(), g["t"].max()) for _, g in frame.groupby("metric")]
    if not spans:
        return out
    t0, t1 = max(a for a, _ in spans), min(b for _, b in spans)
    if not t1 > t0:
        return out
    out["span_s"] = float(t1 - t0)
    for metric, key in (("gpu_energy_joules", "counter_j"), ("gpu_power_watts", "power_j")):
        joules, _ = TelemetryIndex(frame[frame["metric"] == metric]).energy(float(t0), float(t1))
        out[key] = None if joules != joules else joules
    if out["counter_j"] is not None and out["power_j"]:
        out["counter_vs_power"] = out["counter_j"] / out["power_j"]
    return out


def gpu_chart(series: dict[str, tuple[list[float], list[float]]], events: Sequence[dict]) -> str | None:
    """The report's GPU memory timeline panel (`llmload.report.plots.timeline_plot`) for one recorder's
    series, with the check as its one step window: an SVG string."""
    import pandas as pd

    from llmload.report.plots import timeline_plot

    name = "nvml" if "nvml" in series else next(iter(series), None)
    if name is None or not series[name][0]:
        return None
    times, used = series[name]
    timeline = pd.DataFrame({"t": times, "gpu_memory_used_bytes": used})
    start = float(events[0]["t"]) if events else float(min(times))
    steps = pd.DataFrame([{"label": f"steps ({name})", "index": 0, "status": "run", "window_start": start,
                           "window_end": float(max(times))}])
    svg, _missing = timeline_plot(timeline, steps)
    return svg


# --------------------------------------------------------------------------- recorders (need a GPU)

class _Recorder(threading.Thread):
    def __init__(self, name: str, poll, period_s: float, stop: threading.Event, gpu: int) -> None:
        super().__init__(daemon=True, name=f"record-{name}")
        self.name_, self.poll, self.period_s, self.stop = name, poll, period_s, stop
        self.source = f"gpu:{gpu}"
        self.times: list[float] = []
        self.ends: list[float] = []  # when each sample's read returned
        self.used: list[float] = []
        self.energy: list[tuple[float, str, float]] = []  # (t, gpu_energy_joules | gpu_power_watts, value)
        self.errors = 0

    def run(self) -> None:
        while not self.stop.is_set():
            began = time.time()
            try:
                points = self.poll()
            except Exception:  # a failed scrape is a missing sample
                self.errors += 1
            else:
                used = [p.value for p in points if p.metric == "gpu_memory_used_bytes" and p.source == self.source]
                self.energy += [(began, p.metric, float(p.value)) for p in points if p.source == self.source
                                and p.metric in ("gpu_energy_joules", "gpu_power_watts")]
                if used:
                    self.times.append(began)
                    self.ends.append(time.time())
                    self.used.append(float(used[0]))
            self.stop.wait(max(0.0, self.period_s - (time.time() - began)))


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_agent(interval_s: float, timeout_s: float = 30.0) -> tuple[subprocess.Popen, str]:
    """`llmload gpu-agent` on a free port of 127.0.0.1, once it answers; RuntimeError if it never does."""
    from urllib.request import urlopen

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "gpu-agent", "--port", str(port),
                             "--interval", f"{interval_s:g}"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/metrics"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmload gpu-agent exited {proc.returncode}: {(proc.stderr.read() or '').strip()[-300:]}")
        try:
            with urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"llmload gpu-agent did not answer at {url} within {timeout_s:g} s")


def run_check(args: argparse.Namespace) -> tuple[int, dict]:
    from llmload.telemetry.gpu import DcgmPoller, NvmlSampler

    sampler = NvmlSampler()
    if not sampler.open(log_missing=False):
        return 0, {"gpu": False, "message": f"{NO_GPU} (NVML: {sampler.reason}): nothing checked"}
    try:
        import torch

        cuda = bool(torch.cuda.is_available())
    except ImportError:
        cuda = False
    if not cuda:
        sampler.close()
        return 2, {"gpu": True, "message": "an NVIDIA GPU but no torch with CUDA here: install torch to run "
                                           "the check (nothing checked)"}
    devices = sampler.devices()
    if not 0 <= args.gpu < len(devices):
        sampler.close()
        return 2, {"gpu": True, "message": f"--gpu {args.gpu}: NVML sees {len(devices)} GPU(s) (nothing checked)"}
    agent, agent_url = _start_agent(args.interval)
    scrape_s = args.interval / 4
    stop = threading.Event()
    recorders = [_Recorder("nvml", sampler.poll, args.interval, stop, args.gpu),
                 _Recorder("gpu-agent", DcgmPoller(agent_url, timeout_s=2.0).poll, scrape_s, stop, args.gpu)]
    events: list[dict] = []
    try:
        for r in recorders:
            r.start()
        time.sleep(2 * args.interval)
        child = subprocess.run([sys.executable, "-c", CHILD, ",".join(str(s) for s in args.steps_mib),
                                f"{args.hold_s:g}"], capture_output=True, text=True,
                               # the NVML index is the PCI bus order: make CUDA's the same
                               env={**os.environ, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(args.gpu)},
                               timeout=120 + 4 * len(args.steps_mib) * args.hold_s)
        time.sleep(2 * args.interval)
        events = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
        if child.returncode != 0 or len(events) < 2:
            return 1, {"gpu": True, "message": f"the torch child failed: {child.stderr.strip()[-500:]}"}
    finally:
        stop.set()
        for r in recorders:
            r.join(timeout=5)
        agent.terminate()
        agent.wait(timeout=10)
        sampler.close()
    tolerance = args.tolerance_mib * MIB
    results: dict = {}
    code = 0
    for r in recorders:
        limit = args.interval + (scrape_s if r.name_ == "gpu-agent" else 0.0) + args.slack_s
        base = baseline_of(r.times, r.used, events)
        checks = ([] if base is None else
                  follow_steps(r.times, r.used, events, baseline_bytes=base, limit_s=limit, tolerance_bytes=tolerance,
                               ends=r.ends))
        ok = bool(checks) and all(c.followed for c in checks)
        code = code or (0 if ok else 1)
        results[r.name_] = {"followed": ok, "limit_s": limit, "baseline_bytes": base, "samples": len(r.times),
                            "failed_scrapes": r.errors, "steps": [asdict(c) for c in checks],
                            "max_lag_s": max((c.lag_s for c in checks if c.lag_s is not None), default=None),
                            "seen_steps": detect_steps(r.times, r.used, min_jump_bytes=min(args.steps_mib) * MIB / 2),
                            "energy": energy_over(r.energy)}
    folder = Path(args.out).parent
    folder.mkdir(parents=True, exist_ok=True)
    series_path, chart_path = folder / "gpu_telemetry_series.csv", folder / "gpu_telemetry_chart.svg"
    with open(series_path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["t", "recorder", "used_bytes", "child_step", "child_held_bytes"])
        for r in recorders:
            out.writerows([t, r.name_, u, "", ""] for t, u in zip(r.times, r.used, strict=True))
        out.writerows([e["t"], "child", "", e["step"], e["held_bytes"]] for e in events)
    svg = gpu_chart({r.name_: (r.times, r.used) for r in recorders}, events)
    if svg:
        chart_path.write_text(svg)
    verdict = "followed every step" if code == 0 else "did NOT follow the steps"
    return code, {"gpu": True, "devices": devices, "steps_mib": args.steps_mib, "hold_s": args.hold_s,
                  "interval_s": args.interval, "tolerance_mib": args.tolerance_mib, "events": events,
                  "recorders": results, "series": str(series_path), "chart": str(chart_path) if svg else None,
                  "message": f"recorded GPU memory {verdict} (nvml max lag "
                             f"{results['nvml']['max_lag_s']}, gpu-agent max lag {results['gpu-agent']['max_lag_s']} s); "
                             + "; ".join(f"{name} energy {_energy_text(results[name]['energy'])}"
                                         for name in ("nvml", "gpu-agent"))}


def _energy_text(energy: dict) -> str:
    """`1234.5 J over 20.0 s (counter), 1230.1 J (power), counter/power 1.004`, or what was not reported."""
    if energy.get("span_s") is None:
        return "not reported"
    parts = [f"over {energy['span_s']:.1f} s:"]
    parts += [f"{energy[k]:.1f} J ({name})" if energy.get(k) is not None else f"no {name}"
              for k, name in (("counter_j", "counter"), ("power_j", "power"))]
    if energy.get("counter_vs_power") is not None:
        parts.append(f"counter/power {energy['counter_vs_power']:.3f}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> int:
    from _common import machine, write_result

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps-mib", type=int, nargs="+", default=[1024, 1024, 2048],
                        help="MiB allocated at each step (cumulative), then freed in reverse")
    parser.add_argument("--hold-s", type=float, default=3.0, help="seconds each step is held")
    parser.add_argument("--interval", type=float, default=0.5, help="sample interval of both recorders (s)")
    parser.add_argument("--tolerance-mib", type=float, default=64.0, help="how far from the level a sample may be")
    parser.add_argument("--slack-s", type=float, default=0.05, help="scheduling slack added to the limit (s)")
    parser.add_argument("--gpu", type=int, default=0, help="the GPU (NVML index) to check")
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    if min(args.steps_mib) <= 0 or args.hold_s <= 0 or args.interval <= 0 or args.hold_s < 3 * args.interval:
        print("gpu_telemetry_check: steps must be positive and --hold-s at least 3 x --interval", file=sys.stderr)
        return 2
    before = machine()
    code, fields = run_check(args)
    write_result(args.out, "gpu_telemetry_check", argv, before, exit_code=code, **fields)
    print(f"gpu_telemetry_check: {fields['message']} (exit {code}); {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
