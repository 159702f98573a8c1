"""The engine model on a virtual clock: batching, chunked prefill, step cost, KV preemption, FCFS."""

from __future__ import annotations

import pytest

from llmload.sim.engine import Engine, EngineLimits, Sequence


def run(engine: Engine, max_steps: int = 10_000) -> tuple[float, list]:
    """Step until idle; return the virtual time and (time, seq_id, token index) of every token."""
    t, tokens = 0.0, []
    for _ in range(max_steps):
        if engine.idle:
            break
        result = engine.step()
        t += result.cost_s
        tokens += [(t, s.seq_id, s.generated - 1) for s in result.emitted]
    return t, tokens


def test_single_request_costs_prefill_then_one_step_per_token():
    lim = EngineLimits(step_base_s=0.02, prefill_cost_s=0.001, decode_cost_s=0.005)
    engine = Engine(lim)
    engine.add(Sequence(seq_id=1, prompt_tokens=100, output_tokens=5))
    t, tokens = run(engine)
    assert [k for _, _, k in tokens] == [0, 1, 2, 3, 4]
    first = 0.02 + 100 * 0.001 + 0.005
    assert tokens[0][0] == pytest.approx(first)
    assert t == pytest.approx(first + 4 * (0.02 + 0.005))
    assert engine.free_blocks == lim.num_blocks


def test_chunked_prefill_splits_a_long_prompt_across_steps():
    engine = Engine(EngineLimits(max_num_batched_tokens=64, step_base_s=0.01, prefill_cost_s=0.001,
                                 decode_cost_s=0.0))
    engine.add(Sequence(seq_id=1, prompt_tokens=150, output_tokens=2))
    steps = [engine.step() for _ in range(3)]
    assert [s.prefill_tokens for s in steps] == [64, 64, 22]
    assert [len(s.emitted) for s in steps] == [0, 0, 1]
    assert steps[0].cost_s == pytest.approx(0.01 + 0.064)


def test_a_prompt_tail_takes_a_step_of_its_own_and_the_decoders_get_a_token_in_each():
    """llama.cpp with a sliding-window model stops a prompt's batch 4 tokens before its end (a context
    checkpoint): the prompt takes two steps, the first token comes at the second's end, and a request
    decoding meanwhile samples a token at the end of each."""
    lim = EngineLimits(step_base_s=0.01, prefill_cost_s=0.001, decode_cost_s=0.005, prompt_tail_tokens=4)
    engine = Engine(lim)
    engine.add(Sequence(seq_id=0, prompt_tokens=10, output_tokens=20))
    first = engine.step()
    assert first.prefill_tokens == 6 and not first.emitted and first.cost_s == pytest.approx(0.01 + 0.006 + 0.005)
    second = engine.step()
    assert second.prefill_tokens == 4 and [s.seq_id for s in second.emitted] == [0]
    engine.add(Sequence(seq_id=1, prompt_tokens=100, output_tokens=3))
    chunk, tail = engine.step(), engine.step()
    assert (chunk.prefill_tokens, tail.prefill_tokens) == (96, 4) and (chunk.batch, tail.batch) == (2, 2)
    assert [s.seq_id for s in chunk.emitted] == [0] and [s.seq_id for s in tail.emitted] == [0, 1]
    assert chunk.cost_s == pytest.approx(0.01 + 0.096 + 2 * 0.005)
    # a prompt no longer than the tail takes one step; the token budget still chunks a long one first
    engine = Engine(lim)
    engine.add(Sequence(seq_id=2, prompt_tokens=4, output_tokens=2))
    assert engine.step().emitted
    engine = Engine(EngineLimits(max_num_batched_tokens=64, prompt_tail_tokens=4))
    engine.add(Sequence(seq_id=3, prompt_tokens=130, output_tokens=2))
    assert [engine.step().prefill_tokens for _ in range(4)] == [64, 62, 4, 0]


