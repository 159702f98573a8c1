"""A config a user writes for a slow server (issue 41), against a sim whose true knee is known, in virtual time.

    PYTHONPATH=. python bench/user_config_case.py [--seeds 20] [--first-seed 1] [--min-samples N]
        [--refine-duration 90s] [--truth-arrivals 30000] [--raw-shares]
        [--outputs fixed|uniform|exponential]
        [--out bench/results/user_config_case.json]

A ladder of 1, 2, 3, 4, 5 req/s of 30 s steps, `slo: {ttft_p95: 800ms, tpot_p95: 100ms}`, a 6 minute refine
budget, no `min_samples` unless given; the sim: 6 slots, 30 ms + 1.2 ms per sequence per step, 64-in / 32-out
(true knee about 3.47 req/s, `llmload.sim.truth.true_knee`). Prints each seed's answer, whether its interval
holds the truth, and the median and worst point error (`llmload.sim.virtual_search`: the tool's own steps,
judging and search against the sim's engine, about a second a seed). bench/README.md has the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from pathlib import Path

import numpy as np
from _common import machine, write_result

from analysis.knee import estimate_knee, knee_sentence
from llmload.config import SLO, Config
from llmload.sim.settings import SimSettings
from llmload.sim.truth import RequestSizes, true_knee
from llmload.sim.virtual_search import step_table, virtual_search

SIM = {"max_num_seqs": 6, "step_base_s": "30ms", "decode_cost_s": "1.2ms", "prefill_cost_s": "0.1ms"}
SIZES = (64, 32)
TARGETS = {"ttft_p95": "800ms", "tpot_p95": "100ms"}


def output_sizes(kind: str) -> RequestSizes:
    """The sim's request sizes: 64 in, and 32 out (`fixed`), uniform on 8-56 or exponential with mean 32
    (at least 1): a server whose requests take different times (the truth is measured with the same)."""
    if kind == "fixed":
        return SIZES

    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        out = rng.integers(8, 57, n) if kind == "uniform" else np.maximum(1, np.round(rng.exponential(32.0, n)))
        return np.full(n, SIZES[0]), out.astype(int)

    return draw


def user_config(seed: int, *, min_samples: int | None = None, refine_duration: str | None = None,
                refine_budget: str = "6m") -> Config:
    """The user's config as written, its requests drawn from `seed`."""
    return Config.model_validate(user_config_dict(seed, min_samples=min_samples, refine_duration=refine_duration,
                                                  refine_budget=refine_budget))


