"""The sim twin against the sim it was fitted to (issue 45): a live 3-minute ladder against `llmload sim`
with known settings, `llmload fit` on its run directory, then each fitted setting against the truth and
the twin's knee (`llmload.sim.whatif.predict_knee`) against the true sim's knee, as fitted and with twice
the slots, both with the run's own request mix and SLO.

Three servers: slot-bound (slots fill, requests queue), KV-bound (the KV cache holds fewer sequences
than the slots allow) and prefill-bound (long prompts, short answers: the prompts' compute is the
limit). Both knees are computed the same way (same seeds, arrivals and tolerance), so the comparison is
the twin's parameters' error, not the bisection's noise.

    PYTHONPATH=$PWD python bench/twin_accuracy.py [--servers slot kv prefill] [--quick]

Writes bench/results/twin_accuracy.json (or `--out`); the run directories stay in `--work`.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import machine, write_result

from llmload.sim.process import start_sim_process

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "twin_accuracy.json"

#: sim settings (truth), request mix (uniform ranges), SLO, ladder rates (req/s): the top step well past
#: capacity, so the slots fill and requests wait (the running plateau the fit reads the slots from)
SERVERS = {
    "slot": {"sim": {"max_num_seqs": 8, "step_base_s": 0.020, "decode_cost_s": 0.002, "prefill_cost_s": 0.0002,
                     "num_blocks": 4096, "block_size": 16},
             "input": (50, 400), "output": (20, 60), "slo": {"ttft_p95": "500ms"},
             "rates": [0.8, 1.5, 2.2, 2.7, 3.2, 6.0]},
    "kv": {"sim": {"max_num_seqs": 32, "step_base_s": 0.020, "decode_cost_s": 0.002, "prefill_cost_s": 0.0002,
                   "num_blocks": 160, "block_size": 16},
           "input": (50, 400), "output": (20, 60), "slo": {"ttft_p95": "500ms"},
           "rates": [0.8, 1.6, 2.4, 3.0, 3.6, 4.4]},
    "prefill": {"sim": {"max_num_seqs": 16, "step_base_s": 0.030, "decode_cost_s": 0.003, "prefill_cost_s": 0.0005,
                        "num_blocks": 8192, "block_size": 16},
                "input": (300, 1800), "output": (4, 12), "slo": {"ttft_p95": "2500ms"},
                "rates": [0.3, 0.6, 0.9, 1.2, 1.5, 2.5]},
}
#: the keys a run shows (the others are the sim's defaults in both, or read from the server)
FITTED = ("max_num_seqs", "step_base_s", "decode_cost_s", "prefill_cost_s", "num_blocks")


#: (step_s, warmup_s, telemetry_s) of the live ladder; `--quick`'s (the smoke test): 2-s steps and the telemetry
#: at the default 1 s (4 polls a second of the Locust process and the sim were a fifth of the quick run's CPU;
#: its steps are too short for the slots' plateau at either interval)
LADDER = (25.0, 3.0, 0.25)
QUICK_LADDER = (2.0, 0.5, 1.0)


def run_config(name: str, url: str, *, step_s: float, warmup_s: float, telemetry_s: float) -> dict:
    c = SERVERS[name]
    return {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
            "requests": {"input_tokens": {"dist": "uniform", "min": c["input"][0], "max": c["input"][1]},
                         "output_tokens": {"dist": "uniform", "min": c["output"][0], "max": c["output"][1]}},
            "client": {"max_concurrency": 256, "max_send_lag_p99": "500ms"},
            "slo": {**c["slo"], "min_samples": 5},
            "shape": {"ladder": {"arrival": "poisson", "warmup": f"{warmup_s:g}s", "drain_timeout": "30s",
                                 "stop_after_failures": None,
                                 "steps": [{"rate": r, "duration": f"{step_s:g}s"} for r in c["rates"]]}},
            "telemetry": {"gpu": "off", "interval": f"{telemetry_s * 1000:g}ms"}, "conditions": {"gpus": 0}}


def live_ladder(name: str, work: Path, *, quick: bool) -> tuple[Path, float]:
    """The run directory of a live ladder against the true sim (reused when it finished before)."""
    folder = work / name
    run_dir = folder / "run"
    if (run_dir / "summary.json").exists():
        return run_dir, json.loads((folder / "wall.json").read_text())["wall_s"]
    folder.mkdir(parents=True, exist_ok=True)
    sim = start_sim_process(folder, settings={**SERVERS[name]["sim"], "enable_prefix_caching": False,
                                              "load_time_s": 0.0})
    started = time.monotonic()
    try:
        path = folder / "run.yaml"
        step_s, warmup_s, telemetry_s = QUICK_LADDER if quick else LADDER
        path.write_text(yaml.safe_dump(run_config(name, sim.url, step_s=step_s, warmup_s=warmup_s,
                                                  telemetry_s=telemetry_s), sort_keys=False))
        done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(path), "--out", str(run_dir),
                               "--no-report"],  # the fit reads the records: no report.html to draw
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800)
    finally:
        sim.stop()
    wall_s = time.monotonic() - started
    (folder / "run.log").write_text(done.stdout)
    (folder / "wall.json").write_text(json.dumps({"wall_s": wall_s}))
    return run_dir, wall_s


def evaluate(name: str, run_dir: Path, *, arrivals: int, seeds: tuple[int, ...]) -> dict:
    """The fit's settings against the truth, and the knees of twin and truth (x1 and x2 slots)."""
    import analysis
    from analysis.fit import fit_run, twin_yaml
    from llmload.config import load_config
    from llmload.sim.whatif import predict_knee, read_twin, sizes_from_records

    run = analysis.load_run(run_dir)
    fit = fit_run(run)
    twin_path = run_dir.parent / "twin.yaml"
    twin_path.write_text(twin_yaml(fit, source=str(run_dir)))
    if fit.misfit:  # no twin: nothing to predict from
        return {"misfit": list(fit.misfit), "twin": twin_path.read_text(), "params": {}, "knees": {}}
    truth = dict(SERVERS[name]["sim"])
    params = {}
    for key in FITTED:
        e = fit.get(key)
        params[key] = {"truth": truth[key], "fitted": None if e is None else float(e.value),
                       "error": None if e is None or e.error is None else float(e.error),
                       "basis": fit.unobserved.get(key) if e is None else e.basis,
                       "rel_error": None if e is None else abs(float(e.value) - truth[key]) / truth[key]}
    config = load_config(run_dir / "config.yaml") if (run_dir / "config.yaml").exists() else None
    slo = config.slo if config is not None else None
    if slo is None:
        from llmload.config import SLO

        slo = SLO.model_validate({**SERVERS[name]["slo"], "min_samples": 5})
    sizes = sizes_from_records(run.records)
    twin = read_twin(twin_path)
    knees = {}
    for label, factor in (("x1", 1), ("x2_slots", 2)):
        t0 = time.monotonic()
        true = predict_knee({**truth, "max_num_seqs": truth["max_num_seqs"] * factor}, sizes, slo,
                            arrivals=arrivals, seeds=seeds, tol=0.01)
        pred = predict_knee(twin.sim_settings(**{twin.slots_key: twin.slots() * factor}), sizes, slo,
                            arrivals=arrivals, seeds=seeds, tol=0.01, guess=true["rate"])
        rel = None if true["rate"] is None or pred["rate"] is None else abs(pred["rate"] - true["rate"]) / true["rate"]
        knees[label] = {"true": true["rate"], "twin": pred["rate"], "rel_error": rel, "binding": true["binding"],
                        "twin_binding": pred["binding"], "seconds": round(time.monotonic() - t0, 1)}
    return {"params": params, "unobserved": dict(fit.unobserved), "knees": knees, "twin": twin_path.read_text()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", nargs="+", choices=sorted(SERVERS), default=["slot", "kv", "prefill"])
    parser.add_argument("--quick", action="store_true",
                        help="2 s steps, telemetry every second, few arrivals (the smoke test)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/twin_work"))
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    before = machine()
    step_s, warmup_s, telemetry_s = QUICK_LADDER if args.quick else LADDER
    arrivals, seeds = (400, (1,)) if args.quick else (4000, (1, 2))
    results = {}
    for name in args.servers:
        run_dir, wall_s = live_ladder(name, args.work, quick=args.quick)
        results[name] = {"ladder_wall_s": round(wall_s, 1), **evaluate(name, run_dir, arrivals=arrivals, seeds=seeds)}
        r = results[name]
        for why in r.get("misfit", []):
            print(name, "DOES NOT FIT:", why, flush=True)
        print(name, f"ladder {wall_s:.0f} s;", "; ".join(
            f"{k} {p['fitted']} vs {p['truth']}" + (f" ({p['rel_error']:.1%})" if p["rel_error"] is not None else "")
            for k, p in r["params"].items()), flush=True)
        for label, k in r["knees"].items():
            print(f"  knee {label}: twin {k['twin']} true {k['true']}" +
                  (f" ({k['rel_error']:.1%})" if k["rel_error"] is not None else ""), flush=True)
    write_result(args.out, "twin_accuracy", argv, before, step_s=step_s, warmup_s=warmup_s, telemetry_s=telemetry_s,
                 arrivals=arrivals, seeds=list(seeds), servers=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
