"""What `llmload plan --twin` costs and how close its what-if knees come to the truth (issue 45, item 2).

On the run directories and twins `bench/twin_accuracy.py` leaves in `--work` (one live ladder each
against a sim with known settings: slot-bound, KV-bound, prefill-bound), this runs
`llmload.sim.whatif.what_if` (the lines `llmload plan --twin` prints: the knee as fitted, with the
slots of the what-if, with prompts x2, with two replicas, each with its range) once per seed, timing
each, and computes the true sim's knee for the same what-ifs (`predict_knee` on the true settings with
many arrivals and seeds: the truth the twin is compared with in bench/twin_accuracy.py).

The seeds' spread is the what-if's run-to-run noise (seed 1 is what `llmload plan` prints). Run it with
another tree's code first (`PYTHONPATH=OTHER_TREE`) to compare before and after: `--truth` is the same
for both and may be skipped in the second (`--no-truth`).

    PYTHONPATH=$PWD python bench/whatif_speed.py [--servers slot kv prefill] [--seeds 1 2 3] [--quick]

Writes bench/results/whatif_speed.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import machine, write_result
from twin_accuracy import SERVERS, live_ladder

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "whatif_speed.json"


def ensure_twin(work: Path, name: str, *, quick: bool) -> None:
    """The run directory and twin `bench/twin_accuracy.py` leaves in `work`: made (a live ladder against
    the sim, then `llmload fit`) when missing; `quick`: its quick ladder (`twin_accuracy.QUICK_LADDER`)."""
    if (work / name / "twin.yaml").exists():
        return
    import analysis
    from analysis.fit import fit_run, twin_yaml

    run_dir, _ = live_ladder(name, work, quick=quick)
    (work / name / "twin.yaml").write_text(twin_yaml(fit_run(analysis.load_run(run_dir)), source=str(run_dir)))


def _inputs(work: Path, name: str) -> tuple:
    """The twin, its run's mix (`sizes_of(input_scale)`) and SLO, as `llmload plan --twin` takes them."""
    import analysis
    from llmload.report.run_inputs import current_slo
    from llmload.sim.whatif import read_twin, sizes_from_records

    run_dir = work / name / "run"
    run = analysis.load_run(run_dir)
    slo, _ = current_slo(run_dir, run.manifest)
    twin = read_twin(work / name / "twin.yaml")
    return twin, (lambda scale: sizes_from_records(run.records, input_scale=scale)), slo


def twin_rows(work: Path, name: str, seeds: list[int], *, arrivals: int) -> list[dict]:
    """`what_if` once per seed: each row's knee and range, and the wall and CPU seconds of the call."""
    from llmload.sim.whatif import what_if

    twin, sizes_of, slo = _inputs(work, name)
    out = []
    for seed in seeds:
        wall, cpu = time.monotonic(), time.process_time()
        rows = what_if(twin, sizes_of, slo, arrivals=arrivals, seeds=(seed,))
        out.append({"seed": seed, "wall_s": round(time.monotonic() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2),
                    "rows": {r["what"]: {k: r[k] for k in ("rate", "low", "high", "binding")} for r in rows}})
        print(name, seed, f"{out[-1]['cpu_s']} s CPU", {w: round(r["rate"] or 0, 3) for w, r in out[-1]["rows"].items()},
              flush=True)
    return out


def truth_rows(work: Path, name: str, *, arrivals: int, seeds: tuple[int, ...]) -> dict:
    """The true sim's knee for the what-ifs `what_if` answers (the same slots, prompts x2, replicas)."""
    from llmload.sim.whatif import predict_knee

    twin, sizes_of, slo = _inputs(work, name)
    truth = dict(SERVERS[name]["sim"])
    slots = 2 * twin.slots()
    cases = {"as fitted": (truth, 1.0), f"slots {slots}": ({**truth, "max_num_seqs": slots}, 1.0),
             "prompts x2": (truth, 2.0)}
    out = {}
    for what, (settings, scale) in cases.items():
        got = predict_knee(settings, sizes_of(scale), slo, arrivals=arrivals, seeds=seeds, tol=0.01)
        out[what] = {"rate": got["rate"], "binding": got["binding"]}
    out["replicas 2"] = {"rate": None if out["as fitted"]["rate"] is None else 2 * out["as fitted"]["rate"],
                         "binding": out["as fitted"]["binding"]}
    print(name, "truth", {w: round(r["rate"] or 0, 3) for w, r in out.items()}, flush=True)
    return out


