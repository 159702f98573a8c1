"""Time to precision (issue 41 item 4): how tight the knee's interval gets, and how often it still holds the
truth, as the search is given more time. In virtual time, against the sim engine's truth.

    PYTHONPATH=. python bench/time_to_precision.py [--configs demo,tpot,auto-mid,auto-fast] [--budgets 2m,4m,8m,12m]
        [--seeds 10] [--first-seed 1] [--out bench/results/time_to_precision.json]

For each configuration of `bench/knee_accuracy.py` (its sims, SLOs, ladders and stored or computed truths)
and each budget: `--seeds` searches in virtual time (`llmload.sim.virtual_search` for a ladder with
`refine:`, `llmload.sim.virtual_auto` for `shape: auto`), each with that budget (a ladder's budget is its
refine search's, after the ladder; `auto`'s is the whole run's). Reports per budget: the median virtual
wall time of the whole run, the median half-width of the interval (relative to the point; open intervals
are counted apart), how many intervals hold the truth, and the median and worst point error. The figures
are the tool's own steps, judging and search against the sim's engine (no sockets): what the search's
decisions buy in precision per minute of load. bench/README.md has the figures.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from _common import machine, write_result
from knee_accuracy import CONFIGS, run_config, truth

from llmload.units import parse_duration


def searches(name: str, budget_s: float, seeds: range, true_rate: float) -> dict:
    """`seeds` virtual searches of configuration `name` with `budget_s`, scored against `true_rate`."""
    from llmload.config import parse_config
    from llmload.sim.virtual_auto import auto_accuracy
    from llmload.sim.virtual_search import knee_accuracy

    c = CONFIGS[name]
    accuracy = auto_accuracy if c.get("auto") else knee_accuracy
    return accuracy(lambda seed: parse_config(run_config(name, "http://127.0.0.1:9", seed, 1.0, quick=False,
                                                         budget_s=budget_s)),
                    c["sim"], (c["input"], c["output"]), true_rate, seeds)


def _pct(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1%}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="demo,tpot,auto-mid,auto-fast",
                    help="comma-separated configurations of bench/knee_accuracy.py (not demo-itself)")
    ap.add_argument("--budgets", default="2m,4m,8m,12m", help="comma-separated search budgets (durations)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--truth-arrivals", type=int, default=50_000)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "time_to_precision.json")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS or n == "demo-itself"]
    if unknown:
        ap.error(f"--configs: unknown {', '.join(unknown)} (one of {', '.join(n for n in CONFIGS if n != 'demo-itself')})")
    try:
        budgets = [float(parse_duration(b.strip())) for b in args.budgets.split(",") if b.strip()]
    except ValueError as exc:
        ap.error(f"--budgets: {exc}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    before = machine()
    results: dict = {}
    for name in names:
        true = truth(name, quick=False, arrivals=args.truth_arrivals)
        t = float(true["rate"])
        print(f"{name}: true knee {t:.3g} req/s ({true['binding']} binds)", flush=True)
        print("  budget   run (median)   half-width (median, closed)   holds   error median / worst", flush=True)
        rows = []
        for budget in budgets:
            got = searches(name, budget, seeds, t)
            runs = got.pop("runs")
            closed = sum(1 for r in runs if r["rate"] is not None and r["low"] is not None and r["high"] is not None)
            rows.append({"budget_s": budget, **{k: v for k, v in got.items() if not isinstance(v, float)
                                                 or math.isfinite(v)}, "closed": closed,
                         "runs": [{k: r[k] for k in ("seed", "rate", "low", "high", "run_s", "stopped")} for r in runs]})
            print(f"  {budget:5.0f} s  {got['median_run_s']:8.0f} s     {_pct(got['median_half_width']):>8} "
                  f"({closed} of {len(runs)})             {got['covered']:2d}/{len(runs):<2d}   "
                  f"{_pct(got['median_error'])} / {_pct(got['worst_error'])}", flush=True)
        results[name] = {"truth": {k: v for k, v in true.items() if k != "detail"}, "budgets": rows}
    write_result(args.out, "time_to_precision", sys.argv[1:] if argv is None else argv, before, results=results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
