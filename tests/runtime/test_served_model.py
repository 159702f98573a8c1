"""A model the server does not serve stops `llmload run` before any load (issue 43 item 1): one line naming
what the server serves and `target.model`, exit 2, no run directory, within seconds. llama.cpp and SGLang
(which answer any name with the model they loaded), SGLang's `/generate` (no model field) and a server that
lists no models are not refused. A quality case that fails on a 404 says so, not "set quality.required: false"."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from runtime_helpers import base_config, write_config
from support import SimServer, start_sim, stop_process

from llmload.client.quality import QualityResult
from llmload.config import Config
from llmload.runtime.master.preflight import (
    ModelNotServed,
    _quality_advice,
    check_model_served,
    check_reachable,
)
from llmload.runtime.master.served_model import model_listed, served_model_check

pytestmark = pytest.mark.timeout(120)

SHAPE = {"ladder": {"arrival": "constant", "warmup": "0s", "steps": [{"rate": 1, "duration": "2s"}]}}


def _config(url: str = "http://127.0.0.1:9", **target) -> Config:
    config = base_config(url, SHAPE)
    config["target"].update(target)
    return Config.model_validate(config)


@pytest.fixture(scope="module")
def flavour_sim(tmp_path_factory) -> Iterator[Callable[[str], SimServer]]:
    """`flavour_sim(flavor)`: one sim of that flavour for this module, started when first asked for (the
    tests here only ask it for its models and send one pre-flight request: four sims, not seven)."""
    sims: dict[str, SimServer] = {}

    def sim(flavor: str) -> SimServer:
        if flavor not in sims:
            sims[flavor] = start_sim(tmp_path_factory.mktemp(f"sim-{flavor}"), flavor=flavor)
        return sims[flavor]

    yield sim
    for server in sims.values():
        stop_process(server.proc)


def _listing(*names: str, status: int = 200, ignores_model: bool = False) -> dict:
    return {"status": status, "models": list(names), "ignores_model": ignores_model}


def test_an_unlisted_model_is_refused_naming_what_is_served_and_the_key():
    refusal, warnings = served_model_check(_config(model="llama3"), {"http://a": _listing("sim-model", "other")})
    assert refusal is not None and warnings == []
    assert "'llama3'" in refusal and "sim-model, other" in refusal and "target.model" in refusal


def test_a_listed_model_passes_on_every_endpoint_or_the_missing_one_is_named():
    config = _config(model="m")
    assert served_model_check(config, {"http://a": _listing("m"), "http://b": _listing("x", "m")}) == (None, [])
    refusal, _ = served_model_check(config, {"http://a": _listing("m"), "http://b": _listing("x")})
    assert refusal.startswith("http://b does not serve model 'm'")


@pytest.mark.parametrize(("model", "listed", "served"), [
    ("llama3", ["llama3:latest"], True), ("llama3:latest", ["llama3"], True), ("llama3", ["llama3:8b"], False),
    ("llama3:8b", ["llama3:latest"], False), ("Qwen/Qwen2.5-7B", ["Qwen/Qwen2.5-7B"], True)])
def test_ollama_tags_match_with_or_without_latest(model, listed, served):
    assert model_listed(model, listed) is served


@pytest.mark.parametrize("case", ["llamacpp_list", "llamacpp_hint", "sglang_hint", "tgi_hint", "sglang_generate"])
def test_servers_that_take_any_model_name_are_not_refused(case):
    target = {"model": "anything"}
    listing = _listing("gemma-3-270m", ignores_model=case == "llamacpp_list")
    if case == "llamacpp_hint":
        target["server"] = "llamacpp"
    elif case in ("sglang_hint", "tgi_hint"):
        target["server"] = case.removesuffix("_hint")
    elif case == "sglang_generate":
        target.update(api="sglang-generate", server="sglang")
    assert served_model_check(_config(**target), {"http://a": listing}) == (None, [])


@pytest.mark.parametrize("listing", [_listing(status=404), _listing()])
def test_a_server_that_lists_no_models_is_a_warning_not_a_refusal(listing):
    refusal, warnings = served_model_check(_config(model="m"), {"http://a": listing})
    assert refusal is None and len(warnings) == 1
    assert "does not list its models" in warnings[0] and "'m' is not checked" in warnings[0]


@pytest.mark.parametrize(("flavor", "api", "wrong", "right"), [
    ("vllm", "openai-chat", "llama3", "sim-model"), ("ollama", "ollama-chat", "llama3", "sim-model:latest"),
    ("ollama", "openai-chat", "llama3", "sim-model")])
def test_the_real_model_lists_of_each_flavour(flavour_sim, flavor, api, wrong, right):
    sim = flavour_sim(flavor)
    with pytest.raises(ModelNotServed, match="sim-model") as caught:
        check_model_served(_config(sim.url, api=api, model=wrong, server=flavor),
                           check_reachable(_config(sim.url, api=api, model=wrong, server=flavor)))
    assert caught.value.exit_code == 2
    config = _config(sim.url, api=api, model=right, server=flavor)
    assert check_model_served(config, check_reachable(config)) == []


@pytest.mark.parametrize(("flavor", "api"), [("llamacpp", "openai-chat"), ("sglang", "openai-completions"),
                                             ("sglang", "sglang-generate")])
def test_servers_that_answer_any_name_are_not_refused_without_a_server_hint(flavour_sim, flavor, api):
    sim = flavour_sim(flavor)  # each answers a request for any model with the one it loaded
    config = _config(sim.url, api=api, model="not-its-name", server="generic")
    endpoints = check_reachable(config)
    assert endpoints[sim.url]["ignores_model"] is True
    assert check_model_served(config, endpoints) == []


@pytest.mark.slow
def test_llmload_run_with_a_wrong_model_is_one_line_exit_2_and_leaves_no_run_directory(flavour_sim, tmp_path,
                                                                                      capfd):
    """The command's entry in this process (a launcher process would add only its imports); the Locust
    child it holds during its checks is a real one, ended by the refusal."""
    from llmload.cli import main

    sim = flavour_sim("vllm")
    config = base_config(sim.url, SHAPE, output=str(tmp_path / "runs"))
    config["target"]["model"] = "llama3"
    path = write_config(tmp_path, config)
    capfd.readouterr()
    started = time.monotonic()
    code = main(["run", str(path)])
    elapsed_s = time.monotonic() - started
    said = capfd.readouterr()
    output = said.out + said.err
    assert code == 2, output
    assert "Traceback" not in output
    errors = [line for line in said.err.splitlines() if line.startswith("llmload: error")]
    assert len(errors) == 1 and "'llama3'" in errors[0] and "sim-model" in errors[0], output
    assert "target.model" in errors[0]
    assert not (tmp_path / "runs").exists()  # nothing on disk: the check comes before any folder is made
    assert elapsed_s < 10 + 20  # the check itself is bounded by 10 s; the rest is a slow machine's start-up


def _case(outcome: str, reason: str) -> QualityResult:
    return QualityResult(0, False, reason, outcome, "", None, None)


def test_quality_advice_names_the_real_cause():
    config = _config(model="llama3")
    not_found = _quality_advice(config, [_case("http_error", "HTTP 404: The model `llama3` does not exist.")])
    assert "not a quality failure" in not_found and "target.model" in not_found
    assert "quality.required" not in not_found
    wrong = _quality_advice(config, [_case("quality_fail", "expected '4' in the answer")])
    assert wrong == "(set quality.required: false to run anyway)"
    timeout = _quality_advice(config, [_case("timeout", "no answer within 120s")])
    assert "not a quality failure" in timeout and "timeout" in timeout
