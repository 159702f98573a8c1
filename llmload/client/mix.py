"""The request mix: what each request asks (CONFIG.md `requests`), deterministic per request.

`RequestMix(requests, target, base_dir=..., tokens_per_word=None).build(request_id, index, seed, ...)`
returns a `PreparedRequest`. All draws for a request come from `random.Random` seeded by
(`requests.seed`, `seed`, `index`): the runtime passes a `seed` that identifies the step and shard, and
`index` the request's number in that shard, so request k of shard i of step s always gets the same
lengths, prefix choice and text, in any process, and no two requests share text by accident.

- Lengths: `input_tokens` / `output_tokens` distributions; a trace arrival's sizes override them.
- Shared prefixes: with probability `shared_prefix.ratio` a request starts with one of
  `shared_prefix.prefixes` fixed prefixes of `shared_prefix.tokens` tokens (capped below the request's
  length); its number goes to `prefix_id`. The rest of the prompt is the request's own.
- Text: synthesised words (`llmload.client.prompts`); a chat request's content is shortened by
  `CHAT_TOKENS_PER_MESSAGE` for the template's role markers (the sim counts exactly that; real
  templates differ by a few tokens, recorded as the planned vs served difference).
- Dataset: when `requests.dataset` is set, each request takes entry `rng.randrange(len)`; its input
  length is the entry's (estimated with the sim's rule), its output length the entry's `output_tokens`
  or the drawn one; shared prefixes do not apply (the dataset's own text is sent as it is).
"""

from __future__ import annotations

import random
from pathlib import Path

from llmload.apis import get_api
from llmload.client.bodies import PreparedRequest, build_body
from llmload.client.dataset import DatasetEntry, load_dataset
from llmload.client.lengths import LengthSampler
from llmload.client.prompts import prefix_text, synthesize_words, words_for_tokens
from llmload.config import Requests, Target
from llmload.tokens import count_tokens

__all__ = ["CHAT_TOKENS_PER_MESSAGE", "RequestMix"]

#: template tokens a chat message adds around its content (the sim's rule; see llmload.sim.text)
CHAT_TOKENS_PER_MESSAGE = 4
#: tokens per Mooncake `hash_ids` block (`llmload.traces.MOONCAKE_BLOCK_TOKENS`)
HASH_BLOCK_TOKENS = 512


