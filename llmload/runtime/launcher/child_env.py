"""What the launcher tells its Locust child through the environment (never on its command line).

The launcher's other two variables live beside the code that reads them: `stop_signals.LAUNCHED_ENV`
(started by `llmload run`: follow the parent) and `gated_child.GATE_ENV` (hold until the checks pass).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["DEMO_ENV", "TOKEN_ENV", "run_in_demo"]

#: the shared worker token (`--worker-token-file`'s first line, or made by `--processes`' master)
TOKEN_ENV = "LLMLOAD_WORKER_TOKEN"
#: set while `llmload demo` runs a config: the run's last line says its verdict in words
DEMO_ENV = "LLMLOAD_DEMO"


def run_in_demo(run: Callable[..., int], *args: Any, **kwargs: Any) -> int:
    """`run(*args, **kwargs)` (`run_config`) with `DEMO_ENV` set for the Locust process it starts."""
    was = os.environ.get(DEMO_ENV)
    os.environ[DEMO_ENV] = "1"
    try:
        return run(*args, **kwargs)
    finally:
        if was is None:
            os.environ.pop(DEMO_ENV, None)
        else:
            os.environ[DEMO_ENV] = was
