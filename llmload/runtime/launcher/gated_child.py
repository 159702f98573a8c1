"""`llmload run` starts the Locust child before its own checks, and releases it once they pass.

The child's imports (Locust, gevent, flask, numpy, our packages: about 1 s of CPU) do not depend on
anything the launcher checks, so the launcher starts the child (`GATED_BOOT`) right after the config
has validated and runs its checks (the plan, the run directory, reachability, the envelope) while the
child imports. The child then waits at the gate, before Locust parses its command line or does
anything else: `release(cmd)` sends it the command line (`launcher.locust_command`, one JSON line on
its stdin, which is then closed: the child sees end-of-file there, as with the /dev/null it had
before) and it goes on as `python -c BOOT <args>` would. If a check fails, or the launcher stops,
`discard()` closes the gate and ends the child, which has printed nothing; if the launcher dies
without that, the child ends too (end-of-file at the gate, or `follow_parent`'s SIGTERM while it is
still importing). Nothing the launcher checks, prints or returns changes (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from typing import IO

__all__ = ["GATE_ENV", "GatedChild", "gated_boot", "released"]

#: set in the child's environment when it must wait at the gate for its command line
GATE_ENV = "LLMLOAD_GATE"


def gated_boot(boot: str) -> str:
    """`boot` (the launcher's `BOOT`) with the gate: first follow the launcher (its death ends the child
    even mid-import), then the imports, then wait for the command line, then Locust's `main()`."""
    head, imports, tail = boot.partition("from llmload.runtime.locustglue.boot import import_locust; "
                                         "import_locust(); import locust, llmload, shapes, analysis; ")
    if not imports:
        raise ValueError("BOOT has changed: the gate goes after its imports")
    return (f"{head}from llmload.runtime.launcher.stop_signals import follow_parent; follow_parent(); {imports}"
            f"from llmload.runtime.launcher.gated_child import released; released(); {tail}")


def released() -> None:
    """In the child, after its imports: when started gated (`GATE_ENV`), wait for the launcher's command
    line on stdin; its arguments replace `sys.argv[1:]`. The gate closed without one (a failed check, a
    stop, the launcher gone): exit at once, saying nothing (the launcher says why)."""
    if os.environ.pop(GATE_ENV, None) != "1":
        return
    line = sys.stdin.buffer.readline()
    if not line.endswith(b"\n"):
        os._exit(0)
    sys.argv[1:] = json.loads(line)


class GatedChild:
    """The Locust child, started at once and held at the gate until `release` (or ended by `discard`)."""

    def __init__(self, boot: str, env: dict[str, str]) -> None:
        self.boot = boot
        self.released = False
        self.proc = subprocess.Popen([sys.executable, "-c", gated_boot(boot)], env={**env, GATE_ENV: "1"},
                                     stdin=subprocess.PIPE, start_new_session=True)
        #: the gate: the child's stdin (a pipe, `stdin=PIPE` above)
        self._gate: IO[bytes] = _piped(self.proc.stdin)

    def release(self, cmd: list[str]) -> subprocess.Popen:
        """Let the child run as `cmd` (`[python, "-c", BOOT, *args]`); returns its process."""
        if cmd[:3] != [sys.executable, "-c", self.boot]:
            raise ValueError("the gated child runs BOOT: another command cannot be released to it")
        self.released = True
        with contextlib.suppress(BrokenPipeError, OSError):  # it died importing: its exit code says so
            self._gate.write((json.dumps(cmd[3:]) + "\n").encode())
        with contextlib.suppress(BrokenPipeError, OSError):
            self._gate.close()
        return self.proc

    def discard(self) -> None:
        """Not released (a check failed, or the launcher is stopping): close the gate, end the child
        (still importing or waiting: it has started nothing) and reap it. A no-op once released."""
        if self.released:
            return
        self.released = True
        with contextlib.suppress(BrokenPipeError, OSError):
            self._gate.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _piped(stream: IO[bytes] | None) -> IO[bytes]:
    """The pipe `Popen(stdin=PIPE)` made (never None there; typed `IO | None` for other `stdin`s)."""
    if stream is None:
        raise RuntimeError("the gated child was started without a pipe on its stdin")
    return stream
