"""Many workers, one master: can the master take the records of 32 workers at 10,000 requests/s?

Starts a real llmload master (`llmload run --master`'s Locust command: pre-flight, telemetry and the
report off, nothing sent to a server) and fake workers that speak Locust's protocol and llmload's
messages: they prove the worker token, spawn no users, answer the clock exchanges, and for the step they
are sent ship `llmload:results` batches (the same message and packed-record payload the real workers
ship, `llmload.runtime.wire.messages.pack_record`, every `SHIP_INTERVAL_S`) for their share of the step's
arrivals, then `llmload:drained`. The fake workers live in `--drivers` processes (16 workers each by
default: 32 Python processes would measure the machine, not the master).

Measured, over the step's arrivals:

- the master process's CPU per record (psutil, from the step's start until the last record was counted),
  and its peak RSS;
- the delay from a record being shipped (its `closed_at` is stamped just before its batch is sent) to it
  being counted: the master copies every record it takes into `records/master.jsonl` as it counts it,
  which this script tails every `TAIL_S` (so the figure includes up to that much polling);
- lost records: shipped minus counted (must be 0);
- the master's RSS over time (`master_rss_mib_every_10s`, sampled each `TAIL_S`, the highest of each 10 s)
  and its growth after the first minute (issue 46: flat, under 300 MB, for 5 minutes at 10,000 req/s).

    python bench/fan_in.py                                 # 32 workers, 10,000 req/s, 60 s
    python bench/fan_in.py --quick                         # 4 workers, 400 req/s, 3 s (the smoke test)
    python bench/fan_in.py --profile prof.out --duration 20 # the master under cProfile
    python bench/fan_in.py --metrics                       # and serving live /metrics (as on Kubernetes)
    python bench/fan_in.py --duration 300 --out bench/results/fan_in_5min.json  # 3 million records (issue 46)

Results: bench/results/fan_in.json; bench/README.md ("Fan-in") and docs/SCALING.md read them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))
RESULTS = REPO / "bench" / "results"
TOKEN = "fan-in-bench-worker-token-000000"
#: how often the tail of master.jsonl is read
TAIL_S = 0.02
#: every how many counted records one is parsed for its delay
DELAY_EVERY = 20


# ---------------------------------------------------------------------------------------------- driver

def drive(host: str, port: int, first: int, count: int, out: Path) -> None:
    """Run `count` fake workers against the master at host:port until it says quit; write what each shipped."""
    import gevent
    import gevent.event
    import locust
    from locust.rpc import Message, zmqrpc

    from llmload.clock import now
    from llmload.records import Record
    from llmload.runtime.locustglue.workerauth import HELLO, proof
    from llmload.runtime.wire import clocksync
    from llmload.runtime.wire.messages import (
        STEP,
        DrainedMessage,
        HelloMessage,
        ResultsMessage,
        StepMessage,
        pack_record,
    )
    from llmload.runtime.worker.scheduler import SHIP_INTERVAL_S

    template = pack_record(Record(request_id="", step="", worker="", scheduled_at=0.0, outcome="ok",
                                  sent_at=0.0, first_token_at=0.0, last_token_at=0.0, http_status=200,
                                  input_tokens=16, output_tokens=4, planned_input_tokens=16,
                                  planned_output_tokens=4, token_times=[0.0] * 4, token_counts=[1] * 4))
    shipped: dict[str, int] = {}
    finished: list[str] = []
    done = gevent.event.Event()

    def worker(index: int) -> None:
        client_id = f"fanin_{index:02d}_{os.getpid()}"
        client = zmqrpc.Client(host, port, client_id)
        state = {"state": "ready"}

        def send(kind: str, data: object) -> None:
            client.send(Message(kind, data, client_id))

        def heartbeat() -> None:
            while True:
                send("heartbeat", {"state": state["state"], "current_cpu_usage": 0.0, "current_memory_usage": 0})
                gevent.sleep(1.0)

        def run_step(data: dict) -> None:
            message = StepMessage.from_dict(data)
            step, name = message.step, message.worker
            label, shard, shards = step.label, message.shard, message.shards
            rate = float(step.target_rate)
            span = float(step.arrivals_s)
            start = message.start_at
            times = [start + (i * shards + shard) / rate for i in range(int(rate * span / shards))]
            sent, total = 0, len(times)
            gevent.sleep(max(0.0, times[0] - now()) if times else 0.0)
            while sent < total:  # as a real worker ships: every SHIP_INTERVAL_S, what finished since
                gevent.sleep(SHIP_INTERVAL_S)
                t = now()
                rows = []
                while sent < total and times[sent] <= t:
                    at = times[sent]
                    row = dict(template)
                    row.update(request_id=f"{name}-{sent:07d}", step=label, worker=name, scheduled_at=at,
                               sent_at=at, dequeued_at=at, first_token_at=at + 0.01, last_token_at=at + 0.02)
                    rows.append(row)
                    sent += 1
                if rows:
                    stamp = now()
                    for row in rows:
                        row["closed_at"] = stamp
                    send(ResultsMessage.TYPE, ResultsMessage(worker=name, rows=rows, sent={label: sent}).to_dict())
                    shipped[client_id] = shipped.get(client_id, 0) + len(rows)
            send(DrainedMessage.TYPE, DrainedMessage(worker=name, label=label, put=total, finished=total,
                                                     at=now()).to_dict())
            finished.append(client_id)
            if len(finished) == count:  # every worker here shipped its share: say how much
                out.write_text(json.dumps(shipped))

        send(HELLO, HelloMessage(proof=proof(TOKEN, client_id)).to_dict())
        send("client_ready", locust.__version__)
        gevent.spawn(heartbeat)
        while True:
            msg = client.recv()
            if msg.type == "spawn":
                send("spawning", None)
                classes = msg.data["user_classes_count"]
                state["state"] = "running"
                send("spawning_complete", {"user_classes_count": classes, "user_count": sum(classes.values())})
            elif msg.type == clocksync.PING:
                clocksync.answer_ping(msg.data, send)
            elif msg.type == STEP:
                gevent.spawn(run_step, msg.data)
            elif msg.type in ("quit", "llmload:refused"):
                break
        done.set()

    greenlets = [gevent.spawn(worker, first + i) for i in range(count)]
    done.wait()  # one worker told to quit: the master is ending (or this process is killed)
    gevent.killall(greenlets, timeout=2)


# ---------------------------------------------------------------------------------------------- master

def _config(folder: Path, rate: float, duration_s: float) -> Path:
    import yaml

    config = {"target": {"url": "http://127.0.0.1:9", "api": "openai-chat", "model": "m", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                           "output_tokens": {"dist": "fixed", "value": 4}},
              "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "30s",
                                   "steps": [{"rate": rate, "duration": f"{duration_s}s"}]}},
              "slo": {"min_samples": 1}, "telemetry": {"gpu": "off", "metrics_url": "off"}}
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _master_command(config: Path, run_dir: Path, workers: int, port: int, profile: Path | None,
                    metrics: bool = False) -> list[str]:
    from llmload.runtime.launcher.run import free_loopback_port, locust_command

    cmd = locust_command(config, run_dir, master=True, expect_workers=workers, master_port=port,
                         metrics_port=free_loopback_port() if metrics else None)
    cmd += ["--llmload-skip-preflight", "--llmload-no-report"]
    if profile is not None:  # the boot snippet as a file, run under cProfile
        boot = run_dir.parent / "boot.py"
        boot.write_text(cmd[2])
        cmd = [sys.executable, "-m", "cProfile", "-o", str(profile), str(boot), *cmd[3:]]
    return cmd


def _plan_step(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "plan.json").read_text())["steps"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def measure(workers: int, rate: float, duration_s: float, drivers: int, profile: Path | None,
            metrics: bool = False) -> dict:
    import psutil

    from llmload.clock import now
    from llmload.runtime.launcher.run import free_loopback_port

    folder = Path(tempfile.mkdtemp(prefix="fan-in-"))
    run_dir = folder / "run"
    run_dir.mkdir()
    port = free_loopback_port()
    env = {**os.environ, "LLMLOAD_WORKER_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    master = subprocess.Popen(_master_command(_config(folder, rate, duration_s), run_dir, workers, port, profile, metrics),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    proc = psutil.Process(master.pid)
    per = [workers // drivers + (1 if i < workers % drivers else 0) for i in range(drivers)]
    outs = [folder / f"driver-{i}.json" for i in range(drivers)]
    driver_procs = [subprocess.Popen([sys.executable, __file__, "--driver", "127.0.0.1", str(port), str(sum(per[:i])),
                                      str(per[i]), str(outs[i])], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL) for i in range(drivers) if per[i]]
    driver_ps = [psutil.Process(d.pid) for d in driver_procs]
    counted, delays, peak_rss = 0, [], 0
    rss_by_10s: dict[int, float] = {}  # seconds since the step's start // 10 -> the highest RSS (MiB)
    driver_cpu0 = driver_cpu_last = None
    cpu0 = t_start = t_last = cpu_last = None
    tail = run_dir / "records" / "master.jsonl"
    buffer, offset = b"", 0
    expected = int(rate * duration_s)
    deadline = time.time() + duration_s + 120
    try:
        while time.time() < deadline:  # until every record is counted, or the step drained
            time.sleep(TAIL_S)
            rss = proc.memory_info().rss
            peak_rss = max(peak_rss, rss)
            if t_start is not None:
                slot = int((now() - t_start) // 10)
                rss_by_10s[slot] = max(rss_by_10s.get(slot, 0.0), rss / 2**20)
            step = _plan_step(run_dir)
            if cpu0 is None and step is not None and step.get("start_at") and now() >= step["start_at"]:
                times = proc.cpu_times()
                cpu0, t_start = times.user + times.system, now()
                driver_cpu0 = sum(sum(d.cpu_times()[:2]) for d in driver_ps)
            if tail.exists():
                with tail.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                offset += len(chunk)
                seen = now()
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                for i, line in enumerate(lines):
                    if (counted + i) % DELAY_EVERY == 0:
                        delays.append(seen - json.loads(line)["closed_at"])
                counted += len(lines)
                if lines:
                    times = proc.cpu_times()
                    t_last, cpu_last = seen, times.user + times.system
                    driver_cpu_last = sum(sum(d.cpu_times()[:2]) for d in driver_ps)
            if counted >= expected or (step is not None and step.get("drained_at")):
                break
            if master.poll() is not None:
                break
    finally:
        if profile is not None and master.poll() is None:
            os.killpg(master.pid, signal.SIGINT)  # cProfile writes its file on the way out
            with contextlib.suppress(subprocess.TimeoutExpired):
                master.wait(timeout=300)
        wait_until = time.time() + 30  # the drivers write what they shipped once their workers drained
        while time.time() < wait_until and not all(p.exists() for p, n in zip(outs, per, strict=True) if n):
            time.sleep(0.1)
        if master.poll() is None:
            os.killpg(master.pid, signal.SIGKILL)
        said = master.communicate()[0] or ""
        for driver in driver_procs:
            driver.kill()
            driver.wait()
    shipped = sum(sum(json.loads(p.read_text()).values()) for p in outs if p.exists())
    drivers_done = all(p.exists() for p, n in zip(outs, per, strict=True) if n)
    import numpy as np

    if profile is None:  # the run directory holds every record (~400 MB at 10,000 req/s for 60 s)
        shutil.rmtree(folder, ignore_errors=True)
    d = np.array(delays) if delays else np.array([np.nan])
    cpu_s = (cpu_last - cpu0) if cpu0 is not None and cpu_last is not None else None
    wall_s = (t_last - t_start) if t_start is not None and t_last is not None else None
    series = [round(rss_by_10s.get(i, float("nan")), 1) for i in range(max(rss_by_10s, default=-1) + 1)]
    first_minute = max(series[:6], default=None)
    after = series[6:]
    return {
        "workers": workers, "rate": rate, "duration_s": duration_s, "drivers": len(driver_procs),
        "master_rss_mib_every_10s": series,
        "master_rss_first_minute_max_mib": first_minute,
        "master_rss_after_first_minute_max_mib": max(after) if after else None,
        "master_rss_growth_after_first_minute_mib": (round(max(after) - after[0], 1) if after else None),
        "live_metrics": metrics,
        "expected_records": expected, "shipped_records": shipped if drivers_done else None,
        "counted_records": counted, "lost_records": (shipped - counted) if drivers_done else None,
        "master_cpu_s": cpu_s, "master_wall_s": wall_s,
        "master_cpu_share": cpu_s / wall_s if cpu_s is not None and wall_s else None,
        "master_cpu_per_record_us": cpu_s / counted * 1e6 if cpu_s is not None and counted else None,
        "master_peak_rss_mib": round(peak_rss / 2**20, 1),
        "drivers_cpu_share": ((driver_cpu_last - driver_cpu0) / wall_s if driver_cpu0 is not None
                              and driver_cpu_last is not None and wall_s else None),
        "loadavg_during": list(os.getloadavg()),
        "delay_p50_ms": float(np.nanpercentile(d, 50) * 1000), "delay_p99_ms": float(np.nanpercentile(d, 99) * 1000),
        "delay_max_ms": float(np.nanmax(d) * 1000), "delay_samples": len(delays),
        "master_said": said[-2000:],
    }


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--driver":
        host, port, first, count, out = argv[1:6]
        drive(host, int(port), int(first), int(count), Path(out))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rate", type=float, default=10_000.0, help="requests/s of all workers together")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    parser.add_argument("--drivers", type=int, default=2, help="processes that host the fake workers")
    parser.add_argument("--quick", action="store_true", help="4 workers, 400 req/s, 3 s (the smoke test)")
    parser.add_argument("--profile", type=Path, default=None, help="run the master under cProfile into this file")
    parser.add_argument("--metrics", action="store_true",
                        help="the master also serves live Prometheus metrics (as deploy/kubernetes/ runs it)")
    parser.add_argument("--out", type=Path, default=RESULTS / "fan_in.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.workers, args.rate, args.duration, args.drivers = 4, 400.0, 3.0, 1
    from _common import machine, write_result

    before = machine()
    result = measure(args.workers, args.rate, args.duration, args.drivers, args.profile, args.metrics)
    write_result(args.out, "fan_in", argv, before, **result)
    shown = {k: v for k, v in result.items() if k != "master_said"}
    print(json.dumps(shown, indent=1))
    return 0 if result["lost_records"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
