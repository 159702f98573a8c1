"""`ApiSpec`: everything llmload knows about one server API, declared once.

The client (request bodies, stream decoding), the config (`target.api`), the pre-flight (probe and
`/tokenize`), the request mix (chat or not) and the Locust user all read a spec; none of them names an
API. See `llmload.apis` for the registry and docs/ARCHITECTURE.md for adding an API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from llmload.protocols.events import StreamChunk
from llmload.protocols.stream import StreamDecoder

__all__ = ["ApiSpec", "BodyBuilder", "ChunkParser"]


class ChunkParser(Protocol):
    """One request's payload parser: one SSE `data:` payload (str) or NDJSON line (bytes) in, one
    `StreamChunk` out (METRICS.md decides what is output). One instance per request: it may keep state."""

    def parse(self, payload: Any) -> StreamChunk: ...


#: `build(model=, max_tokens=, prompt=, messages=, temperature=, ignore_eos=, server=,
#: reasoning_effort=None) -> dict`: the
#: JSON body of one streaming request; `prompt` and `messages` are both given (the caller derives one
#: from the other), a chat API uses `messages`, a completion API `prompt`
BodyBuilder = Callable[..., dict]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One server API, as llmload speaks it."""

    #: the `target.api` value
    name: str
    #: POST path of a generation request (under the endpoint's URL)
    path: str
    #: the body builder (see `BodyBuilder`); the body always asks for a stream
    build: BodyBuilder
    #: stream framing: `sse` (`data:` events) or `ndjson` (one JSON object per line)
    framing: Literal["sse", "ndjson"]
    #: a new `ChunkParser` per request (a class, or any factory)
    parser: Callable[[], ChunkParser]
    #: takes messages (chat template applied by the server) rather than one prompt text
    chat: bool
    #: GET path the pre-flight probes: reachability, and the served models (`data[].id` /
    #: `models[].name`)
    probe_path: str
    #: POST path that counts tokens of a text, used by the pre-flight to size prompts; None: none
    tokenize_path: str | None
    #: how the server reports token counts (docs, the config reference)
    usage: str
    #: which server timings the stream carries (docs)
    timings: str
    #: servers known to speak it (docs) and the `llmload sim --flavor` values that serve it (tests)
    servers: tuple[str, ...] = ()
    sim_flavors: tuple[str, ...] = ()
    #: the body names the model (`model`), so the pre-flight refuses one the server does not list;
    #: False: the body has no model field (the server serves the one it loaded)
    names_model: bool = True

    def decoder(self) -> StreamDecoder:
        """A new stream decoder for one response body (framing plus this API's parser)."""
        return StreamDecoder(ndjson=self.framing == "ndjson", parser=self.parser())
