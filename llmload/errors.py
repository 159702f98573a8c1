"""One error tree for the whole project.

    LLMLoadError                 root: the CLI catches it and prints one line
    ├── ConfigError              a config or SLO file is wrong (exit 2)
    ├── ProtocolError            a server spoke something we cannot parse
    ├── TelemetryError           a metrics endpoint or GPU sampler failed
    ├── ServerError              a server we start (sim, llama.cpp) failed to start or died
    └── RunError                 a run could not be carried out (target unreachable: exit 3)
        └── MessageError         a message between master and worker lacks a field, has one we do not know,
                                 or one of the wrong type (`llmload.runtime.wire.messages`)

Context goes in keyword arguments so messages stay one line and callers can inspect it.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "LLMLoadError",
    "MessageError",
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


class MessageError(RunError):
    """A message between master and worker we cannot read: a field missing, unknown or of the wrong type
    (a master and a worker of different llmload versions, or a bug of ours). `message_type`, `field` and
    `worker` say which; the text is one line: `worker 0: malformed llmload:results message: missing
    field 'cpu_at'`."""

    def __init__(self, problem: str, *, message_type: str, field: str | None = None,
                 worker: str | None = None) -> None:
        who = f"worker {worker}: " if worker else ""
        super().__init__(" ".join(f"{who}malformed {message_type} message: {problem}".splitlines()),
                         message_type=message_type, field=field, worker=worker)
        self.message_type, self.field, self.worker, self.problem = message_type, field, worker, problem


def interrupted_exit_code(signo: int) -> int:
    """The exit code of a run stopped by signal `signo`: 128 + its number, as a shell reports it."""
    return 128 + int(signo)
