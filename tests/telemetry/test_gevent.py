"""The collector runs on the Locust master, where gevent has patched threads and sockets: it must work there."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from .exposition_samples import VLLM
from .helpers import CannedServer

SCRIPT = textwrap.dedent("""
    from gevent import monkey
    monkey.patch_all()
    import json, sys, time
    from llmload.config import parse_config
    from llmload.telemetry import TelemetryCollector, finalise_telemetry, read_telemetry
    url, run_dir = sys.argv[1], sys.argv[2]
    config = parse_config({"target": {"url": url}, "shape": {"ladder": {"steps": [{"rate": 1, "duration": 1}]}},
                           "telemetry": {"interval": "100ms", "gpu": "auto"}})
    collector = TelemetryCollector(config, run_dir)
    collector.start()
    collector.set_step("r1")
    time.sleep(0.6)
    collector.stop()
    frame = read_telemetry(finalise_telemetry(run_dir).parent)
    running = frame[frame["metric"] == "running"]
    print(json.dumps({"samples": len(running), "steps": sorted(set(running["step"].dropna())),
                      "latest": collector.latest()}))
""")


def test_collector_under_gevent_monkey_patching(tmp_path: Path, canned: CannedServer) -> None:
    canned.routes["/metrics"] = (200, VLLM, 0.0)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, canned.url, str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["samples"] >= 3 and out["steps"] == ["r1"]
    assert out["latest"][f"server:{canned.url}"]["waiting"] == 8.0
    assert "no GPU telemetry" in proc.stderr  # said once, and the run went on
