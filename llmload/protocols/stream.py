"""Framing plus interpretation for one API: bytes of a response body in, `StreamChunk`s out.

The framing and the payload parser come from the API's `llmload.apis.ApiSpec` (`spec.decoder()`, or
`llmload.apis.get_api(name).decoder()`); this module knows no API by name. SSE APIs (OpenAI-style, SGLang's
`/generate`) frame with SSE; only `data` of `message` events (and llama.cpp's `error` events)
are payloads; other event names are ignored; a line that is not valid UTF-8, or longer than
`MAX_LINE_BYTES` (1 MiB), is a malformed chunk, in NDJSON too. Ollama's native APIs frame with NDJSON. The streaming
core feeds the body as each socket read brings it (split anywhere) to `feed` and calls `flush` when the
body ends.
"""

from __future__ import annotations

from typing import Any

from llmload.protocols.events import StreamChunk, loads_json, malformed_chunk
from llmload.protocols.lines import NDJSONDecoder
from llmload.protocols.ollama import OllamaStreamParser
from llmload.protocols.openai import OpenAIStreamParser, error_message
from llmload.protocols.sse import SSEDecoder, SSEEvent

__all__ = ["StreamDecoder"]


class StreamDecoder:
    """One request's body decoder: `feed(bytes) -> list[StreamChunk]`, `flush() -> list[StreamChunk]`.
    `parser` (one per request) reads each payload; without one, OpenAI's for SSE, Ollama's for NDJSON."""

    __slots__ = ("_decoder", "_parse")

    def __init__(self, *, ndjson: bool, parser: Any = None) -> None:
        self._decoder: NDJSONDecoder | SSEDecoder = NDJSONDecoder() if ndjson else SSEDecoder()
        if parser is None:
            parser = OllamaStreamParser() if ndjson else OpenAIStreamParser()
        self._parse = parser.parse

    def feed(self, chunk: bytes) -> list[StreamChunk]:
        sse = self._decoder
        if isinstance(sse, NDJSONDecoder):
            lines = sse.feed(chunk)
            if sse.overlong:
                return [_too_long(sse.max_line_bytes, ndjson=True)]
            return [self._parse(line) for line in lines]
        if sse.invalid is None:
            data = sse.whole_data(chunk)  # the usual read: one whole `data:` event
            if data is not None:
                return [self._parse(data)]
            events = sse.feed_lines(chunk)  # whole_data was asked: not again
        else:
            events = sse.feed(chunk)
        if sse.invalid is not None:
            return [_too_long(sse.max_line_bytes) if sse.overlong else _not_utf8(sse.invalid)]
        return self._events(events) if events else []

    def flush(self) -> list[StreamChunk]:
        """The end of the body. An unterminated last line is dropped in both framings (it may be cut),
        as SSE's rules say; an SSE event whose lines all ended but that lacked its blank line is kept."""
        if isinstance(self._decoder, NDJSONDecoder):
            self._decoder.flush()
            return []
        return self._events(self._decoder.flush())

    def _events(self, events: list[SSEEvent]) -> list[StreamChunk]:
        out = []
        for ev in events:
            if ev.event == "message":
                out.append(self._parse(ev.data))
            elif ev.event == "error":
                try:
                    obj = loads_json(ev.data)
                except ValueError:
                    obj = ev.data
                out.append(StreamChunk(error=error_message(obj.get("error", obj) if isinstance(obj, dict)
                                                           else obj)))
        return out


def _not_utf8(raw: bytes) -> StreamChunk:
    """A line that is not UTF-8 is a malformed chunk (as the same bytes are in Ollama's NDJSON, where the
    JSON decoder refuses them), not text with replacement characters."""
    return malformed_chunk(raw, "not valid UTF-8")


def _too_long(limit: int, *, ndjson: bool = False) -> StreamChunk:
    """A line longer than the decoder's cap (`MAX_LINE_BYTES`): the server's malformed output."""
    return StreamChunk(error=f"malformed stream {'line' if ndjson else 'chunk'}: a line longer than "
                             f"{limit} bytes", malformed=True)
