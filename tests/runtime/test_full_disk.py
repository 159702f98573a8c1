"""A run whose `--out` fills up (a 128 KiB tmpfs: the telemetry log fills it within seconds) goes on to
the end: no tracebacks, one warning when the disk fills and one error line at the end, exit code 4,
no partial file, every record line on disk readable; `llmload report` on a copy with room finishes it
(issue 33, item 4). Needs root to mount the tmpfs; skipped otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from runtime_helpers import base_config, write_config

from llmload.diskfull import DISK_FULL_EXIT

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def tiny_disk(tmp_path):
    where = tmp_path / "tiny"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_is_one_line_exit_4_and_keeps_what_fitted(sim_factory, tmp_path, tiny_disk):
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                              "steps": [{"rate": 8, "duration": "5s"}]}})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 16}
    out = tiny_disk / "run"
    done = subprocess.run([sys.executable, "-m", "llmload.cli", "run", str(write_config(tmp_path, config)),
                           "--out", str(out)], capture_output=True, text=True, timeout=150)
    said = done.stdout + done.stderr
    assert done.returncode == DISK_FULL_EXIT, said
    assert "Traceback" not in said and "Errno 28" not in said, said
    errors = [ln for ln in said.splitlines() if ln.startswith("llmload: error")]
    warnings = [ln for ln in said.splitlines() if ln.startswith("llmload: warning")]
    assert len(errors) == 1 and "is full" in errors[0] and f"llmload report {out}" in errors[0], said
    assert len(warnings) <= 1, said
    assert not list(out.glob("*.tmp")) and not (out / "summary.json").exists()
    assert "summary.json" not in said.replace("not written: ", "").split("kept:")[-1]  # no missing file named
    # every complete record line is readable and is a request the sim received
    received = {r["request_id"] for r in sim.ground_truth_rows()}
    kept = set()
    for path in (out / "records").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                kept.add(json.loads(line)["request_id"])
            except ValueError:
                continue  # a line the full disk cut short
    assert kept <= received
    # with room again, `llmload report` finishes the run from what was kept
    roomy = tmp_path / "copy"
    shutil.copytree(out, roomy)
    again = subprocess.run([sys.executable, "-m", "llmload.cli", "report", str(roomy)], capture_output=True,
                           text=True, timeout=120)
    assert again.returncode in (0, 1, 3) and (roomy / "summary.json").exists(), again.stdout + again.stderr
