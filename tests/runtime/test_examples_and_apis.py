"""Example configs validate; the live web UI's LLM tab and page. (A closed loop's levels over the Ollama
API are tests/runtime/test_run_decisions_virtual.py's, in virtual time; the Ollama sim's wire is
tests/client/'s.)"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from runtime_helpers import base_config, write_config
from support import REPO, free_port, start_sim, stop_process

from llmload.apis import api_names
from llmload.config import load_config
from llmload.runtime.launcher.run import locust_command
from shapes.plan import build_plan

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_configs_validate_and_plan(path: Path):
    config = load_config(path)
    assert build_plan(config, base_dir=path.parent)


def test_every_api_has_an_example():
    apis = {load_config(p).target.api for p in EXAMPLES}
    assert apis == set(api_names())


#: a step's arrival count, normal approximation: mean rate x window, variance the mean x the dispersion (0
#: evenly spaced, 1 Poisson, 1 / burstiness gamma); its 1st percentile must reach min_samples, so that a step
#: under capacity is `insufficient` in at most one run in a hundred (15 expected of 15: every other run)
Z_99 = 2.326


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_ladder_step_can_reach_min_samples(path: Path):
    config = load_config(path)
    ladder, need = config.shape.ladder, config.slo.min_samples
    if ladder is None:
        return
    dispersion = {"constant": 0.0, "poisson_exact": 0.0, "poisson": 1.0, "gamma": 1.0 / ladder.burstiness}[ladder.arrival]
    short = []
    for step in build_plan(config, base_dir=path.parent):
        expected = step.target_rate * step.duration_s
        if expected - Z_99 * (expected * dispersion) ** 0.5 < need:
            short.append(f"{step.label}: {step.target_rate:g} req/s x {step.duration_s:g} s = {expected:g} expected")
    assert not short, f"{path.name}: min_samples {need} is out of reach in 1% of runs or more: {short}"


def test_the_llamacpp_example_names_the_engine_s_model_alias():
    from llmload.llama_server import MODEL_ALIAS

    examples = [p for p in EXAMPLES if load_config(p).target.server == "llamacpp"]
    assert examples and all(load_config(p).target.model == MODEL_ALIAS for p in examples)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


def _finished_runs(runs: Path, count: int) -> list[Path]:
    """The finished runs under `runs`, once there are `count` of them (or fewer after a minute)."""
    deadline = time.time() + 60
    while True:
        done = sorted(p for p in runs.glob("*") if (p / "summary.json").exists())
        if len(done) >= count or time.time() > deadline:
            return done
        time.sleep(0.3)


@pytest.fixture(scope="module")
def web_session(tmp_path_factory) -> dict:
    """One web UI process for this module's two tests (a Locust process is ~3 s of CPU): its LLM tab and
    pages read while the autostarted run goes, then a second run started from the UI once the first has
    stopped. Without a report (the web run's report is test_signals' and test_web_finalise's). What it saw is
    returned, not asserted: each test fails on its own part."""
    tmp = tmp_path_factory.mktemp("web")
    sim = start_sim(tmp, flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "5s",
                                              "steps": [{"rate": 5, "duration": "2s"}]}},
                         client={"max_concurrency": 16}, output=str(tmp / "runs"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = locust_command(write_config(tmp, config), None, web=True) + ["--web-port", str(port), "--autostart",
                                                                       "--llmload-no-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict = {"rows": []}
    try:
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None:
            try:
                stats = json.loads(_get(base + "/stats/requests"))
            except OSError:
                time.sleep(0.3)
                continue
            tables = {t["key"]: t["data"] for t in stats.get("extended_stats", [])}
            rows = [r for r in tables.get("llm", []) if r.get("verdict") not in ("not_run", None)]
            if rows:
                seen["rows"] = rows
            if any(r.get("offered_rate") is not None for r in rows):
                break
            time.sleep(0.5)
        seen["page"] = _get(base + "/llmload").decode()  # the old live page: now the LLM tab
        seen["index"] = _get(base + "/").decode()
        seen["script"] = _get(base + "/llmload/tab.js").decode()
        seen["live"] = json.loads(_get(base + "/llmload/live.json"))
        seen["steps"] = json.loads(_get(base + "/llmload/steps.json"))
        seen["first"] = _finished_runs(tmp / "runs", 1)
        deadline = time.time() + 30
        while json.loads(_get(base + "/stats/requests"))["state"] != "stopped" and time.time() < deadline:
            time.sleep(0.3)
        token = re.search(r'name="llmload-token" content="([^"]+)"', _get(base + "/").decode()).group(1)
        start = urllib.request.Request(base + "/swarm", data=b"",
                                       headers={"X-Llmload-Token": token})  # the UI page's own POST
        seen["swarm"] = json.loads(urllib.request.urlopen(start, timeout=10).read())
        seen["runs"] = _finished_runs(tmp / "runs", 2) if seen["swarm"].get("success") else seen["first"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        stop_process(sim.proc)
    return seen


@pytest.mark.slow
def test_web_ui_llm_tab_and_live_page(web_session):
    seen = web_session
    assert seen["rows"] and any(r.get("offered_rate") for r in seen["rows"])  # live numbers in the LLM tab
    page, index, script = seen["page"], seen["index"], seen["script"]
    assert "llmload/tab.js" in page and "llmload/tab.js" in index and '"llm"' in index
    # the charts are drawn by our script from our own routes: nothing is fetched from elsewhere
    assert "live.json" in script and [u for u in re.findall(r"https?://[^\s\"']+", script)] == [
        "http://www.w3.org/2000/svg"]
    assert {"state", "series", "steps", "slo", "result", "current"} <= set(seen["live"])
    assert [s["label"] for s in seen["steps"]["steps"]] == ["r5.00"]
    assert len(seen["first"]) == 1  # the autostarted run finalised


@pytest.mark.slow
def test_web_ui_starts_a_second_run_into_a_new_directory(web_session):
    assert web_session["swarm"]["success"]
    runs = web_session["runs"]
    assert len(runs) == 2, "fewer than 2 finished runs"
    assert len({p.name for p in runs}) == 2 and all((p / "records.parquet").exists() for p in runs)
