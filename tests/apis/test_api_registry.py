"""The API registry (llmload.apis): one spec per server API, read by config, client, pre-flight and the
Locust user; an unknown `target.api` is one config line that lists the known names."""

from __future__ import annotations

import json

import pytest
from support import write_config

from llmload.apis import UnknownApi, all_apis, api_names, get_api
from llmload.client.bodies import build_body
from llmload.config import API_KINDS, Target, parse_config

NAMES = ("ollama-chat", "ollama-generate", "openai-chat", "openai-completions", "sglang-generate")


def test_registry_names_and_specs() -> None:
    assert api_names() == API_KINDS == NAMES
    for spec in all_apis():
        assert spec.path.startswith("/") and spec.framing in ("sse", "ndjson") and spec.probe_path.startswith("/")
        assert get_api(spec.name) is spec
        decoder = spec.decoder()
        assert decoder.feed(b"") == [] and decoder.flush() == []
    assert [s.chat for s in all_apis()] == [True, False, True, False, False]


def test_unknown_api_is_one_line_naming_target_api(tmp_path, capfd, monkeypatch) -> None:
    """The command's entry in this process: the config is checked before anything starts."""
    from llmload.cli import main

    config = {"target": {"url": "http://127.0.0.1:9", "api": "tgi-generate", "model": "m"},
              "shape": {"ladder": {"steps": [{"rate": 1, "duration": "2s"}]}}}
    path = write_config(tmp_path, config)
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    code = main(["run", str(path)])
    done = capfd.readouterr()
    said = (done.out + done.err).strip()
    assert code == 2 and len(said.splitlines()) == 1 and "Traceback" not in said, said
    assert f"{path}:3 target.api:" in said and 'unknown api "tgi-generate"' in said
    assert all(name in said for name in NAMES)
    with pytest.raises(UnknownApi, match="expected one of ollama-chat"):
        get_api("tgi-generate")
    with pytest.raises(ValueError, match="unknown api"):
        build_body("tgi-generate", model="m", max_tokens=1, prompt="x")


def test_config_accepts_every_registered_api() -> None:
    for name in NAMES:
        cfg = parse_config({"target": {"url": "http://127.0.0.1:9", "api": name},
                            "shape": {"ladder": {"steps": [{"rate": 1, "duration": "2s"}]}}})
        assert cfg.target.api == name


def test_sglang_body_is_a_generate_request() -> None:
    body = json.loads(build_body("sglang-generate", model="m", max_tokens=7,
                                 messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
                                 temperature=0.5, ignore_eos=True, server=None))
    assert body == {"text": "a\nb", "sampling_params": {"max_new_tokens": 7, "temperature": 0.5,
                                                         "ignore_eos": True}, "stream": True}
    plain = json.loads(build_body("sglang-generate", model="m", max_tokens=3, prompt="hi"))
    assert "ignore_eos" not in plain["sampling_params"] and plain["text"] == "hi"


def test_old_bodies_unchanged() -> None:
    """The registry builds the bodies byte for byte as the old if/else did."""
    chat = build_body("openai-chat", model="m", max_tokens=4, prompt="hi", ignore_eos=True, server="vllm")
    assert chat == (b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0.0,'
                    b'"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},'
                    b'"ignore_eos":true}')
    gen = build_body("ollama-generate", model="m", max_tokens=4, messages=[{"role": "user", "content": "x"}])
    assert gen == b'{"model":"m","prompt":"x","stream":true,"options":{"num_predict":4,"temperature":0.0}}'


@pytest.mark.slow
def test_preflight_probe_and_tokenize_come_from_the_spec(sim_factory) -> None:
    from llmload.config import Config
    from llmload.runtime.master.preflight import _tokens_per_word, check_reachable

    sim = sim_factory(flavor="sglang", config={"load_time_s": "0.1s"})
    shape = {"ladder": {"steps": [{"rate": 1, "duration": "2s"}]}}
    config = Config.model_validate({"target": {"url": sim.url, "api": "sglang-generate", "model": "sim-model",
                                               "server": "sglang"}, "shape": shape})
    assert check_reachable(config)[sim.url]["models"] == ["sim-model"]  # /v1/models
    assert _tokens_per_word(config) == pytest.approx(1.0, abs=0.2)        # the sim's /tokenize
    ollama = config.model_copy(update={"target": Target(url=sim.url, api="ollama-chat", server="sglang")})
    assert _tokens_per_word(ollama) is None  # the spec has no tokenize path: nothing is asked