def test_max_num_seqs_caps_the_batch_and_the_rest_wait_fcfs():
    engine = Engine(EngineLimits(max_num_seqs=2))
    for i in range(4):
        engine.add(Sequence(seq_id=i, prompt_tokens=10, output_tokens=3))
    first = engine.step()
    assert [s.seq_id for s in first.admitted] == [0, 1]
    assert len(engine.running) == 2 and [s.seq_id for s in engine.waiting] == [2, 3]
    _, tokens = run(engine)
    finish_order = [sid for _, sid, k in tokens if k == 2]
    assert finish_order == [0, 1, 2, 3]


def test_decode_cost_grows_with_batch():
    engine = Engine(EngineLimits(step_base_s=0.02, decode_cost_s=0.001, prefill_cost_s=0.0))
    for i in range(8):
        engine.add(Sequence(seq_id=i, prompt_tokens=4, output_tokens=3))
    engine.step()
    assert engine.step().cost_s == pytest.approx(0.02 + 8 * 0.001)


TABLE = (0.028, 0.054, 0.086, 0.072)  # llama.cpp on a CPU: the 3-sequence step dearer than the 4-sequence one


@pytest.mark.parametrize("table, extra", [
    (TABLE, (0.072 + 0.018, 0.072 + 2 * 0.018)),  # falls at its end: the origin's line through 72 ms at 4
    ((0.028, 0.054, 0.066, 0.072), (0.078, 0.084)),  # rises: the line through the last two (6 ms a sequence)
])
def test_a_cost_per_batch_size_is_what_each_step_costs_and_extrapolated_past_its_end(table, extra):
    """`decode_step_s`: n sequences cost entry n (the line's `step_base_s` and `decode_cost_s` unused), plus
    the prefill tokens at `prefill_cost_s`; past the end (5 and 6 sequences) the extrapolation."""
    lim = EngineLimits(max_num_seqs=8, step_base_s=1.0, decode_cost_s=1.0, prefill_cost_s=0.001,
                       decode_step_s=table)
    want = {n: cost for n, cost in enumerate((*table, *extra), start=1)}
    assert {n: lim.decode_part_s(n) for n in want} == pytest.approx(want, rel=1e-12)
    for n in range(1, 7):  # n requests at once: their prompts in one step, then decode steps of n
        engine = Engine(lim)
        for i in range(n):
            engine.add(Sequence(seq_id=i, prompt_tokens=10, output_tokens=3))
        costs = [engine.step().cost_s for _ in range(3)]
        assert costs[0] == pytest.approx(want[n] + 10 * n * 0.001, rel=1e-12)
        assert costs[1:] == pytest.approx([want[n], want[n]], rel=1e-12) and engine.idle
        if n <= len(table):
            assert costs[1:] == [table[n - 1]] * 2  # decode only: the entry itself, to the bit
    assert EngineLimits(decode_step_s=(0.03,)).decode_part_s(3) == pytest.approx(0.09)  # one entry: per sequence


def test_kv_exhaustion_preempts_the_newest_and_it_recomputes():
    # 8 blocks of 4 tokens = 32 tokens; two requests of 8 prompt + 12 output cannot both stay
    engine = Engine(EngineLimits(num_blocks=8, block_size=4, max_num_batched_tokens=64))
    a = Sequence(seq_id=1, prompt_tokens=8, output_tokens=12)
    b = Sequence(seq_id=2, prompt_tokens=8, output_tokens=12)
    engine.add(a)
    engine.add(b)
    peak, preempted = 0.0, []
    while not engine.idle:
        result = engine.step()
        peak = max(peak, engine.kv_usage)
        preempted += [s.seq_id for s in result.preempted]
        assert engine.free_blocks >= 0
    assert preempted and set(preempted) == {2}  # always the newest
    assert b.preemptions == len(preempted) and a.preemptions == 0
    assert a.generated == 12 and b.generated == 12
    assert peak == 1.0 and engine.free_blocks == 8
    assert engine.preemptions_total == len(preempted)


