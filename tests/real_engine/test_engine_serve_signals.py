"""`llmload engine serve` stops the server it started on every stop signal (SIGINT, SIGTERM, SIGHUP), also
while the model loads. A fake llama-server (this machine need not have built the real one) serves
`/health` on the port it is given and writes its PID to a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from support import free_port

from llmload import llama_server as engine

FAKE_SERVER = """#!{python}
import http.server, os, sys, time
args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
open(os.environ["FAKE_LLAMA_PID_FILE"], "w").write(str(os.getpid()))
ready_at = time.monotonic() + float(os.environ.get("FAKE_LLAMA_LOAD_S", "0"))

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        loading = time.monotonic() < ready_at
        self.send_response(503 if loading else 200)
        self.end_headers()
        self.wfile.write(b"{{}}")

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point llmload at a fake llama-server and model; returns the file the server writes its PID to."""
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE_SERVER.format(python=sys.executable))
    binary.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"gguf")
    pid_file = tmp_path / "server.pid"
    monkeypatch.setenv(engine.ENV_SERVER, str(binary))
    monkeypatch.setenv(engine.ENV_MODEL, str(model))
    monkeypatch.setenv(engine.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_LLAMA_PID_FILE", str(pid_file))
    return pid_file


def _gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _kill_left(pid_file: Path) -> None:
    """The test's own clean-up: a server left by a failing run goes (it was started by this test)."""
    if pid_file.exists() and not _gone(pid := int(pid_file.read_text()), 0):
        os.kill(pid, signal.SIGKILL)


def _serve(port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "llmload.cli", "engine", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_pid(pid_file: Path, proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if pid_file.exists() and pid_file.read_text().strip():
            return int(pid_file.read_text())
        time.sleep(0.05)
    raise AssertionError(f"the fake server never started: {proc.stdout.read() if proc.poll() is not None else ''}")


@pytest.mark.parametrize("signo", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=lambda s: s.name)
def test_serve_stops_its_server_on_every_stop_signal(fake_engine: Path, signo: int) -> None:
    port = free_port()
    proc = _serve(port)
    try:
        line = proc.stdout.readline()
        assert f"ready at http://127.0.0.1:{port}" in line, line + proc.stdout.read()
        server = _wait_pid(fake_engine, proc)
        assert psutil.pid_exists(server)
        proc.send_signal(signo)
        assert proc.wait(timeout=20) == 0
        assert _gone(server), f"llama-server (pid {server}) outlived `llmload engine serve` after {signo.name}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_left(fake_engine)


def test_serve_stopped_while_the_model_loads_stops_its_server(fake_engine: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_LLAMA_LOAD_S", "30")  # /health answers 503 "loading" all the while
    proc = _serve(free_port())
    try:
        server = _wait_pid(fake_engine, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        assert _gone(server), f"llama-server (pid {server}) outlived `llmload engine serve` stopped while loading"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_left(fake_engine)


def test_build_provides_the_binary_and_the_model(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from llmload.cli import main

    made = []
    monkeypatch.setattr(engine, "build_llama_server", lambda: made.append("server") or Path("/c/llama-server"))
    monkeypatch.setattr(engine, "assemble_model", lambda: made.append("model") or Path("/c/model.gguf"))
    assert main(["engine", "build"]) == 0
    assert made == ["server", "model"]
    assert capsys.readouterr().out.splitlines() == ["/c/llama-server", "/c/model.gguf"]
