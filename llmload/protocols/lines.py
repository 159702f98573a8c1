"""Newline-delimited JSON framing (Ollama): an incremental, I/O-free line splitter.

`NDJSONDecoder.feed(chunk) -> list[bytes]` returns the complete, non-blank lines that `chunk` finished
(terminators and surrounding whitespace removed); `flush()` returns a last line that had no newline.
Lines stay bytes: JSON decoders take bytes, and UTF-8 can only be split inside a line, never by us.
The unfinished line is kept as a list of pieces (joined once, when its newline comes), so a long line
costs linear time; past `MAX_LINE_BYTES` still unfinished, `overlong` is set, the pieces are dropped
and nothing more is returned (the caller ends the request as malformed).
"""

from __future__ import annotations

from llmload.protocols.events import MAX_LINE_BYTES

__all__ = ["NDJSONDecoder"]


class NDJSONDecoder:
    """Push decoder for NDJSON: bytes in, complete lines out."""

    __slots__ = ("_parts", "_size", "max_line_bytes", "overlong")

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self.max_line_bytes = max_line_bytes
        #: a line ran past `max_line_bytes` without its newline (the decoder then takes nothing more)
        self.overlong = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete non-blank lines ended by `chunk`."""
        if self.overlong:
            return []
        cut = chunk.rfind(b"\n")
        if cut == -1:
            self._parts.append(chunk)
            self._size += len(chunk)
            if self._size > self.max_line_bytes:
                self._overflow()
            return []
        if self._parts:
            self._parts.append(chunk[:cut])
            buf = b"".join(self._parts)
            self._parts.clear()
        else:
            buf = chunk[:cut]
        rest = chunk[cut + 1:]
        self._size = len(rest)
        if rest:
            self._parts.append(rest)
        lines = [line for line in (part.strip() for part in buf.split(b"\n")) if line]
        if self._size > self.max_line_bytes or (len(buf) > self.max_line_bytes
                                                and any(len(line) > self.max_line_bytes for line in lines)):
            self._overflow()
            return []
        return lines

    def flush(self) -> list[bytes]:
        """The last line if the stream ended without a newline."""
        rest = b"".join(self._parts).strip()
        self._parts.clear()
        self._size = 0
        return [rest] if rest and not self.overlong else []

    def _overflow(self) -> None:
        self.overlong = True
        self._parts.clear()
        self._size = 0
