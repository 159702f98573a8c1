"""A run whose `--out` fills up goes on to the end: no tracebacks, one warning per kind of file that stops
(telemetry, records) and one error line at the end, exit code 4, no partial file, every record line on
disk readable; `llmload report` on a copy with room finishes it (issue 33, item 4). Finished records
outrank telemetry (issue 44, item 5): on the issue's 5 MB filesystem with 528 KB free, the telemetry log
used to fill the disk first and 48 of 141 finished requests were kept; now telemetry stops at once (under
`TELEMETRY_RESERVE_BYTES` free), every request the sim finished is on disk, and the closing line says what
was dropped, once. Needs root to mount the tmpfs; skipped otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess

import pyarrow.parquet as pq
import pytest
from runtime_helpers import base_config, write_config

from llmload.diskfull import DISK_FULL_EXIT, TELEMETRY_RESERVE_BYTES

pytestmark = pytest.mark.timeout(180)


def _mount_tmpfs(where, size: str) -> None:
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB filesystem: the records themselves fill it."""
    where = tmp_path / "tiny"
    _mount_tmpfs(where, "64k")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def nearly_full_disk(tmp_path):
    """The issue's case: a 5 MB filesystem with 528 KB free (the rest taken by another file)."""
    where = tmp_path / "five"
    _mount_tmpfs(where, "5m")
    try:
        (where / "other-files").write_bytes(b"x" * (5 * 2**20 - 528 * 2**10))
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _record_ids(out) -> set[str]:
    kept = set()
    for path in (out / "records").glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                kept.add(json.loads(line)["request_id"])
            except ValueError:
                continue  # a line the full disk cut short
    return kept


