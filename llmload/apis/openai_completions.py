"""OpenAI-compatible completions: `POST /v1/completions`, SSE; the body as for chat, with `prompt`."""

from __future__ import annotations

from llmload.apis.openai_chat import openai_body
from llmload.apis.spec import ApiSpec
from llmload.protocols.openai import OpenAIStreamParser

__all__ = ["SPEC"]


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return openai_body({"prompt": prompt}, **params)


SPEC = ApiSpec(
    name="openai-completions", path="/v1/completions", build=build, framing="sse", parser=OpenAIStreamParser,
    chat=False, probe_path="/v1/models", tokenize_path="/tokenize",
    usage="`usage` chunk (`stream_options.include_usage`); vLLM: per event (`continuous_usage_stats`)",
    timings="llama.cpp `timings` (prompt and decode time)",
    servers=("vllm", "llamacpp", "sglang", "ollama", "generic"), sim_flavors=("vllm", "ollama", "llamacpp"))
