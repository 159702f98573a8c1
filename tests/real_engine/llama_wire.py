"""Plain-stdlib helpers for the real-engine tests: prompts that defeat the slot prompt cache, /metrics.

The counters are read with urllib, independent of `llmload.telemetry`, so a disagreement between the
records and the server points at the client or the server, never at our own scraper as well.
"""

from __future__ import annotations

from urllib.request import urlopen

__all__ = ["prompt_of", "scrape_metrics"]


def prompt_of(words: int, *, tag: int = 0) -> str:
    """A prompt of `words` words (2-3 tokens each); `tag` makes its start unique (no prefix-cache reuse)."""
    return f"Request {tag}: " + " ".join(f"word{(tag * 7 + i) % 97}" for i in range(words))


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
