"""One output style for every line a run prints: `llmload: <level>: <message>`.

Inside the Locust process, Locust's logging set-up formats every record as
`[time] host/LEVEL/logger: message`, unlike the lines llmload prints itself (`llmload: warning: ...`).
`configure_logging` gives the `llmload` loggers their own handler in our style (called from the
locustfile's `init`, after Locust's set-up). `drop_locust_stats` silences Locust's closing request
tables, which count E2E, TTFT and TPOT as three "requests" each: `llmload run` passes
`--llmload-no-locust-stats` and ends with its own summary; plain `locust -f` keeps Locust's tables.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

__all__ = ["LOCUST_STATS_LOGGER", "LineFormatter", "configure_logging", "drop_locust_stats"]

#: the logger Locust prints its request statistics tables through
LOCUST_STATS_LOGGER = "locust.stats_logger"


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
        for root_handler in logging.getLogger().handlers:
            if type(root_handler).__name__ == "LogReader" and root_handler not in logger.handlers:
                logger.addHandler(root_handler)
    logger.propagate = False
    if logger.level == logging.NOTSET:
        logger.setLevel(level)


def drop_locust_stats() -> None:
    """Silence Locust's request statistics tables in this process (our command prints its own summary)."""
    logging.getLogger(LOCUST_STATS_LOGGER).disabled = True
