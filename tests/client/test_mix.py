"""The request mix: deterministic draws, exact lengths by the sim's rule, prefixes, datasets, bodies."""

from __future__ import annotations

import json
import random
from statistics import median

import pytest

from llmload.client import RequestMix, build_body, load_dataset
from llmload.client.lengths import LengthSampler
from llmload.client.mix import CHAT_TOKENS_PER_MESSAGE
from llmload.config import Requests, Target
from llmload.errors import ConfigError
from llmload.tokens import count_tokens


def target(api: str = "openai-chat", server: str | None = "vllm") -> Target:
    return Target(url="http://127.0.0.1:9", api=api, model="m", server=server)


def body(prepared) -> dict:
    return json.loads(prepared.body)


def prompt_tokens(b: dict) -> int:
    if "messages" in b:
        return sum(count_tokens(m["content"]) + CHAT_TOKENS_PER_MESSAGE for m in b["messages"])
    return count_tokens(b["prompt"])


@pytest.mark.parametrize("api", ["openai-chat", "openai-completions", "ollama-chat", "ollama-generate"])
def test_planned_input_is_what_the_sim_counts(api: str) -> None:
    reqs = Requests(input_tokens={"dist": "uniform", "min": 1, "max": 900},
                    output_tokens={"dist": "fixed", "value": 7})
    mix = RequestMix(reqs, target(api))
    for i in range(30):
        p = mix.build(f"r{i}", i, seed=1, input_tokens=2 if i == 0 else None)
        assert prompt_tokens(body(p)) == p.planned_input_tokens
        assert p.planned_output_tokens == 7 and p.headers["X-Request-Id"] == f"r{i}"


