"""The Locust seams (`llmload.runtime.locustglue.seams`): what each one does, and the contract with the installed
Locust behind it (as `test_geventhttpclient_contract` pins the transport's): the pieces of Locust each seam relies
on, read from Locust's own source and files. An upgrade that renames one fails here, not in a run."""

from __future__ import annotations

import ast
import importlib.util
import logging
import re
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

from llmload.runtime.locustglue import seams

ROOT = Path(__file__).resolve().parents[2]


def _locust() -> Path:
    """Locust's package folder, found without importing it (an import here would patch the standard library
    with gevent too late for the rest of the session)."""
    spec = importlib.util.find_spec("locust")
    return Path(next(iter(spec.submodule_search_locations)))


def _classes(path: Path) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_locust_contract() -> None:
    locust = _locust()
    low = re.search(r'"locust>=([\d.]+)', (ROOT / "pyproject.toml").read_text()).group(1)
    installed = tuple(int(x) for x in version("locust").split(".")[:2])
    assert installed >= tuple(int(x) for x in low.split(".")[:2])
    # the session on the environment: an attribute of ours that Locust's Environment does not have
    assert seams.SESSION_ATTR not in (locust / "env.py").read_text()
    # the master is the one runner with `clients` (is_master); its nodes, their ids and states (WorkerLink)
    runners_py = (locust / "runners.py").read_text()
    runners = _classes(locust / "runners.py")
    assert "self.clients = WorkerNodes()" in ast.unparse(_method(runners["MasterRunner"], "__init__"))
    for name in ("Runner", "LocalRunner", "DistributedRunner", "WorkerRunner"):
        assert "self.clients" not in ast.unparse(runners[name]), name
    nodes = runners["WorkerNodes"]
    assert ast.unparse(nodes.bases[0]) == "MutableMapping" and "all" in {n.name for n in nodes.body if isinstance(
        n, ast.FunctionDef)}  # .all, and .get of a mapping
    node = ast.unparse(_method(runners["WorkerNode"], "__init__"))
    assert "self.id: str = id" in node and "self.state = state" in node
    assert re.search(r'STATE_STOPPED, STATE_MISSING = \[[^]]*"stopped",\s*"missing"', runners_py)
    send = _method(runners["MasterRunner"], "send_message")
    assert [a.arg for a in send.args.args] == ["self", "msg_type", "data", "client_id"]
    assert [a.arg for a in _method(runners["MasterRunner"], "get_worker_index").args.args] == ["self", "client_id"]
    assert seams.SPAWN_WARNING in runners_py and 'logging.getLogger(__name__)' in runners_py  # locust.runners
    # the web UI: its template args, the index page's endpoint and </body>, the stats it polls, our tab's keys
    web = (locust / "web.py").read_text()
    assert 'Blueprint("locust"' in web and "def index(" in web and f'"{seams.STATS_PATH}"' in web
    update = ast.unparse(_method(_classes(locust / "web.py")["WebUI"], "update_template_args"))
    assert "self.template_args = {" in update
    for key in ("extra_options", "host", "missing_host_warning"):
        assert f"'{key}'" in update, key
    dist = locust / "webui" / "dist"
    page = (dist / "index.html").read_text()
    assert "template_args|tojson" in page and page.count("</body>") == 1
    bundle = "".join(p.read_text(errors="ignore") for p in (dist / "assets").glob("*.js"))
    for key in ("extendedTabs", "extendedTables", "extendedStats"):  # the page reads our keys, camel-cased
        assert key in bundle, key
    # logging: the log panel's reader by class name, the stats table's logger
    log_py = (locust / "log.py").read_text()
    assert seams.LOG_READER in _classes(locust / "log.py") and f"locust.log.{seams.LOG_READER}" in log_py
    assert f'"{seams.STATS_LOGGER}"' in (locust / "stats.py").read_text()


def test_the_session_goes_on_the_environment_and_back() -> None:
    env, session = SimpleNamespace(), object()
    assert seams.session_of(env) is None and seams.session_of(None) is None
    seams.attach_session(env, session)
    assert seams.session_of(env) is session


