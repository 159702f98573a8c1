"""How close any search can come to a sim's knee in a given time: an oracle's error.

The oracle runs T seconds of steady (warm) load at exactly the true knee and knows the true curve's slope
there; it reads the share of requests over the binding target's threshold in those T seconds and places
the crossing at knee + (share read - share at the knee) / slope. Its error is what T seconds of load at
the knee can tell, whatever the search or the estimate: no real search places every second there, starts
warm, or knows the slope. The share's spread over T-second windows of one long run carries the queue's
autocorrelation (its episodes over the threshold come in clumps).

    PYTHONPATH=$PWD python bench/knee_floor.py [--config auto-mid] [--horizon-s 100000] [--windows 100 320 640 1280]

The configurations and true knees are bench/knee_accuracy.py's (`CONFIGS`); only TPOT, TTFT and E2E
percentile targets (the binding one's key, e.g. `tpot_p95`). Writes bench/results/knee_floor.json (or `--out`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from _common import machine, write_result
from knee_accuracy import CONFIGS

REPO = Path(__file__).resolve().parents[1]
RESULT = REPO / "bench" / "results" / "knee_floor.json"
#: the slope is read between the knee x (1 -/+ this)
SPAN = 0.05
#: seconds at the start of each run left out (the queue's start from idle)
SETTLE_S = 60.0


def over_series(config: dict, rate: float, horizon_s: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times and whether each request went over the binding target, `horizon_s` of Poisson arrivals
    at `rate` on the config's sim (the first `SETTLE_S` left out)."""
    from llmload.sim.truth import engine_limits, run_virtual

    figure = config["truth"]["binding"].split("_p")[0]
    threshold = float(config["slo"][config["truth"]["binding"]])
    rng = np.random.default_rng(seed)
    n = int(rate * (horizon_s + SETTLE_S))
    arrivals = np.cumsum(rng.exponential(1.0, n)) / rate
    frame = run_virtual(engine_limits(config["sim"]), arrivals, np.full(n, config["input"]), np.full(n, config["output"]))
    frame = frame[frame["arrival_s"] > SETTLE_S]
    return frame["arrival_s"].to_numpy(), (frame[f"{figure}_s"].to_numpy() > threshold).astype(float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="auto-mid", choices=sorted(CONFIGS))
    ap.add_argument("--horizon-s", type=float, default=100_000.0, help="seconds of load per rate (default 100000)")
    ap.add_argument("--windows", type=float, nargs="+", default=[100.0, 320.0, 640.0, 1280.0],
                    help="the oracle's seconds of load at the knee")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULT)
    args = ap.parse_args()
    before = machine()
    config = CONFIGS[args.config]
    knee = float(config["truth"]["rate"])
    series = {r: over_series(config, r, args.horizon_s, args.seed) for r in (knee * (1 - SPAN), knee, knee * (1 + SPAN))}
    shares = {r: float(x.mean()) for r, (_, x) in series.items()}
    low, at, high = sorted(shares)
    slope = (shares[high] - shares[low]) / (high - low)
    print(f"{args.config}: true knee {knee} req/s ({config['truth']['binding']}); share over the threshold "
          + ", ".join(f"{shares[r]:.4f} at {r:.3g}" for r in (low, at, high)) + f"; slope {slope:.4f} per req/s")
    t, x = series[at]
    rows = []
    for window in args.windows:
        starts = np.arange(t[0], t[-1] - window, window)
        read = np.array([x[(t >= a) & (t < a + window)].mean() for a in starts])
        error = np.abs(read - shares[at]) / slope / knee
        row = {"window_s": window, "windows": int(len(read)), "share_sd": float(read.std(ddof=1)),
               "median_error": float(np.median(error)), "p90_error": float(np.quantile(error, 0.9))}
        rows.append(row)
        print(f"  {window:6.0f} s at the knee ({row['windows']} windows): share sd {row['share_sd']:.4f}; oracle's "
              f"error median {100 * row['median_error']:.1f}%, 90th percentile {100 * row['p90_error']:.1f}%")
    write_result(args.out, "knee_floor", None, before, config=args.config, truth=config["truth"],
                 horizon_s=args.horizon_s, seed=args.seed, shares={f"{r:.6g}": s for r, s in shares.items()},
                 slope_per_rps=slope, windows=rows)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
