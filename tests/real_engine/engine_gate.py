"""When the real-engine tests run: only with the engine's paths given; under CI=true a missing engine fails.

`.ci/run` exports `LLMLOAD_LLAMA_SERVER` and `LLMLOAD_GEMMA_GGUF` after `llmload engine build` and
`llmload engine model`. Locally, without them, the tests skip with the command that builds the engine,
so a plain `pytest` on a laptop stays fast; in CI a skip would hide that we never measured a real server.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llmload.llama_server import ENV_MODEL, ENV_SERVER

__all__ = ["in_ci", "require_engine"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def require_engine() -> None:
    """Skip (locally) or fail (CI=true) when the engine's paths are unset or not files."""
    missing = [name for name in (ENV_SERVER, ENV_MODEL)
               if not os.environ.get(name) or not Path(os.environ[name]).is_file()]
    if not missing:
        return
    reason = (f"real engine not available: {' and '.join(missing)} unset or not a file "
              "(run `llmload engine build && llmload engine model && eval \"$(llmload engine path)\"`)")
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)
