"""A user's `RequestSpec` becomes the body the mix would build for the API, plus its own fields; the
planned counts are what the sim counts; a spec that cannot be sent is an error (the runtime's
client_error)."""

from __future__ import annotations

import json

import pytest

from llmload.client import build_body
from llmload.client.spec import RequestSpec, planned_prompt_tokens, prepare_spec
from llmload.config import Requests, Target
from llmload.sim.text import chat_prompt_tokens, prompt_tokens


def target(api: str = "openai-chat", server: str | None = "vllm") -> Target:
    return Target(url="http://127.0.0.1:9", api=api, model="m", server=server)


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a KV cache, really?"},
        {"role": "assistant", "content": "A store of keys and values."}, {"role": "user", "content": "Why?"}]


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "ollama-chat", "ollama-generate"])
def test_the_body_is_build_body_and_the_planned_input_is_what_the_sim_counts(api):
    chat = api.endswith("chat")
    spec = RequestSpec(messages=CHAT, max_tokens=9)
    prepared = prepare_spec(spec, "r-1", target=target(api), requests=Requests(), chat=chat)
    assert prepared.body == build_body(api, model="m", max_tokens=9, messages=CHAT, temperature=0.0,
                                       ignore_eos=True, server="vllm")
    body = json.loads(prepared.body)
    served = chat_prompt_tokens(body["messages"]) if chat else prompt_tokens(body["prompt"])
    assert prepared.planned_input_tokens == served == planned_prompt_tokens(CHAT, chat=chat)
    assert prepared.planned_output_tokens == 9 and prepared.headers["X-Request-Id"] == "r-1"


def test_prompt_sampling_extra_fields_and_headers():
    spec = RequestSpec(prompt="one two three", max_tokens=5, temperature=0.7, ignore_eos=False,
                       extra_body={"top_p": 0.9, "stream_options": {"continuous_usage_stats": False}},
                       headers={"X-Session": "s1", "X-Request-Id": "forged"}, input_tokens=99, prefix_id=4)
    prepared = prepare_spec(spec, "r-2", target=target(), requests=Requests(temperature=0.1), chat=True)
    body = json.loads(prepared.body)
    assert body["messages"] == [{"role": "user", "content": "one two three"}]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, 5) and "ignore_eos" not in body
    # a dict merges into the body's dict of that name: usage stays asked for
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert prepared.headers["X-Session"] == "s1" and prepared.headers["X-Request-Id"] == "r-2"
    assert (prepared.planned_input_tokens, prepared.prefix_id) == (99, 4)


def test_ollama_options_merge():
    spec = RequestSpec(prompt="hi", max_tokens=3, extra_body={"options": {"top_k": 5}, "keep_alive": "1m"})
    body = json.loads(prepare_spec(spec, "r", target=target("ollama-generate", "ollama"), requests=Requests(),
                                   chat=False).body)
    assert body["options"] == {"num_predict": 3, "temperature": 0.0, "top_k": 5} and body["keep_alive"] == "1m"


@pytest.mark.parametrize(("built", "error"), [
    ({"messages": CHAT}, TypeError),
    (RequestSpec(max_tokens=3), ValueError),
    (RequestSpec(prompt="a", messages=CHAT), ValueError),
    (RequestSpec(prompt="a", max_tokens=0), ValueError),
    (RequestSpec(prompt="a", max_tokens=True), ValueError),
    (RequestSpec(messages=[], max_tokens=3), ValueError),
    (RequestSpec(messages=["hello"], max_tokens=3), ValueError),
])
def test_a_spec_that_cannot_be_sent_raises(built, error):
    with pytest.raises(error):
        prepare_spec(built, "r", target=target(), requests=Requests(), chat=True)
