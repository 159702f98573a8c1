"""Newline-delimited JSON framing (Ollama): an incremental, I/O-free line splitter.

`NDJSONDecoder.feed(chunk) -> list[bytes]` returns the complete, non-blank lines that `chunk` finished
(terminators and surrounding whitespace removed); `flush()` returns a last line that had no newline.
Lines stay bytes: JSON decoders take bytes, and UTF-8 can only be split inside a line, never by us.
"""

from __future__ import annotations

__all__ = ["NDJSONDecoder"]


class NDJSONDecoder:
    """Push decoder for NDJSON: bytes in, complete lines out."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete non-blank lines ended by `chunk`."""
        buf = self._buf + chunk if self._buf else chunk
        cut = buf.rfind(b"\n")
        if cut == -1:
            self._buf = buf
            return []
        self._buf = buf[cut + 1:]
        return [line for line in (part.strip() for part in buf[:cut].split(b"\n")) if line]

    def flush(self) -> list[bytes]:
        """The last line if the stream ended without a newline."""
        rest, self._buf = self._buf.strip(), b""
        return [rest] if rest else []
