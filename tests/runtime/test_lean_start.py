"""Lean start (issue 20): the user pool starts at once, and launcher / worker modules do not load pandas."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from runtime_helpers import base_config, plan, records, run_locust, write_config

from llmload.blas import BLAS_THREADS_ENV, one_blas_thread
from llmload.config import parse_config
from llmload.runtime.launcher.run import VERDICT_EXIT_CODES
from llmload.runtime.locustglue import session as session_mod

HEAVY = ("pandas", "pyarrow", "matplotlib")
#: also kept out of the launcher: it only validates, checks reachability and starts Locust
LAUNCHER_ONLY = ("gevent", "geventhttpclient", "llmload.sim.server")
#: also kept out of the Locust child until a config needs it: a `json_schema` answer check (issue 42)
WORKER_LAZY = ("jsonschema",)
#: kept out of the sim's modules: prometheus-client until a vLLM sim makes its metrics (or a scrape asks for
#: their content type), PyYAML until a sim reads a settings file
SIM_LAZY = ("prometheus_client", "yaml")
#: Locust's web UI (`locust.web`: Flask and its kin), kept out of a Locust process until it makes a web UI
WEB_UI = ("flask", "jinja2", "werkzeug")


def _chained(stages: list[tuple[str, str, tuple[str, ...]]]) -> dict[str, dict]:
    """Run `stages` (name, code, heavy modules) one after the other in one fresh interpreter (each probe
    process costs its imports: the stages of one chain share theirs); per stage, `loaded`: the heavy
    modules in sys.modules after its code (and the stages before it: a chain's stages each add to what
    the previous ones loaded, in the order the program they stand for loads them), and `result`: what its
    code left in `result`."""
    code = ["import sys, json", "out = {}"]
    for name, stage, heavy in stages:
        code += ["result = None", stage,
                 f"out[{name!r}] = {{'loaded': [m for m in {heavy!r} if m in sys.modules], 'result': result}}"]
    code.append("print(json.dumps(out))")
    done = subprocess.run([sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _boot() -> str:
    from llmload.runtime.launcher.run import BOOT

    return BOOT.split("; from locust.main")[0]


#: gevent's plugins' entry points, counted around the Locust child's boot (its first stage)
_COUNT_ENTRY_POINTS = (
    "from importlib import metadata\nreads = []\nreal = metadata.PathDistribution.read_text\n"
    "def counted(self, name):\n    reads.append(name)\n    return real(self, name)\n"
    "metadata.PathDistribution.read_text = counted\nentry_points = metadata.entry_points")
_ENTRY_POINTS_READ = (
    "import gevent.monkey\n"
    "result = [reads.count('entry_points.txt'), len({d._path for d in metadata.distributions()}),"
    " metadata.entry_points is entry_points, gevent.monkey.is_module_patched('socket')]\n"
    "metadata.PathDistribution.read_text = real")


#: a probe's first lines: no OPENBLAS_NUM_THREADS inherited from the suite's environment (the probe tests ours)
_NO_BLAS_SETTING = f"import os\nos.environ.pop({BLAS_THREADS_ENV!r}, None)"
#: numpy loaded (by the worker's modules): the BLAS setting and the threads of the process (OpenBLAS's pool: one
#: per core beside the main thread, unless told one)
_BLAS_THREADS = (f"result = ['numpy' in sys.modules, os.environ.get({BLAS_THREADS_ENV!r}), "
                 "len(os.listdir('/proc/self/task'))]")


#: the launcher's probe builds this config's plan (two ladder steps, each with its own seed)
_LADDER = base_config("http://127.0.0.1:1", {"ladder": {"steps": [{"rate": 1, "duration": "1s"},
                                                                  {"rate": 2, "duration": "1s"}]}})


#: a local runner set up by our session, then stopped: the `inspect.stack()` calls and Locust's DEBUG line
_STOP_CALLER = (
    "import inspect, logging\nfrom locust.env import Environment\nfrom locust.runners import STATE_RUNNING\n"
    "from llmload.runtime.locustglue.session import Session\n"
    "env = Environment(user_classes=[])\nrunner = env.create_local_runner()\nSession(env).setup()\n"
    "runner.state = STATE_RUNNING\nlines, stacks, real = [], [], inspect.stack\n"
    "handler = logging.Handler()\nhandler.emit = lambda record: lines.append(record.getMessage())\n"
    "runners_log = logging.getLogger('locust.runners')\nrunners_log.addHandler(handler)\n"
    "runners_log.setLevel(logging.DEBUG)\n"
    "inspect.stack = lambda *a, **kw: stacks.append(1) or real(*a, **kw)\n"
    "runner.stop()\ninspect.stack = real\n"
    "result = [len(stacks), [line for line in lines if line.startswith('Stopping all users')]]")


#: Locust's entry (the rest of BOOT): its HTML report's module a stand-in, Jinja2 not loaded
_LOCUST_MAIN = ("import locust.main\n"
                "result = [getattr(sys.modules['locust.html'], '__file__', None), locust.html is sys.modules['locust.html']]")

#: `locust.main`'s HTML report functions, called after the web UI (which imports the real module): the real ones
_HTML_REPORT = ("from types import SimpleNamespace\nimport locust.html\n"
                "options = SimpleNamespace(num_users=5, spawn_rate=0.5, run_time=None, html_file='r-{u}-{r}.html')\n"
                "locust.main.process_html_filename(options)\n"
                "result = [options.html_file, locust.html.__file__.endswith('html.py'), "
                "locust.main.get_html_report.__name__]")

#: a web UI made after a headless session's stop (the stage before): Locust's own class, from its real module
_WEB_UI_MADE = (
    "import locust.env, locust.web\nui = env.create_web_ui('127.0.0.1', 0)\n"
    "result = [type(ui).__module__, type(ui) is locust.web.WebUI, locust.env.WebUI is locust.web.WebUI]")


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict[str, dict]:
    """The import probes of this module, in three fresh interpreters: a Locust child (its boot, then what
    a worker loads), the launcher then the master (then a run's end without a report: its modules, then
    the finalisation of `test_finalize_unchanged`'s four-step run), and the sim."""
    from test_finalize_unchanged import CONFIG, write_run

    run_dir = tmp_path_factory.mktemp("no-report-run")
    write_run(run_dir)
    out: dict[str, dict] = {}
    out.update(_chained([
        ("boot", f"{_NO_BLAS_SETTING}\n{_COUNT_ENTRY_POINTS}\n{_boot()}\n{_ENTRY_POINTS_READ}", HEAVY + WEB_UI),
        ("main", _LOCUST_MAIN, WEB_UI),
        ("worker", "import importlib.util\n"
                   "spec = importlib.util.spec_from_file_location('lf', 'locustfiles/llm.py')\n"
                   "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
                   "import shapes.llm, llmload.runtime.worker.scheduler, llmload.runtime.worker.sending, "
                   "llmload.records", HEAVY + WORKER_LAZY + WEB_UI),
        ("blas", _BLAS_THREADS, ()),
        ("expect", "from llmload.config import Expect\nExpect(json_schema={'type': 'object'})", WORKER_LAZY),
        ("stop", _STOP_CALLER, WEB_UI),
        ("web", _WEB_UI_MADE, WEB_UI),
        ("html", _HTML_REPORT, ())]))
    out.update(_chained([
        ("command", f"{_NO_BLAS_SETTING}\nimport llmload.cli\nllmload.cli.main(['--version'])\n"
                    f"result = os.environ.get({BLAS_THREADS_ENV!r})", ("numpy",)),
        ("launcher", "import llmload.runtime.launcher.run\n"
                     "from llmload.config import load_config\n"
                     "from llmload.runtime.master.preflight import check_reachable\n"
                     "from shapes.plan import build_plan\n"
                     "from llmload.envelope import check_plan_against_envelope\n"
                     "from llmload.client.auth import Credentials\n"
                     "from pathlib import Path\nfrom llmload.config import parse_config\n"
                     f"result = len(build_plan(parse_config({_LADDER!r}), base_dir=Path('.')))\n"
                     "from llmload.runtime.launcher.stop_signals import end_process_group\n"
                     "import subprocess\nchild = subprocess.Popen([sys.executable, '-c', ''], start_new_session=True)\n"
                     "child.wait()\nend_process_group(child.pid)",
         HEAVY + LAUNCHER_ONLY + ("psutil",)),
        ("master", "from llmload.runtime.master.preflight import write_run_manifest, start_telemetry, preflight\n"
                   "import llmload.telemetry.manifest, llmload.telemetry.collector\n"
                   "from llmload.telemetry import build_manifest, write_manifest, TelemetryCollector\n"
                   "from llmload.runtime.master.judging import live_judge", HEAVY),
        ("answer", "import llmload.report.answer, llmload.rundir.finalise, llmload.report", ("matplotlib",)),
        ("finalise", "from pathlib import Path\nfrom llmload.config import parse_config\n"
                     "from llmload.rundir.finalise import finalise_run\n"
                     f"run, outcome = Path({str(run_dir)!r}), {{}}\n"  # the outcome: as the master asks, the answer made
                     f"result = [finalise_run(run, parse_config({CONFIG!r}), report=False, outcome=outcome), "
                     "(run / 'summary.json').exists(), (run / 'report.html').exists(), outcome]", ("matplotlib",))]))
    out.update(_chained([("sim", "import llmload.cli, llmload.sim.server", HEAVY + ("llmload.config", "gevent") + SIM_LAZY)]))
    return out


def test_launcher_imports_no_pandas(probes):
    """It builds the plan (the steps' seeds are numpy's `SeedSequence`), and imports no psutil ending
    the Locust child's process group when nothing is left in it."""
    assert probes["launcher"]["result"] == 2
    assert probes["launcher"]["loaded"] == []


def test_the_command_and_the_locust_child_start_numpy_with_one_blas_thread(probes):
    """numpy's OpenBLAS starts a thread per core at import, each spinning ~0.1 s before it sleeps (~0.07 s
    of CPU per process on 2 cores): the `llmload` command's `main` and a Locust child's boot ask for one
    thread first (`llmload.blas`), so the child has no thread beside its own once numpy is loaded."""
    assert probes["command"]["result"] == "1" and probes["command"]["loaded"] == []
    loaded, setting, threads = probes["blas"]["result"]
    assert loaded and setting == "1"
    assert threads == 1


def test_one_blas_thread_keeps_a_setting_and_leaves_a_loaded_numpy_alone(monkeypatch):
    """A user's OPENBLAS_NUM_THREADS is theirs; once numpy is imported the setting is read already, and a
    process that imported it (the test suite's) is not told anything (nor, through it, its children)."""
    import numpy  # noqa: F401

    monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    one_blas_thread()
    assert BLAS_THREADS_ENV not in os.environ
    monkeypatch.delitem(sys.modules, "numpy")
    monkeypatch.setenv(BLAS_THREADS_ENV, "3")
    one_blas_thread()
    assert os.environ[BLAS_THREADS_ENV] == "3"
    monkeypatch.delenv(BLAS_THREADS_ENV)
    one_blas_thread()
    assert os.environ[BLAS_THREADS_ENV] == "1"


def test_worker_side_modules_import_no_pandas(probes):
    """What a Locust worker loads after its boot: the locustfile (session, worker runtime, sending, client)
    and the shape."""
    assert probes["worker"]["loaded"] == []


def test_jsonschema_is_loaded_only_for_a_json_schema_check(probes):
    """The answer checks (`llmload.client.checks`, imported by every Locust child) load jsonschema (~0.08 s
    of CPU) only for a `json_schema` check, and then when the config is validated: not mid-load, in a
    greenlet, at the first answer checked."""
    assert probes["worker"]["loaded"] == []
    assert probes["expect"]["loaded"] == ["jsonschema"]


def test_the_locust_runners_stop_names_its_caller_without_inspecting_the_stack(probes):
    """`Runner.stop` logs its caller's file and line (DEBUG) from `inspect.stack()`, which reads every frame's
    source and scans the ~1,300 loaded modules: ~0.04 s of CPU per Locust process. Our session swaps in
    `seams.cheap_stop_caller`: the same line, from the frame alone."""
    stacks, lines = probes["stop"]["result"]
    assert stacks == 0
    assert len(lines) == 1 and re.fullmatch(r"Stopping all users \(called from .*locust/runners\.py:\d+\)", lines[0])


def test_the_sim_starts_without_the_run_configs_models(probes):
    """`llmload sim` (a few hundred starts in the test suite) takes its length distributions and error
    lines from `llmload.configbase`: building the run config's models cost each start 0.13 s of CPU. Nor
    does it load prometheus-client (an Ollama, SGLang or llama.cpp sim never needs it: ~0.03 s) or PyYAML
    (a sim without a settings file: ~0.01 s) with its modules."""
    assert probes["sim"]["loaded"] == []


def test_the_locust_childs_boot_imports_no_pandas(probes):
    """`llmload run` starts Locust as `python -c BOOT`, which imports our packages first (so a folder
    named like one of them in the working directory cannot shadow it): that must stay cheap."""
    assert "import locust, llmload, shapes, analysis" in _boot()
    assert probes["boot"]["loaded"] == []


def test_a_locust_process_imports_its_web_ui_only_when_it_makes_one(probes):
    """A headless master and every worker never start Locust's web UI, whose module (Flask, Werkzeug,
    Jinja2: ~0.06 s of CPU per Locust process) `locust.env` imports: the boot defers it
    (`boot.defer_web_ui`) through the child's imports, a worker's modules and a session's stop, and a web
    UI made afterwards is Locust's own, from the real module."""
    assert probes["boot"]["loaded"] == [] and probes["worker"]["loaded"] == [] and probes["stop"]["loaded"] == []
    assert sorted(probes["web"]["loaded"]) == sorted(WEB_UI)
    assert probes["web"]["result"] == ["locust.web", True, True]


def test_locusts_entry_imports_its_html_report_only_when_one_is_made(probes):
    """`locust.main` imports `locust.html` (Jinja2: ~0.024 s of CPU per Locust process) for `--html`
    alone: the boot stands in for it (`boot.defer_html_report`) until a report is made, and the web UI
    (which renders its page with it) and the report functions get the real module."""
    assert probes["main"]["loaded"] == [] and probes["main"]["result"] == [None, True]
    assert probes["html"]["result"] == ["r-5-0.5.html", True, "get_html_report"]


def test_the_locust_childs_boot_reads_the_entry_points_once(probes):
    """gevent's monkey-patching (in `import locust`) asks for its plugins' entry points ~25 times, each a
    read of every installed distribution's entry_points.txt (~0.25 s of CPU per Locust process): the boot
    reads them once (`llmload.runtime.locustglue.boot`), patches the same, and leaves the standard
    library's `entry_points` in place afterwards."""
    reads, installed, restored, patched = probes["boot"]["result"]
    assert patched and restored
    # one reading for gevent's events, one for pydantic's plugins (its own); gevent alone read 25
    assert reads <= 2 * installed, (reads, installed)


def test_the_runs_answer_is_made_without_matplotlib(probes):
    """The summary's answer (`llmload.report.answer`, made at every run's end) needs no plot: a run
    without a report (`--llmload-no-report`, `llmload calibrate`'s steps) never imports matplotlib."""
    assert probes["answer"]["loaded"] == []


def test_a_run_without_a_report_finalises_without_matplotlib(probes):
    """The end of a run without a report (`--no-report`: the analysis, the answer with its limits and burst
    lines, summary.json, the worksheet) draws nothing: importing matplotlib there cost each such run
    ~0.2 s of CPU (issue 42; `llmload.report.limits_view` imports its plotting helpers where it draws)."""
    code, summary_written, report_written, outcome = probes["finalise"]["result"]
    assert code in (0, 1, 3) and summary_written and not report_written
    assert outcome["sentences"], outcome  # the answer (`answer_sentences`, `limits_view.answer_lines`) was made
    assert probes["finalise"]["loaded"] == []


def test_record_schema_still_importable_and_complete():
    from dataclasses import fields

    from llmload.records import RECORD_SCHEMA, Record

    assert RECORD_SCHEMA.names == [f.name for f in fields(Record)]


def test_launcher_exit_codes_match_analysis():
    from analysis.summary import exit_code

    for verdict, code in VERDICT_EXIT_CODES.items():
        assert exit_code({"verdict": verdict}) == code
    assert exit_code({}) == 3


class _ChatUser:
    api = "openai-chat"

    def build_request(self, arrival):
        return arrival.default_request()


def test_the_shape_starts_the_whole_pool_at_once():
    """tick() asks Locust for a spawn rate of at least the pool size: one dispatch, no 100/s ramp."""
    config = parse_config(base_config("http://127.0.0.1:1", {"ladder": {"steps": [{"rate": 1, "duration": "1s"}]}},
                                      client={"max_concurrency": 256}))
    session = session_mod.Session(SimpleNamespace(runner=None, user_classes=[_ChatUser]))
    session.config = config
    users, spawn_rate, _ = session.tick()
    assert users == 256
    assert spawn_rate >= users


@pytest.mark.slow
def test_a_256_user_pool_is_spawned_in_one_dispatch_and_sends_on_time(sim_factory, tmp_path):
    """Locust's own log (INFO) shows the ramp: one dispatch of 256 users at >= 256/s, no spawn-rate
    warning; the plan's first arrival is sent close to its scheduled time."""
    sim = sim_factory(flavor="vllm")
    config = base_config(sim.url, {"ladder": {"arrival": "constant", "warmup": "0s", "drain_timeout": "10s",
                                              "steps": [{"rate": 10, "duration": "2s"}]}},
                         client={"max_concurrency": 256})
    run_dir = tmp_path / "run"
    done = run_locust(write_config(tmp_path, config), run_dir, extra=["--loglevel", "INFO",
                                                                      "--llmload-skip-preflight"], report=False)
    log = done.stdout + done.stderr
    assert "Ramping to 256 users at a rate of 256.00 per second" in log, log[-2000:]
    assert "spawn rate is very high" not in log
    df = records(run_dir)
    first = df.sort_values("scheduled_at").iloc[0]
    start_at = plan(run_dir)["steps"][0]["start_at"]
    assert abs(first["scheduled_at"] - start_at) < 0.2  # the plan's first arrival ...
    assert first["sent_at"] - first["scheduled_at"] < 1.0  # ... is sent on time (generous: shared CI cores)


def test_record_json_line_is_the_same_as_the_json_module_writes():
    """Record.to_json (orjson) round-trips to exactly what `json.dumps` of the record gives."""
    from llmload.records import Record

    record = Record(request_id="q-1", step="r10", worker="w0", scheduled_at=1.7e9 + 0.123456789,
                    sent_at=1.7e9 + 0.2, first_token_at=1.7e9 + 0.3, output_tokens=3,
                    token_times=[1.7e9 + 0.3, 1.7e9 + 0.31, 1.7e9 + 1 / 3], token_counts=[1, 1, 1])
    line = record.to_json()
    assert "\n" not in line
    assert json.loads(line) == json.loads(json.dumps(record.as_dict()))


@pytest.mark.parametrize("field,value", [("sent_at", float("nan")), ("token_times", [1.0, float("inf")])])
def test_record_json_refuses_non_finite_floats(field, value):
    from llmload.records import Record

    record = Record(request_id="q-1", step="r10", worker="w0", scheduled_at=1.0, **{field: value})
    with pytest.raises(ValueError):
        record.to_json()


def test_the_masters_pre_run_modules_import_no_pandas(probes):
    """What the master runs between the pre-flight and the first arrival (the manifest, the telemetry
    collector, the live judge's set-up) loads no pandas / pyarrow: importing them there put ~0.45 s on
    the path from launch to the first arrival (issue 20)."""
    assert probes["master"]["loaded"] == []
