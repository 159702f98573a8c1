"""Every API of the registry, against every sim flavour that serves it: the spec's body is accepted,
its stream decoded, and the record agrees with the sim's ground-truth log."""

from __future__ import annotations

import pytest
from client_helpers import fixed_requests, send_batch, sim_target

from llmload.apis import all_apis
from llmload.sim.settings import FLAVORS

SERVER = {"vllm": "vllm", "ollama": "ollama", "llamacpp": "llamacpp", "sglang": "sglang"}


def test_every_api_is_served_by_a_sim_flavour() -> None:
    assert {spec.name for spec in all_apis()} >= {"openai-chat", "openai-completions", "ollama-chat",
                                                   "ollama-generate", "sglang-generate"}
    for spec in all_apis():
        assert spec.sim_flavors and set(spec.sim_flavors) <= set(FLAVORS), spec.name


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_each_spec_builds_a_body_the_sim_accepts(sim_factory, flavor: str) -> None:
    sim = sim_factory(flavor=flavor, config={"load_time_s": "0.1s"})
    specs = [spec for spec in all_apis() if flavor in spec.sim_flavors]
    assert specs
    for spec in specs:
        target = sim_target(sim.url, spec.name, SERVER[flavor])
        records = send_batch(target, fixed_requests(20, 6, ignore_eos=True), 2, prefix=spec.name)
        truth = {row["request_id"]: row for row in sim.ground_truth_rows()}
        for rec in records:
            row = truth[rec.request_id]  # the sim logs the client's X-Request-Id
            assert rec.outcome == "ok", (spec.name, rec.error)
            assert row["endpoint"] == spec.path and row["outcome"] == "ok"
            assert rec.output_tokens == row["output_tokens"] == 6 and not rec.tokens_estimated, spec.name
            assert rec.input_tokens == row["input_tokens"]
            assert len(rec.token_times) == len(row["token_times"])


@pytest.mark.slow
def test_sglang_in_stream_refusal_is_an_http_error(sim_factory) -> None:
    """SGLang refuses a too-long prompt inside a 200 stream (an error event, then `[DONE]`): a failure
    with the server's message, no output, never ok."""
    sim = sim_factory(flavor="sglang", config={"load_time_s": "0.1s", "max_model_len": 64})
    (rec,) = send_batch(sim_target(sim.url, "sglang-generate", "sglang"), fixed_requests(100, 4), 1)
    assert rec.outcome == "http_error" and rec.http_status == 200 and rec.output_tokens == 0
    assert "is longer than the model's context length (64 tokens)" in rec.error
