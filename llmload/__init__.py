"""llmload: capacity testing for LLM inference servers, built on Locust."""

from typing import TYPE_CHECKING

from llmload import startsignal
from llmload.errors import ConfigError, LLMLoadError, ProtocolError, RunError, ServerError, TelemetryError

startsignal.install()  # before anything heavy loads: a Ctrl-C while the command starts is one line, no traceback

if TYPE_CHECKING:
    from llmload.config import Config, load_config, load_slo
    from llmload.records import Record, RecordWriter

__version__ = "0.1.0"

#: imported on first use, so `llmload --help` does not load pydantic, pandas and pyarrow
_LAZY = {"Config": "llmload.config", "load_config": "llmload.config", "load_slo": "llmload.config",
         "Record": "llmload.records", "RecordWriter": "llmload.records"}

__all__ = [
    "Config",
    "ConfigError",
    "LLMLoadError",
    "ProtocolError",
    "Record",
    "RecordWriter",
    "RunError",
    "ServerError",
    "TelemetryError",
    "__version__",
    "load_config",
    "load_slo",
]


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'llmload' has no attribute {name!r}")