def user_config_dict(seed: int, *, min_samples: int | None = None, refine_duration: str | None = None,
                     refine_budget: str = "6m") -> dict:
    """The user's config as its YAML would read, its requests drawn from `seed` (`refine_budget`: its 6 minutes,
    or another budget to try)."""
    slo: dict = dict(TARGETS)
    if min_samples is not None:
        slo["min_samples"] = min_samples
    refine: dict = {"budget": refine_budget}
    if refine_duration:
        refine["duration"] = refine_duration
    return {"target": {"url": "http://127.0.0.1:9", "model": "m"},
            "requests": {"input_tokens": {"dist": "fixed", "value": SIZES[0]},
                         "output_tokens": {"dist": "fixed", "value": SIZES[1]}, "seed": seed},
            "shape": {"ladder": {"steps": [{"rate": r, "duration": "30s"} for r in (1, 2, 3, 4, 5)], "refine": refine}},
            "slo": slo}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--min-samples", type=int, default=None, help="write slo.min_samples (default: unset)")
    ap.add_argument("--refine-duration", default=None, help="write refine.duration (default: unset, sized)")
    ap.add_argument("--refine-budget", default="6m", help="refine.budget (default: 6m, as the user wrote it)")
    ap.add_argument("--truth-arrivals", type=int, default=30_000,
                    help="arrivals per rate of the true knee's steady state (fewer: a rougher truth, e.g. the smoke test)")
    ap.add_argument("--raw-shares", action="store_true",
                    help="the knee from the steps' raw TTFT shares (not read against their arrivals, "
                         "analysis.share_cv): the estimator before it")
    ap.add_argument("--outputs", choices=("fixed", "uniform", "exponential"), default="fixed",
                    help="output lengths the sim's requests draw (default: 32 each, as the config writes)")
    ap.add_argument("--runtime", action="store_true",
                    help="each seed as `llmload run CONFIG --virtual --sim SIM` runs it (the product's runtime in "
                         "virtual time, about 5 CPU s a seed, two at a time) instead of `virtual_search`")
    ap.add_argument("--work", type=Path, default=Path("/tmp/user-config-case"), help="with --runtime: run directories")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "user_config_case.json")
    args = ap.parse_args()
    before = machine()
    sizes = output_sizes(args.outputs)
    truth = true_knee(SimSettings.model_validate(SIM), sizes, SLO(ttft_p95=0.8, tpot_p95=0.1), lo=1, hi=8,
                      tol=0.005, arrivals=args.truth_arrivals, seeds=(1,))
    t = float(truth["rate"] if isinstance(truth, dict) else truth)
    print(f"true knee {t:.3f} req/s")
    if args.runtime:
        return runtime_main(args, t, before)
    errors, held, runs = [], 0, []
    options = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        config = user_config(seed, min_samples=args.min_samples, refine_duration=args.refine_duration,
                             refine_budget=args.refine_budget)
        if args.raw_shares:
            options["estimate"] = partial(estimate_knee, slo=config.slo)
        found = virtual_search(config, SIM, sizes, **options)
        k = found.knee
        ok = (k is not None and k.rate is not None and (k.low is None or k.low <= t)
              and (k.high is None or t <= k.high))
        held += ok
        if k is not None and k.rate is not None:
            errors.append(abs(k.rate - t) / t)
        runs.append({"seed": seed, "rate": None if k is None else k.rate, "low": None if k is None else k.low,
                     "high": None if k is None else k.high, "holds": bool(ok), "stopped": found.stopped,
                     "virtual_run_s": round(found.run_s, 1), "steps": step_table(found.rows, list(TARGETS))})
        steps = " ".join(f"{r['label']}:{r['verdict'][:4]}" for r in found.rows)
        print(f"{seed:3d} {'holds' if ok else 'MISS '} {knee_sentence(k)} | {found.stopped} {found.run_s:.0f} s | {steps}")
    if errors:
        print(f"answered {len(errors)} of {args.seeds}; interval holds the truth in {held}; point error median "
              f"{statistics.median(errors):.1%}, worst {max(errors):.1%}; within 10% in {sum(e <= 0.1 for e in errors)}")
    write_result(args.out, "user_config_case", sys.argv[1:], before, true_knee=t, truth_arrivals=args.truth_arrivals,
                 raw_shares=args.raw_shares, outputs=args.outputs,
                 runs=runs, held=held,
                 median_error=statistics.median(errors) if errors else None,
                 worst_error=max(errors) if errors else None)


def _runtime_seed(job: tuple[int, Path, int | None, str | None, str]) -> dict:
    from knee_accuracy import runtime_run

    seed, work, min_samples, refine_duration, refine_budget = job
    config = user_config_dict(seed, min_samples=min_samples, refine_duration=refine_duration,
                              refine_budget=refine_budget)
    return {"seed": seed, **runtime_run(work / f"user-config-{seed}", config, SIM)}


def runtime_main(args: argparse.Namespace, t: float, before: dict) -> None:
    """The seeds through the product's runtime in virtual time (`llmload run --virtual --sim`), scored as above."""
    from concurrent.futures import ProcessPoolExecutor

    if args.outputs != "fixed" or args.raw_shares:
        sys.exit("user_config_case: --runtime runs the config as written (fixed outputs, the product's estimator)")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    jobs = [(seed, args.work, args.min_samples, args.refine_duration, args.refine_budget) for seed in seeds]
    errors, held, runs = [], 0, []
    with ProcessPoolExecutor(2) as pool:
        for run in pool.map(_runtime_seed, jobs):
            rate, low, high = run["rate"], run["low"], run["high"]
            ok = rate is not None and (low is None or low <= t) and (high is None or t <= high)
            held += ok
            if rate is not None:
                errors.append(abs(rate - t) / t)
            runs.append({**run, "holds": bool(ok)})
            print(f"{run['seed']:3d} {'holds' if ok else 'MISS '} knee {rate} ({low} to {high}) exit {run['exit_code']} "
                  f"| {run['search']} {run['wall_s']:.0f} virtual s, {run['cpu_s']} CPU s | {' '.join(run['verdicts'])}",
                  flush=True)
    if errors:
        print(f"runtime: answered {len(errors)} of {args.seeds}; interval holds the truth in {held}; point error median "
              f"{statistics.median(errors):.1%}, worst {max(errors):.1%}; within 10% in {sum(e <= 0.1 for e in errors)}")
    write_result(args.out, "user_config_case", sys.argv[1:], before, true_knee=t, truth_arrivals=args.truth_arrivals,
                 runtime=True, runs=runs, held=held,
                 median_error=statistics.median(errors) if errors else None,
                 worst_error=max(errors) if errors else None)


if __name__ == "__main__":
    main()
