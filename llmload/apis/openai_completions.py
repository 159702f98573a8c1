"""OpenAI-compatible completions: `POST /v1/completions`, SSE; the body and the stream as for chat, with
`prompt`."""

from __future__ import annotations

from dataclasses import replace

from llmload.apis import openai_chat
from llmload.apis.openai_chat import openai_body

__all__ = ["SPEC"]


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return openai_body({"prompt": prompt}, **params)


SPEC = replace(openai_chat.SPEC, name="openai-completions", path="/v1/completions", build=build, chat=False)
