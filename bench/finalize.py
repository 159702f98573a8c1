"""CPU after the load: merge, analysis and report of an N-request run (`llmload.rundir.finalise.finalise_run`).

Builds a synthetic ladder run (`bench/analysis_bench.build_run`: 10 steps, per-token times), writes its
records as a worker's JSON-lines file (`records/worker-0.jsonl`, what a run leaves; with `--telemetry`
also its server and GPU telemetry as `telemetry.jsonl`), then times `finalise_run` in fresh child
processes pinned to one CPU: the merge into `records.parquet`, telemetry, `summary.json`,
`worksheet.csv`, `report.html`. The figure is CPU seconds (user + system) of the child; wall time is noted.

Children per round (`--modes`), each on a fresh copy of the run directory, each calling
`finalise_run(run_dir, config, outcome={})` as the Locust master does (`runtime/locustglue/session.py`):
- *cold* (the headline, `after_load_cpu_s`): nothing loaded but the config and `finish`, so every import
  the finalisation needs (analysis, pandas, pyarrow, matplotlib, telemetry) happens inside it;
- *master*: what a Locust master has loaded when the steps are over: `llmload.telemetry` (pre-flight
  writes the manifest with it) and the live judge (`runtime/master/judging.py`, `analysis.verdict`: pandas
  and pyarrow), which judged each step between steps; left to import: matplotlib, the report, the rest
  of the analysis;
- *breakdown*: cold, with those imports done first, to split imports from the work.

`--baseline DIR` runs every round's children on another checkout too (its `llmload`/`analysis` on
`PYTHONPATH`), alternating with this one, so before/after are measured in the same sitting.

    python bench/finalize.py                   # 10,000 requests, 3 rounds
    python bench/finalize.py --records 100000 --rounds 1
    python bench/finalize.py --telemetry --baseline /tmp/llmload-before
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"

_CHILD = r"""
import json, os, resource, sys, time
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime

marks = [("start", time.perf_counter(), cpu())]
from llmload.config import parse_config
config = parse_config({"target": {"url": "http://127.0.0.1:1", "api": "openai-chat", "model": "m"},
                       "shape": {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}},
                       "telemetry": {"gpu": "off", "metrics_url": "off"}})
from llmload.rundir.finalise import finalise_run
if sys.argv[2] == "master":  # what a Locust master has loaded once the steps are over
    import llmload.telemetry, llmload.runtime.master.judging, analysis.verdict
marks.append(("light_imports", time.perf_counter(), cpu()))
if sys.argv[2] == "breakdown":
    import analysis.pipeline, analysis.outputs, llmload.report.page, llmload.telemetry, pandas, pyarrow.parquet, matplotlib
    marks.append(("heavy_imports", time.perf_counter(), cpu()))
outcome = {}
code = finalise_run(sys.argv[1], config, outcome=outcome)
marks.append(("finalise_run", time.perf_counter(), cpu()))
out = {"exit_code": code, "verdict": outcome.get("verdict")}
for (_, w0, c0), (name, w1, c1) in zip(marks, marks[1:]):
    out[f"{name}_wall_s"], out[f"{name}_cpu_s"] = round(w1 - w0, 3), round(c1 - c0, 3)
out["after_load_cpu_s"] = round(marks[-1][2] - marks[1][2], 3)
out["after_load_wall_s"] = round(marks[-1][1] - marks[1][1], 3)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
out["peak_rss_mb"] = round(int(hwm.split()[1]) / 1024, 1)
print(json.dumps(out))
"""


def prepare(folder: Path, n: int, *, telemetry: bool = False) -> dict:
    """A run directory as a finished run leaves it: plan.json, records/worker-0.jsonl and, with
    `telemetry`, telemetry.jsonl."""
    import pyarrow.parquet as pq
    from analysis_bench import build_run

    built = build_run(folder, n)
    rows = pq.read_table(folder / "records.parquet").to_pylist()
    (folder / "records").mkdir()
    with open(folder / "records" / "worker-0.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n")
    (folder / "records.parquet").unlink()
    if telemetry:
        with open(folder / "telemetry.jsonl", "w", encoding="utf-8") as f:
            for row in pq.read_table(folder / "telemetry.parquet").to_pylist():
                f.write(json.dumps({**row, "step": row["step"] or None}) + "\n")
    else:
        built["telemetry_rows"] = 0
    (folder / "telemetry.parquet").unlink(missing_ok=True)
    return built


def run_child(source: Path, mode: str, code_dir: Path | None) -> dict:
    """One child on a fresh copy of `source`; `code_dir`: the checkout to import (None: this one)."""
    with tempfile.TemporaryDirectory(prefix="llmload-finalize-") as tmp:
        run_dir = Path(tmp) / "run"
        shutil.copytree(source, run_dir)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        if code_dir is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(code_dir), env.get("PYTHONPATH", "")])
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        proc = subprocess.run([sys.executable, "-c", _CHILD, str(run_dir), mode], capture_output=True, text=True,
                              env=env, check=False, cwd=code_dir or REPO)
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout + proc.stderr)
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        figures["report_written"] = (run_dir / "report.html").exists()
        figures["loadavg_1min_before"] = round(load, 2) if load is not None else None
    return figures


def _medians(rounds: list[dict], mode: str) -> dict:
    """Median of each figure over the rounds, and the least CPU seen (`min_after_load_cpu_s`: other jobs
    on a shared machine only ever add to a process's CPU time, so the minimum is the steadiest figure)."""
    keys = [k for k in rounds[0][mode] if k.endswith("_s") or k == "peak_rss_mb"]
    out = {k: round(statistics.median(r[mode][k] for r in rounds), 3) for k in keys}
    out["min_after_load_cpu_s"] = min(r[mode]["after_load_cpu_s"] for r in rounds)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--telemetry", action="store_true", help="the run has server/GPU telemetry lines")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout (its root) to time in the same rounds, alternating")
    parser.add_argument("--modes", nargs="+", choices=("cold", "master", "breakdown"),
                        default=["cold", "master", "breakdown"])
    parser.add_argument("--out", type=Path, default=RESULTS / "finalize.json")
    args = parser.parse_args(argv)
    from _common import machine, write_result

    machine_before = machine()
    codes = {"this": None} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    rounds: dict[str, list[dict]] = {name: [] for name in codes}
    with tempfile.TemporaryDirectory(prefix="llmload-finalize-src-") as tmp:
        built = prepare(Path(tmp), args.records, telemetry=args.telemetry)
        for i in range(args.rounds):
            order = list(codes) if i % 2 == 0 else list(codes)[::-1]
            for name in order:
                done = {mode: run_child(Path(tmp), mode, codes[name]) for mode in args.modes}
                rounds[name].append(done)
                cpu = {f"{mode}_{k}": v for mode, f in done.items() for k, v in f.items() if k.endswith("cpu_s")}
                print(json.dumps({"round": i, "code": name, **cpu}), flush=True)
    summary = {name: {mode: _medians(r, mode) for mode in args.modes} for name, r in rounds.items()}
    print(json.dumps(summary), flush=True)
    write_result(args.out, "finalize", argv, machine_before, records=built["records"], events=built["events"],
                 telemetry_rows=built["telemetry_rows"], target_cpu_s=2.0,
                 baseline=str(args.baseline) if args.baseline else None,
                 results=summary, rounds=rounds)
    return 0 if all(r[m]["report_written"] for rs in rounds.values() for r in rs for m in r) else 1


if __name__ == "__main__":
    sys.exit(main())
