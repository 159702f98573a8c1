"""Server-sent events: an incremental, I/O-free decoder following the WHATWG event-stream rules.

`SSEDecoder.feed(chunk) -> list[SSEEvent]` takes bytes split anywhere (inside a line, inside a UTF-8
character, between `\\r` and `\\n`) and returns the events completed by that chunk; `flush()` ends the
stream. Rules: lines end with CRLF, LF or CR; a blank line dispatches the event; `:` starts a comment
(pings); `data:` lines join with `\\n`; `event:` names the event; `id:` sets the last event id (kept
across events, ignored when it holds NUL); `retry:` takes digits only; one space after the colon is
dropped; a leading BOM is dropped.

One extension: llama.cpp's server writes errors inside a stream as an `error:` field (`error: {...}`),
which the standard would ignore. We keep it as an event named `error` with the value as its data, so a
failure inside a 200 stream is seen.

UTF-8 is decoded per complete line (a line terminator byte never occurs inside a multi-byte character),
so a character split across chunks is never broken. A line that is not valid UTF-8 is decoded with
replacement characters, as the standard says, and kept in `invalid` (the first such line, raw): a
client that needs exact payloads (the streaming core) treats it as a malformed stream. sseclient-py's parser serves as the test oracle; it
pulls from an iterator, where the streaming core needs a push decoder fed what each socket read brings.

An unfinished line is kept as a list of pieces, joined once when its terminator comes, so a long line
costs linear time, not a copy of everything so far per read. A line longer than `max_line_bytes`
(`MAX_LINE_BYTES`, 1 MiB), finished or not, sets `overlong` (and `invalid`, to the line's first bytes):
the pieces are dropped and the decoder takes nothing more (the streaming core ends the request as
`malformed`).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmload.protocols.events import MAX_LINE_BYTES

__all__ = ["SSEDecoder", "SSEEvent"]


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event. `event` is `message` unless the stream named it."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


class SSEDecoder:
    """Push decoder: feed bytes as they arrive, get the events they complete."""

    __slots__ = ("_parts", "_size", "_skip_lf", "_data", "_event", "_last_id", "_retry", "_started", "_pending",
                 "invalid", "overlong", "max_line_bytes")

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        #: the unfinished line, in pieces (`_size` bytes)
        self._parts: list[bytes] = []
        self._size = 0
        self.max_line_bytes = max_line_bytes
        #: a line was longer than `max_line_bytes` (then `invalid` holds its first bytes)
        self.overlong = False
        self._skip_lf = False
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._started = False
        self._pending = False
        #: the first line that was not valid UTF-8 (raw bytes), else None
        self.invalid: bytes | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Events completed by `chunk` (possibly none)."""
        data = self.whole_data(chunk)
        if data is not None:
            return [SSEEvent(data, "message", self._last_id, self._retry)]
        return self.feed_lines(chunk)

    def feed_lines(self, chunk: bytes) -> list[SSEEvent]:
        """`feed` for a chunk that `whole_data` did not take (the caller asked it already)."""
        if chunk.find(b"\n") == len(chunk) - 1 and not self._parts and not self._skip_lf and b"\r" not in chunk:
            # fast path: exactly one LF-terminated line
            if chunk == b"\n" and not self._pending:  # a blank line with nothing to dispatch
                return []
            if self._started and chunk.startswith(b"data: "):  # the usual payload line (same rules)
                try:
                    self._data.append(chunk[6:-1].decode("utf-8"))
                except UnicodeDecodeError:
                    pass  # the general path records it as invalid
                else:
                    self._pending = True
                    return []
            events: list[SSEEvent] = []
            self._line(chunk[:-1], events)
            return events
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 10:  # the \n of a \r\n split across chunks
                chunk = chunk[1:]
        if self.overlong:
            return []
        has_cr = b"\r" in chunk
        if not has_cr and b"\n" not in chunk:  # no line ends here: keep the piece (linear, not a copy)
            if chunk:
                self._parts.append(chunk)
                self._size += len(chunk)
                if self._size > self.max_line_bytes:
                    self._overflow(b"".join(self._parts[:1])[:120])
            return []
        if self._parts:
            self._parts.append(chunk)
            buf = b"".join(self._parts)
            self._parts.clear()
        else:
            buf = chunk
        events = []
        start = 0
        size = len(buf)
        limit = self.max_line_bytes
        while start < size:
            lf = buf.find(b"\n", start)
            cr = buf.find(b"\r", start) if has_cr else -1
            if cr != -1 and (lf == -1 or cr < lf):
                end = cr
                if cr + 1 < size:
                    nxt = cr + 2 if buf[cr + 1] == 10 else cr + 1
                else:
                    nxt = cr + 1
                    self._skip_lf = True
            elif lf != -1:
                end, nxt = lf, lf + 1
            else:
                break
            if end - start > limit:
                self._overflow(buf[start:start + 120])
                return events
            self._line(buf[start:end], events)
            start = nxt
        if start < size:
            self._size = size - start
            self._parts.append(buf[start:])
            if self._size > limit:
                self._overflow(buf[start:start + 120])
        else:
            self._size = 0
        return events

    def _overflow(self, head: bytes) -> None:
        self.overlong = True
        if self.invalid is None:
            self.invalid = head
        self._parts.clear()
        self._size = 0

    def whole_data(self, chunk: bytes) -> str | None:
        """The data of `chunk` when it is exactly one whole `data: ...` event and its blank line (what
        one socket read usually brings) and nothing is pending: `feed` would return one `message` event with
        that data and leave the decoder as it was, so the chunk is taken; else None (then `feed` it)."""
        if (chunk.startswith(b"data: ") and chunk.find(b"\n") == len(chunk) - 2 and chunk[-1] == 10
                and self._started and not self._pending and not self._parts and not self._skip_lf
                and b"\r" not in chunk):
            try:
                return chunk[6:-2].decode("utf-8")
            except UnicodeDecodeError:
                return None  # `feed` records it as invalid
        return None

    def flush(self) -> list[SSEEvent]:
        """End of stream. An event whose lines all ended but that lacked its blank line is returned
        (lenient: some servers close right after `data: [DONE]\\n`); an unterminated last line is
        dropped, as the standard says, because it may be cut."""
        self._parts.clear()
        self._size = 0
        events: list[SSEEvent] = []
        if self._pending:
            self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            self._dispatch(events)
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", "replace")
            if self.invalid is None:
                self.invalid = raw
        if not self._started:
            self._started = True
            if line.startswith("\ufeff"):
                line = line[1:]
                if not line:
                    return
        if line[0] == ":":
            return
        colon = line.find(":")
        if colon == -1:
            field, value = line, ""
        else:
            field = line[:colon]
            value = line[colon + 2:] if line[colon + 1:colon + 2] == " " else line[colon + 1:]
        if field == "data":
            self._data.append(value)
            self._pending = True
        elif field == "event":
            self._event = value
            self._pending = True
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isdigit() and value.isascii():
                self._retry = int(value)
        elif field == "error":  # llama.cpp's in-stream error (see module docstring)
            self._event = "error"
            self._data.append(value)
            self._pending = True

    def _dispatch(self, events: list[SSEEvent]) -> None:
        data, name = self._data, self._event
        self._data, self._event, self._pending = [], "", False
        if not data:
            return
        events.append(SSEEvent(data[0] if len(data) == 1 else "\n".join(data), name or "message", self._last_id,
                               self._retry))