def summary(runs: list[dict], truth: dict | None) -> dict:
    """Per what-if: seed 1's knee, the seeds' mean and spread (sd), and seed 1's error against the truth."""
    out = {}
    for what in runs[0]["rows"]:
        rates = [r["rows"][what]["rate"] for r in runs if r["rows"][what]["rate"] is not None]
        first = runs[0]["rows"][what]
        true = (truth or {}).get(what, {}).get("rate")
        out[what] = {"seed1": first["rate"], "seed1_range": [first["low"], first["high"]],
                     "mean": statistics.mean(rates) if rates else None,
                     "sd": statistics.stdev(rates) if len(rates) > 1 else None, "true": true,
                     "seed1_error": None if true is None or first["rate"] is None else (first["rate"] - true) / true}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", nargs="+", choices=sorted(SERVERS), default=["slot", "kv", "prefill"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--arrivals", type=int, default=3000, help="what_if's arrivals per rate (its default)")
    parser.add_argument("--truth-arrivals", type=int, default=20000)
    parser.add_argument("--no-truth", action="store_true")
    parser.add_argument("--truth-from", type=Path, help="take the truth from an earlier result of this script")
    parser.add_argument("--before", type=Path,
                        help="an earlier result of this script (another tree's code): compared, per what-if")
    parser.add_argument("--quick", action="store_true", help="one seed, few arrivals (the smoke test)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/twin_work"))
    parser.add_argument("--out", type=Path, default=RESULT)
    args = parser.parse_args(argv)
    truth_seeds = (1, 2, 3)
    if args.quick:  # the truth from one seed too (its three seeds were half of the quick run's CPU)
        args.seeds, args.arrivals, args.truth_arrivals, truth_seeds = args.seeds[:1], 400, 1000, (1,)
    before = machine()
    import llmload

    earlier = json.loads(args.truth_from.read_text())["servers"] if args.truth_from else {}
    before_doc = json.loads(args.before.read_text()) if args.before else None
    results = {}
    for name in args.servers:
        ensure_twin(args.work, name, quick=args.quick)
        runs = twin_rows(args.work, name, args.seeds, arrivals=args.arrivals)
        if name in earlier:
            truth = earlier[name]["truth"]
        else:
            truth = None if args.no_truth else truth_rows(args.work, name, arrivals=args.truth_arrivals, seeds=truth_seeds)
        results[name] = {"runs": runs, "truth": truth, "summary": summary(runs, truth),
                         "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
                         "median_wall_s": statistics.median(r["wall_s"] for r in runs)}
        if before_doc is not None and name in before_doc["servers"]:
            old = before_doc["servers"][name]
            results[name]["before"] = {"code": before_doc.get("code"), "runs": old["runs"],
                                       "summary": summary(old["runs"], truth), "median_cpu_s": old["median_cpu_s"],
                                       "median_wall_s": old["median_wall_s"]}
            for what, row in results[name]["summary"].items():
                was = results[name]["before"]["summary"][what]
                if row["seed1"] is not None and was["seed1"] is not None:
                    row["seed1_vs_before"] = (row["seed1"] - was["seed1"]) / was["seed1"]
                    row["before_sd_rel"] = None if was["sd"] is None else was["sd"] / was["mean"]
    write_result(args.out, "whatif_speed", argv, before, code=str(Path(llmload.__file__).parents[1]),
                 arrivals=args.arrivals, seeds=args.seeds, truth_arrivals=args.truth_arrivals,
                 truth_seeds=list(truth_seeds), servers=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
