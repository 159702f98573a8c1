"""How late does the sim write tokens compared with its engine's plan? At 1, 100 and 1,000 streams.

Starts `llmload sim --flavor vllm` pinned to one core (`taskset`, when there is one), opens N concurrent
streaming chat requests on loopback from this process (pinned to another core) and reads them to the
end. The sim's ground-truth log has, per token, `planned_times` (the engine's planned end of the step
that produced it) and `token_times` (wall time just after the event was written to the socket); the
lateness is their difference. Writes bench/results/sim_timing.json and prints a table.

    python bench/sim_timing.py [--streams 1 100 1000] [--tokens N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "sim_timing.json"


async def _stream(port: int, n: int, tokens: int) -> int:
    """One streaming chat request over a raw socket; returns the bytes read."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": f"stream {n}"}],
                       "max_tokens": tokens, "ignore_eos": True, "stream": True}).encode()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"connection: close\r\nx-request-id: bench-%d\r\ncontent-length: %d\r\n\r\n%b"
                 % (n, len(body), body))
    await writer.drain()
    total = 0
    while chunk := await reader.read(65536):
        total += len(chunk)
    writer.close()
    return total


async def _run_streams(port: int, streams: int, tokens: int) -> None:
    await asyncio.gather(*(_stream(port, i, tokens) for i in range(streams)))


def _pin(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


def measure(streams: int, tokens: int, workdir: Path) -> dict:
    """Run one level against a fresh sim; return lateness percentiles in milliseconds."""
    gt = workdir / f"gt-{streams}.jsonl"
    cfg = workdir / "sim.yaml"
    cfg.write_text(f"max_num_seqs: {max(streams, 1)}\nnum_blocks: 65536\nload_time_s: 0\n")
    cmd = _pin(0) + [sys.executable, "-m", "llmload.cli", "sim", "--flavor", "vllm", "--port", "0",
                     "--config", str(cfg), "--ground-truth", str(gt)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        port = int(proc.stdout.readline().split("http://127.0.0.1:")[1].split()[0])
        if _pin(1):
            os.sched_setaffinity(0, {1})
        t0 = time.monotonic()
        asyncio.run(_run_streams(port, streams, tokens))
        wall = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    rows = [json.loads(line) for line in gt.read_text().splitlines()]
    late, first_late, itl_err, by_step = [], [], [], {}
    for row in rows:
        d = np.array(row["token_times"]) - np.array(row["planned_times"])
        late.extend(d.tolist())
        first_late.append(d[0])
        itl_err.extend(np.diff(d).tolist())  # gap written minus gap planned: what an ITL would be off by
        for planned, lateness in zip(row["planned_times"], d.tolist(), strict=True):
            by_step.setdefault(planned, []).append(lateness)
    ms = np.array(late) * 1000
    # per step: the first write's lateness is the wake-up delay, the spread is the serial write cost
    wake = np.array([min(v) for v in by_step.values()]) * 1000
    spread = np.array([max(v) - min(v) for v in by_step.values()]) * 1000
    per_write_us = [1e6 * (max(v) - min(v)) / (len(v) - 1) for v in by_step.values() if len(v) > 1]
    return {"streams": streams, "tokens_per_stream": tokens, "requests_ok": sum(r["outcome"] == "ok" for r in rows),
            "token_writes": int(ms.size), "wall_s": round(wall, 3),
            "lateness_ms": {"p50": round(float(np.percentile(ms, 50)), 3),
                            "p99": round(float(np.percentile(ms, 99)), 3),
                            "p999": round(float(np.percentile(ms, 99.9)), 3),
                            "max": round(float(ms.max()), 3),
                            "mean": round(float(ms.mean()), 3)},
            "first_token_lateness_ms_p99": round(float(np.percentile(np.array(first_late) * 1000, 99)), 3),
            "share_within_2ms": round(float((ms <= 2.0).mean()), 4),
            "itl_error_ms": ({"p50": round(float(np.percentile(np.abs(itl_err), 50) * 1000), 3),
                              "p99": round(float(np.percentile(np.abs(itl_err), 99) * 1000), 3)}
                             if itl_err else None),
            "steps": len(by_step),
            "wakeup_lateness_ms": {"p50": round(float(np.percentile(wake, 50)), 3),
                                   "p99": round(float(np.percentile(wake, 99)), 3)},
            "write_spread_ms": {"p50": round(float(np.percentile(spread, 50)), 3),
                                "max": round(float(spread.max()), 3)},
            "write_cost_us_per_token": round(float(np.median(per_write_us)), 2) if per_write_us else None}


def main() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    from _common import machine

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--tokens", type=int, default=None,
                        help="tokens per stream (default: about 4,000 token writes per level, at least 20)")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.streams:
            tokens = args.tokens or max(20, min(200, 4000 // n))
            results.append(measure(n, tokens, Path(tmp)))
            r = results[-1]
            print(f"{n:>5} streams: lateness p50 {r['lateness_ms']['p50']:.3f} ms  p99 {r['lateness_ms']['p99']:.3f} ms"
                  f"  max {r['lateness_ms']['max']:.3f} ms  within 2 ms {r['share_within_2ms']:.1%}  wake-up p50 "
                  f"{r['wakeup_lateness_ms']['p50']:.3f} ms  write {r['write_cost_us_per_token']} us/token  "
                  f"|ITL error| p99 {(r['itl_error_ms'] or {}).get('p99')} ms",
                  flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    out = {"load_average_1m_at_end": load, "what": "token write time minus the engine's planned step end (sim ground truth), vLLM flavour, "
                   "sim pinned to one core, default step costs",
           "machine": machine(),
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
