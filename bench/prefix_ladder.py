"""A shared-prefix ladder against the vLLM sim, prefix caching on vs off (issue 18).

    PYTHONPATH=. python bench/prefix_ladder.py [--step-s 8] [--out /tmp/prefix-ladder]

Runs the same Poisson ladder (1,024-token system-like prefix shared by `ratio` of the requests, 1,280
input / 32 output tokens) twice with `llmload run`, once per sim setting, and prints per rate the TTFT
p50/p95 the sim's ground truth saw, the share of prompt tokens served from the cache (the sim's
`cached_tokens` vs the planned prefix share) and the `vllm:prefix_cache_hits_total /
prefix_cache_queries_total` counters.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from llmload.sim.process import start_sim_process

SIM = {"max_num_seqs": 32, "step_base_s": "20ms", "decode_cost_s": "0.5ms", "prefill_cost_s": "0.25ms",
       "max_num_batched_tokens": 2048, "load_time_s": 0}
RATIO, PREFIX, INPUT, OUTPUT = 0.8, 1024, 1280, 32
RATES = (2, 4, 6, 8, 10)


def _config(url: str, step_s: float) -> dict:
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
            "requests": {"input_tokens": {"dist": "fixed", "value": INPUT},
                         "output_tokens": {"dist": "fixed", "value": OUTPUT},
                         "shared_prefix": {"ratio": RATIO, "prefixes": 1, "tokens": PREFIX}, "seed": 1},
            "client": {"max_concurrency": 128, "max_send_lag_p99": "100ms"},
            "slo": {"ttft_p95": "500ms", "tpot_p95": "200ms", "max_reject_ratio": 0.0, "min_samples": 5},
            "shape": {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "20s",
                                 "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in RATES]}},
            "telemetry": {"gpu": "off"}, "conditions": {"gpus": 0}}


def _metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def run_one(folder: Path, caching: bool, step_s: float) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    sim = start_sim_process(folder, settings={**SIM, "enable_prefix_caching": caching})
    try:
        cfg = folder / "run.yaml"
        cfg.write_text(yaml.safe_dump(_config(sim.url, step_s)))
        subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(cfg), "--out", str(folder / "runs")],
                       check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        hits, queries = _metric(sim.url, "vllm:prefix_cache_hits_total"), \
            _metric(sim.url, "vllm:prefix_cache_queries_total")
    finally:
        sim.stop()
    rows = [json.loads(x) for x in sim.ground_truth.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["first_token_at"] and r["input_tokens"] >= INPUT - 8]
    t0 = min(r["received_at"] for r in rows)
    # the ladder's steps follow one another; bucket rows by arrival into len(RATES) equal windows
    span = (max(r["received_at"] for r in rows) - t0) / len(RATES) + 1e-9
    steps = {}
    for r in rows:
        i = min(int((r["received_at"] - t0) / span), len(RATES) - 1)
        steps.setdefault(RATES[i], []).append(r["first_token_at"] - r["received_at"])
    cached = sum(r["cached_tokens"] for r in rows)
    return {"steps": {rate: (statistics.median(v), sorted(v)[int(0.95 * (len(v) - 1))], len(v))
                      for rate, v in sorted(steps.items())},
            "cached_share": cached / sum(r["input_tokens"] for r in rows),
            "hits": hits, "queries": queries}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-s", type=float, default=8.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/prefix-ladder"))
    args = ap.parse_args()
    planned = RATIO * (PREFIX // 16 * 16) / (INPUT + 0)  # tokens of whole cached blocks per prompt
    print(f"planned: {RATIO:.0%} of requests share a {PREFIX}-token prefix of {INPUT}-token prompts "
          f"-> at most {planned:.1%} of prompt tokens from the cache (first request of the prefix misses)")
    for caching in (True, False):
        res = run_one(args.out / ("on" if caching else "off"), caching, args.step_s)
        ratio = res["hits"] / res["queries"] if res["queries"] else 0.0
        print(f"\nprefix caching {'on' if caching else 'off'}: cached share of prompt tokens "
              f"{res['cached_share']:.1%}; counters hits/queries {res['hits']:.0f}/{res['queries']:.0f} "
              f"= {ratio:.1%}")
        for rate, (p50, p95, n) in res["steps"].items():
            print(f"  {rate:>3} req/s  TTFT p50 {p50 * 1000:7.0f} ms  p95 {p95 * 1000:7.0f} ms  (n={n})")


if __name__ == "__main__":
    main()
