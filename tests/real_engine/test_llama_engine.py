"""`llmload.llama_server`: where the binary and model are found, the server command line, the CLI actions.

The first tests need nothing built; the last one checks every flag we pass against the real binary.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.request import urlopen

import pytest
from engine_gate import require_engine

from llmload import llama_server as engine
from llmload.cli import main
from llmload.errors import ConfigError, ServerError


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(engine.ENV_CACHE, str(tmp_path / "cache"))
    monkeypatch.delenv(engine.ENV_SERVER, raising=False)
    monkeypatch.delenv(engine.ENV_MODEL, raising=False)
    return tmp_path / "cache"


def _fill_cache(cache: Path) -> tuple[Path, Path]:
    binary = cache / "bin" / f"llama-server-{engine.LLAMA_CPP_PYTHON_VERSION}"
    model = cache / "models" / engine.MODEL_FILE
    for path in (binary, model):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"x")
    binary.chmod(0o755)
    return binary, model


def test_nothing_found_in_an_empty_cache(empty_cache: Path) -> None:
    assert engine.cache_dir() == empty_cache
    assert engine.find_llama_server() is None
    assert engine.find_model() is None
    with pytest.raises(ServerError, match="llmload engine build"):
        engine.start_llama_server()


def test_cached_files_are_found_and_env_overrides_them(empty_cache: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    binary, model = _fill_cache(empty_cache)
    assert engine.find_llama_server() == binary
    assert engine.find_model() == model
    other = tmp_path / "other.gguf"
    other.write_bytes(b"y")
    monkeypatch.setenv(engine.ENV_MODEL, str(other))
    assert engine.find_model() == other
    monkeypatch.setenv(engine.ENV_SERVER, str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match=f"missing does not exist \\(set by {engine.ENV_SERVER}\\)"):
        engine.find_llama_server()


def test_engine_path_prints_exports_or_fails(empty_cache: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["engine", "path"]) == 1
    assert "missing llama-server (llmload engine build), model" in capsys.readouterr().err
    binary, model = _fill_cache(empty_cache)
    assert main(["engine", "path"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"export {engine.ENV_SERVER}='{binary}'",
                                                    f"export {engine.ENV_MODEL}='{model}'"]


def test_unknown_action_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["engine", "bake"]) == 2
    assert capsys.readouterr().err.strip() == (
        'llmload: error: engine: unknown action "bake": expected build, model, serve or path')


def test_server_command_line() -> None:
    cmd = engine.llama_server_command(Path("/b/llama-server"), Path("/m.gguf"), port=8123, parallel=3,
                                      threads=1, ctx_size=3072)
    pairs = {flag: value for flag, value in zip(cmd, cmd[1:], strict=False) if flag.startswith("--")}
    assert cmd[0] == "/b/llama-server"
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8123"
    assert pairs["--parallel"] == "3" and pairs["--ctx-size"] == "3072" and pairs["--threads"] == "1"
    assert pairs["--cache-ram"] == "0" and pairs["--alias"] == engine.MODEL_ALIAS
    assert {"--metrics", "--no-webui"} <= set(cmd)


def test_cmake_options_exist_in_the_pinned_tree() -> None:
    """Every -D option we pass is declared in the sdist's llama.cpp (checked when the tree is there)."""
    tree = engine.cache_dir() / "work" / f"llama_cpp_python-{engine.LLAMA_CPP_PYTHON_VERSION}"
    cmakelists = tree / "vendor" / "llama.cpp" / "CMakeLists.txt"
    if not cmakelists.is_file():
        require_engine()
        pytest.skip(f"{cmakelists} not unpacked (llmload engine build unpacks it)")
    text = cmakelists.read_text()
    for option in engine.CMAKE_OPTIONS:
        name = option[2:].split("=")[0]
        if name.startswith("CMAKE_") or name == "BUILD_SHARED_LIBS":
            continue
        assert f"option({name} " in text, name


@pytest.mark.real_engine
def test_every_flag_exists_in_the_binary_help() -> None:
    require_engine()
    binary = engine.find_llama_server()
    help_text = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=30).stdout
    cmd = engine.llama_server_command(binary, Path("m.gguf"), port=1)
    for flag in (a for a in cmd[1:] if a.startswith("--")):
        assert re.search(rf"(^|[\s,]){flag}([\s,]|$)", help_text, flags=re.M), flag


def test_build_progress_is_one_line_per_five_percent() -> None:
    lines: list[str] = []
    progress = engine._Progress(lines.append)
    for pct in (0, 1, 2, 4, 5, 9, 10, 50, 51, 100):
        progress(f"[{pct:3d}%] Building CXX object x{pct}.o")
    progress("-- not a progress line")
    assert [line.split()[1] for line in lines] == ["0%", "5%", "10%", "50%", "100%"]


@pytest.mark.real_engine
def test_build_and_model_reuse_the_cache(capsys: pytest.CaptureFixture) -> None:
    require_engine()
    if engine.find_llama_server() is None or engine.find_model() is None:
        pytest.skip("the cache is elsewhere (the variables point outside it)")
    assert main(["engine", "build"]) == 0
    assert main(["engine", "model"]) == 0
    out = capsys.readouterr().out
    assert "already built" in out and "already assembled" in out


@pytest.mark.real_engine
def test_serve_prints_the_url_and_stops_on_interrupt() -> None:
    require_engine()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "llmload.cli", "engine", "serve", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        assert f"ready at http://127.0.0.1:{port}" in line, line
        with urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
