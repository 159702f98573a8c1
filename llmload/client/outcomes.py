"""How a failure becomes an outcome (METRICS.md): status codes and error texts, one rule each.

- `rejected`: HTTP 429 or 503, or any text that is an engine's admission refusal (Ollama's
  `server busy ... maximum pending requests exceeded`, vLLM's queue-full message, "too many requests");
- `oom`: the error text says out of memory (`CUDA out of memory`, `OutOfMemoryError`, `OOM`), whether
  in a status body or inside the stream; this wins over `rejected` and `http_error`;
- `http_error`: any other 4xx/5xx, and an error object inside a 200 stream.
Messages are trimmed to `MAX_ERROR_CHARS` so a record stays small.
"""

from __future__ import annotations

import re

from llmload.protocols import error_message, loads_json

__all__ = ["MAX_ERROR_CHARS", "body_message", "classify_error_text", "classify_status", "is_oom", "trim"]

MAX_ERROR_CHARS = 300

_OOM = re.compile(r"out of memory|OutOfMemory|\bOOM\b|cudaErrorMemoryAllocation|failed to allocate",
                  re.IGNORECASE)
_REFUSAL = re.compile(r"maximum pending requests exceeded|server busy|too many requests|queue is full|"
                      r"request queue (?:is )?full|max_num_queued|rate limit", re.IGNORECASE)


def is_oom(text: str) -> bool:
    """The text says the server ran out of (GPU) memory."""
    return bool(_OOM.search(text))


def trim(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """One line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def body_message(body: bytes) -> str:
    """The message of an error body: JSON `error.message` / `error` / `message` / `detail`, else text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = loads_json(text)
    except ValueError:
        return text
    if isinstance(obj, dict) and "error" in obj:
        return error_message(obj["error"])
    return error_message(obj)


def classify_status(status: int, message: str) -> str:
    """Outcome of a non-200 answer with this body message."""
    if is_oom(message):
        return "oom"
    if status in (429, 503) or _REFUSAL.search(message):
        return "rejected"
    return "http_error"


def classify_error_text(message: str) -> str:
    """Outcome of an error reported inside a 200 stream."""
    if is_oom(message):
        return "oom"
    if _REFUSAL.search(message):
        return "rejected"
    return "http_error"
