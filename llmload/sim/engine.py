"""The engine model: continuous batching with chunked prefill, a KV block budget and preemption.

Pure and clock-free: `Engine.step()` schedules one iteration, applies it and returns what happened and
what it cost (`StepResult.cost_s`); the real-time loop (`llmload.sim.loop`) sleeps that long before it
writes the step's tokens. Tests drive it with a virtual clock.

One step, as vLLM's v1 scheduler does it:
1. Running sequences, oldest first, each get the tokens they need before they can sample their next one
   (`prompt + generated - computed`: one when decoding, a chunk when (re)prefilling), within the step's
   token budget `max_num_batched_tokens`. A sequence that needs a KV block when none is free preempts
   the newest running sequence (its blocks are freed, it goes back to the front of the waiting queue and
   later recomputes prompt + generated tokens; counted in `preemptions`).
2. If nothing was preempted, waiting sequences are admitted first come first served while fewer than
   `max_num_seqs` run, budget is left and their first chunk's blocks are free.
3. Cost = `step_base_s + prefill_cost_s x prefill tokens + decode_cost_s x sequences in the step`, or, with
   a cost per batch size (`decode_step_s`, below), `decode_step_s[n - 1] + prefill_cost_s x prefill tokens`
   for n sequences in the step.
   A sequence whose computed tokens reach `prompt + generated` samples one token at the step end;
   reaching its output length finishes it and frees its blocks.

A prompt's tail in a step of its own (`prompt_tail_tokens`, 0 by default; llama.cpp's server with a
sliding-window model such as Gemma 3): a first prefill chunk never crosses the prompt's last
`prompt_tail_tokens` tokens, so a prompt longer than that takes two steps at least, its tail (and its first
token) in the second. llama.cpp stops a prompt's batch there to save a context checkpoint before it
(`update_slots`, "create checkpoints that many tokens before the end of the prompt"); each of those
steps carries the decoding sequences too, so they get a token in each.

A cost per batch size (`decode_step_s`, empty by default): a server whose step is not a line in the batch
size (llama.cpp on a CPU: 28 / 54 / 86 / 72 ms at 1-4 sequences, the 3-sequence step dearer than the
4-sequence one) gets a table, entry n - 1 for n sequences, in place of `step_base_s + decode_cost_s x n`.
Past the table's end it is extrapolated (`decode_part_s`): the line through its last two entries, or,
where the last entry is the cheaper of those two (or the only one), the line through the origin and the
last entry (its cost per sequence), so that a step never costs less than a smaller one past the end.

An injected slow leak, for soak tests (both 0 by default, both functions of the engine's age `age_s`, the
time since it started, passed to `step`, so the same schedule gives the same numbers): every step costs
`step_cost_growth_s_per_min x age_s / 60` more, and `kv_leak_blocks_per_min x age_s / 60` KV blocks
(rounded down) are taken out of the free pool for good, as free blocks allow, at most half the cache so
every request that fits still runs. Leaked blocks count in `kv_usage`.

Prefix caching (`enable_prefix_caching`, vLLM's default; `llmload.sim.prefix` has the rules): a sequence
with `block_hashes` (its full prompt blocks) starts, when scheduled from the waiting queue, from the
longest run of cached blocks; those tokens are not prefilled (no cost, earlier first token). Cached
blocks nobody uses count as free and are evicted when an allocation needs them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from llmload.sim.prefix import PrefixCache

__all__ = ["Engine", "EngineLimits", "Sequence", "StepResult"]


@dataclass(frozen=True, slots=True)
class EngineLimits:
    """Batching and cost parameters (a subset of SimSettings, flavour-adjusted)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    num_blocks: int = 4096
    block_size: int = 16
    step_base_s: float = 0.024
    prefill_cost_s: float = 0.0002
    decode_cost_s: float = 0.00025
    step_cost_growth_s_per_min: float = 0.0
    kv_leak_blocks_per_min: float = 0.0
    enable_prefix_caching: bool = False
    #: a prompt's last tokens in a step of their own (module docstring); 0: prompts are chunked by budget only
    prompt_tail_tokens: int = 0
    #: a step's cost without its prefill, per batch size (entry n - 1: n sequences; module docstring);
    #: empty: `step_base_s + decode_cost_s x n`
    decode_step_s: tuple[float, ...] = ()

    def decode_part_s(self, n: int) -> float:
        """What a step of `n` sequences costs besides its prefill tokens (and the injected growth)."""
        table = self.decode_step_s
        if not table:
            return self.step_base_s + self.decode_cost_s * n
        if n <= len(table):
            return table[n - 1] if n > 0 else 0.0
        last = table[-1]
        rise = last - table[-2] if len(table) > 1 and last >= table[-2] else last / len(table)
        return last + rise * (n - len(table))


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine. `output_tokens` is the length it will stop at."""

    seq_id: int
    prompt_tokens: int
    output_tokens: int
    generated: int = 0
    computed: int = 0
    blocks: int = 0
    preemptions: int = 0
    admitted: bool = False
    state: str = "new"  # new | waiting | running | finished | aborted
    #: chained hashes of the full prompt blocks (prefix caching; empty: never a hit)
    block_hashes: tuple[int, ...] = ()
    #: prompt tokens found in the prefix cache when first scheduled (vLLM's num_cached_tokens; -1: not yet)
    cached_tokens: int = -1
    held: list[int] = field(default_factory=list)  # hashes of the cached blocks it references
    registered: int = 0  # its leading blocks already offered to the cache

    @property
    def needed(self) -> int:
        """Tokens to compute before the next token can be sampled."""
        return self.prompt_tokens + self.generated - self.computed


@dataclass(slots=True)
class StepResult:
    """What one step did. `emitted` holds the sequences that sampled a token at the step end."""

    cost_s: float
    prefill_tokens: int = 0
    batch: int = 0
    emitted: list[Sequence] = field(default_factory=list)
    finished: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    #: prefix cache lookups of requests never preempted: tokens asked, tokens found (vLLM's counters)
    cache_queries: int = 0
    cache_hits: int = 0


class Engine:
    """Continuous-batching scheduler over a KV block pool. Not thread-safe; one loop drives it."""

    def __init__(self, limits: EngineLimits) -> None:
        self.limits = limits
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.free_blocks = limits.num_blocks
        self.preemptions_total = 0
        #: KV blocks lost to the injected leak (never returned)
        self.leaked_blocks = 0
        self.cache = PrefixCache(limits.block_size) if limits.enable_prefix_caching else None
        #: `decode_horizon` cannot tell what the next steps do (prefix cache, injected leak or cost growth)
        self._no_horizon = (self.cache is not None or limits.kv_leak_blocks_per_min > 0
                            or limits.step_cost_growth_s_per_min > 0)

    # ----------------------------------------------------------------- queries
    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def kv_usage(self) -> float:
        """Share of KV blocks held, 0-1 (vLLM's `kv_cache_usage_perc`)."""
        return 1.0 - self.free_blocks / self.limits.num_blocks

    def fits(self, prompt_tokens: int, output_tokens: int) -> bool:
        """Whether one request alone fits the KV cache (else it could never finish)."""
        return self._blocks_for(prompt_tokens + output_tokens) <= self.limits.num_blocks

    # ----------------------------------------------------------------- changes
    def add(self, seq: Sequence) -> None:
        """Queue a sequence (FCFS)."""
        if not self.fits(seq.prompt_tokens, seq.output_tokens):
            raise ValueError("request does not fit the KV cache")
        seq.state = "waiting"
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        """Drop a sequence wherever it is (client gone, fault) and free its blocks."""
        if seq.state == "waiting":
            self.waiting.remove(seq)
        elif seq.state == "running":
            self.running.remove(seq)
            self._free(seq)
        seq.state = "aborted"

    def step(self, age_s: float = 0.0) -> StepResult:
        """Schedule and run one iteration at engine age `age_s` (seconds since start; only the
        injected leak uses it); see the module docstring."""
        lim = self.limits
        if lim.kv_leak_blocks_per_min > 0:
            self._leak(age_s)
        budget = lim.max_num_batched_tokens
        scheduled: list[tuple[Sequence, int]] = []
        result = StepResult(cost_s=0.0)
        running = self.running
        block_size = lim.block_size
        plain = self.cache is None  # no prefix cache: a reservation that fits is plain arithmetic
        tail = lim.prompt_tail_tokens
        free = self.free_blocks  # kept here, written back around `_reserve` (the hot loop)
        # a preemption removes the newest sequences (the list's end) in place: iterating stops before them
        for seq in running:
            if budget <= 0:
                break
            n = seq.prompt_tokens + seq.generated - seq.computed  # seq.needed, inlined (the hot loop)
            if n > budget:
                n = budget
            if tail and n > 1 and seq.generated == 0:
                n = self._before_tail(seq, seq.computed, n)
            # _reserve's common case inlined: no prefix cache and the blocks are free (no preemption)
            extra = -(-(seq.computed + n) // block_size) - seq.blocks
            if plain and extra <= free:
                seq.blocks += extra
                free -= extra
            else:
                self.free_blocks = free
                reserved = self._reserve(seq, n, result)  # a preemption removes from `running` in place
                free = self.free_blocks
                if not reserved:
                    break  # seq itself was preempted (it was the newest)
            scheduled.append((seq, n))
            budget -= n
        self.free_blocks = free
        if not result.preempted:
            waiting = self.waiting
            slots = lim.max_num_seqs
            while waiting and len(self.running) < slots and budget > 0:
                seq = waiting[0]
                if plain:  # no prefix cache: no hits, nothing to reclaim or register
                    n = seq.prompt_tokens + seq.generated
                    if n > budget:
                        n = budget
                    if tail and seq.generated == 0:
                        n = self._before_tail(seq, 0, n)
                    extra = -(-n // block_size)
                    if extra > self.free_blocks:
                        break
                    waiting.popleft()
                    seq.state = "running"
                    self.running.append(seq)
                    seq.blocks = extra
                    self.free_blocks -= extra
                else:
                    hits, reclaim = self._lookup(seq, result)
                    computed = len(hits) * block_size
                    n = min(seq.prompt_tokens + seq.generated - computed, budget)
                    if tail and seq.generated == 0:
                        n = self._before_tail(seq, computed, n)
                    extra = self._blocks_for(computed + n) - len(hits)
                    if extra > self.free_blocks - reclaim:
                        break
                    waiting.popleft()
                    seq.state = "running"
                    self.running.append(seq)
                    if self.cache is not None:
                        self.free_blocks -= reclaim
                        self.cache.acquire(seq, hits)
                        seq.computed = computed
                        if seq.cached_tokens < 0:
                            seq.cached_tokens = computed
                    seq.blocks = len(hits) + extra
                    self._take(extra)
                    self._register(seq, n)
                if not seq.admitted:
                    seq.admitted = True
                    result.admitted.append(seq)
                scheduled.append((seq, n))
                budget -= n
        prefill_tokens = 0
        emitted, finished = result.emitted, result.finished
        for seq, n in scheduled:
            target = seq.prompt_tokens + seq.generated  # seq.needed is target - computed
            if not (target - seq.computed == 1 and seq.generated > 0):  # not a decode step
                prefill_tokens += n
            seq.computed += n
            if seq.computed == target:
                seq.generated += 1
                emitted.append(seq)
                if seq.generated >= seq.output_tokens:
                    seq.state = "finished"
                    self._free(seq)
                    finished.append(seq)
        result.prefill_tokens = prefill_tokens
        if result.finished:  # one pass, not a list.remove per finished sequence
            self.running = [seq for seq in self.running if seq.state == "running"]
        result.batch = len(scheduled)
        if scheduled and lim.decode_step_s:
            result.cost_s = (lim.decode_part_s(result.batch) + lim.prefill_cost_s * result.prefill_tokens
                             + lim.step_cost_growth_s_per_min * max(0.0, age_s) / 60.0)
        elif scheduled:
            result.cost_s = (lim.step_base_s + lim.prefill_cost_s * result.prefill_tokens
                             + lim.decode_cost_s * result.batch
                             + lim.step_cost_growth_s_per_min * max(0.0, age_s) / 60.0)
        return result

    def decode_horizon(self) -> tuple[int, float, bool]:
        """`(k, cost_s, admits)`: the next `k` steps are the same decode-only step (every running sequence
        samples one token; none is preempted, none admitted from the waiting queue; only in the `k`-th may
        some finish), each costing `cost_s`; `admits`: a sequence queued now would be admitted (the caller
        bounds `k` by its next arrival). `k` is 0 or at least 2; 0: the next steps are not such steps, or the engine cannot
        tell (prefix cache, injected leak or cost growth). For callers in virtual time, which apply them
        at once with `decode_steps`."""
        lim = self.limits
        running = self.running
        if not running or self._no_horizon or len(running) > lim.max_num_batched_tokens:
            return 0, 0.0, False
        block_size = lim.block_size
        budget = lim.max_num_batched_tokens - len(running)
        slots_free = len(running) < lim.max_num_seqs and budget > 0
        waiting = self.waiting
        if waiting and slots_free and -(-self._first_chunk(waiting[0], budget) // block_size) \
                <= self.free_blocks - len(running):  # the head is admitted (at most a block each for the rest)
            return 0, 0.0, False
        k = 1 << 30
        first_extra = 0
        for seq in running:
            computed, generated = seq.computed, seq.generated
            if generated <= 0 or seq.prompt_tokens + generated - computed != 1 \
                    or seq.blocks != -(-computed // block_size):
                return 0, 0.0, False
            left = seq.output_tokens - generated  # the step it finishes in
            if left < k:
                k = left
            first_extra += -(-(computed + 1) // block_size) - seq.blocks
        if waiting and slots_free:  # the head is admitted unless its first chunk's blocks are short
            head = waiting[0]
            if -(-self._first_chunk(head, budget) // block_size) <= self.free_blocks - first_extra:
                return 0, 0.0, False
        # a sequence's k more tokens take at most ceil(k / block_size) more blocks: when that many each are
        # free, none is short (the sum below is only needed under KV pressure)
        if len(running) * -(-k // block_size) > self.free_blocks:
            while k > 1 and sum(-(-(seq.computed + k) // block_size) - seq.blocks for seq in running) \
                    > self.free_blocks:
                k //= 2  # a step would preempt: fewer steps
        if k < 2:
            return 0, 0.0, False
        # step's sum, bit for bit (no prefill: + 0.0 leaves it as it is)
        cost_s = lim.decode_part_s(len(running)) if lim.decode_step_s else \
            lim.step_base_s + lim.decode_cost_s * len(running)
        return k, cost_s, slots_free and not waiting

    def decode_steps(self, k: int) -> list[Sequence]:
        """Apply `k` steps of `decode_horizon` at once (k at most its answer): the state `k` calls of `step`
        leave. Returns the sequences that ran (each sampled `k` tokens, the last at the `k`-th step's end;
        those that reached their output length are finished and their blocks freed)."""
        block_size = self.limits.block_size
        ran = self.running
        free = self.free_blocks
        finished = False
        for seq in ran:
            seq.computed += k
            seq.generated += k
            blocks = -(-seq.computed // block_size)
            if seq.generated >= seq.output_tokens:  # its blocks taken for the last steps, then freed
                seq.state = "finished"
                free += seq.blocks  # `_free` without a prefix cache (`decode_horizon` answers 0 with one)
                seq.blocks = 0
                finished = True
            else:
                free -= blocks - seq.blocks
                seq.blocks = blocks
        self.free_blocks = free
        if finished:
            self.running = [seq for seq in ran if seq.state == "running"]
        return ran

    # ----------------------------------------------------------------- internals
    def _first_chunk(self, seq: Sequence, budget: int) -> int:
        """The tokens a waiting sequence (no prefix cache) would be admitted with, within `budget`."""
        n = min(seq.prompt_tokens + seq.generated, budget)
        return self._before_tail(seq, 0, n) if self.limits.prompt_tail_tokens and seq.generated == 0 else n

    def _before_tail(self, seq: Sequence, computed: int, n: int) -> int:
        """`n` prompt tokens from `computed` on, cut at the start of the prompt's tail (module docstring)."""
        edge = seq.prompt_tokens - self.limits.prompt_tail_tokens
        return edge - computed if computed < edge < computed + n else n

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.limits.block_size)

    def _leak(self, age_s: float) -> None:
        due = min(int(self.limits.kv_leak_blocks_per_min * max(0.0, age_s) / 60.0), self.limits.num_blocks // 2)
        take = min(due - self.leaked_blocks, self.free_blocks)
        if take > 0:
            self.leaked_blocks += take
            self._take(take)

    def _take(self, n: int) -> None:
        """Allocate n free blocks: never-cached ones first, then the least recently freed cached ones."""
        if n > 0 and self.cache is not None and self.cache.evictable:
            self.cache.evict(n - (self.free_blocks - len(self.cache.evictable)))
        self.free_blocks -= n

    def _lookup(self, seq: Sequence, result: StepResult) -> tuple[list[int], int]:
        """The prefix cache hits of a waiting sequence (counted as vLLM counts each lookup)."""
        if self.cache is None:
            return [], 0
        hits, reclaim = self.cache.lookup(seq)
        if seq.preemptions == 0:
            result.cache_queries += seq.prompt_tokens + seq.generated
            result.cache_hits += len(hits) * self.limits.block_size
        return hits, reclaim

    def _register(self, seq: Sequence, n: int) -> None:
        """Offer the blocks that `n` more scheduled tokens fill to the prefix cache."""
        if self.cache is not None:
            full = min(seq.computed + n, seq.prompt_tokens + seq.generated) // self.limits.block_size
            if full > seq.registered:  # most decode steps fill no block
                self.cache.register(seq, full)

    def _free(self, seq: Sequence) -> None:
        if self.cache is not None:
            own = seq.blocks - len(seq.held)
            self.free_blocks += own + self.cache.release(seq)
        else:
            self.free_blocks += seq.blocks
        seq.blocks = 0

    def _reserve(self, seq: Sequence, n: int, result: StepResult) -> bool:
        """Allocate blocks for `n` more tokens of `seq`, preempting the newest running ones if needed."""
        extra = self._blocks_for(seq.computed + n) - seq.blocks
        while extra > self.free_blocks:
            victim = self.running[-1]
            self._preempt(victim, result)
            if victim is seq:
                return False
        seq.blocks += extra
        if extra:
            self._take(extra)
        if self.cache is not None and (seq.computed + n) // self.limits.block_size > seq.registered:
            self._register(seq, n)  # a block fills in this step (not on most decode steps)
        return True

    def _preempt(self, seq: Sequence, result: StepResult) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.computed = 0
        seq.preemptions += 1
        seq.state = "waiting"
        self.waiting.appendleft(seq)
        self.preemptions_total += 1
        result.preempted.append(seq)
