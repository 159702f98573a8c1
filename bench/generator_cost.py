"""Generator cost: CPU per streamed event and per request, ours against the reference client, same sim.

One script, one sim (`llmload sim --flavor vllm`, large capacity, 20 ms engine steps, ground truth on),
three clients in turn at the same constant rate and request size, each in its own process:

- `reference`: `bench/reference_client.py` (asyncio + aiohttp, the way `vllm bench serve` measures);
- `core`: our worker path without Locust (`WorkerRuntime` scheduler + queue + a pool of greenlets +
  `Sender` + `llmload.client.core.send` + the flushed record file), what each Locust user runs;
- `locust`: the whole generator (`llmload run`'s Locust command, local runner, pre-flight off), CPU
  of the Locust process from its start of arrivals to the step's drain (master work included).

CPU is user + system time of the client process over its sending window (process start-up and
imports left out); events are output-bearing stream events received. TTFT and token errors are the
client's stamps minus the sim's ground truth, joined on request_id. The clients take turns for
`--rounds` rounds (the machine may be shared); each figure is the median over rounds, ratios are
ours / reference of those medians.

    python bench/generator_cost.py                      # 50 req/s, 600 requests, 32 tokens, 3 rounds
    python bench/generator_cost.py --rate 100 --requests 1000 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

RESULTS = REPO / "bench" / "results"
#: timing figures leave out each client's first second (connections opening, lazy imports)
SETTLE_S = 1.0


def _pct(values, q):
    return None if not len(values) else round(float(np.percentile(np.asarray(values, dtype=float), q)), 6)


def _errors(rows: list[dict], truth: dict[str, dict]) -> dict:
    """TTFT / token timestamp errors (seconds, absolute) and send lag of client rows against the sim."""
    ttft, tokens, lag = [], [], []
    first = min(r["scheduled_at"] for r in rows)
    for row in rows:
        if row["scheduled_at"] < first + SETTLE_S:
            continue
        if row.get("sent_at") is not None and row.get("scheduled_at") is not None:
            lag.append(row["sent_at"] - row["scheduled_at"])
        gt = truth.get(row["request_id"])
        if gt is None or row.get("first_token_at") is None or gt.get("first_token_at") is None:
            continue
        ttft.append(abs(row["first_token_at"] - gt["first_token_at"]))
        tokens.extend(abs(c - s) for c, s in zip(row["token_times"], gt["token_times"], strict=False))
    return {"ttft_error_p50_s": _pct(ttft, 50), "ttft_error_p99_s": _pct(ttft, 99),
            "token_error_p50_s": _pct(tokens, 50), "token_error_p99_s": _pct(tokens, 99),
            "send_lag_p50_s": _pct(lag, 50), "send_lag_p99_s": _pct(lag, 99), "joined": len(ttft)}


def _cost(cpu_s: float, rows: list[dict]) -> dict:
    events = sum(len(r["token_times"]) for r in rows)
    ok = sum(1 for r in rows if r.get("outcome", "ok" if r.get("ok") else "fail") == "ok")
    return {"requests": len(rows), "ok": ok, "events": events, "cpu_s": round(cpu_s, 4),
            "cpu_per_request_ms": round(1000 * cpu_s / max(1, len(rows)), 4),
            "cpu_per_event_us": round(1e6 * cpu_s / max(1, events), 3)}


def _median(runs: list[dict]) -> dict:
    """Per key, the median over rounds (None when a round had none)."""
    out = {}
    for key in runs[0]:
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = round(float(np.median(values)), 6) if values else None
    out["rounds"] = len(runs)
    return out


def _read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# --------------------------------------------------------------------------- the three clients

def run_reference(url: str, args: argparse.Namespace, work: Path) -> tuple[float, list[dict]]:
    out = work / "reference.jsonl"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "reference_client.py"), "--url", url,
                           "--rate", str(args.rate), "--requests", str(args.requests),
                           "--max-tokens", str(args.max_tokens), "--out", str(out)],
                          capture_output=True, text=True, check=False)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = [{**r, "outcome": "ok" if r["ok"] else "fail"} for r in _read_jsonl(out)]
    return summary["cpu_s"], rows


def run_core(url: str, args: argparse.Namespace, work: Path) -> tuple[float, list[dict]]:
    out = work / "core.json"
    subprocess.run([sys.executable, __file__, "--_core", "--url", url, "--rate", str(args.rate),
                    "--requests", str(args.requests), "--max-tokens", str(args.max_tokens),
                    "--work", str(work)], check=True)
    result = json.loads(out.read_text())
    return result["cpu_s"], [r for r in _read_jsonl(Path(result["records"])) if r["step"] != "warm-up"]


def _core_child(args: argparse.Namespace) -> None:
    """Inside the `core` process: the worker path of `llmload.runtime` without Locust."""
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from llmload.clock import now
    from llmload.config import parse_config
    from llmload.runtime.wire.messages import StepMessage
    from llmload.runtime.worker.scheduler import WorkerRuntime
    from llmload.runtime.worker.sending import build_sender
    from shapes.steps import StepSpec

    config = parse_config(_config(args.url, args, Path(args.work))).model_dump(mode="json")
    drained = gevent.event.Event()
    runtime = WorkerRuntime(lambda kind, data: drained.set() if kind == "llmload:drained" else None,
                            build_sender=build_sender)
    users = 512

    def user() -> None:
        while True:
            runtime.run(runtime.take())

    pool = [gevent.spawn(user) for _ in range(users)]
    step = StepSpec(label="core", index=0, phase="ladder", arrival="constant", target_rate=args.rate,
                    duration_s=args.requests / args.rate, seed=1)
    message = {"worker": "0", "run_dir": args.work, "config": config, "shard": 0, "shards": 1, "seed": 1}

    def step_message(step: StepSpec) -> dict:
        return StepMessage(step=step, start_at=now() + 0.1, **message).to_dict()

    warm = StepSpec(label="warm-up", index=0, phase="ladder", arrival="constant", target_rate=10, duration_s=0.5,
                    seed=2)
    runtime.on_step(step_message(warm))  # lazy imports, connections
    drained.wait()
    drained.clear()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    runtime.on_step(step_message(step))
    drained.wait()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    gevent.killall(pool)
    runtime.close()
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    Path(args.work, "core.json").write_text(json.dumps(
        {"cpu_s": cpu_s, "records": str(Path(args.work) / "records" / "worker-0.jsonl")}))


def _config(url: str, args: argparse.Namespace, work: Path) -> dict:
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
            "requests": {"input_tokens": {"dist": "fixed", "value": 32},
                         "output_tokens": {"dist": "fixed", "value": args.max_tokens}, "seed": 1},
            "client": {"max_concurrency": 512},
            "shape": {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "30s",
                                 "steps": [{"rate": args.rate, "duration": f"{args.requests / args.rate}s"}]}},
            "telemetry": {"metrics_url": "off", "gpu": "off"}, "output": str(work)}


def run_locust(url: str, args: argparse.Namespace, work: Path, sim_pid: int) -> tuple[float, list[dict]]:
    import pandas as pd
    import yaml
    from _common import ChildSampler

    from llmload.runtime.launcher.run import locust_command

    config_path = work / "locust.yaml"
    config_path.write_text(yaml.safe_dump(_config(url, args, work)))
    run_dir = work / "locust"
    # no report.html: the figure is the CPU between the step's start and its drain, from the records
    cmd = locust_command(config_path, run_dir, report=False) + ["--llmload-skip-preflight"]
    with ChildSampler(interval_s=0.2) as sampler:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    step = json.loads((run_dir / "plan.json").read_text())["steps"][0]
    cpu_s = sampler.cpu_between(step["start_at"], step["drained_at"], exclude={sim_pid}) or 0.0
    rows = pd.read_parquet(run_dir / "records.parquet").to_dict("records")
    for row in rows:
        row["token_times"] = list(row["token_times"])
    return cpu_s, rows


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--clients", default="reference,core,locust")
    parser.add_argument("--rounds", type=int, default=3, help="each client this many times, medians kept")
    parser.add_argument("--out", type=Path, default=RESULTS / "generator_cost.json")
    parser.add_argument("--_core", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._core:
        _core_child(args)
        return 0

    from _common import machine, start_sim

    from llmload.sim.groundtruth import read_ground_truth

    work = Path(tempfile.mkdtemp(prefix="llmload-bench-"))
    sim, url, truth_path = start_sim(work / "sim")
    proc = sim.proc
    rounds: dict[str, list[dict]] = {name: [] for name in args.clients.split(",")}
    try:
        for i in range(args.rounds):  # clients take turns, so a busy spell of the machine hits all of them
            for name in rounds:
                folder = work / f"{name}-{i}"
                folder.mkdir()
                load0 = os.getloadavg()[0]
                started = time.time()
                if name == "reference":
                    cpu_s, rows = run_reference(url, args, folder)
                elif name == "core":
                    cpu_s, rows = run_core(url, args, folder)
                else:
                    cpu_s, rows = run_locust(url, args, folder, proc.pid)
                truth = read_ground_truth(truth_path)
                rounds[name].append({**_cost(cpu_s, rows), **_errors(rows, truth),
                                     "wall_s": round(time.time() - started, 2), "loadavg_before": round(load0, 2)})
                print(name, i, json.dumps(rounds[name][-1]), flush=True)
    finally:
        sim.stop()
    results = {name: _median(runs) for name, runs in rounds.items()}
    ref = results.get("reference")
    ratios = {}
    if ref:
        for name, r in results.items():
            if name != "reference":
                ratios[name] = {k: round(r[k] / ref[k], 3) for k in ("cpu_per_event_us", "cpu_per_request_ms")
                                if ref[k]}
    doc = {"benchmark": "generator_cost", "command": "python bench/generator_cost.py " + " ".join(argv or sys.argv[1:]),
           "params": {"rate": args.rate, "requests": args.requests, "max_tokens": args.max_tokens,
                      "rounds": args.rounds},
           "machine": machine(),
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results": results, "ratio_to_reference": ratios, "rounds": rounds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