class RequestMix:
    """Builds each request of a run from the `requests` config."""

    def __init__(self, requests: Requests, target: Target, *, base_dir: str | Path = ".",
                 tokens_per_word: float | None = None) -> None:
        self.requests = requests
        self.api = target.api
        self.model = target.model
        self.server = target.server
        self.tokens_per_word = tokens_per_word or 1.0
        self.chat = get_api(self.api).chat
        self.input_lengths = LengthSampler.from_dist(requests.input_tokens, base_dir=base_dir)
        self.output_lengths = LengthSampler.from_dist(requests.output_tokens, base_dir=base_dir)
        self.dataset: list[DatasetEntry] | None = None
        if requests.dataset:
            self.dataset = load_dataset(Path(base_dir) / requests.dataset)
        self._prefixes: dict[tuple[int, int], str] = {}
        self._block_words: dict[int, list[str]] = {}

    def build(self, request_id: str, index: int, seed: int = 0, *, input_tokens: int | None = None,
              output_tokens: int | None = None, prefix_id: int | None = None,
              hash_ids: list[int] | None = None) -> PreparedRequest:
        """The request number `index` of the shard/step identified by `seed`. Trace sizes and a forced
        prefix override the draws (the draws still happen, so other requests do not shift)."""
        rng = random.Random(f"llmload-mix/{self.requests.seed}/{seed}/{index}")
        drawn_in = self.input_lengths.draw(rng)
        drawn_out = self.output_lengths.draw(rng)
        shared = self.requests.shared_prefix
        drawn_prefix = rng.randrange(shared.prefixes) if rng.random() < shared.ratio else None
        n_out = output_tokens or drawn_out
        if prefix_id is None:
            prefix_id = drawn_prefix

        if self.dataset is not None:
            entry = self.dataset[rng.randrange(len(self.dataset))]
            n_out = output_tokens or entry.output_tokens or n_out
            if entry.messages is not None:
                messages = list(entry.messages)
                planned = sum(count_tokens(m["content"]) + CHAT_TOKENS_PER_MESSAGE for m in messages) \
                    if self.chat else count_tokens("\n".join(m["content"] for m in messages))
                body = build_body(self.api, model=self.model, max_tokens=n_out, messages=messages,
                                  temperature=self.requests.temperature, ignore_eos=self.requests.ignore_eos,
                                  server=self.server, reasoning_effort=self.requests.reasoning_effort,
                          tools=self.requests.tools, tool_choice=self.requests.tool_choice)
            else:
                prompt = entry.prompt or ""
                planned = count_tokens(prompt) + (CHAT_TOKENS_PER_MESSAGE if self.chat else 0)
                body = self._body(prompt, n_out)
            return PreparedRequest(request_id, self.api, body, planned_input_tokens=planned,
                                   planned_output_tokens=n_out, prefix_id=None)

        n_in = input_tokens or drawn_in
        if self.chat:  # a chat message cannot be shorter than its template plus one token
            n_in = max(n_in, CHAT_TOKENS_PER_MESSAGE + 1)
        content_tokens = n_in - CHAT_TOKENS_PER_MESSAGE if self.chat else n_in
        parts = []
        if hash_ids:  # Mooncake: the prompt is the trace's blocks, then text of its own
            parts.append(self._blocks(hash_ids, content_tokens))
            content_tokens -= min(content_tokens, len(hash_ids) * HASH_BLOCK_TOKENS)
        elif prefix_id is not None:
            prefix_tokens = min(shared.tokens, content_tokens - 1)
            if prefix_tokens >= 1:
                parts.append(self._prefix(prefix_id, prefix_tokens))
                content_tokens -= prefix_tokens
            else:
                prefix_id = None
        if content_tokens > 0 or not parts:
            parts.append(synthesize_words(words_for_tokens(content_tokens, self.tokens_per_word), rng))
        prompt = " ".join(parts)
        return PreparedRequest(request_id, self.api, self._body(prompt, n_out), planned_input_tokens=n_in,
                               planned_output_tokens=n_out, prefix_id=prefix_id)

    def _body(self, prompt: str, max_tokens: int) -> bytes:
        return build_body(self.api, model=self.model, max_tokens=max_tokens, prompt=prompt,
                          temperature=self.requests.temperature, ignore_eos=self.requests.ignore_eos,
                          server=self.server, reasoning_effort=self.requests.reasoning_effort,
                          tools=self.requests.tools, tool_choice=self.requests.tool_choice)

    def _blocks(self, hash_ids: list[int], n_tokens: int) -> str:
        """Mooncake's `hash_ids` as text: block `h` is the same `HASH_BLOCK_TOKENS` tokens of text in
        every request that has it (seeded by the run's seed and `h`), so equal leading hash ids are an
        equal prompt prefix for the server's cache; cut to the request's `n_tokens`."""
        words: list[str] = []
        used = 0
        for h in hash_ids:
            take = min(n_tokens - used, HASH_BLOCK_TOKENS)
            if take <= 0:
                break
            block = self._block_words.get(h)
            if block is None:
                n_words = words_for_tokens(HASH_BLOCK_TOKENS, self.tokens_per_word)
                block = self._block_words[h] = synthesize_words(
                    n_words, random.Random(f"llmload-hash-block/{self.requests.seed}/{h}")).split(" ")
            words += block if take == HASH_BLOCK_TOKENS else block[:words_for_tokens(take, self.tokens_per_word)]
            used += take
        return " ".join(words)

    def _prefix(self, prefix_id: int, n_tokens: int) -> str:
        """The shared prefix text, cut to `n_tokens` (every cut of one prefix is a prefix of it)."""
        key = (prefix_id, n_tokens)
        text = self._prefixes.get(key)
        if text is None:
            n_words = words_for_tokens(self.requests.shared_prefix.tokens, self.tokens_per_word)
            words = prefix_text(self.requests.seed, prefix_id, n_words).split(" ")
            text = " ".join(words[:words_for_tokens(n_tokens, self.tokens_per_word)])
            self._prefixes[key] = text
        return text
