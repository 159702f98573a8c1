"""Request bodies for each `target.api`, always streaming, asking for usage where the API has it.

Each API's path and body builder are declared once, in its `llmload.apis` module (`ApiSpec`):

| api | path | length cap | usage |
|---|---|---|---|
| openai-chat | /v1/chat/completions | `max_tokens` | `stream_options.include_usage` |
| openai-completions | /v1/completions | `max_tokens` | `stream_options.include_usage` |
| ollama-chat | /api/chat | `options.num_predict` | final object's counts |
| ollama-generate | /api/generate | `options.num_predict` | final object's counts |
| sglang-generate | /generate | `sampling_params.max_new_tokens` | `meta_info` on every event |

`build_body` turns `prompt` or `messages` into both (a chat API wraps a prompt as one user message, a
completion API joins the messages' contents) and asks the spec for the body.
"""

from __future__ import annotations

import json

from llmload.apis import all_apis, get_api
from llmload.apis.openai_chat import IGNORE_EOS_SERVERS

__all__ = ["API_PATHS", "IGNORE_EOS_SERVERS", "PreparedRequest", "build_body"]

#: path per api (read from the registry; kept for callers of the old table)
API_PATHS = {spec.name: spec.path for spec in all_apis()}


def _as_prompt(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def build_body(api: str, *, model: str, max_tokens: int, prompt: str | None = None,
               messages: list[dict] | None = None, temperature: float = 0.0, ignore_eos: bool = False,
               server: str | None = None, reasoning_effort: str | None = None, tools: list[dict] | None = None,
               tool_choice: object = None) -> bytes:
    """The JSON body (bytes) of one streaming request. Give `prompt` or `messages`. An unknown `api`
    raises `llmload.apis.UnknownApi` (a ValueError)."""
    spec = get_api(api)
    if messages is None:
        messages = [{"role": "user", "content": prompt or ""}]
    elif prompt is None:
        prompt = _as_prompt(messages)
    body = spec.build(messages=messages, prompt=prompt, model=model, max_tokens=max_tokens,
                      temperature=temperature, ignore_eos=ignore_eos, server=server,
                      reasoning_effort=reasoning_effort)
    if tools and spec.chat:  # OpenAI chat and Ollama chat take `tools`; only OpenAI has `tool_choice`
        body["tools"] = tools
        if tool_choice is not None and spec.framing == "sse":
            body["tool_choice"] = tool_choice
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class PreparedRequest:
    """A request ready to send: path, body bytes, headers, and what the mix planned (for the record).
    The prompt text is not kept: only the body carries it."""

    __slots__ = ("request_id", "api", "path", "body", "headers", "planned_input_tokens",
                 "planned_output_tokens", "prefix_id")

    def __init__(self, request_id: str, api: str, body: bytes, *, planned_input_tokens: int | None = None,
                 planned_output_tokens: int | None = None, prefix_id: int | None = None) -> None:
        self.request_id = request_id
        self.api = api
        self.path = get_api(api).path
        self.body = body
        self.headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        self.planned_input_tokens = planned_input_tokens
        self.planned_output_tokens = planned_output_tokens
        self.prefix_id = prefix_id

    def __repr__(self) -> str:
        return (f"PreparedRequest({self.request_id!r}, {self.api}, in={self.planned_input_tokens}, "
                f"out={self.planned_output_tokens}, prefix={self.prefix_id}, {len(self.body)} bytes)")
