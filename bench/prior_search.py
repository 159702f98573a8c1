"""The twin as the knee search's prior (issue 45 item 3), in virtual time: the same searches
(`llmload.sim.virtual_search`: the tool's ladder, refine steps, judging and estimate against the sim's
engine) without a prior and with `refine.prior` at the true knee x (1 + offset), i.e. a twin that far
off. After each refine step the knee is estimated again from the judged steps so far (`estimate_knee`,
what the run would answer if it stopped there; a search that stopped on precision keeps its answer): its
relative half-width, its error against the true
knee and whether its interval holds it; and per search, the refine steps until the half-width is first
within `--target` (10%) with the truth inside.

    PYTHONPATH=$PWD python bench/prior_search.py [--configs demo tpot] [--seeds 20] [--offsets 0 0.05 -0.05 0.1]

The configurations and their true knees are bench/knee_accuracy.py's (`CONFIGS`, the stored truths of
bench/results/knee_accuracy-virtual.json); writes bench/results/prior_search.json (or `--out`).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from _common import machine, write_result
from knee_accuracy import CONFIGS, run_config

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "prior_search.json"
#: the true knees (req/s) of bench/results/knee_accuracy-virtual.json (true_knee, 3 x 50k arrivals)
TRUTH = {"demo": 4.6162, "tpot": 5.5088}


def trajectory(rows: list[dict], ladder: int, slo, truth: float) -> list[dict]:
    """The knee after each refine step: half-width (relative), error, truth inside."""
    from analysis.knee import estimate_knee

    out = []
    for k in range(1, len(rows) - ladder + 1):
        knee = estimate_knee(rows[:ladder + k], slo)
        width = None if knee is None else knee.half_width_rel
        rate = None if knee is None else knee.rate
        held = knee is not None and (knee.low is None or knee.low <= truth) and (knee.high is None or truth <= knee.high)
        out.append({"steps": k, "half_width": width, "error": None if rate is None else abs(rate - truth) / truth,
                    "held": held})
    return out


def one(name: str, seed: int, prior: float | None, steps: int) -> dict:
    from llmload.config import parse_config
    from llmload.sim.virtual_search import virtual_search

    c = CONFIGS[name]
    raw = run_config(name, "http://127.0.0.1:9", seed, 1.0, quick=False)
    refine = raw["shape"]["ladder"]["refine"]
    refine.update(max_steps=steps, budget="100000s")  # the steps, not the budget, end it
    if prior is not None:
        refine["prior"] = prior
    config = parse_config(raw)
    found = virtual_search(config, c["sim"], (c["input"], c["output"]))
    ladder = sum(1 for r in found.rows if r.get("phase") != "refine")
    traj = trajectory(found.rows, ladder, config.slo, TRUTH[name])
    traj += [{**traj[-1], "steps": k} for k in range(len(traj) + 1, steps + 1)] if traj else []  # stopped: its answer
    return {"seed": seed, "stopped": found.stopped, "refine_steps": found.refine_steps, "trajectory": traj,
            "first_rates": [r["target_rate"] for r in found.rows[ladder:ladder + 2]]}


def steps_to(traj: list[dict], target: float) -> int | None:
    return next((t["steps"] for t in traj if t["half_width"] is not None and t["half_width"] <= target and t["held"]),
                None)


def summarise(runs: list[dict], target: float, steps: int) -> dict:
    per_step = []
    for k in range(1, steps + 1):
        at = [r["trajectory"][k - 1] for r in runs if len(r["trajectory"]) >= k]
        widths = [t["half_width"] for t in at if t["half_width"] is not None]
        errors = [t["error"] for t in at if t["error"] is not None]
        per_step.append({"steps": k, "median_half_width": statistics.median(widths) if widths else None,
                         "median_error": statistics.median(errors) if errors else None,
                         "held": sum(t["held"] for t in at), "searches": len(at)})
    reached = [steps_to(r["trajectory"], target) for r in runs]
    got = [s for s in reached if s is not None]
    return {"per_step": per_step, "steps_to_target": reached, "reached": len(got),
            "median_steps_to_target": statistics.median(got) if got else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=["demo", "tpot"], choices=sorted(TRUTH))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=6, help="refine steps per search (all run)")
    ap.add_argument("--offsets", type=float, nargs="+", default=[0.0, 0.05, -0.05, 0.10])
    ap.add_argument("--target", type=float, default=0.10, help="the half-width to reach (relative)")
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args(argv)
    before = machine()
    results: dict = {}
    for name in args.configs:
        results[name] = {"truth": TRUTH[name]}
        for label, offset in [("none", None), *((f"{o:+g}", o) for o in args.offsets)]:
            prior = None if offset is None else TRUTH[name] * (1 + offset)
            runs = [one(name, seed, prior, args.steps) for seed in range(1, args.seeds + 1)]
            summary = summarise(runs, args.target, args.steps)
            results[name][label] = {"prior": prior, **summary,  # per run: its last estimate, not every one
                                    "runs": [{**{k: v for k, v in r.items() if k != "trajectory"},
                                              "final": r["trajectory"][-1] if r["trajectory"] else None} for r in runs]}
            widths = " ".join(f"{s['median_half_width']:.3f}" if s["median_half_width"] is not None else "-"
                              for s in summary["per_step"])
            print(f"{name} prior {label}: median half-width after 1..{args.steps} steps {widths}; reached "
                  f"{args.target:.0%} with the truth inside in {summary['reached']}/{args.seeds}, median "
                  f"{summary['median_steps_to_target']} steps", flush=True)
    write_result(args.out, "prior_search", argv, before, seeds=args.seeds, steps=args.steps, target=args.target,
                 results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