def test_one_test_for_the_master() -> None:
    local = SimpleNamespace(send_message=lambda *a, **k: None)  # a local runner has no `clients`
    assert not seams.is_master(local) and seams.worker_count(local) == 1
    nodes = [SimpleNamespace(id="a", state="ready"), SimpleNamespace(id="b", state="missing")]
    master = SimpleNamespace(clients=SimpleNamespace(all=nodes, get={n.id: n for n in nodes}.get),
                             get_worker_index=lambda cid: {"a": 1, "b": 2}[cid])
    assert seams.is_master(master) and seams.worker_count(master) == 1
    link = seams.WorkerLink(master)
    assert link.workers() == [("a", "1")] and link.missing("b") and link.missing("gone") and not link.missing("a")
    assert seams.WorkerLink(local).workers() == [(None, "0")]


def test_the_web_ui_seams() -> None:
    from flask import Flask, Response

    web_ui = SimpleNamespace(template_args={"extra_options": {"rate": {"default_value": "1"}}})
    web_ui.update_template_args = lambda: web_ui.template_args.update(host="", missing_host_warning=True)
    seams.add_tab(web_ui, "LLM", "llm", [("rate", "Rate")])
    assert web_ui.template_args["extended_tabs"] == [{"title": "LLM", "key": "llm"}]
    assert web_ui.template_args["extended_tables"] == [{"key": "llm", "structure": [{"key": "rate", "title": "Rate"}]}]
    seams.override_start_form(web_ui, lambda options: ({**options, "rate": {"default_value": "2"}}, "http://t"))
    web_ui.update_template_args()
    assert web_ui.template_args["extra_options"] == {"rate": {"default_value": "2"}}
    assert web_ui.template_args["host"] == "http://t" and web_ui.template_args["missing_host_warning"] is False

    with Flask(__name__).app_context():
        index = SimpleNamespace(endpoint=seams.INDEX_ENDPOINT, path="/")
        page = Response("<html><body><div></div></body></html>", mimetype="text/html")
        assert seams.splice_into_page(index, page, "<script></script>", unless="<script>")
        assert page.get_data(as_text=True) == "<html><body><div></div><script></script></body></html>"
        assert not seams.splice_into_page(index, page, "<script></script>", unless="<script>")  # once
        other = SimpleNamespace(endpoint="locust.other", path="/x")
        assert not seams.splice_into_page(other, Response("</body>", mimetype="text/html"), "x", unless="x")
        stats = Response('{"stats": []}', mimetype="application/json")
        polled = SimpleNamespace(endpoint="locust.request_stats", path=seams.STATS_PATH)
        assert seams.fill_tab(polled, stats, "llm", lambda: [{"rate": 1}])
        assert stats.get_json() == {"stats": [], "extended_stats": [{"key": "llm", "data": [{"rate": 1}]}]}
        assert not seams.fill_tab(index, page, "llm", lambda: [])


def test_the_logging_seams() -> None:
    class LogReader(logging.Handler):  # matched by its name, as Locust's (pinned in test_locust_contract)
        def emit(self, record: logging.LogRecord) -> None:
            pass

    root = logging.getLogger()
    reader = LogReader()
    root.addHandler(reader)
    try:
        assert reader in seams.log_readers()
    finally:
        root.removeHandler(reader)
    seams.quiet_spawn_warning()
    seams.quiet_spawn_warning()  # once
    runners_log = logging.getLogger("locust.runners")
    assert sum(type(f).__name__ == "_QuietSpawnWarning" for f in runners_log.filters) == 1
    dropped = logging.LogRecord("locust.runners", logging.WARNING, "", 0,
                                f"Your selected {seams.SPAWN_WARNING}, ...", None, None)
    kept = logging.LogRecord("locust.runners", logging.WARNING, "", 0, "another warning", None, None)
    assert not runners_log.filters[-1].filter(dropped) and runners_log.filters[-1].filter(kept)


