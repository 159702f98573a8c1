"""Ollama native generate: `POST /api/generate`, NDJSON; the body and the stream as for chat, with `prompt`."""

from __future__ import annotations

from dataclasses import replace

from llmload.apis import ollama_chat
from llmload.apis.ollama_chat import ollama_body

__all__ = ["SPEC"]


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return ollama_body({"prompt": prompt}, **params)


SPEC = replace(ollama_chat.SPEC, name="ollama-generate", path="/api/generate", build=build, chat=False)
