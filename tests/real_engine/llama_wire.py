"""Plain-stdlib access to llama-server for the real-engine tests: one streamed chat request, /metrics.

This is deliberately independent of `llmload.client`: it checks the server facts our client relies on
(timings, token counters, deferral, the context-overflow 400) with the simplest possible reader, so a
disagreement points at the server or at our client, never at both.
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit
from urllib.request import urlopen

__all__ = ["StreamResult", "prompt_of", "scrape_metrics", "stream_chat"]


@dataclass
class StreamResult:
    """What one streamed request showed: times are `time.perf_counter()` seconds."""

    status: int
    sent_at: float
    first_token_at: float | None = None
    last_token_at: float | None = None
    token_times: list[float] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    usage: dict = field(default_factory=dict)
    error_body: str = ""

    @property
    def ttft_s(self) -> float:
        return (self.first_token_at or float("nan")) - self.sent_at

    @property
    def e2e_s(self) -> float:
        return (self.last_token_at or float("nan")) - self.sent_at


def prompt_of(words: int, *, tag: int = 0) -> str:
    """A prompt of about `words` tokens; `tag` makes its start unique (no prefix-cache reuse)."""
    return f"Request {tag}: " + " ".join(f"word{(tag * 7 + i) % 97}" for i in range(words))


def stream_chat(url: str, prompt: str, *, max_tokens: int = 32, timeout_s: float = 60.0) -> StreamResult:
    """POST a streamed chat completion with `ignore_eos` and usage; read the SSE stream to its end."""
    parts = urlsplit(url)
    body = json.dumps({"model": "gemma3-270m", "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": max_tokens, "stream": True, "ignore_eos": True, "temperature": 0,
                       "stream_options": {"include_usage": True}}).encode()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        sent_at = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        result = StreamResult(status=resp.status, sent_at=sent_at)
        if resp.status != 200:
            result.error_body = resp.read().decode(errors="replace")
            return result
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data:"):
                continue  # blank separators and `:` pings
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            at = time.perf_counter()
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    result.token_times.append(at)
            if chunk.get("timings"):
                result.timings = chunk["timings"]
            if chunk.get("usage"):
                result.usage = chunk["usage"]
        if result.token_times:
            result.first_token_at, result.last_token_at = result.token_times[0], result.token_times[-1]
        return result
    finally:
        conn.close()


def scrape_metrics(url: str) -> dict[str, float]:
    """`llamacpp:*` samples from /metrics (this server's series carry no labels)."""
    with urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:"):
            name, _, value = line.rpartition(" ")
            out[name.split("{")[0]] = float(value)
    return out
