"""CPU after the load: merge, analysis and report of an N-request run (`llmload.runtime.finish.finalize_run`).

Builds a synthetic ladder run (`bench/analysis_bench.build_run`: 10 steps, per-token times, telemetry),
writes its records as a worker's JSON-lines file (`records/worker-0.jsonl`, what a run leaves), then in
a fresh child process pinned to one CPU times the imports the finalisation needs (analysis, pandas,
pyarrow, matplotlib: a Locust process that only sent has loaded none of them) and `finalize_run`
itself: the merge into `records.parquet`, telemetry, `summary.json`, `worksheet.csv`, `report.html`.
The figure is CPU seconds (user + system) of the child; wall time is noted.

    python bench/finalize.py                   # 10,000 requests
    python bench/finalize.py --records 100000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
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
from llmload.runtime.finish import finalize_run
marks.append(("light_imports", time.perf_counter(), cpu()))
import analysis, llmload.report, pandas, pyarrow.parquet, matplotlib
marks.append(("heavy_imports", time.perf_counter(), cpu()))
code = finalize_run(sys.argv[1], config)
marks.append(("finalize_run", time.perf_counter(), cpu()))
out = {"exit_code": code}
for (_, w0, c0), (name, w1, c1) in zip(marks, marks[1:]):
    out[f"{name}_wall_s"], out[f"{name}_cpu_s"] = round(w1 - w0, 3), round(c1 - c0, 3)
out["after_load_cpu_s"] = round(marks[-1][2] - marks[1][2], 3)
out["after_load_wall_s"] = round(marks[-1][1] - marks[1][1], 3)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
out["peak_rss_mb"] = round(int(hwm.split()[1]) / 1024, 1)
print(json.dumps(out))
"""


def prepare(folder: Path, n: int) -> dict:
    """A run directory as a finished run leaves it: plan.json and records/worker-0.jsonl."""
    import pyarrow.parquet as pq
    from analysis_bench import build_run

    built = build_run(folder, n)
    rows = pq.read_table(folder / "records.parquet").to_pylist()
    (folder / "records").mkdir()
    with open(folder / "records" / "worker-0.jsonl", "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n")
    (folder / "records.parquet").unlink()
    (folder / "telemetry.parquet").unlink(missing_ok=True)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=RESULTS / "finalize.json")
    args = parser.parse_args(argv)
    from _common import machine

    machine_before = machine()
    with tempfile.TemporaryDirectory(prefix="llmload-finalize-") as tmp:
        built = prepare(Path(tmp), args.records)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        proc = subprocess.run([sys.executable, "-c", _CHILD, tmp], capture_output=True, text=True, env=env,
                              check=False)
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        figures["report_written"] = (Path(tmp) / "report.html").exists()
    print(json.dumps(figures), flush=True)
    doc = {"benchmark": "finalize", "command": "python bench/finalize.py " + " ".join(argv or sys.argv[1:]),
           "records": built["records"], "events": built["events"], "target_cpu_s": 2.0,
           "machine_before": machine_before, "machine": machine(),
           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": figures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if figures["report_written"] else 1


if __name__ == "__main__":
    sys.exit(main())
