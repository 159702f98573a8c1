"""Prompts synthesised to a target token length, and the tokens-per-word calibration for real servers.

Words come from a list of common English words, each one token by the sim's rule
(`llmload.tokens`) and, with its leading space, usually one token for BPE tokenizers too. A prompt of N
tokens is N words at the sim's ratio (1.0), or round(N / r) words where `r` is the tokens-per-word ratio
learned from the server's `/tokenize` (vLLM: `{"model", "prompt"} -> {"count"}`; llama.cpp:
`{"content"} -> {"tokens"}`). Without `/tokenize` (Ollama) the ratio stays 1.0, an estimate: the served
count from usage is recorded beside the planned one.

Words are drawn from the caller's `random.Random`, so a request's text is fixed by its seed and differs
from every other request's from the first word on (no accidental prefix-cache hits).
"""

from __future__ import annotations

import json
import random

__all__ = ["WORDS", "calibrate_tokens_per_word", "prefix_text", "synthesize_words", "words_for_tokens"]

_WORD_LIST = """
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community name
president team minute idea kid body information back parent face others level office door health person
art war history party result change morning reason research girl guy moment air teacher force education
foot boy age policy process music market sense nation plan college interest death experience effect use
class control care field development role effort rate heart drug show leader light voice wife police mind
price report decision son view relationship town road arm difference value building action model season
society tax director position player record paper space ground form event official matter center couple
site project activity star table need court oil situation cost industry figure street image phone data
picture practice piece land product doctor wall patient worker news test movie north love support
technology step baby computer type attention film tree source organization hair window evidence
population truth song zone river garden stone cloud bridge letter summer winter forest island
"""
WORDS = tuple(_WORD_LIST.split())


def synthesize_words(n_words: int, rng: random.Random) -> str:
    """`n_words` words drawn from WORDS, space-separated."""
    return " ".join(rng.choices(WORDS, k=max(0, n_words)))


def words_for_tokens(n_tokens: int, tokens_per_word: float) -> int:
    """Words needed for about `n_tokens` tokens at this ratio (at least 1 when n_tokens > 0)."""
    if n_tokens <= 0:
        return 0
    return max(1, int(round(n_tokens / tokens_per_word)))


def prefix_text(seed: int, prefix_id: int, n_words: int) -> str:
    """Shared prefix number `prefix_id`: the same text for every request that uses it."""
    return synthesize_words(n_words, random.Random(f"llmload-prefix/{seed}/{prefix_id}"))


def calibrate_tokens_per_word(base_url: str, *, server: str | None, model: str, n_words: int = 400,
                              timeout_s: float = 10.0, headers: dict[str, str] | None = None) -> float | None:
    """Tokens per synthesised word measured with the server's `/tokenize`, or None where the server
    has none (or it fails). Runs once before a test; works in or out of gevent."""
    from geventhttpclient import HTTPClient
    from geventhttpclient.url import URL

    if server not in ("vllm", "llamacpp", "sglang"):
        return None
    text = synthesize_words(n_words, random.Random("llmload-calibration"))
    body = {"model": model, "prompt": text} if server != "llamacpp" else {"content": text}
    url = URL(base_url.rstrip("/") + "/tokenize")
    client = HTTPClient.from_url(url, connection_timeout=timeout_s, network_timeout=timeout_s)
    try:
        resp = client.request("POST", url.request_uri, body=json.dumps(body).encode(),
                              headers={"Content-Type": "application/json", **(headers or {})})
        data = json.loads(resp.read()) if resp.status_code == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        client.close()
    if not isinstance(data, dict):
        return None
    count = data.get("count")
    if count is None and isinstance(data.get("tokens"), list):
        count = len(data["tokens"])
    if not isinstance(count, int) or count <= 0:
        return None
    return count / n_words
