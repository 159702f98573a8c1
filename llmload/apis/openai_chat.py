"""OpenAI-compatible chat: `POST /v1/chat/completions`, SSE (vLLM, llama.cpp, SGLang, Ollama's /v1, any
OpenAI-compatible server).

The body asks for a stream with `stream_options.include_usage` (the usage chunk after the last delta);
`continuous_usage_stats` (tokens per event) only for vLLM, the server that has it. `ignore_eos` (exact
output lengths) is a top-level extra that vLLM, llama.cpp and SGLang accept; it is sent only when
`target.server` is one of those, because the OpenAI API rejects unknown fields. `requests.reasoning_effort`
is sent as chat's `reasoning_effort` (OpenAI's field; vLLM and SGLang pass it to the chat template,
Ollama's /v1 maps it to `think`).
"""

from __future__ import annotations

from llmload.apis.spec import ApiSpec
from llmload.protocols.openai import OpenAIStreamParser

__all__ = ["IGNORE_EOS_SERVERS", "SPEC", "openai_body"]

IGNORE_EOS_SERVERS = ("vllm", "llamacpp", "sglang")


def openai_body(payload: dict, *, model: str, max_tokens: int, temperature: float, ignore_eos: bool,
                server: str | None, reasoning_effort: str | None = None) -> dict:
    """The OpenAI streaming body around `payload` (`messages` or `prompt`); `reasoning_effort` goes to
    chat only (the completions API has no such field)."""
    body: dict = {"model": model, **payload, "max_tokens": max_tokens, "temperature": temperature,
                  "stream": True}
    options = {"include_usage": True}
    if server == "vllm":
        options["continuous_usage_stats"] = True
    body["stream_options"] = options
    if ignore_eos and server in IGNORE_EOS_SERVERS:
        body["ignore_eos"] = True
    if reasoning_effort is not None and "messages" in payload:
        body["reasoning_effort"] = reasoning_effort
    return body


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return openai_body({"messages": messages}, **params)


SPEC = ApiSpec(
    name="openai-chat", path="/v1/chat/completions", build=build, framing="sse", parser=OpenAIStreamParser,
    chat=True, probe_path="/v1/models", tokenize_path="/tokenize",
    usage="`usage` chunk (`stream_options.include_usage`); vLLM: per event (`continuous_usage_stats`)",
    timings="llama.cpp `timings` (prompt and decode time)",
    servers=("vllm", "llamacpp", "sglang", "ollama", "generic"), sim_flavors=("vllm", "ollama", "llamacpp"))
