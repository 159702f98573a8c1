"""One output style for every line a run prints: `llmload: <level>: <message>`.

Inside the Locust process, Locust's logging set-up formats every record as
`[time] host/LEVEL/logger: message`, unlike the lines llmload prints itself (`llmload: warning: ...`).
`configure_logging` gives the `llmload` loggers their own handler in our style (called from the
locustfile's `init`, after Locust's set-up). `replace_locust_stats` puts our live step table in place of
Locust's request statistics table (every 2 s in a headless run, and again at the end), as `llmload run`
does: with llmload's users loaded, plain `locust -f locustfiles/llm.py,shapes/llm.py --headless` prints
one row per step and the run's summary, not hundreds of lines of Locust's table (whose one `E2E` row
mixes warm-up, steps and drains). Locust's `--print-stats` brings its table back.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

from llmload.runtime.launcher.child_env import DEMO_ENV
from llmload.runtime.locustglue.seams import STATS_LOGGER, log_readers

__all__ = ["LineFormatter", "configure_logging", "drop_locust_stats", "exit_note",
           "replace_locust_stats"]

#: the logger Locust prints its request statistics tables through
#: set by `llmload demo` for its runs: their last line says the verdict in words, not an exit code the
#: demo itself does not return (it exits 0 when it ran: a failing step is its point)


class LineFormatter(logging.Formatter):
    """`llmload: warning: message` (a traceback, when logged, follows on the next lines)."""

    def format(self, record: logging.LogRecord) -> str:
        text = f"llmload: {record.levelname.lower()}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


class _LineHandler(logging.StreamHandler):
    """Marks the handler this module installed, so a second call adds no second one."""


def configure_logging(stream: TextIO | None = None, *, level: int = logging.WARNING) -> None:
    """Print the `llmload.*` loggers' records in our style on `stream` (stderr), not through Locust's
    root handler. Idempotent."""
    logger = logging.getLogger("llmload")
    if not any(isinstance(h, _LineHandler) for h in logger.handlers):
        handler = _LineHandler(stream if stream is not None else sys.stderr)
        handler.setFormatter(LineFormatter())
        logger.addHandler(handler)
        # the web UI's log panel reads the root logger's LogReader: keep feeding it our records
        for reader in log_readers():
            if reader not in logger.handlers:
                logger.addHandler(reader)
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(level)


def drop_locust_stats() -> None:
    """Silence Locust's request statistics tables in this process (our command prints its own summary)."""
    logging.getLogger(STATS_LOGGER).disabled = True


def replace_locust_stats(options: Any) -> None:
    """Our step table instead of Locust's statistics table (see the module docstring): no periodic table
    (`--only-summary`, read by Locust after the `init` event) and no closing one. Left alone when the
    command line asks for Locust's table (`--print-stats`) and on a worker (which prints none)."""
    if options is None or getattr(options, "print_stats", False) or getattr(options, "worker", False):
        return
    options.only_summary = True
    drop_locust_stats()


#: what a demo run's verdict code means, in its last line
_DEMO_VERDICTS = {0: "every step passed", 1: "a step failed its SLO: the knee the demo is there to show",
                  3: "no conclusion: a step was invalid or had too few samples, see above"}


def exit_note(code: int) -> str:
    """The end of a run's last line: ` (exit code N)`, or inside `llmload demo` the verdict in words."""
    if os.environ.get(DEMO_ENV) and code in _DEMO_VERDICTS:
        return f" ({_DEMO_VERDICTS[code]})"
    return f" (exit code {code})"
