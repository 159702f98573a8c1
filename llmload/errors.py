"""One error tree for the whole project.

    LLMLoadError                 root: the CLI catches it and prints one line
    ├── ConfigError              a config or SLO file is wrong (exit 2)
    ├── ProtocolError            a server spoke something we cannot parse
    ├── TelemetryError           a metrics endpoint or GPU sampler failed
    ├── ServerError              a server we start (sim, llama.cpp) failed to start or died
    └── RunError                 a run could not be carried out (target unreachable: exit 3)

Context goes in keyword arguments so messages stay one line and callers can inspect it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LLMLoadError",
    "ProtocolError",
    "RunError",
    "ServerError",
    "TelemetryError",
]


class LLMLoadError(Exception):
    """Root of every error the project raises on purpose. `exit_code` is what the CLI returns."""

    exit_code = 2

    def __init__(self, message: str, **context: object) -> None:
        super().__init__(message)
        self.message = message
        self.context = context

    def __str__(self) -> str:
        return self.message


class ConfigError(LLMLoadError):
    """A config, SLO, sim or trace file is wrong. `file`, `line` and `key` say where."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 key: str | None = None) -> None:
        where = ""
        if file:
            where = f"{file}:{line}" if line else str(file)
        if key:
            where = f"{where} {key}" if where else key
        text = f"{where}: {message}" if where else message
        # always one line, whatever value or key it quotes
        super().__init__(" ".join(text.splitlines()), file=file, line=line, key=key)
        self.file, self.line, self.key, self.reason = file, line, key, message


class ProtocolError(LLMLoadError):
    """A stream or body did not follow the wire format."""


class TelemetryError(LLMLoadError):
    """A telemetry source could not be read."""


class ServerError(LLMLoadError):
    """A server we start ourselves failed."""


class RunError(LLMLoadError):
    """The run could not be carried out (target unreachable, quality case failed)."""

    exit_code = 3
