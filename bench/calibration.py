"""Send lag and timestamp error against offered rate: the full `llmload calibrate` (under 30 s).

Runs the ramp of `llmload.calibrate` (10, 30, 100, 200 req/s per process, 16-token outputs, 0.25 s
warm-up and 1.5 s window per step, stopped at the first step that does not hold) against the built-in
sim with its ground-truth log, and keeps the envelope document, whose `steps` hold per step: offered
and achieved rate, send lag p50/p99, TTFT error p50/p99, token timestamp error p99, mean in-flight
streams, events/s and the busiest worker's CPU while sending. A step holds when it is valid by the run
steps' rule (`analysis.validity`, default limits, no latency target) and no request failed. Also
records the command's wall time.

    python bench/calibration.py                 # one worker process
    python bench/calibration.py --processes 2
    python bench/calibration.py --quick --out /tmp/c.json   # two short steps (the CI smoke test)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
RESULTS = REPO / "bench" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--quick", action="store_true", help="`llmload calibrate --quick`'s short ramp (smoke test)")
    args = parser.parse_args(argv)
    from _common import machine

    from llmload.calibrate import run_calibrate

    out = args.out or RESULTS / f"calibration-p{args.processes}.json"
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    machine_before = machine()
    code = run_calibrate(processes=args.processes, target=None, out=out, quick=args.quick)
    wall_s = time.monotonic() - started
    doc = json.loads(out.read_text())
    doc["command"] = "python bench/calibration.py " + " ".join(argv or sys.argv[1:])
    doc["loadavg_before"] = round(load_before, 2)
    doc["loadavg_after"] = round(os.getloadavg()[0], 2)
    doc["wall_s"] = round(wall_s, 1)
    doc["machine_before"], doc["machine_after"] = machine_before, machine()
    holding = [s for s in doc["steps"] if s["holds"]]
    doc["max_events_per_s_holding"] = max((s["events_per_s"] for s in holding), default=None)
    doc["max_events_per_s_seen"] = max((s["events_per_s"] for s in doc["steps"]), default=None)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
