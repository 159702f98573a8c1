"""The injected slow leak of the sim engine (soak tests): step cost growth and KV blocks lost over time."""

from __future__ import annotations

import pytest

from llmload.sim.engine import Engine, EngineLimits, Sequence
from llmload.sim.settings import SimSettings


def test_step_cost_grows_with_engine_age_and_not_without_the_setting():
    lim = EngineLimits(step_base_s=0.02, prefill_cost_s=0.0, decode_cost_s=0.001,
                       step_cost_growth_s_per_min=0.006)
    costs = []
    for age_s in (0.0, 30.0, 60.0, 120.0):
        engine = Engine(lim)
        engine.add(Sequence(seq_id=1, prompt_tokens=4, output_tokens=2))
        costs.append(engine.step(age_s).cost_s)
    assert costs == pytest.approx([0.021, 0.024, 0.027, 0.033])
    steady = Engine(EngineLimits(step_base_s=0.02, prefill_cost_s=0.0, decode_cost_s=0.001))
    steady.add(Sequence(seq_id=1, prompt_tokens=4, output_tokens=2))
    assert steady.step(600.0).cost_s == pytest.approx(0.021)


def test_kv_leak_takes_blocks_for_good_as_time_passes_capped_at_half():
    engine = Engine(EngineLimits(num_blocks=100, block_size=16, kv_leak_blocks_per_min=10.0))
    engine.add(Sequence(seq_id=1, prompt_tokens=16, output_tokens=1))
    engine.step(0.0)  # finishes the request: its block is back
    assert engine.leaked_blocks == 0 and engine.kv_usage == 0.0
    engine.add(Sequence(seq_id=2, prompt_tokens=16, output_tokens=1))
    engine.step(90.0)  # 1.5 min -> 15 blocks lost
    assert engine.leaked_blocks == 15 and engine.free_blocks == 85
    assert engine.kv_usage == pytest.approx(0.15)
    engine.add(Sequence(seq_id=3, prompt_tokens=16, output_tokens=1))
    engine.step(3600.0)  # an hour would be 600 blocks: capped at half the cache
    assert engine.leaked_blocks == 50 and engine.free_blocks == 50


def test_kv_leak_only_takes_free_blocks_and_catches_up_later():
    engine = Engine(EngineLimits(num_blocks=10, block_size=16, kv_leak_blocks_per_min=60.0))
    engine.add(Sequence(seq_id=1, prompt_tokens=16 * 4, output_tokens=3))
    engine.step(0.0)  # 4 blocks held, 6 free
    engine.step(4.0)  # 4 due, 4 free blocks taken
    assert engine.leaked_blocks == 4
    engine.step(100.0)  # due 5 (half of 10): one more
    assert engine.leaked_blocks == 5


def test_the_same_schedule_gives_the_same_numbers():
    def run() -> list[float]:
        engine = Engine(EngineLimits(step_cost_growth_s_per_min=0.01, kv_leak_blocks_per_min=7.0))
        for i in range(3):
            engine.add(Sequence(seq_id=i, prompt_tokens=40, output_tokens=5))
        age, out = 0.0, []
        while not engine.idle:
            result = engine.step(age)
            age += result.cost_s * 100
            out.append(result.cost_s)
        return [*out, engine.leaked_blocks]

    assert run() == run()


def test_sim_yaml_keys_reach_the_engine_limits():
    settings = SimSettings.model_validate({"step_cost_growth_s_per_min": "2ms", "kv_leak_blocks_per_min": 40})
    assert settings.step_cost_growth_s_per_min == pytest.approx(0.002)
    assert settings.kv_leak_blocks_per_min == 40.0
    assert SimSettings().step_cost_growth_s_per_min == 0.0 and SimSettings().kv_leak_blocks_per_min == 0.0
    with pytest.raises(ValueError):
        SimSettings.model_validate({"kv_leak_blocks_per_min": -1})


def test_a_keep_alive_connection_holds_nothing_of_the_requests_it_served(tmp_path):
    """Issue 46: each request used to leave its close callback (holding the request's job, its ground-truth
    row and token times) on the connection: a client's kept-alive connection grew the sim by every request
    it carried (44 -> 275 MiB in the first 5 minutes of a 300 req/s soak, bench/soak.py). A real server on
    a free port, one kept-alive connection, streamed requests one after another."""
    import asyncio
    import json

    from llmload.sim.groundtruth import GroundTruthWriter
    from llmload.sim.http import start_http_server
    from llmload.sim.server import SimServer

    async def scenario() -> tuple[int, list[int]]:
        settings = SimSettings.model_validate({"step_base_s": "1ms", "load_time_s": "0s"})
        server = SimServer(flavor="vllm", settings=settings, seed=0, model="sim-model",
                           ground_truth=GroundTruthWriter(tmp_path / "truth.jsonl"))
        conns = set()

        async def handle(req, conn):
            conns.add(conn)
            await server.handle(req, conn)

        http = await start_http_server(handle, "127.0.0.1", 0)
        engine = asyncio.get_running_loop().create_task(server.loop.run())
        reader, writer = await asyncio.open_connection("127.0.0.1", http.sockets[0].getsockname()[1])
        body = json.dumps({"model": "sim-model", "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 3, "stream": True}).encode()
        for i in range(20):
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                         + f"x-request-id: r{i}\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
            await writer.drain()
            while b"data: [DONE]" not in await reader.readuntil(b"\n\n"):
                pass
            await reader.readuntil(b"\r\n\r\n")  # the chunked body's end
        held = [len(c.on_close) for c in conns]
        writer.close()
        engine.cancel()
        http.close()
        return len(conns), held

    connections, held = asyncio.run(scenario())
    assert connections == 1 and held == [0]
