"""Request bodies for each `target.api`, always streaming, asking for usage where the API has it.

| api | path | length cap | usage |
|---|---|---|---|
| openai-chat | /v1/chat/completions | `max_tokens` | `stream_options.include_usage` |
| openai-completions | /v1/completions | `max_tokens` | `stream_options.include_usage` |
| ollama-chat | /api/chat | `options.num_predict` | final object's counts |
| ollama-generate | /api/generate | `options.num_predict` | final object's counts |

`stream_options.continuous_usage_stats` (tokens per event) is added only for vLLM, the server that has
it. `ignore_eos` (exact output lengths) is an extra top-level field that vLLM, llama.cpp and SGLang
accept; it is sent only when `target.server` is one of those, because the OpenAI API rejects unknown
fields. Ollama has no ignore-EOS option (`num_predict` is a cap only), so Ollama answers may end
early: the served `output_tokens` is recorded next to the planned one.
"""

from __future__ import annotations

import json

__all__ = ["API_PATHS", "IGNORE_EOS_SERVERS", "PreparedRequest", "build_body"]

API_PATHS = {
    "openai-chat": "/v1/chat/completions",
    "openai-completions": "/v1/completions",
    "ollama-chat": "/api/chat",
    "ollama-generate": "/api/generate",
}
IGNORE_EOS_SERVERS = ("vllm", "llamacpp", "sglang")


def _as_prompt(messages: list[dict]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)


def build_body(api: str, *, model: str, max_tokens: int, prompt: str | None = None,
               messages: list[dict] | None = None, temperature: float = 0.0, ignore_eos: bool = False,
               server: str | None = None) -> bytes:
    """The JSON body (bytes) of one streaming request. Give `prompt` or `messages`; a chat API wraps a
    prompt as one user message, a completion API joins the messages' contents."""
    if api not in API_PATHS:
        raise ValueError(f"unknown api {api!r}")
    if messages is None:
        messages = [{"role": "user", "content": prompt or ""}]
    elif prompt is None:
        prompt = _as_prompt(messages)
    if api.startswith("openai"):
        body: dict = {"model": model}
        if api == "openai-chat":
            body["messages"] = messages
        else:
            body["prompt"] = prompt
        body.update(max_tokens=max_tokens, temperature=temperature, stream=True)
        options = {"include_usage": True}
        if server == "vllm":
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
        if ignore_eos and server in IGNORE_EOS_SERVERS:
            body["ignore_eos"] = True
    else:
        body = {"model": model}
        if api == "ollama-chat":
            body["messages"] = messages
        else:
            body["prompt"] = prompt
        body.update(stream=True, options={"num_predict": max_tokens, "temperature": temperature})
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
        self.path = API_PATHS[api]
        self.body = body
        self.headers = {"Content-Type": "application/json", "X-Request-Id": request_id}
        self.planned_input_tokens = planned_input_tokens
        self.planned_output_tokens = planned_output_tokens
        self.prefix_id = prefix_id

    def __repr__(self) -> str:
        return (f"PreparedRequest({self.request_id!r}, {self.api}, in={self.planned_input_tokens}, "
                f"out={self.planned_output_tokens}, prefix={self.prefix_id}, {len(self.body)} bytes)")