def test_the_user_stop_seam() -> None:
    """`finish_then_stop`: a user in a task asked to stop (`LOCUST_STATE_STOPPING`) ends after that task;
    the runner's states while it runs are `spawning` / `running`, and a test's stop enters `cleanup`
    before it stops the users (so a stop of the test is never mistaken for a rebalance)."""
    locust = _locust()
    users = _classes(locust / "user" / "users.py")
    stop = ast.unparse(_method(users["User"], "stop"))
    assert "self._state == LOCUST_STATE_RUNNING" in stop and "self._state = LOCUST_STATE_STOPPING" in stop
    wait = ast.unparse(_method(_classes(locust / "user" / "task.py")["TaskSet"], "wait"))
    assert re.search(r"if self\.user\._state == LOCUST_STATE_STOPPING:\s+raise StopUser\(\)", wait), wait
    runners_py = (locust / "runners.py").read_text()
    for state in ("spawning", "running", "cleanup"):
        assert f'"{state}"' in runners_py, state
    runner_stop = ast.unparse(_method(_classes(locust / "runners.py")["Runner"], "stop"))
    assert runner_stop.index("self.update_state(STATE_CLEANUP)") < runner_stop.index("self.stop_users(")


def test_the_stop_caller_seam() -> None:
    """`cheap_stop_caller`: `locust.runners` uses `inspect` only for `Runner.stop`'s caller (its `filename`
    and `lineno`), and the replacement gives what `inspect` gives for them."""
    import inspect

    runners_py = (_locust() / "runners.py").read_text()
    assert re.findall(r"\binspect\.\w+", runners_py) == ["inspect.getframeinfo", "inspect.stack"]
    runner_stop = ast.unparse(_method(_classes(_locust() / "runners.py")["Runner"], "stop"))
    assert "caller = inspect.getframeinfo(inspect.stack()[1][0])" in runner_stop
    assert set(re.findall(r"caller\.(\w+)", runner_stop)) == {"filename", "lineno"}

    def stop(using):  # as `Runner.stop` asks, one frame below its caller
        return using.getframeinfo(using.stack()[1][0])

    def caller(using):
        return stop(using)

    ours, real = caller(seams._FrameCaller), caller(inspect)
    assert (ours.filename, ours.lineno) == (real.filename, real.lineno) == (__file__, caller.__code__.co_firstlineno + 1)


def test_locusts_main_ends_with_sys_exit_of_its_code() -> None:
    """`run_without_teardown` relies on it: the end of `main()` is `sys.exit(code)` (its shutdown)."""
    source = (_locust() / "main.py").read_text()
    assert re.search(r"\n        sys\.exit\(code\)\n", source)


_TEARDOWN_CHILD = """
import atexit, sys, threading, time
from llmload.runtime.locustglue.seams import run_without_teardown

class Noisy:
    def __del__(self):  # run by the interpreter's teardown only
        sys.stderr.write("teardown\\n")

keep = Noisy()
atexit.register(lambda: print("atexit ran"))

def main():
    sys.stdout.write("buffered, ")  # no newline, no flush: written only if the streams are flushed
    if sys.argv[1] == "thread":
        threading.Thread(target=time.sleep, args=(0.5,)).start()
    sys.exit(None if sys.argv[1] == "none" else sys.argv[1] if sys.argv[1] == "text" else 3)

run_without_teardown(main)
"""


def test_run_without_teardown_exits_with_mains_code_after_atexit_and_without_the_teardown(tmp_path) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def run(case: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _TEARDOWN_CHILD, case], capture_output=True, text=True,
                              timeout=60, env=env, cwd=tmp_path)

    fast = run("code")
    assert (fast.returncode, fast.stdout, fast.stderr) == (3, "buffered, atexit ran\n", "")
    assert run("none").returncode == 0
    # the ordinary way: a text exit (printed, code 1), or another thread still running (waited for)
    text = run("text")
    assert (text.returncode, text.stdout) == (1, "buffered, atexit ran\n") and "text" in text.stderr
    threaded = run("thread")
    assert threaded.returncode == 3 and "teardown" in threaded.stderr
