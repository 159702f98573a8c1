"""Secrets never leave the process: every string bound for a file or the console passes `redact`.

A server may echo what it was sent: the Authorization header in its model list, in a `/metrics` label, in
an error body. So the API key (and each secret-named header value) is registered in this process the
moment it is read (`client.auth.Credentials`, `telemetry.credentials.api_key`), and the writers replace
every registered secret with `<redacted>`, whatever the string's origin:

    records         `RecordWriter.write` (workers) and the master's copy of shipped records
    telemetry       `TelemetrySink.write` (telemetry.jsonl, hence telemetry.parquet)
    run files       `manifest.json`, `preflight.json`, `summary.json`, `worksheet.csv`, `report.html`
    console         `install_console_redaction()`: stdout, stderr and the logging handlers writing to them

A secret shorter than 4 characters is not registered (it would erase ordinary words).
"""

from __future__ import annotations

import io
import logging
import sys
from typing import Any, TextIO

__all__ = ["REDACTED", "clear_secrets", "install_console_redaction", "redact", "redact_text",
           "register_secret", "secrets_registered"]

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 4

_secrets: list[str] = []  # longest first, so a secret containing another is replaced whole


def register_secret(value: str | None) -> None:
    """Remember `value` (and the credential after a `Bearer `/`Basic ` scheme) as a secret."""
    if not value:
        return
    values = {value.strip()}
    scheme, _, rest = value.strip().partition(" ")
    if rest and scheme.lower() in ("bearer", "basic", "token"):
        values.add(rest.strip())
    fresh = [v for v in values if len(v) >= MIN_SECRET_CHARS and v not in _secrets]
    if fresh:
        _secrets.extend(fresh)
        _secrets.sort(key=len, reverse=True)


def secrets_registered() -> int:
    """How many secrets this process holds (not the secrets themselves)."""
    return len(_secrets)


def clear_secrets() -> None:
    """Forget every registered secret (tests)."""
    _secrets.clear()


def redact_text(text: str) -> str:
    """`text` with every registered secret replaced by `<redacted>`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: Any) -> Any:
    """A copy of `value` with secrets removed from every string in it (dict keys included)."""
    if not _secrets:
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [redact(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


class _RedactingStream(io.TextIOBase):
    """A text stream that redacts what it is given, then writes it to the stream it wraps."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(redact_text(text) if _secrets else text)
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def fileno(self) -> int:
        return self.inner.fileno()

    def isatty(self) -> bool:
        return self.inner.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase's is an attribute; this reads the stream's
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def install_console_redaction(*, handlers: bool = True) -> None:
    """Redact this process's stdout and stderr (and, with `handlers`, the logging handlers already
    writing to them). Idempotent."""
    originals = {}
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _RedactingStream):
            wrapped = _RedactingStream(stream)
            originals[id(stream)] = wrapped
            setattr(sys, name, wrapped)
    if not handlers:
        return
    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values()
                                       if isinstance(lg, logging.Logger)]
    for logger in loggers:
        for handler in logger.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and id(stream) in originals:
                handler.setStream(originals[id(stream)])
