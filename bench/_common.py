"""What every bench script shares: the machine's state, the sim, CPU sampling (the sim's ground truth is
`llmload.sim.groundtruth.read_ground_truth`).

Only public names of `llmload` are used here (`llmload.sim.process`, `llmload.calibrate.CpuSampler`),
so that refactors of private helpers (e.g. in `llmload.calibrate`) cannot break the benches again; the smoke test
`tests/test_bench_smoke.py` runs each script on a tiny setting.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from llmload.calibrate import CpuSampler

#: the sim used by the benches: effectively unlimited batch, 20 ms per engine step, no load time
BENCH_SIM = {"max_num_seqs": 100000, "max_num_batched_tokens": 10000000, "num_blocks": 10000000,
             "block_size": 16, "step_base_s": "20ms", "prefill_cost_s": "0ms", "decode_cost_s": "0ms",
             "load_time_s": "0s", "max_model_len": 100000}

#: iterations of the CPU-speed probe's fixed pure-Python loop; the smoke test (tests/test_bench_smoke.py)
#: sets LLMLOAD_BENCH_PROBE_LOOPS lower: each `machine()` costs 3 x 0.12 s of CPU at 2,000,000, and every
#: script takes two (before and after), which was a tenth of the smoke test's CPU
PROBE_LOOPS = int(os.environ.get("LLMLOAD_BENCH_PROBE_LOOPS", "2000000"))


def cpu_probe_s(loops: int = PROBE_LOOPS) -> float:
    """CPU seconds of a fixed pure-Python loop (best of 3): per-core speed, which varies ~2x within
    an hour on shared VMs. Divide a bench's CPU figures by it to compare runs across machines."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        x = 0
        for i in range(loops):
            x += i & 7
        best = min(best, time.process_time() - t0)
    return round(best, 4)


def machine() -> dict:
    """The machine and its state now: cores, Python, load averages (1, 5, 15 min) and the CPU probe."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (None, None, None)
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "host": platform.node(),
            "platform": platform.platform(), "loadavg": [round(x, 2) if x is not None else None for x in load],
            "cpu_probe_s": cpu_probe_s(), "cpu_probe_loops": PROBE_LOOPS,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_result(out: Path, benchmark: str, argv: list[str] | None, machine_before: dict, **fields) -> dict:
    """Write a bench's JSON document: its name, command, the machine before and now, then `fields`."""
    import sys

    doc = {"benchmark": benchmark, "command": f"python bench/{benchmark}.py " + " ".join(argv or sys.argv[1:]),
           "machine_before": machine_before, "machine": machine(),
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def start_sim(folder: Path, *, settings: dict | None = None, port: int = 0, reuse_port: bool = False):
    """`llmload sim --flavor vllm` with a ground-truth log: returns (SimProcess, url, ground-truth path).
    `reuse_port` lets further sims share its port (`llmload sim --reuse-port`)."""
    from llmload.sim.process import start_sim_process

    sim = start_sim_process(folder, settings=settings or BENCH_SIM, port=port, reuse_port=reuse_port)
    return sim, sim.url, sim.ground_truth


class ChildSampler(CpuSampler):
    """`llmload.calibrate.CpuSampler` (CPU seconds of this process's descendants every `interval_s`),
    which also keeps each process's peak RSS."""

    def __init__(self, interval_s: float = 0.1) -> None:
        super().__init__(exclude=set(), interval_s=interval_s)
        #: pid -> (peak RSS bytes, command line)
        self.peak_rss: dict[int, tuple[int, str]] = {}
        #: (time, pid, RSS bytes) of every sample
        self.rss: list[tuple[float, int, int]] = []

    def _sample(self, proc: Any) -> float:
        cpu = super()._sample(proc)
        rss = proc.memory_info().rss
        self.rss.append((time.time(), proc.pid, rss))
        if rss > self.peak_rss.get(proc.pid, (0, ""))[0]:
            self.peak_rss[proc.pid] = (rss, " ".join(proc.cmdline()[:6]))
        return cpu

    def cpu_between(self, t0: float, t1: float, exclude: set[int]) -> float | None:
        """CPU seconds of the sampled children (less `exclude`) over [t0, t1], scaled to the window."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1 and s[1]]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        used = sum(b[pid] - a.get(pid, b[pid]) for pid in b if pid not in exclude)
        return used * (t1 - t0) / (tb - ta) if tb > ta else None
