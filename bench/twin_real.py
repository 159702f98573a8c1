"""The twin against the real llama.cpp engine (issue 45): a short ladder against llama-server with Gemma 3
270M (`--parallel P`), `llmload fit` on it, the twin's knee (`llmload.sim.whatif.knee_with_range`, with
the ladder's own request mix) for `--parallel P` and for another `--parallel`, and the knee a live knee
search (ladder + refine) measures at each.

    eval "$(llmload engine path)"; PYTHONPATH=$PWD python bench/twin_real.py [--parallel 4] [--other 2]

Each live run starts its own llama-server on 127.0.0.1 (`llmload.llama_server.start_llama_server`, one
thread, 4096 context) and stops it. Slow: the engine serves one stream at about 27 tok/s on a shared
2-core VM, so every run is a few minutes (`--quick`: seconds, for the smoke test; its figures mean
nothing). Writes bench/results/twin_real.json (or `--out`); the run directories stay in `--work`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import machine, write_result

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "twin_real.json"
#: loose targets: on the shared 2-core VM (load 12-14 from other jobs) one llama-server thread gets a
#: fraction of a core, and a 100-token prompt takes seconds
SLO = {"ttft_p95": "5s", "tpot_p95": "1s", "min_samples": 5}


def config(url: str, *, rates: list[float], step_s: float, refine: dict | None) -> dict:
    ladder = {"arrival": "poisson_exact", "warmup": "3s", "drain_timeout": "30s", "stop_after_failures": 1,
              "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in rates]}
    if refine is not None:
        ladder["refine"] = refine
    else:
        ladder["stop_after_failures"] = None  # the fit's ladder: every step, the overload too
    return {"target": {"url": url, "api": "openai-chat", "model": "gemma3-270m", "server": "llamacpp",
                       "timeout": "300s", "idle_timeout": "300s"},  # queued past the slots: no headers yet
            "requests": {"input_tokens": {"dist": "uniform", "min": 16, "max": 96},
                         "output_tokens": {"dist": "fixed", "value": 8}, "ignore_eos": True, "seed": 1},
            "client": {"max_concurrency": 64, "max_send_lag_p99": "200ms", "max_worker_cpu": 1.0},
            "slo": dict(SLO), "shape": {"ladder": ladder},
            "telemetry": {"interval": "500ms", "gpu": "off"},
            "conditions": {"instances": 1, "notes": "llama-server --threads 1 --ctx-size 4096, Gemma 3 270M"}}


def live(name: str, work: Path, parallel: int, cfg_of) -> Path:
    """A run against a fresh llama-server with `parallel` slots (reused when it finished before)."""
    from llmload.llama_server import start_llama_server, stop_llama_server

    folder = work / name
    run_dir = folder / "run"
    if (run_dir / "summary.json").exists():
        return run_dir
    folder.mkdir(parents=True, exist_ok=True)
    url, proc = start_llama_server(port=0, parallel=parallel, threads=1, ctx_size=4096,
                                   log_path=folder / "llama-server.log")
    started = time.monotonic()
    try:
        path = folder / "run.yaml"
        path.write_text(yaml.safe_dump(cfg_of(url), sort_keys=False))
        done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(path), "--out", str(run_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
                              env={**os.environ})
    finally:
        stop_llama_server(proc)
    (folder / "run.log").write_text(done.stdout)
    (folder / "wall.json").write_text(json.dumps({"wall_s": time.monotonic() - started}))
    return run_dir


def measured_knee(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    knee = summary.get("knee") or {}
    return {k: knee.get(k) for k in ("rate", "low", "high", "binding")} | {
        "search": (summary.get("search") or {}).get("stopped")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallel", type=int, default=4, help="the slots of the server the twin is fitted to")
    ap.add_argument("--other", type=int, default=2, help="the other --parallel the twin predicts")
    ap.add_argument("--quick", action="store_true", help="seconds-long runs (the smoke test)")
    ap.add_argument("--search-rates", type=float, nargs="+", help="the live searches' ladder (req/s)")
    ap.add_argument("--fit-rates", type=float, nargs="+", help="the fit's ladder (req/s)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/twin_real"))
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    before = machine()
    from llmload.llama_server import find_llama_server, find_model

    if find_llama_server() is None or find_model() is None:
        print("no llama-server or model here (eval \"$(llmload engine path)\"): nothing measured")
        write_result(args.out, "twin_real", argv, before, skipped="no engine")
        return 0
    import analysis
    from analysis.fit import describe, fit_run, twin_yaml
    from llmload.config import SLO as SLOModel
    from llmload.sim.whatif import knee_with_range, read_twin, sizes_from_records

    step_s = 4.0 if args.quick else 45.0
    fit_rates = args.fit_rates or ([0.15, 0.4] if args.quick else [0.06, 0.12, 0.2, 0.35])
    search_rates = args.search_rates or ([0.2, 0.5] if args.quick else [0.08, 0.16, 0.28])
    refine = ({"budget": "20s", "duration": "8s", "max_steps": 1} if args.quick
              else {"budget": "300s", "precision": 0.05, "max_steps": 4})
    ladder_dir = live(f"ladder-p{args.parallel}", args.work, args.parallel,
                      lambda url: config(url, rates=fit_rates, step_s=step_s, refine=None))
    run = analysis.load_run(ladder_dir)
    fit = fit_run(run)
    twin_path = args.work / "twin.yaml"
    twin_path.write_text(twin_yaml(fit, source=str(ladder_dir)))
    for e in fit.estimates:
        print(f"  fit {e.key}: {describe(e)}", flush=True)
    for key, why in fit.unobserved.items():
        print(f"  fit {key}: not observed ({why})", flush=True)
    for why in fit.misfit:
        print(f"  fit: DOES NOT FIT: {why}", flush=True)
    results: dict = {"fit": {e.key: {"value": e.value, "error": e.error, "basis": e.basis} for e in fit.estimates},
                     "unobserved": dict(fit.unobserved), "misfit": list(fit.misfit), "twin": twin_path.read_text()}
    slo = SLOModel.model_validate(SLO)
    sizes = sizes_from_records(run.records)
    predictions = {}
    if not fit.misfit:
        twin = read_twin(twin_path)
        for parallel in (args.parallel, args.other):
            t0 = time.monotonic()
            got = knee_with_range(twin, sizes, slo, changes={twin.slots_key: parallel},
                                  arrivals=400 if args.quick else 3000, arrival="poisson")
            predictions[parallel] = {**got, "seconds": round(time.monotonic() - t0, 1)}
            print(f"  twin --parallel {parallel}: {got}", flush=True)
    results["predicted"] = predictions
    measured = {}
    for parallel in (args.parallel, args.other):
        run_dir = live(f"search-p{parallel}", args.work, parallel,
                       lambda url: config(url, rates=search_rates, step_s=step_s, refine=refine))
        measured[parallel] = {**measured_knee(run_dir),
                              "wall_s": json.loads((run_dir.parent / "wall.json").read_text())["wall_s"]}
        print(f"  live --parallel {parallel}: {measured[parallel]}", flush=True)
    results["measured"] = measured
    results["error"] = {p: (None if not predictions.get(p) or predictions[p]["rate"] is None or measured[p]["rate"] is None
                            else (predictions[p]["rate"] - measured[p]["rate"]) / measured[p]["rate"])
                        for p in measured}
    print("  relative error (twin - live) / live:", results["error"], flush=True)
    write_result(args.out, "twin_real", argv, before, parallel=args.parallel, other=args.other, step_s=step_s,
                 fit_rates=fit_rates, search_rates=search_rates, refine=refine, slo=SLO, **results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
