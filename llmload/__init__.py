"""llmload: capacity testing for LLM inference servers, built on Locust."""

from llmload.config import Config, load_config, load_slo
from llmload.errors import ConfigError, LLMLoadError, ProtocolError, RunError, ServerError, TelemetryError
from llmload.records import Record, RecordWriter

__version__ = "0.1.0"

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
