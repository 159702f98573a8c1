"""Test helpers shared by every test module: free ports, servers started as subprocesses, killed by PID.

Import as `from support import start_sim, free_port` (tests/ is on sys.path; never import `conftest`,
whose name is ambiguous when several test folders have one)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.error import URLError
from urllib.request import urlopen

from simfork import ForkedSim, start_forked_sim

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, *, timeout_s: float = 20.0, proc: subprocess.Popen | ForkedSim | None = None) -> None:
    """Wait until `url` answers 200 (or the process dies, or the time runs out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before {url} answered")
        try:
            with urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except (URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout_s}s")


@dataclass
class SimServer:
    """A running `llmload sim` process (`proc`: a `subprocess.Popen`, or its double for a forked sim)."""

    url: str
    port: int
    flavor: str
    proc: subprocess.Popen | ForkedSim
    ground_truth: Path
    log: Path

    def ground_truth_rows(self) -> list[dict]:
        if not self.ground_truth.exists():
            return []
        rows = []
        for line in self.ground_truth.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
        return rows


def start_sim(tmp_path: Path, *, flavor: str = "vllm", config: dict | None = None, seed: int = 0,
              health_path: str | None = None, forked: bool = True) -> SimServer:
    """Start `llmload sim` on a free loopback port with an optional sim config; wait for health. A port
    another process took between `free_port` and the sim's bind (parallel tests) is tried again once.
    `forked`: a fork of this process's sim forkserver (tests/simfork.py: no interpreter boot, ~0.25 s of CPU
    less), else an exec'd `python -m llmload.cli sim`; the same command, arguments, environment and log."""
    try:
        return _start_sim(tmp_path, flavor=flavor, config=config, seed=seed, health_path=health_path, forked=forked)
    except RuntimeError as exc:
        if "address already in use" not in str(exc):
            raise
        return _start_sim(tmp_path, flavor=flavor, config=config, seed=seed, health_path=health_path, forked=forked)


def _start_sim(tmp_path: Path, *, flavor: str, config: dict | None, seed: int, health_path: str | None,
               forked: bool) -> SimServer:
    import yaml

    port = free_port()
    gt = tmp_path / f"gt-{flavor}-{port}.jsonl"
    log = tmp_path / f"sim-{flavor}-{port}.log"
    argv = ["sim", "--flavor", flavor, "--port", str(port), "--seed", str(seed), "--ground-truth", str(gt)]
    if config is not None:
        cfg = tmp_path / f"sim-{flavor}-{port}.yaml"
        cfg.write_text(yaml.safe_dump(config))
        argv += ["--config", str(cfg)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc: subprocess.Popen | ForkedSim
    if forked:
        proc = start_forked_sim(argv, log=log, env=env, cwd=REPO)
    else:
        with open(log, "wb") as logf:
            proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", *argv], stdout=logf,
                                    stderr=subprocess.STDOUT, cwd=REPO, env=env)
    url = f"http://127.0.0.1:{port}"
    path = health_path or ("/api/version" if flavor == "ollama" else "/health")
    try:
        wait_http(url + path, proc=proc)
    except Exception:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"sim did not start: {log.read_text()[-2000:]}") from None
    return SimServer(url=url, port=port, flavor=flavor, proc=proc, ground_truth=gt, log=log)


def stop_process(proc: subprocess.Popen | ForkedSim) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def write_config(tmp_path: Path, config: dict, name: str = "run.yaml") -> Path:
    """Write a run config dict as YAML into `tmp_path`."""
    import yaml

    path = tmp_path / name
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def base_config(url: str, shape: dict, **sections: dict) -> dict:
    """A small run config against a sim at `url` (16-token prompts, 4-token answers unless told otherwise)."""
    config = {"target": {"url": url, "api": "openai-chat", "model": "sim-model", "server": "vllm"},
              "requests": {"input_tokens": {"dist": "fixed", "value": 16},
                           "output_tokens": {"dist": "fixed", "value": 4}},
              "shape": shape, "slo": {"min_samples": 5}, "telemetry": {"gpu": "off"}}
    config.update(sections)
    return config


@dataclass
class TruthStepRun:
    """tests/conftest.py's shared truth step (`truth_step_run`): its sim, run directory, exit code and output."""

    sim: SimServer
    run_dir: Path
    returncode: int
    output: str


#: the API key of tests/conftest.py's shared truth step (`truth_step_run`), from an environment variable:
#: no file of its run directory may hold it
TRUTH_STEP_SECRET = "sk-llmload-test-secret-4f9a1c"


def truth_step_config(url: str) -> dict:
    """One 5 s Poisson step at 4 req/s of 8-token answers, for tests that compare a step's numbers with
    the sim's ground truth. What they test is the numbers against the sim's log, not the generator: a
    busy machine's send lag moves when a request leaves, not what the server did (hence 500 ms)."""
    config = base_config(url, {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "10s",
                                          "steps": [{"rate": 4, "duration": "5s"}]}},
                         client={"max_concurrency": 16, "max_send_lag_p99": "500ms"}, slo={"min_samples": 5})
    config["requests"]["output_tokens"] = {"dist": "fixed", "value": 8}
    config["telemetry"] = {"gpu": "off", "interval": "500ms"}
    return config