def test_deterministic_per_request_and_different_across_requests() -> None:
    reqs = Requests(input_tokens={"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 10, "max": 400})
    a, b = RequestMix(reqs, target()), RequestMix(reqs, target())
    assert a.build("x", 5, seed=2).body == b.build("x", 5, seed=2).body
    first_words = {body(a.build("x", i, seed=2))["messages"][0]["content"].split()[:4].__str__() for i in range(50)}
    assert len(first_words) == 50  # no two requests start alike: no accidental prefix-cache hits
    assert a.build("x", 5, seed=2).body != a.build("x", 5, seed=3).body


def test_shared_prefixes() -> None:
    reqs = Requests(input_tokens={"dist": "fixed", "value": 300},
                    shared_prefix={"ratio": 0.5, "prefixes": 3, "tokens": 100})
    mix = RequestMix(reqs, target("openai-completions"))
    built = [mix.build(f"r{i}", i, seed=0) for i in range(200)]
    with_prefix = [p for p in built if p.prefix_id is not None]
    assert 70 < len(with_prefix) < 130 and {p.prefix_id for p in with_prefix} == {0, 1, 2}
    for pid in range(3):
        starts = {" ".join(body(p)["prompt"].split()[:100]) for p in with_prefix if p.prefix_id == pid}
        assert len(starts) == 1
    assert all(count_tokens(body(p)["prompt"]) == 300 for p in built)
    forced = mix.build("f", 0, prefix_id=2, input_tokens=50, output_tokens=3)
    assert forced.prefix_id == 2 and forced.planned_input_tokens == 50 and body(forced)["max_tokens"] == 3


def test_tokens_per_word_ratio_scales_words() -> None:
    reqs = Requests(input_tokens={"dist": "fixed", "value": 260})
    p = RequestMix(reqs, target("openai-completions"), tokens_per_word=1.3).build("r", 0)
    assert len(body(p)["prompt"].split()) == 200 and p.planned_input_tokens == 260


def test_length_distributions() -> None:
    rng = random.Random(0)
    lognormal = LengthSampler.from_dist(Requests(input_tokens={
        "dist": "lognormal", "median": 200, "sigma": 1.0, "min": 16, "max": 4000}).input_tokens)
    draws = [lognormal.draw(rng) for _ in range(4000)]
    assert 180 < median(draws) < 220 and min(draws) >= 16 and max(draws) <= 4000 and 4000 in draws
    normal = LengthSampler.from_dist(Requests(input_tokens={
        "dist": "normal", "mean": 50, "std": 40, "min": 10}).input_tokens)
    assert min(normal.draw(rng) for _ in range(500)) == 10
    empirical = LengthSampler.from_dist(Requests(input_tokens={"dist": "empirical", "values": [3, 9]}).input_tokens)
    assert {empirical.draw(rng) for _ in range(50)} == {3, 9}


def test_empirical_file_and_its_errors(tmp_path) -> None:
    (tmp_path / "lens.txt").write_text("# lengths\n12\n\n40\n")
    (tmp_path / "lens.csv").write_text("t,tokens\n0,5\n1,7\n")
    (tmp_path / "bad.txt").write_text("12\nabc\n")
    dist = Requests(input_tokens={"dist": "empirical", "file": "lens.txt"}).input_tokens
    assert {LengthSampler.from_dist(dist, base_dir=tmp_path).draw(random.Random(i)) for i in range(40)} == {12, 40}
    csv_dist = Requests(input_tokens={"dist": "empirical", "file": "lens.csv", "column": "tokens"}).input_tokens
    assert LengthSampler.from_dist(csv_dist, base_dir=tmp_path).draw(random.Random(0)) in (5, 7)
    bad = Requests(input_tokens={"dist": "empirical", "file": "bad.txt"}).input_tokens
    with pytest.raises(ConfigError, match=r"bad\.txt:2: expected a positive integer, got 'abc'"):
        LengthSampler.from_dist(bad, base_dir=tmp_path)


def test_dataset_shapes(tmp_path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join([
        json.dumps({"prompt": "Tell me about rivers."}),
        "",
        json.dumps({"messages": [{"role": "system", "content": "Be short."},
                                 {"role": "user", "content": "Hi!"}], "output_tokens": 5}),
        json.dumps({"conversations": [{"from": "human", "value": "Q one"}, {"from": "gpt", "value": "A"},
                                      {"from": "human", "value": "Q two"}]}),
    ]))
    entries = load_dataset(path)
    assert entries[0].prompt == "Tell me about rivers." and entries[1].output_tokens == 5
    assert entries[2].messages == ({"role": "user", "content": "Q one"},)
    mix = RequestMix(Requests(dataset="d.jsonl", output_tokens={"dist": "fixed", "value": 9}),
                     target("ollama-chat", "ollama"), base_dir=tmp_path)
    for i in range(20):
        p = mix.build(f"r{i}", i)
        b = body(p)
        assert p.planned_input_tokens == prompt_tokens(b)
        assert b["options"]["num_predict"] == p.planned_output_tokens in (5, 9)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", r"d\.jsonl:2: not valid JSON"),
    ('{"text": "x"}', r'd\.jsonl:2: expected "prompt", "messages" or "conversations"'),
    ('{"messages": [{"role": "user"}]}', r"d\.jsonl:2: messages must be"),
    ('{"conversations": [{"from": "gpt", "value": "x"}]}', r"d\.jsonl:2: conversation has no human turn"),
    ('{"prompt": "x", "output_tokens": true}', r"d\.jsonl:2: output_tokens must be a positive integer"),
])
def test_bad_dataset_line_is_one_line_error(tmp_path, line: str, message: str) -> None:
    (tmp_path / "d.jsonl").write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        load_dataset(tmp_path / "d.jsonl")
    assert "\n" not in str(err.value)


def test_bodies_per_api_and_server() -> None:
    vllm = json.loads(build_body("openai-chat", model="m", max_tokens=4, prompt="hi", ignore_eos=True,
                                 server="vllm"))
    assert vllm["stream"] and vllm["ignore_eos"] and vllm["max_tokens"] == 4
    assert vllm["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    generic = json.loads(build_body("openai-completions", model="m", max_tokens=4, prompt="hi",
                                    ignore_eos=True, server=None))
    assert "ignore_eos" not in generic and generic["stream_options"] == {"include_usage": True}
    assert generic["prompt"] == "hi"
    llama = json.loads(build_body("openai-chat", model="m", max_tokens=4, prompt="hi", ignore_eos=True,
                                  server="llamacpp"))
    assert llama["ignore_eos"] and "continuous_usage_stats" not in llama["stream_options"]
    ollama = json.loads(build_body("ollama-generate", model="m", max_tokens=4, prompt="hi", temperature=0.5,
                                   ignore_eos=True, server="ollama"))
    assert ollama == {"model": "m", "prompt": "hi", "stream": True,
                      "options": {"num_predict": 4, "temperature": 0.5}}
