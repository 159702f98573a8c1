"""The sim answers as the real servers do where a client can tell, driven by the official `openai` and
`ollama` client libraries (docs/SIM.md lists each behaviour and the source it was read from)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sim_client import FAST, post
from support import start_sim, stop_process

# `openai` and `ollama` are imported inside the tests that use them: at the top they cost every pytest process
# that collects this module (each xdist worker of the suite) 1.2-1.6 s of CPU
if TYPE_CHECKING:
    import openai

MSG = [{"role": "user", "content": "hi"}]
#: the shared sims' settings: FAST, and where a request sets no output cap, EOS after `default_max_tokens` (the
#: tests of that read it; every other test on them sets its cap), vLLM's context 600 tokens
SHARED = {"vllm": {**FAST, "max_model_len": 600, "default_max_tokens": 40},
          "llamacpp": {**FAST, "default_max_tokens": 30}, "ollama": {**FAST, "default_max_tokens": 30}}


@pytest.fixture(scope="module")
def fast_sim(tmp_path_factory):
    """`fast_sim(flavor)`: one sim with the SHARED settings per flavour for this module, shared by the tests
    that ask it what leaves nothing behind that another reads (a refusal, a 404, a 501, one answer, a
    served model's copy, the metric names), and read its log only past its rows before theirs, its counters
    not at all; a sim costs ~0.3 s of CPU to start."""
    folder = tmp_path_factory.mktemp("fast-sims")
    started: dict = {}

    def get(flavor: str):
        if flavor not in started:
            started[flavor] = start_sim(folder, flavor=flavor, config=SHARED[flavor])
        return started[flavor]

    yield get
    for sim in started.values():
        stop_process(sim.proc)


def _openai(sim) -> openai.OpenAI:
    import openai

    return openai.OpenAI(base_url=sim.url + "/v1", api_key="x", max_retries=0)


def test_vllm_unknown_model_is_a_404_naming_it(fast_sim):
    import openai

    sim = fast_sim("vllm")
    logged = len(sim.ground_truth_rows())  # the module's sim: other tests' requests are logged too
    with pytest.raises(openai.NotFoundError) as err:
        _openai(sim).chat.completions.create(model="gpt-x", messages=MSG, max_tokens=2)
    assert err.value.status_code == 404
    assert err.value.body["message"] == "The model `gpt-x` does not exist."
    assert err.value.body["type"] == "NotFoundError" and err.value.body["param"] == "model"
    ok = _openai(sim).completions.create(model="sim-model", prompt="hi", max_tokens=2)
    assert ok.usage.completion_tokens == 2
    assert [r["http_status"] for r in sim.ground_truth_rows()[logged:]] == [404, 200]


def test_ollama_unknown_model_is_a_404_native_and_openai(fast_sim):
    import ollama
    import openai

    sim = fast_sim("ollama")
    client = ollama.Client(host=sim.url)
    with pytest.raises(ollama.ResponseError) as err:
        client.generate(model="nope", prompt="hi", options={"num_predict": 2})
    assert err.value.status_code == 404 and err.value.error == "model 'nope' not found"
    with pytest.raises(openai.NotFoundError) as err2:
        _openai(sim).chat.completions.create(model="nope", messages=MSG, max_tokens=2)
    assert err2.value.body["message"] == "model 'nope' not found"
    assert client.generate(model="sim-model:latest", prompt="hi", options={"num_predict": 2}).eval_count == 2


def test_llamacpp_serves_any_model_name(fast_sim):
    sim = fast_sim("llamacpp")
    out = _openai(sim).chat.completions.create(model="whatever", messages=MSG, max_tokens=2)
    assert out.usage.completion_tokens == 2


def test_no_max_tokens_runs_to_eos_or_the_context(fast_sim):
    sim = fast_sim("vllm")  # max_model_len 600, default_max_tokens 40
    client = _openai(sim)
    out = client.chat.completions.create(model="sim-model", messages=MSG)
    assert (out.choices[0].finish_reason, out.usage.completion_tokens) == ("stop", 40)
    out = client.chat.completions.create(model="sim-model", messages=MSG, extra_body={"ignore_eos": True})
    prompt = out.usage.prompt_tokens
    assert (out.choices[0].finish_reason, out.usage.completion_tokens) == ("length", 600 - prompt)


def test_ollama_empty_prompt_loads_and_keep_alive_zero_unloads(sim_factory):
    import ollama

    sim = sim_factory(flavor="ollama", config={**FAST, "load_time_s": "300ms"})
    client = ollama.Client(host=sim.url)
    loaded = client.generate(model="sim-model", prompt="")
    assert loaded.done and loaded.done_reason == "load" and loaded.response == ""
    assert [m.model for m in client.ps().models] == ["sim-model"]
    unloaded = client.generate(model="sim-model", prompt="", keep_alive=0)
    assert unloaded.done_reason == "unload"
    assert client.ps().models == []
    chat = client.chat(model="sim-model", messages=[])
    assert chat.done_reason == "load" and chat.message.content == ""


def test_ollama_ps_lists_a_model_while_it_loads(sim_factory):
    import threading

    import ollama

    sim = sim_factory(flavor="ollama", config={**FAST, "load_time_s": "1s"})
    client = ollama.Client(host=sim.url)
    t = threading.Thread(target=client.generate, kwargs={"model": "sim-model", "prompt": ""})
    t.start()
    try:
        import time

        time.sleep(0.4)
        assert [m.model for m in client.ps().models] == ["sim-model"]
    finally:
        t.join()


@pytest.mark.parametrize(("flavor", "path"), [("llamacpp", "/v1/embeddings"), ("llamacpp", "/embedding"),
                                              ("ollama", "/api/embed"), ("ollama", "/v1/embeddings")])
def test_embeddings_are_501_not_404(fast_sim, flavor, path):
    sim = fast_sim(flavor)
    resp = post(sim.url + path, {"model": "sim-model", "input": "hi", "content": "hi"})
    assert resp.status_code == 501
    text = resp.text
    assert "embeddings" in text and "not" in text


def test_every_metrics_page_parses_and_new_vllm_series_are_there(fast_sim):
    for flavor in ("vllm", "llamacpp"):
        sim = fast_sim(flavor)  # the names (and labels declared up front) are there whatever ran before
        _openai(sim).chat.completions.create(model="sim-model", messages=MSG, max_tokens=3)
        text = requests.get(sim.url + "/metrics", timeout=5).text
        names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        if flavor == "vllm":
            for name in ("vllm:request_prefill_time_seconds_count", "vllm:request_decode_time_seconds_count",
                         "vllm:request_inference_time_seconds_count", "vllm:iteration_tokens_total_count",
                         "vllm:request_prompt_tokens_count", "vllm:request_generation_tokens_count",
                         "vllm:request_params_max_tokens_count", "vllm:prefix_cache_queries_total",
                         "vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_by_source_total",
                         "vllm:num_requests_waiting_by_reason", "vllm:admission_rejections_total"):
                assert name in names, name
            reasons = {s.labels.get("finished_reason") for f in text_string_to_metric_families(text)
                       for s in f.samples if s.name == "vllm:request_success_total"}
            assert reasons == {"stop", "length", "abort", "error", "repetition"}
            labels = [s.labels for f in text_string_to_metric_families(text) for s in f.samples
                      if s.name == "vllm:admission_rejections_total"]
            assert labels == [{"model_name": "sim-model", "reason": "max_num_queued_reqs"}]
        else:
            assert "llamacpp:prompt_tokens_total" in names


def test_llamacpp_throughput_gauges_reset_per_scrape_and_counter_types(sim_factory):
    sim = sim_factory(flavor="llamacpp", config=FAST)

    def scrape() -> dict:
        text = requests.get(sim.url + "/metrics", timeout=5).text
        return {f.name: (f.type, f.samples[0].value) for f in text_string_to_metric_families(text)}

    assert scrape()["llamacpp:prompt_tokens_seconds"] == ("gauge", 0.0)  # idle: 0
    _openai(sim).completions.create(model="sim-model", prompt="one two three", max_tokens=5)
    first = scrape()
    assert first["llamacpp:prompt_tokens_seconds"][1] > 0 and first["llamacpp:predicted_tokens_seconds"][1] > 0
    again = scrape()  # the previous scrape reset the bucket
    assert again["llamacpp:prompt_tokens_seconds"][1] == 0 and again["llamacpp:predicted_tokens_seconds"][1] == 0
    assert again["llamacpp:n_busy_slots_per_decode"][0] == "counter" and again["llamacpp:n_tokens_max"] == \
        ("counter", 3 + 5)
    assert again["llamacpp:tokens_predicted"] == ("counter", 5)


def test_stop_strings_end_the_answer_in_every_flavour(fast_sim):
    # the sim's answer cycles through 20 words, "... for load testing ...": 30 tokens always reach "load"
    import ollama

    for flavor in ("vllm", "llamacpp", "ollama"):
        sim = fast_sim(flavor)
        client = _openai(sim)
        out = client.completions.create(model="sim-model", prompt="hi", max_tokens=30, stop=["load"])
        choice = out.choices[0]
        assert choice.finish_reason == "stop" and choice.text.endswith("for") and "load" not in choice.text
        assert out.usage.completion_tokens < 30
        free = client.completions.create(model="sim-model", prompt="hi", max_tokens=30)
        assert free.choices[0].finish_reason == "length" and "load" in free.choices[0].text
        if flavor == "vllm":
            events = list(client.completions.create(model="sim-model", prompt="hi", max_tokens=30, stop="load",
                                                    stream=True))
            assert events[-1].choices[0].finish_reason == "stop"
            assert events[-1].choices[0].model_extra["stop_reason"] == "load"
    native = ollama.Client(host=sim.url).generate(model="sim-model", prompt="hi",
                                                  options={"num_predict": 30, "stop": ["load"]})
    assert native.done_reason == "stop" and native.response.endswith("for")


def test_llamacpp_refuses_n_and_echo_as_llama_server_does(fast_sim):
    import openai

    sim = fast_sim("llamacpp")
    for extra, message in (({"n": 2}, "Only one completion choice is allowed"),
                           ({"echo": True}, "Only no echo is supported"),
                           ({"best_of": 2}, "Unsupported param: best_of")):
        with pytest.raises(openai.InternalServerError) as err:
            _openai(sim).completions.create(model="m", prompt="hi", max_tokens=2, **extra)
        assert err.value.body["message"] == message and err.value.body["type"] == "server_error"


def test_vllm_refuses_what_it_needs_flags_for_and_the_sim_what_it_cannot_do(fast_sim):
    import openai

    sim = fast_sim("vllm")
    client = _openai(sim)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="sim-model", messages=MSG, max_tokens=2, tools=tools)
    assert err.value.body["message"].startswith('"auto" tool choice requires --enable-auto-tool-choice')
    for extra in ({"n": 2}, {"logprobs": True}, {"response_format": {"type": "json_object"}}):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model="sim-model", messages=MSG, max_tokens=2, **extra)
        assert "llmload sim does not model" in err.value.body["message"]
    ok = client.chat.completions.create(model="sim-model", messages=MSG, max_tokens=2, n=1, tools=tools,
                                        tool_choice="none")
    assert ok.usage.completion_tokens == 2


def test_ollama_refuses_think_and_tools_on_a_completion_model(fast_sim):
    import ollama

    sim = fast_sim("ollama")
    client = ollama.Client(host=sim.url)
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="sim-model", messages=MSG, think=True)
    assert err.value.status_code == 400 and err.value.error == '"sim-model" does not support thinking'
    tools = [{"type": "function", "function": {"name": "f", "description": "d",
                                               "parameters": {"type": "object", "properties": {}}}}]
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="sim-model", messages=MSG, tools=tools)
    assert err.value.error == "registry.ollama.ai/library/sim-model:latest does not support tools"


def test_ollama_keeps_generating_past_the_context(sim_factory):
    import ollama

    sim = sim_factory(flavor="ollama", config={**FAST, "ctx_size": 64})
    out = ollama.Client(host=sim.url).generate(model="sim-model", prompt="word " * 200,
                                               options={"num_predict": 40})
    assert out.prompt_eval_count == 63 and out.eval_count == 40 and out.done_reason == "length"


def test_llamacpp_slots_and_props_carry_the_real_fields(sim_factory):
    import threading

    sim = sim_factory(flavor="llamacpp", config={**FAST, "step_base_s": "20ms"})
    props = requests.get(sim.url + "/props", timeout=5).json()
    dgs = props["default_generation_settings"]
    assert dgs["params"]["top_k"] == 40 and isinstance(dgs["next_token"], list)
    assert {"bos_token", "eos_token", "build_info", "total_slots", "modalities"} <= set(props)
    t = threading.Thread(target=post, args=(sim.url + "/completion", {"prompt": "hi", "n_predict": 50}))
    t.start()
    try:
        busy = []
        for _ in range(100):
            busy = [s for s in requests.get(sim.url + "/slots", timeout=5).json() if s["is_processing"]]
            if busy and busy[0]["next_token"][0]["n_decoded"] > 2:
                break
        nt = busy[0]["next_token"][0]
        assert busy[0]["params"]["n_predict"] == 50 and nt["n_remain"] == 50 - nt["n_decoded"] and nt["has_next_token"]
    finally:
        t.join()


def test_llamacpp_completions_stream_puts_timings_on_the_usage_chunk(fast_sim):
    from sim_client import sse

    sim = fast_sim("llamacpp")
    body = {"prompt": "hi", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
    _, events = sse(sim.url + "/v1/completions", body)
    finish, usage, done = events[-3:]
    assert finish["choices"][0]["finish_reason"] == "length" and "timings" not in finish
    assert usage["choices"] == [] and usage["timings"]["predicted_n"] == 3 and done == "[DONE]"


def test_ollama_pull_and_copy_of_the_served_model(fast_sim):
    import ollama

    sim = fast_sim("ollama")
    client = ollama.Client(host=sim.url)
    assert client.pull("sim-model").status == "success"
    assert [p.status for p in client.pull("sim-model", stream=True)][-1] == "success"
    assert client.copy("sim-model", "other").status == "success"
    with pytest.raises(ollama.ResponseError) as err:
        client.copy("nope", "other")
    assert err.value.status_code == 404 and err.value.error == "model 'nope' not found"
    with pytest.raises(ollama.ResponseError) as err:
        client.pull("nope")
    assert err.value.error == "pull model manifest: file does not exist"


@pytest.mark.parametrize("flavor", ["llamacpp", "ollama"])
def test_no_output_cap_runs_to_eos_on_llamacpp_and_ollama(fast_sim, flavor):
    sim = fast_sim(flavor)  # default_max_tokens 30, ctx_size 4096 (the default)
    out = _openai(sim).chat.completions.create(model="sim-model", messages=MSG)
    assert (out.choices[0].finish_reason, out.usage.completion_tokens) == ("stop", 30)


def test_the_loop_ends_its_steps_on_time_without_spinning_through_them():
    """`llmload.sim.loop` writes a step's tokens at its planned end: punctual when it has the core (the
    median is 1 us late on a quiet machine; beside two CPU hogs any step may wait ms for a core, so the
    best step is what is checked) and mostly asleep (spinning the last 2 ms of 5 ms steps took 10-30% of a
    core; sleeping to 0.2 ms before the end takes 2-4%)."""
    import asyncio
    import time

    from llmload.clock import now
    from llmload.sim.loop import _sleep_until

    async def steps(n: int, step_s: float) -> list[float]:
        late, end = [], now()
        for _ in range(n):
            end += step_s
            await _sleep_until(end)
            late.append(now() - end)
        return late

    cpu, wall = time.process_time(), now()
    late = sorted(asyncio.run(steps(60, 0.005)))
    cpu, wall = time.process_time() - cpu, now() - wall
    assert late[0] < 0.0005, late
    assert cpu < 0.15 * wall, f"{cpu:.3f} s of CPU in {wall:.3f} s"
