"""Pure stream parsers, no I/O: bytes in, typed events out.

- `SSEDecoder` (server-sent events framing) and `NDJSONDecoder` (newline-delimited JSON framing)
  take bytes split anywhere and return complete events / lines.
- `OpenAIStreamParser` (chat and completions chunks) and `OllamaStreamParser` (Ollama NDJSON objects)
  turn one payload into a `StreamChunk`: output text, token counts, usage, server timings, errors, and
  whether it is the final event. A payload of the wrong shape or type is a chunk with `malformed=True`,
  never an exception; a line longer than `MAX_LINE_BYTES` (1 MiB) is one too.
- `StreamDecoder` joins the two layers; an API's `llmload.apis` spec picks both:
  `llmload.apis.get_api("ollama-chat").decoder()`.
"""

from __future__ import annotations

from llmload.protocols.events import MAX_LINE_BYTES, MAX_TOKEN_COUNT, ServerTimings, StreamChunk, loads_json
from llmload.protocols.lines import NDJSONDecoder
from llmload.protocols.ollama import OllamaStreamParser
from llmload.protocols.openai import OpenAIStreamParser, error_message
from llmload.protocols.sse import SSEDecoder, SSEEvent
from llmload.protocols.stream import StreamDecoder

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_TOKEN_COUNT",
    "NDJSONDecoder",
    "OllamaStreamParser",
    "OpenAIStreamParser",
    "SSEDecoder",
    "SSEEvent",
    "ServerTimings",
    "StreamChunk",
    "StreamDecoder",
    "error_message",
    "loads_json",
]
