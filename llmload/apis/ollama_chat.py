"""Ollama native chat: `POST /api/chat`, NDJSON.

The length cap is `options.num_predict`. Ollama has no ignore-EOS option (`num_predict` is a cap only),
so answers may end early: the served `output_tokens` is recorded next to the planned one. Counts and
integer-nanosecond durations come on the final `done: true` object.
"""

from __future__ import annotations

from llmload.apis.spec import ApiSpec
from llmload.protocols.ollama import OllamaStreamParser

__all__ = ["SPEC", "ollama_body"]


def ollama_body(payload: dict, *, model: str, max_tokens: int, temperature: float, ignore_eos: bool,
                server: str | None, reasoning_effort: str | None = None) -> dict:
    """The Ollama streaming body around `payload` (`messages` or `prompt`); a reasoning effort is
    Ollama's `think` (`"low"`, `"medium"`, `"high"`: api/types.go `ThinkValue`)."""
    body = {"model": model, **payload, "stream": True,
            "options": {"num_predict": max_tokens, "temperature": temperature}}
    if reasoning_effort is not None:
        body["think"] = reasoning_effort
    return body


def build(*, messages: list[dict], prompt: str, **params) -> dict:
    return ollama_body({"messages": messages}, **params)


SPEC = ApiSpec(
    name="ollama-chat", path="/api/chat", build=build, framing="ndjson", parser=OllamaStreamParser,
    chat=True, probe_path="/api/tags", tokenize_path=None,
    usage="`prompt_eval_count` / `eval_count` on the final object",
    timings="load, prompt, decode and total durations on the final object",
    servers=("ollama",), sim_flavors=("ollama",))
