"""Ollama native generate: `POST /api/generate`, NDJSON; the body as for chat, with `prompt`."""

from __future__ import annotations

from llmload.apis.ollama_chat import ollama_body
from llmload.apis.spec import ApiSpec
from llmload.protocols.ollama import OllamaStreamParser

__all__ = ["SPEC"]


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return ollama_body({"prompt": prompt}, **params)


SPEC = ApiSpec(
    name="ollama-generate", path="/api/generate", build=build, framing="ndjson", parser=OllamaStreamParser,
    chat=False, probe_path="/api/tags", tokenize_path=None,
    usage="`prompt_eval_count` / `eval_count` on the final object",
    timings="load, prompt, decode and total durations on the final object",
    servers=("ollama",), sim_flavors=("ollama",))
