"""Report build time: `report.html` (plots and tables) from an analysed run, apart from the analysis.

For each size, a synthetic ladder run (`bench/analysis_bench.build_run`: 10 steps, per-token times,
telemetry) is analysed once, then `llmload.report.write_report` is timed (wall and CPU of this process)
and the page size noted. `--run-dir` times a real run directory instead (e.g. a calibration run).

    python bench/report_build.py                          # 10,000 and 100,000 records
    python bench/report_build.py --records 10000 100000 1000000
    python bench/report_build.py --run-dir runs/<a run>
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def time_report(run_dir: Path) -> dict:
    """Analyse `run_dir`, then time `write_report` alone."""
    import analysis
    from llmload.config import SLO
    from llmload.report import write_report

    t0 = time.perf_counter()
    run = analysis.load_run(run_dir)
    result = analysis.analyze(run, SLO())
    analysis_s = time.perf_counter() - t0
    cpu0, t1 = _cpu_s(), time.perf_counter()
    path = write_report(result, run_dir)
    return {"records": len(run.records), "analysis_wall_s": round(analysis_s, 3),
            "report_wall_s": round(time.perf_counter() - t1, 3), "report_cpu_s": round(_cpu_s() - cpu0, 3),
            "report_bytes": path.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--run-dir", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS / "report_build.json")
    args = parser.parse_args(argv)
    rows = []
    if args.run_dir is not None:
        rows.append({"run_dir": str(args.run_dir), **time_report(args.run_dir)})
    else:
        from analysis_bench import build_run

        for n in args.records:
            with tempfile.TemporaryDirectory(prefix="llmload-report-bench-") as folder:
                build_run(Path(folder), n)
                rows.append(time_report(Path(folder)))
    for row in rows:
        print(json.dumps(row), flush=True)
    from _common import machine

    doc = {"benchmark": "report_build", "command": "python bench/report_build.py " + " ".join(argv or sys.argv[1:]),
           "machine": machine(),
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