def run_said(run_dir: Path) -> str:
    """What a run measured, for a failing assertion's message: per step its verdict, failing dimensions,
    outcomes, send lag p99 and why it was invalid (never only Locust's stats table)."""
    path = Path(run_dir) / "summary.json"
    if not path.exists():
        return f"no summary.json in {run_dir}"
    steps = json.loads(path.read_text())["steps"]
    return "; ".join(f"{s['label']}: {s['verdict']} {s['failing']} outcomes {s['outcomes']} send lag p99 "
                     f"{s['send_lag_p99_s']} {[r['message'] for r in s.get('invalid_reasons') or []]}"
                     for s in steps)


#: the verdicts a busy machine can give a run that should pass (exit 3): a step whose generator fell behind
#: its schedule is `invalid`, one with too few samples `insufficient`, one whose interval straddles its
#: target `inconclusive`; the run is still whole (every record, the summary, the report)
UNJUDGED = ("invalid", "insufficient", "inconclusive")


def ended_whole(code: int, run_dir: Path, *, codes: tuple[int, ...] = (0,)) -> bool:
    """For tests of what a run records, not of its verdict: it exited with one of `codes`, or with 3 and a
    summary whose verdict a busy machine causes (`UNJUDGED`), never 3 for a run that failed."""
    if code in codes:
        return True
    path = Path(run_dir) / "summary.json"
    return code == 3 and path.exists() and json.loads(path.read_text())["verdict"] in UNJUDGED


def bad_input_cli(tmp_path: Path, monkeypatch, capsys, *, what: str = "a bad input"):
    """`run(text_or_bytes, command=("run",), name="bad.yaml")` -> (exit code, stderr) of the real entry
    (`llmload.cli.main`) on a file holding that. The pre-flight and the sim server are patched to fail if
    they are reached: bad input must stop before anything starts."""
    from llmload.cli import main

    def not_started(*args, **kwargs):
        raise AssertionError(f"{what} was accepted: the pre-flight was reached")

    monkeypatch.setattr("llmload.runtime.master.preflight.check_reachable", not_started)
    monkeypatch.setattr("llmload.sim.server.SimServer", not_started)  # `sim --config` never serves

    def run(content: str | bytes, command: tuple[str, ...] = ("run",), name: str = "bad.yaml") -> tuple[int, str]:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        args = [*command, str(path)] if command == ("run",) else [*command, "--config", str(path)]
        code = main(args)
        return code, capsys.readouterr().err

    return run


def assert_one_line(code: int, err: str, *, where: str, key: str | None = None) -> None:
    """A user mistake's answer: exit 2 and one `llmload: error:` line naming `where` (and `key`)."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("llmload: error: ") and where in lines[0], err
    if key is not None:
        assert key in lines[0], err


def unrendered_svg(fig: object, salt: str) -> str:
    """A report plot's placeholder for `llmload.report.plots._svg`: the plot is built (its data, axes and
    lines), not drawn (matplotlib's savefig is most of a report's CPU); conftest's `unrendered_plots`."""
    return f'<svg id="unrendered-{salt}"></svg>'


def run_virtual_demo(folder: Path) -> dict[str, int]:
    """`llmload demo`'s two runs (its ladder and knee search, its burst replay and uniform twin) as the demo
    writes them, each run whole in virtual time (`llmload run --virtual`) against the demo's engine, into
    `folder`/ladder and `folder`/burst as the demo leaves them; returns each run's exit code. The target
    is the discard port: a run that contacted it would fail its requests. Seconds of CPU: the demo's
    decisions are tested on it, its live processes once (tests/runtime/test_demo.py)."""
    import yaml

    from llmload.runtime.launcher.demo import demo_configs
    from llmload.runtime.virtual.run import run_virtual

    folder.mkdir(parents=True, exist_ok=True)
    codes = {}
    for name, config in demo_configs("http://127.0.0.1:9").items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        codes[name] = run_virtual(path, out=folder / name)
    return codes


def make_mooncake():
    """examples/traces/make_mooncake.py, loaded as a module (it is a script, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_mooncake", REPO / "examples/traces/make_mooncake.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mooncake_expected_hits(hashes: dict, rows: list[dict]) -> list[int]:
    """512 tokens per leading hash id that an earlier admitted request already had (the trie of the
    earlier prompts): what a Mooncake trace's hash_ids imply for each ground-truth row (`hashes`: its
    request's hash_ids by request id; `rows` in admission order)."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for row in rows:
        ids = hashes[row["request_id"]]
        depth = 0
        while depth < len(ids) and tuple(ids[:depth + 1]) in seen:
            depth += 1
        out.append(512 * depth)
        seen.update(tuple(ids[:k]) for k in range(1, len(ids)))  # full blocks only (the last is cut)
    return out
