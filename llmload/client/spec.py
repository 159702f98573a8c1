"""A request written by a user's own code (`LLMUser.build_request`), and how it becomes a `PreparedRequest`.

`RequestSpec` says what to ask (chat `messages` or a `prompt`, `max_tokens`, sampling parameters, extra
JSON fields, extra headers); `prepare_spec` builds the body for the run's `target.api` with
`build_body`, exactly as the request mix does, so the stream format, usage options and `ignore_eos`
rules stay the client library's. What the record stores is what was sent: `planned_output_tokens` is
`max_tokens`, `planned_input_tokens` is the spec's `input_tokens` or the prompt counted by the sim's
rule (`planned_prompt_tokens`, the mix's rule for datasets); the served counts come from the server's
usage as for every request.

    >>> spec = RequestSpec(messages=[{"role": "user", "content": "Hi there"}], max_tokens=8)
    >>> planned_prompt_tokens(spec.messages, chat=True)
    6
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.mix import CHAT_TOKENS_PER_MESSAGE
from llmload.config import Requests, Target
from llmload.tokens import count_tokens

__all__ = ["RequestSpec", "planned_prompt_tokens", "prepare_spec"]

#: headers the runtime owns (the request id joins client records with server logs)
_OWN_HEADERS = frozenset({"x-request-id", "content-type"})


@dataclass(slots=True)
class RequestSpec:
    """One request as a user's `build_request` describes it. Give `messages` (chat) or `prompt`."""

    #: chat messages (`{"role", "content"}`); a completion API sends their contents joined by newlines
    messages: list[dict] | None = None
    #: a prompt; a chat API wraps it as one user message
    prompt: str | None = None
    #: the output length asked for (`max_tokens`, Ollama `num_predict`); the record's planned output
    max_tokens: int = 128
    #: None: the config's `requests.temperature` / `requests.ignore_eos`
    temperature: float | None = None
    ignore_eos: bool | None = None
    #: extra JSON fields merged into the body (a dict value merges into the body's dict of that name,
    #: e.g. `{"options": {"top_k": 5}}` for Ollama); fields given here win
    extra_body: dict | None = None
    #: extra HTTP headers (`X-Request-Id` and `Content-Type` stay the runtime's)
    headers: dict[str, str] | None = None
    #: the planned prompt length for the record; None: counted by the sim's rule
    input_tokens: int | None = None
    #: which shared prefix this prompt starts with, if the user's logic knows (kept in the record)
    prefix_id: int | None = None


def planned_prompt_tokens(messages: list[dict], *, chat: bool) -> int:
    """Prompt tokens by the sim's rule: each chat message's content plus its template tokens, or the
    contents joined by newlines for a completion API (as `build_body` joins them)."""
    if chat:
        return sum(count_tokens(str(m.get("content", ""))) + CHAT_TOKENS_PER_MESSAGE for m in messages)
    return count_tokens("\n".join(str(m.get("content", "")) for m in messages))


def _merge(body: dict, extra: Mapping) -> dict:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return body


def prepare_spec(spec: RequestSpec, request_id: str, *, target: Target, requests: Requests,
                 chat: bool) -> PreparedRequest:
    """The request `spec` describes, for `target.api`; ValueError / TypeError for a spec that cannot be
    sent (the runtime records it as the user's `client_error`)."""
    if not isinstance(spec, RequestSpec):
        raise TypeError(f"build_request must return a RequestSpec or a PreparedRequest, got {type(spec).__name__}")
    if (spec.messages is None) == (spec.prompt is None):
        raise ValueError("a RequestSpec needs exactly one of messages and prompt")
    if isinstance(spec.max_tokens, bool) or not isinstance(spec.max_tokens, int) or spec.max_tokens < 1:
        raise ValueError(f"RequestSpec.max_tokens must be a positive integer, got {spec.max_tokens!r}")
    messages = spec.messages
    if messages is not None and not (isinstance(messages, list) and messages and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)):
        raise ValueError("RequestSpec.messages must be a non-empty list of {role, content} dicts")
    temperature = requests.temperature if spec.temperature is None else spec.temperature
    ignore_eos = requests.ignore_eos if spec.ignore_eos is None else spec.ignore_eos
    body = build_body(target.api, model=target.model, max_tokens=spec.max_tokens, prompt=spec.prompt,
                      messages=messages, temperature=temperature, ignore_eos=ignore_eos, server=target.server)
    if spec.extra_body:
        body = json.dumps(_merge(json.loads(body), spec.extra_body), ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")
    planned_in = spec.input_tokens
    if planned_in is None:
        planned_in = planned_prompt_tokens(messages if messages is not None else
                                           [{"role": "user", "content": spec.prompt}], chat=chat)
    request = PreparedRequest(request_id, target.api, body, planned_input_tokens=planned_in,
                              planned_output_tokens=spec.max_tokens, prefix_id=spec.prefix_id)
    if spec.headers:
        request.headers.update({k: str(v) for k, v in spec.headers.items() if k.lower() not in _OWN_HEADERS})
    return request
