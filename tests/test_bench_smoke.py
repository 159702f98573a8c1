"""Every bench script runs at HEAD (issue 20): each on a tiny setting, output to a temporary folder.

Nothing is timed here: the test checks that the script exits 0 and writes its JSON, with the machine's
load average and CPU-speed probe in it, so that a refactor cannot silently break `bench/` again.

Each script runs as `python bench/SCRIPT` would run it (`runpy.run_path` as `__main__`, its own `sys.argv`,
the temporary folder as its working directory), inside this test's process: the processes a script starts
(sims, `llmload run`, its pinned children) are still its own, but its interpreter and its imports (pandas,
pyarrow, the analysis: most of a virtual-time script's CPU) are not paid again per script. Where the
script's own process is the point it keeps one (`OWN_PROCESS`).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]

#: script -> arguments for a tiny run (small request counts, short steps)
TINY = {
    "generator_cost.py": ["--rate", "20", "--requests", "5", "--rounds", "1"],
    "calibration.py": ["--quick"],
    "report_build.py": ["--records", "100"],
    "analysis_bench.py": ["--records", "200"],
    "sim_timing.py": ["--streams", "2", "--tokens", "5"],
    # no report.html: drawn after all it measures (0.8 s of CPU a run)
    "startup.py": ["--users", "4", "--rate", "5", "--duration", "1", "--no-report"],
    # the cold child is the breakdown's without its imports; the master's child differs from the cold one by
    # its line of imports alone, whose modules tests/test_imports.py finds (1.6 s of CPU a child)
    "finalize.py": ["--records", "200", "--rounds", "1", "--telemetry", "--modes", "breakdown"],
    # caching on alone: the off run is the same function with the sim's caching off (9 s of wall, 4 s of CPU)
    "prefix_ladder.py": ["--rates", "2", "--step-s", "1", "--work", "work", "--caching", "on"],
    # --quick's 4 workers and one driver, 200 records in 1 s instead of 1,200 in 3 s (every record counted)
    "fan_in.py": ["--workers", "4", "--rate", "200", "--duration", "1", "--drivers", "1"],
    # two workers: the one-worker run is the same function with one (the ratio is left out without it)
    "scaling.py": ["--workers", "2", "--rates", "5", "--step-s", "1", "--warmup-s", "0.25", "--users", "16"],
    # without a GPU (CI) it says "no NVIDIA GPU here" and exits 0; with one, a 256 MiB step check
    "gpu_telemetry_check.py": ["--steps-mib", "256", "--hold-s", "1", "--interval", "0.25"],
    # in virtual time (llmload.sim.virtual_search); a live search against the sim is `llmload demo`'s
    # (tests/runtime/test_demo.py) and the other ladders' under tests/
    "knee_accuracy.py": ["--quick", "--virtual"],
    # its true knee from 1,000 arrivals a rate instead of 30,000 (the bisection was most of its CPU; 2,000 took
    # 0.15 s more)
    "user_config_case.py": ["--seeds", "1", "--truth-arrivals", "1000"],
    # one seed, one budget, in virtual time (the demo's truth is stored)
    "time_to_precision.py": ["--configs", "demo", "--budgets", "2m", "--seeds", "1"],
    "twin_accuracy.py": ["--quick", "--servers", "slot", "--work", "work"],
    # the 2-second ladder against the slot-bound sim and its twin that twin_accuracy.py leaves in the shared
    # --work (SHARED_WORK; its own when it runs first), then one seed's what-ifs
    "whatif_speed.py": ["--quick", "--servers", "slot", "--work", "work"],
    # without the engine (eval "$(llmload engine path)") it says so and exits 0; `--other` the same as
    # `--parallel`: the second live search is the first's run directory (`live` reuses it), two
    # llama-server runs instead of three (35 s of CPU was 20), every step of the script still runs
    "twin_real.py": ["--quick", "--work", "work", "--parallel", "4", "--other", "4"],
    # 500 s a rate instead of 100,000, one window length: the same oracle, a noisier spread
    "knee_floor.py": ["--horizon-s", "500", "--windows", "100"],
    "prior_search.py": ["--configs", "demo", "--seeds", "1", "--steps", "2", "--offsets", "0.05"],
    # 12 s at 10 req/s in three 4-s slices (the fewest its trend test takes), one worker; the sim's step
    # cost grows 60 ms a minute (a drift to find); 30 s in 5-s slices took 44 s of wall and 8.4 s of CPU, 20 req/s
    # about 0.4 s more than 10 (six runs each; the same trends, none drifting in 12 s, and verdict)
    # no report.html: the slices are checked from summary.json (the report's drawing was 0.8 s of CPU)
    "soak.py": ["--minutes", "0.2", "--rate", "10", "--slice-s", "4", "--settle-min", "0.05", "--sample-s", "0.5",
                "--processes", "1", "--growth-ms-per-min", "60", "--no-report"],
}


def test_every_bench_script_has_a_tiny_setting():
    scripts = {p.name for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_")}
    assert scripts - {"reference_client.py"} == set(TINY)  # the reference client runs inside generator_cost


def _machine(doc: dict) -> dict:
    return doc.get("machine") or doc.get("machine_after") or {}


#: scripts that share one `--work` folder (this xdist worker's, one xdist group): whatif_speed.py's twin is the
#: one twin_accuracy.py leaves there (the same 2-second ladder against the slot-bound sim, made by whichever
#: runs first, reused by the other: one live ladder of 26 s wall and 6 s of CPU instead of two)
SHARED_WORK = {"twin_accuracy.py": "twin-work", "whatif_speed.py": "twin-work"}


def _params() -> list:
    return [pytest.param(s, marks=pytest.mark.xdist_group(f"bench-{SHARED_WORK[s]}")) if s in SHARED_WORK else s
            for s in sorted(TINY)]


#: scripts run in a process of their own: sim_timing.py pins its process to a core (`os.sched_setaffinity(0,
#: ...)`), which would pin this test's process and every test after it on this xdist worker; with a GPU,
#: gpu_telemetry_check.py imports torch and asks CUDA for its devices (0.1 s without one)
OWN_PROCESS = {"sim_timing.py", "gpu_telemetry_check.py"}

#: a probe of 20,000 loops: its figure is not what this test checks (only that there is one), and the full
#: probe's 0.7 s of CPU per script added 13 s to this file
PROBE_LOOPS = "20000"


def _in_process(path: Path, args: list[str], monkeypatch: pytest.MonkeyPatch) -> object:
    """`python PATH ARGS` in this process: the script's exit code (its `sys.exit` / `SystemExit` value, or 0 when
    it returns). The bench folder on `sys.path` and the bench modules it imported are taken away again, so that
    the next script imports its own (and `_common` reads the probe's loops again)."""
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    saved = list(sys.path)
    _forget_bench_modules(path.parent)  # another test here may have imported `_common` with the full probe
    sys.path.insert(0, str(path.parent))  # as `python PATH` puts the script's folder first
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        return exc.code or 0
    finally:
        sys.path[:] = saved
        _forget_bench_modules(path.parent)
    return 0


def _forget_bench_modules(folder: Path) -> None:
    """Take the modules imported from `folder` out of `sys.modules` (tests/telemetry/test_gpu_telemetry_check.py
    imports bench/gpu_telemetry_check.py, whose `_common` read the probe's loops before this test set them)."""
    for name, module in list(sys.modules.items()):
        if Path(getattr(module, "__file__", None) or "/").resolve().parent == folder.resolve():
            del sys.modules[name]


def _check_quick_calibration(out: Path, said: str) -> None:
    """calibration.py --quick is `llmload calibrate --quick`'s run (`run_calibrate(processes=1, target=None,
    quick=True)`, as the command calls it: tests/test_calibrate.py checks that it does) against the built-in
    sim: its envelope is checked here, on this one live run, not on a second one of the command's own."""
    from llmload.calibrate import RULE, load_envelope

    envelope = load_envelope(out)
    assert envelope is not None
    assert envelope["quick"] is True and envelope["ttft_error_known"] is True
    assert envelope["rule"] == RULE
    labels = [s["label"] for s in envelope["steps"]]
    # the ramp stops at the first step that does not hold (the steps above it cannot count)
    assert labels == ["r10.00", "r50.00"] or (labels == ["r10.00"] and not envelope["steps"][0]["holds"]), labels
    for step in envelope["steps"]:
        assert step["requests"] > 0 and step["failed"] == 0
        assert step["send_lag_p99_s"] is not None and step["ttft_error_p99_s"] is not None
        assert step["achieved_rate"] > 0 and step["events_per_s"] > 0
    for key in ("max_rate_per_process", "max_streams_per_process"):
        assert envelope[key] is None or envelope[key] > 0
    assert "safe envelope" in said or "no step held" in said


#: what a script's run must show beyond its JSON and machine block: check(out, its stdout)
CHECKS = {"calibration.py": _check_quick_calibration}


@pytest.mark.parametrize("script", _params())
def test_bench_script_runs_and_writes_its_json(script, tmp_path, tmp_path_factory, monkeypatch, capsys):
    out = tmp_path / "result.json"
    path = REPO / "bench" / script
    args = list(TINY[script])
    if script in SHARED_WORK:
        args[args.index("--work") + 1] = str(tmp_path_factory.getbasetemp() / SHARED_WORK[script])
    # the processes a script starts import this checkout (`python -m llmload.cli run`, the sims)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("LLMLOAD_BENCH_PROBE_LOOPS", PROBE_LOOPS)
    if script in OWN_PROCESS:
        done = subprocess.run([sys.executable, str(path), *args, "--out", str(out)],
                              capture_output=True, text=True, timeout=280, cwd=tmp_path)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        said = done.stdout
    else:
        monkeypatch.chdir(tmp_path)
        assert _in_process(path, [*args, "--out", str(out)], monkeypatch) == 0
        said = capsys.readouterr().out
    doc = json.loads(out.read_text())
    machine = _machine(doc)
    assert len(machine["loadavg"]) == 3
    assert machine["cpu_probe_s"] > 0 and machine["cpu_probe_loops"] == int(PROBE_LOOPS)
    if script in CHECKS:
        CHECKS[script](out, said)