def _run(sim, tmp_path, out, capfd, *, rate: float, duration: str,
         extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`llmload run` through its entry (`llmload.cli.main`) in this process (a launcher process would add only
    its imports): its exit code, and what it and its Locust child (on the inherited descriptors) said."""
    from llmload.cli import main

    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s",
                                              "steps": [{"rate": rate, "duration": duration}]}})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 16}
    args = ["run", str(write_config(tmp_path, config)), "--out", str(out), *extra]
    capfd.readouterr()
    code = main(args)
    said = capfd.readouterr()
    return subprocess.CompletedProcess(["llmload", *args], code, said.out, said.err)


def _no_line_twice(said: str) -> None:
    lines = [ln for ln in said.splitlines() if ln.strip()]
    assert len(lines) == len(set(lines)), said
    assert sum("telemetry stopped at" in ln for ln in lines) == 1, said  # the closing line, alone


def test_a_full_disk_is_one_line_exit_4_and_keeps_what_fitted(sim_factory, tmp_path, tiny_disk, capfd,
                                                              unrendered_plots):
    sim = sim_factory(flavor="vllm")
    out = tiny_disk / "run"
    done = _run(sim, tmp_path, out, capfd, rate=20, duration="4s")  # 80 records of ~1.2 KB: more than 64 KiB holds
    said = done.stdout + done.stderr
    assert done.returncode == DISK_FULL_EXIT, said
    assert "Traceback" not in said and "Errno 28" not in said, said
    errors = [ln for ln in said.splitlines() if ln.startswith("llmload: error")]
    warnings = [ln for ln in said.splitlines() if ln.startswith("llmload: warning")]
    assert len(errors) == 1 and "is full" in errors[0] and f"llmload report {out}" in errors[0], said
    assert len(warnings) <= 2 and sum("telemetry stops" in ln for ln in warnings) == 1, said
    _no_line_twice(said)
    assert not list(out.glob("*.tmp"))
    # summary.json is written whole or not at all, and the error line says which: kept only if it is there
    # (beside two hogs less telemetry came first and it fitted: the exit code stayed 4, not its verdict's 0)
    assert (out / "summary.json").exists() == ("summary.json" in errors[0].split("kept:")[-1]), said
    # every complete record line is readable and is a request the sim received
    received = {r["request_id"] for r in sim.ground_truth_rows()}
    kept = _record_ids(out)
    assert kept <= received
    # the records the disk could not hold are counted in the error line, as the sim's own log counts them
    lost = len({r for r in received if not r.startswith("preflight")} - kept)
    assert lost > 0 and f"; {lost} finished record(s) lost;" in errors[0], said
    # with room again, `llmload report` finishes the run from what was kept (its entry, `llmload.cli.main`,
    # in this process: a second interpreter would only add its imports; the plots built, not drawn)
    from llmload.cli import main

    roomy = tmp_path / "copy"
    shutil.copytree(out, roomy)
    capfd.readouterr()
    code = main(["report", str(roomy)])
    again = capfd.readouterr()
    assert code in (0, 1, 3) and (roomy / "summary.json").exists(), again.out + again.err


def test_finished_records_outrank_telemetry_on_a_nearly_full_disk(sim_factory, tmp_path, nearly_full_disk, capfd):
    sim = sim_factory(flavor="vllm")
    out = nearly_full_disk / "run"
    # the 141 finished requests, or about; no report.html: the records are the point (a report.html the
    # disk refuses is tests/runtime/test_finalise_keeps_records.py's, its drawing 0.8 s of CPU here)
    done = _run(sim, tmp_path, out, capfd, rate=24, duration="6s", extra=("--no-report",))
    said = done.stdout + done.stderr
    assert "Traceback" not in said and "Errno 28" not in said, said
    # every request the sim finished for the run (its own log; the pre-flight's are not the run's) is on disk
    finished = {r["request_id"] for r in sim.ground_truth_rows() if not r["request_id"].startswith("preflight")}
    assert len(finished) >= 100, said
    assert finished <= _record_ids(out), f"{len(finished - _record_ids(out))} of {len(finished)} lost: {said}"
    # telemetry stopped before its first line: under the reserve from the start
    assert not (out / "telemetry.jsonl").exists() or (out / "telemetry.jsonl").stat().st_size == 0
    warnings = [ln for ln in said.splitlines() if ln.startswith("llmload: warning")]
    assert len(warnings) == 1 and "telemetry stops at" in warnings[0], said
    assert f"{TELEMETRY_RESERVE_BYTES / 2**20:.1f} MiB kept for finished records" in warnings[0], said
    # the closing line: what was written, what was dropped, the exit code; nothing said twice
    closing = done.stdout.strip().splitlines()[-1] if done.returncode != DISK_FULL_EXIT else next(
        ln for ln in said.splitlines() if ln.startswith("llmload: error"))
    assert "telemetry stopped at" in closing and "sample(s) not written" in closing, said
    assert "record(s) lost" not in closing, said
    assert closing.endswith(f"(exit code {done.returncode})"), said
    _no_line_twice(said)
    if done.returncode != DISK_FULL_EXIT:  # the analysis fitted in what the records left
        assert done.returncode in (0, 1, 3) and (out / "summary.json").exists(), said
        assert set(pq.read_table(out / "records.parquet").column("request_id").to_pylist()) >= finished
        warned = json.loads((out / "summary.json").read_text())["warnings"]
        assert any("telemetry stopped at" in w for w in warned), warned  # the report says its series end early


def test_a_locust_process_that_says_disk_full_is_exit_4_even_when_its_summary_fitted(tmp_path):
    """The launcher's exit code when the Locust process exits with `DISK_FULL_EXIT` after a summary.json that
    fitted (its verdict a pass): 4, as that process's error line said, not the verdict's 0 (beside two CPU
    hogs the tiny disk's run above wrote its summary and `llmload run` exited 0 after saying exit code 4)."""
    import sys

    from llmload.runtime.launcher.run import _wait_locust

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "summary.json").write_text(json.dumps({"verdict": "pass"}))
    code = _wait_locust([sys.executable, "-c", f"raise SystemExit({DISK_FULL_EXIT})"], run_dir, report=False)
    assert code == DISK_FULL_EXIT
    assert _wait_locust([sys.executable, "-c", "raise SystemExit(0)"], run_dir, report=False) == 0  # its verdict
