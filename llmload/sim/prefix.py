"""vLLM's automatic prefix caching, for the engine model: full KV blocks are known by a chained hash of
their tokens and reused by later requests that start with the same tokens.

As vLLM v1 does it (vLLM `vllm/v1/core/kv_cache_manager.py`, `block_pool.py`, `kv_cache_utils.py`
and `v1/metrics/stats.py`, main of late 2025, written from knowledge of that code rather than re-read;
metric names re-read from `v1/metrics/loggers.py`; the sim claims 0.33.0; docs/SIM.md):
- A block's hash covers its `block_size` tokens and the hash of the block before it, so a block only
  matches when the whole prefix up to it matches. Only full blocks are cached.
- When a waiting request is scheduled (new, or after a preemption) the scheduler looks up its longest
  run of cached blocks, at most `(num_tokens - 1) // block_size` blocks (one token is always computed,
  to sample from). Those tokens count as computed: the prefill skips them. Each lookup counts in
  `prefix_cache_queries` (tokens of the request) and `prefix_cache_hits` (tokens found), except for a
  preempted request's lookups (vLLM counts those apart and does not export them); a lookup whose
  allocation then fails (no free block) still counts, and is made again next step, as in vLLM.
- A block is cached as soon as it is scheduled full (before the step runs), so a request admitted later
  in the same step can already hit it.
- Blocks in use are shared (reference counts). A cached block no request uses stays cached and counts as
  free (KV usage ignores it) until an allocation needs it: it is evicted then, least recently freed
  first, and a request's blocks are freed tail first (so its last blocks go first).

The sim's one simplification: an allocation takes never-cached free blocks before it evicts cached ones
(vLLM takes the head of one free queue, where uncached and cached freed blocks are mixed in free order),
so cached prefixes live a little longer here under KV pressure.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from llmload.sim.text import prompt_token_list

if TYPE_CHECKING:
    from llmload.sim.engine import Sequence

__all__ = ["PrefixCache", "block_hashes", "request_block_hashes"]


def block_hashes(tokens: list, block_size: int) -> tuple[int, ...]:
    """The chained hashes of the full blocks of `tokens` (each covers its tokens and the one before)."""
    out: list[int] = []
    h = 0
    for i in range(len(tokens) // block_size):
        h = hash((h, tuple(tokens[i * block_size:(i + 1) * block_size])))
        out.append(h)
    return tuple(out)


def request_block_hashes(body: dict, messages: list | None, n_prompt: int, block_size: int) -> tuple[int, ...]:
    """A generation request's prompt blocks as the prefix cache knows them: the tokens of its body's
    `messages` (a chat; None: its `prompt`) by the sim's rule (`prompt_token_list`), cut to the `n_prompt`
    tokens the engine holds. `llmload sim` and a virtual run (`llmload.runtime.virtual.engine`) both call it."""
    tokens = prompt_token_list(body.get("prompt", ""), messages)[:n_prompt]
    return block_hashes(tokens, block_size)


class PrefixCache:
    """Cached blocks by hash with reference counts; the unreferenced ones in LRU order (all free)."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.refs: dict[int, int] = {}
        self.evictable: OrderedDict[int, None] = OrderedDict()

    @staticmethod
    def hash_of(seq: Sequence, i: int) -> int:
        """Block i of a sequence: its prompt's chained hash, or (holding generated tokens) its own."""
        return seq.block_hashes[i] if i < len(seq.block_hashes) else hash(("gen", seq.seq_id, i))

    def lookup(self, seq: Sequence) -> tuple[list[int], int]:
        """The cached blocks a waiting sequence can start from, and how many of them are free now."""
        hits: list[int] = []
        reclaim = 0
        for i in range((seq.prompt_tokens + seq.generated - 1) // self.block_size):
            h = self.hash_of(seq, i)
            ref = self.refs.get(h)
            if ref is None:
                break
            hits.append(h)
            reclaim += ref == 0
        return hits, reclaim

    def acquire(self, seq: Sequence, hits: list[int]) -> None:
        """The sequence takes the looked-up blocks (they leave the free pool if unreferenced)."""
        for h in hits:
            if self.refs[h] == 0:
                del self.evictable[h]
            self.refs[h] += 1
        seq.held = list(hits)
        seq.registered = len(hits)

    def register(self, seq: Sequence, full_blocks: int) -> None:
        """Cache the sequence's blocks up to `full_blocks` (they are full once this step runs). A block
        whose hash is already cached stays the sequence's own (vLLM keeps such duplicates apart too)."""
        for i in range(seq.registered, full_blocks):
            h = self.hash_of(seq, i)
            if h not in self.refs:
                self.refs[h] = 1
                seq.held.append(h)
        seq.registered = max(seq.registered, full_blocks)

    def release(self, seq: Sequence) -> int:
        """Drop the sequence's references, tail first; returns the cached blocks that became free."""
        freed = 0
        for h in reversed(seq.held):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.evictable[h] = None
                freed += 1
        seq.held = []
        seq.registered = 0
        return freed

    def evict(self, n: int) -> None:
        """Forget the `n` least recently freed cached blocks (their space is being reused)."""
        for _ in range(min(n, len(self.evictable))):
            h, _ = self.evictable.popitem(last=False)
            del self.refs[h]
