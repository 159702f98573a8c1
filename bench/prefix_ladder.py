"""A shared-prefix ladder against the vLLM sim, prefix caching on vs off (issue 18).

    PYTHONPATH=. python bench/prefix_ladder.py [--step-s 8] [--rates 2,4,6,8,10] [--work /tmp/prefix-ladder]
        [--caching both|on|off] [--out bench/results/prefix_ladder.json]

Runs the same Poisson ladder (1,024-token system-like prefix shared by `ratio` of the requests, 1,280
input / 32 output tokens) twice with `llmload run`, once per sim setting, and prints per rate the TTFT
p50 (sim ground truth) and p95 (llmload's step), the step verdicts, the share of prompt tokens served
from the cache (the sim's `cached_tokens` vs the prefix share the requests drew) and the
`vllm:prefix_cache_hits_total / prefix_cache_queries_total` counters. Writes
bench/results/prefix_ladder.json (or `--out`), with the machine's load average and CPU-speed probe.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml
from _common import machine

from llmload.sim.process import start_sim_process

SIM = {"max_num_seqs": 32, "step_base_s": "20ms", "decode_cost_s": "0.5ms", "prefill_cost_s": "0.25ms",
       "max_num_batched_tokens": 2048, "load_time_s": 0}
RATIO, PREFIX, INPUT, OUTPUT = 0.8, 1024, 1280, 32
RATES = (2, 4, 6, 8, 10)
REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "prefix_ladder.json"


def _config(url: str, step_s: float, rates: tuple[float, ...]) -> dict:
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
            "requests": {"input_tokens": {"dist": "fixed", "value": INPUT},
                         "output_tokens": {"dist": "fixed", "value": OUTPUT},
                         "shared_prefix": {"ratio": RATIO, "prefixes": 1, "tokens": PREFIX}, "seed": 1},
            "client": {"max_concurrency": 128, "max_send_lag_p99": "100ms"},
            "slo": {"ttft_p95": "500ms", "tpot_p95": "200ms", "max_reject_ratio": 0.0, "min_samples": 5},
            "shape": {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "20s",
                                 "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in rates],
                                 "stop_after_failures": None}},  # every rate: the figure is TTFT per rate
            "telemetry": {"gpu": "off"}, "conditions": {"gpus": 0}}


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def run_one(folder: Path, caching: bool, step_s: float, rates: tuple[float, ...] = RATES) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    sim = start_sim_process(folder, settings={**SIM, "enable_prefix_caching": caching})
    try:
        cfg = folder / "run.yaml"
        cfg.write_text(yaml.safe_dump(_config(sim.url, step_s, rates)))
        run_dir = folder / "run"
        subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(cfg), "--out", str(run_dir), "--no-report"],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        hits, queries = _metric(sim.url, "vllm:prefix_cache_hits_total"), \
            _metric(sim.url, "vllm:prefix_cache_queries_total")
    finally:
        sim.stop()
    import pandas as pd

    records = pd.read_parquet(run_dir / "records.parquet")
    planned = dict(zip(records["request_id"], records["prefix_id"].notna(), strict=True))
    rows = [json.loads(x) for x in sim.ground_truth.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["request_id"] in planned and r["first_token_at"]]
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"steps": [{"rate": st["target_rate"], "ttft_p50_s": _p50(rows, st), "ttft_p95_s": st["ttft_p95_s"],
                       "verdict": st["verdict"], "failing": st["failing"]} for st in summary["steps"]],
            "last_passing_rate": summary["last_passing_rate"],
            "prefix_share": sum(planned[r["request_id"]] for r in rows) / len(rows),
            "cached_share": sum(r["cached_tokens"] for r in rows) / sum(r["input_tokens"] for r in rows),
            "hits": hits, "queries": queries}


def _p50(rows: list[dict], step: dict) -> float | None:
    v = [r["first_token_at"] - r["received_at"] for r in rows
         if step["window_start"] <= r["received_at"] < step["window_end"]]
    return statistics.median(v) if v else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-s", type=float, default=8.0)
    ap.add_argument("--rates", default=",".join(f"{r:g}" for r in RATES), help="comma-separated req/s")
    ap.add_argument("--work", type=Path, default=Path("/tmp/prefix-ladder"), help="run directories")
    ap.add_argument("--out", type=Path, default=RESULT, help="the result JSON")
    ap.add_argument("--caching", choices=("both", "on", "off"), default="both",
                    help="the sim settings to run (one: a smoke test of the script, no comparison)")
    args = ap.parse_args()
    rates = tuple(float(r) for r in args.rates.split(","))
    result = {"command": " ".join(sys.argv), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(),
              "sim": SIM, "mix": {"ratio": RATIO, "prefix_tokens": PREFIX, "input": INPUT, "output": OUTPUT}}
    for caching in {"both": (True, False), "on": (True,), "off": (False,)}[args.caching]:
        res = run_one(args.work / ("on" if caching else "off"), caching, args.step_s, rates)
        result["caching_on" if caching else "caching_off"] = res
        # a prefix request finds (3 template + PREFIX) // 16 whole blocks once its prefix is cached
        expected = res["prefix_share"] * ((3 + PREFIX) // 16 * 16) / (INPUT)
        ratio = res["hits"] / res["queries"] if res["queries"] else 0.0
        print(f"prefix caching {'on' if caching else 'off'}: {res['prefix_share']:.1%} of requests drew the prefix "
              f"(planned {RATIO:.0%}) -> at most {expected:.1%} of prompt tokens cached; ground truth "
              f"{res['cached_share']:.1%}, counters hits/queries {ratio:.1%}; "
              f"last passing rate {res['last_passing_rate']}")
        for st in res["steps"]:
            p50 = f"{st['ttft_p50_s'] * 1000:6.0f}" if st["ttft_p50_s"] is not None else "     -"
            print(f"  {st['rate']:>4g} req/s  TTFT p50 {p50} ms  p95 {st['ttft_p95_s'] * 1000:6.0f} ms  "
                  f"{st['verdict']} {','.join(st['failing'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
