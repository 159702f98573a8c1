"""Ctrl-C while the `llmload` command is still importing: one line and exit 130, never a traceback.

The command's imports (typer, then a subcommand's modules) take ~0.2 s; a SIGINT then would raise
KeyboardInterrupt inside whichever import was running and print its traceback. `llmload/__init__.py`
calls `install()` first thing, so the handler is in place before anything heavy loads, but only when this
process is the command (the `llmload` script or `python -m llmload.cli`), never when the package is
imported as a library (tests, Locust workers, your own scripts). `llmload.cli.main` calls `restore()`
once the command starts: from then on Ctrl-C is Python's KeyboardInterrupt, which each command handles.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

__all__ = ["install", "restore"]


def _interrupted_while_starting(signum: int, frame: object) -> None:
    os.write(2, b"llmload: interrupted\n")
    os._exit(128 + signum)


def _is_the_command() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    # `python -m llmload.cli`: while the package is imported, argv[0] is still "-m"
    return os.path.basename(argv0) == "llmload" or (argv0 == "-m" and "llmload.cli" in getattr(sys, "orig_argv", ()))


def install() -> None:
    """Exit quietly on SIGINT from now until `restore()`, if this process is the `llmload` command."""
    if not _is_the_command() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    with contextlib.suppress(ValueError):  # not the main thread: not the command
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def restore() -> None:
    """Python's own SIGINT handler (KeyboardInterrupt) again, if `install()` replaced it."""
    if signal.getsignal(signal.SIGINT) is _interrupted_while_starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)