def test_abort_frees_blocks_and_a_request_larger_than_the_cache_is_refused():
    engine = Engine(EngineLimits(num_blocks=4, block_size=4))
    seq = Sequence(seq_id=1, prompt_tokens=8, output_tokens=4)
    engine.add(seq)
    engine.step()
    assert engine.free_blocks < 4
    engine.abort(seq)
    assert engine.free_blocks == 4 and engine.idle
    with pytest.raises(ValueError):
        engine.add(Sequence(seq_id=2, prompt_tokens=16, output_tokens=4))


def _state(engine: Engine) -> tuple:
    seqs = [(s.seq_id, s.state, s.computed, s.generated, s.blocks) for s in (*engine.running, *engine.waiting)]
    return seqs, engine.free_blocks


def _twins(lim: EngineLimits, sizes: list[tuple[int, int]]) -> tuple[Engine, Engine]:
    engines = (Engine(lim), Engine(lim))
    for engine in engines:
        for i, (prompt, output) in enumerate(sizes):
            engine.add(Sequence(seq_id=i, prompt_tokens=prompt, output_tokens=output))
    return engines


@pytest.mark.parametrize("lim, sizes", [
    (EngineLimits(max_num_seqs=2, step_base_s=0.02, decode_cost_s=0.004), [(30, 9), (50, 6), (20, 8)]),
    (EngineLimits(max_num_seqs=8, num_blocks=12, block_size=4, step_base_s=0.01), [(6, 12), (5, 14), (7, 3)]),
    (EngineLimits(max_num_seqs=2, step_base_s=0.02, decode_cost_s=0.004, prompt_tail_tokens=4),
     [(30, 9), (50, 6), (20, 8), (3, 5)]),
    (EngineLimits(max_num_seqs=6, step_base_s=0.02, decode_cost_s=0.004, decode_step_s=TABLE),  # past its end too
     [(30, 9), (50, 6), (20, 8), (3, 5), (9, 12), (4, 7), (11, 20)]),
])
def test_decode_horizon_steps_at_once_leave_what_the_steps_one_by_one_leave(lim, sizes):
    """`decode_horizon` + `decode_steps(k)` against `k` calls of `step`, from every state the run passes:
    the same sequences, tokens, blocks and free blocks; the horizon stops before an admission (slots
    free, a waiting head that fits) and before a step that would preempt."""
    fast, slow = _twins(lim, sizes)
    skipped = 0
    while not slow.idle:
        k, cost_s, _ = fast.decode_horizon()
        if k:
            assert k >= 2
            ran = list(fast.decode_steps(k))
            for _ in range(k):
                result = slow.step()
                assert result.cost_s == cost_s and result.prefill_tokens == 0 and not result.preempted
                assert not result.admitted and [s.seq_id for s in result.emitted] == [s.seq_id for s in ran]
            skipped += k
        else:
            fast.step()
            slow.step()
        assert _state(fast) == _state(slow)
    assert fast.idle and skipped > 0


def test_decode_horizon_refuses_an_admission_and_what_it_cannot_model():
    engine = Engine(EngineLimits(max_num_seqs=2))
    engine.add(Sequence(seq_id=0, prompt_tokens=10, output_tokens=20))
    engine.step()
    assert engine.decode_horizon()[0] == 19 and engine.decode_horizon()[2]  # a slot free: arrivals admit
    engine.add(Sequence(seq_id=1, prompt_tokens=10, output_tokens=20))
    assert engine.decode_horizon()[0] == 0  # the waiting one is admitted in the next step
    engine.step()
    k, _, admits = engine.decode_horizon()
    assert k == 18 and not admits  # both slots busy: nothing is admitted until one finishes
    leaky = Engine(EngineLimits(kv_leak_blocks_per_min=1.0))
    leaky.add(Sequence(seq_id=0, prompt_tokens=10, output_tokens=20))
    leaky.step()
    assert leaky.decode_horizon()[0] == 0
