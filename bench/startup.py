"""Launch to first planned request, and peak RSS of the launcher and the Locust processes.

Starts the built-in sim, then for each pool size (`client.max_concurrency`) launches
`python -m llmload.cli run CONFIG --out DIR` (pre-flight on, as a user runs it) with one constant-rate
step, and measures from the launch (just before `Popen`) to:

- `first_planned_s`: the step's `start_at` in `plan.json` (the plan's first arrival);
- `first_sent_s`: the first record's `sent_at` (what the server sees);
- CPU seconds of the launcher and Locust processes before the first send (psutil, sampled every 0.1 s);
- peak RSS of the launcher (`llmload run`, the parent that only launches) and of each Locust process
  (local runner, or master and workers with `--processes`), the sim apart; and the Locust processes'
  peak while sending (up to the last step's `drained_at`, before the finalisation loads pandas).

Wall figures are only meaningful on an idle machine: the JSON keeps the load average and a CPU-speed
probe (`bench/_common.py`) next to them.

    python bench/startup.py                                   # pools 16, 256, 512 at 20 req/s for 3 s
    python bench/startup.py --users 512 --rate 300 --duration 10   # peak RSS at 300 req/s
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"


def _config(url: str, users: int, rate: float, duration: float, tokens: int) -> dict:
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
            "requests": {"input_tokens": {"dist": "fixed", "value": 32},
                         "output_tokens": {"dist": "fixed", "value": tokens}, "seed": 1},
            "client": {"max_concurrency": users},
            "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "30s",
                                 "steps": [{"rate": rate, "duration": f"{duration}s"}]}},
            "telemetry": {"metrics_url": "off", "gpu": "off"}}


def _first_sent(run_dir: Path) -> tuple[float | None, float | None]:
    """The first `sent_at`, and the worst send lag (`sent_at - scheduled_at`) of the first 10 arrivals:
    a lead (`controller.LEAD_S`) too short for the pool start shows as lag here."""
    import pyarrow.parquet as pq

    path = run_dir / "records.parquet"
    if not path.exists():
        return None, None
    rows = pq.read_table(path, columns=["scheduled_at", "sent_at"]).to_pylist()
    rows = sorted((r for r in rows if r["sent_at"] is not None and r["scheduled_at"] is not None),
                  key=lambda r: r["scheduled_at"])
    if not rows:
        return None, None
    return min(r["sent_at"] for r in rows), max(r["sent_at"] - r["scheduled_at"] for r in rows[:10])


def _role(cmdline: str) -> str:
    if "llmload.cli sim" in cmdline or " sim " in cmdline:
        return "sim"
    if "llmload.cli run" in cmdline or "llmload.cli" in cmdline:
        return "launcher"
    if "locust" in cmdline:
        return "locust"
    return "other"


def launch(url: str, work: Path, *, users: int, rate: float, duration: float, tokens: int, processes: int,
           sim_pid: int, report: bool = True) -> dict:
    import yaml
    from _common import ChildSampler

    work.mkdir(parents=True, exist_ok=True)
    config_path = work / "run.yaml"
    config_path.write_text(yaml.safe_dump(_config(url, users, rate, duration, tokens)))
    run_dir = work / "run"
    cmd = [sys.executable, "-m", "llmload.cli", "run", str(config_path), "--out", str(run_dir)]
    if processes:
        cmd += ["--processes", str(processes)]
    if not report:
        cmd.append("--no-report")
    with ChildSampler(interval_s=0.1) as sampler:
        t0 = time.time()
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        ended = time.time()
    plan = json.loads((run_dir / "plan.json").read_text()) if (run_dir / "plan.json").exists() else {"steps": []}
    start_at = plan["steps"][0].get("start_at") if plan["steps"] else None
    first_sent, first_lag = _first_sent(run_dir)
    rss: dict[str, list[int]] = {}
    for pid, (peak, cmdline) in sampler.peak_rss.items():
        if pid != sim_pid:
            rss.setdefault(_role(cmdline), []).append(peak)
    # the Locust processes' peak RSS while sending (to the last step's drain), before the finalisation
    drained = max((s.get("drained_at") or 0 for s in plan["steps"]), default=0)
    sending = [rss for t, pid, rss in sampler.rss if t <= drained and pid != sim_pid
               and _role(sampler.peak_rss.get(pid, (0, ""))[1]) == "locust"]
    cpu_before = None
    if first_sent is not None:
        before = [s for s in sampler.samples if s[0] <= first_sent]
        if before:
            cpu_before = sum(v for pid, v in before[-1][1].items() if pid != sim_pid)
    mb = 1 / 2**20
    return {"users": users, "rate": rate, "duration_s": duration, "processes": processes, "exit_code": proc.returncode,
            "first_planned_s": round(start_at - t0, 3) if start_at else None,
            "first_sent_s": round(first_sent - t0, 3) if first_sent else None,
            "first_10_send_lag_max_ms": round(first_lag * 1000, 2) if first_lag is not None else None,
            "cpu_before_first_send_s": round(cpu_before, 3) if cpu_before is not None else None,
            "wall_total_s": round(ended - t0, 2),
            "peak_rss_launcher_mb": round(max(rss.get("launcher", [0])) * mb, 1),
            "peak_rss_locust_mb": sorted(round(x * mb, 1) for x in rss.get("locust", [])),
            "peak_rss_locust_sending_mb": round(max(sending) * mb, 1) if sending else None,
            "loadavg_after": round(os.getloadavg()[0], 2),
            "output_tail": proc.stdout[-400:] if first_sent is None else ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[16, 256, 512], help="pool sizes")
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--processes", type=int, default=0)
    parser.add_argument("--no-report", action="store_true",
                        help="no report.html (its ~0.8 s of CPU comes after everything measured but wall_total_s)")
    parser.add_argument("--out", type=Path, default=RESULTS / "startup.json")
    args = parser.parse_args(argv)
    from _common import machine, start_sim, write_result

    machine_before = machine()
    work = Path(tempfile.mkdtemp(prefix="llmload-startup-"))
    sim, url, _ = start_sim(work / "sim")
    rows = []
    try:
        for users in args.users:
            row = launch(url, work / f"users-{users}", users=users, rate=args.rate, duration=args.duration,
                         tokens=args.max_tokens, processes=args.processes, sim_pid=sim.proc.pid,
                         report=not args.no_report)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        sim.stop()
    write_result(args.out, "startup", argv, machine_before, results=rows)
    return 0 if all(r["first_sent_s"] is not None for r in rows) else 1  # a short step may be "insufficient"


if __name__ == "__main__":
    sys.exit(main())
