"""Hostile input files (issue 33 items 18-21): each is one line naming the file (and line or key), exit 2,
before anything is started. The pre-flight and the sim server are patched to fail if they are reached."""

from __future__ import annotations

import pytest
from support import assert_one_line, bad_input_cli

TARGET = "target:\n  url: http://127.0.0.1:8000\n"
LADDER = "shape:\n  ladder:\n    steps:\n      - {rate: 1, duration: 10s}\n"


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    """`run_cli(text_or_bytes, command=("run",))` -> (exit code, stderr) for a config file holding that."""
    return bad_input_cli(tmp_path, monkeypatch, capsys, what="a bad input")


# ------------------------------------------------------------------ 18: YAML alias bomb

def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """`levels` anchors, each a list of `width` aliases of the one before: width**levels leaves."""
    lines = ['a0: &a0 ["lol"]']
    for level in range(1, levels + 1):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [("run",), ("sim",)])
def test_alias_bomb_is_one_line(run_cli, command):
    text = alias_bomb() if command == ("sim",) else TARGET + LADDER + "conditions:\n  notes: x\n" + alias_bomb()
    assert_one_line(*run_cli(text, command), where="bad.yaml:1", key="expands to more than")


@pytest.mark.timeout(60)
def test_alias_bomb_in_an_slo_file(tmp_path):
    from llmload.config import load_slo
    from llmload.errors import ConfigError

    path = tmp_path / "slo.yaml"
    path.write_text("slo:\n  ttft_p95: 1s\n" + alias_bomb(), encoding="utf-8")
    with pytest.raises(ConfigError, match="expands to more than"):
        load_slo(path)


def test_line_index_visits_an_aliased_node_once():
    from llmload.yamlfile import line_index

    index = line_index(alias_bomb(levels=12, width=9))  # 282 billion paths if walked naively
    assert index[("a12",)] == 13 and ("a12", 8) in index


def test_aliases_that_stay_small_are_fine(tmp_path):
    from llmload.config import load_config

    text = TARGET + "shape:\n  ladder:\n    steps:\n      - &s {rate: 1, duration: 10s}\n      - *s\n"
    path = tmp_path / "ok.yaml"
    path.write_text(text, encoding="utf-8")
    assert len(load_config(path).shape.ladder.steps) == 2


def test_a_bad_value_merged_in_is_reported_at_the_mapping_that_merges_it(tmp_path):
    """Building the data rewrites a mapping with `<<` in place; the line index is of the text as written."""
    from llmload.config import load_config
    from llmload.errors import ConfigError

    path = tmp_path / "merge.yaml"
    path.write_text(TARGET + "conditions:\n  extra: {base: &b {rate: fast, duration: 10s}}\n"
                    "shape:\n  ladder:\n    steps:\n      - <<: *b\n        duration: 5s\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"merge\.yaml:8 shape\.ladder\.steps\[0\]\.rate: input should be a valid"):
        load_config(path)


# ------------------------------------------------------------------ 20: traces bounded

TRACE_HEAD = "timestamp,input_tokens,output_tokens\n0,10,10\n"


@pytest.mark.parametrize(("name", "text", "match"), [
    ("inf.csv", TRACE_HEAD + "inf,10,10\n", r"inf\.csv:3: timestamp: expected a finite time"),
    ("gap.csv", TRACE_HEAD + "1e15,10,10\n", r"gap\.csv:3: timestamp: 1e\+15 s after the first arrival"),
    ("big.csv", TRACE_HEAD + "1,1e300,10\n", r"big\.csv:3: input_tokens: 1e300 is more than 1,000,000"),
    ("big.jsonl", '{"timestamp": 0}\n{"timestamp": 1, "output_tokens": 1%s}\n' % ("0" * 400),
     r"big\.jsonl:2: output_tokens: expected a non-negative integer"),
    ("nan.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1}\n'
                  '{"timestamp": 1e400, "input_length": 1, "output_length": 1}\n', r"nan\.jsonl:2: timestamp"),
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1900-01-01 00:00:00,1,2\n2200-01-01 00:00:00,1,2\n",
     r"azure\.csv:3: TIMESTAMP: .* a trace may span at most 31 days"),
    ("prefix.csv", "timestamp,prefix_id\n0,1e300\n", r"prefix\.csv:2: prefix_id: 1e300 is more than"),
])
def test_trace_values_past_the_bounds_name_file_and_line(tmp_path, name, text, match):
    from llmload.errors import ConfigError
    from llmload.traces import load_trace

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=match) as info:
        load_trace(path)
    assert "\n" not in str(info.value)


@pytest.mark.timeout(60)
def test_an_endless_trace_stops_llmload_run_before_preflight(run_cli, tmp_path):
    (tmp_path / "t.csv").write_text(TRACE_HEAD + "1e15,10,10\n", encoding="utf-8")
    text = TARGET + "shape:\n  trace: {file: t.csv}\n"
    assert_one_line(*run_cli(text), where="t.csv:3", key="timestamp")


# ------------------------------------------------------------------ 21: datasets checked at load

@pytest.mark.parametrize(("content", "where", "key"), [
    (b'{"prompt": "hi"}\n{"prompt": "hi", "output_tokens": 100000000000000000000}\n', "data.jsonl:2",
     "output_tokens must be an integer from 1 to 1,000,000"),
    (b'{"prompt": "hi", "output_tokens": true}\n', "data.jsonl:1", "got True"),
    (b'{"prompt": "hi"}\n' + bytes(range(256)) * 4, "data.jsonl:3", "not UTF-8"),
    (b'{"prompt": "hi"}\n\x00\x01\x02\x03\n', "data.jsonl:2", "not valid JSON"),
    (b'[' * 100_000 + b'\n', "data.jsonl:1", "not valid JSON"),
], ids=["output_tokens-1e20", "output_tokens-true", "binary", "control-bytes", "nested-deep"])
def test_a_bad_dataset_stops_llmload_run_before_preflight(run_cli, tmp_path, content, where, key):
    (tmp_path / "data.jsonl").write_bytes(content)
    text = TARGET + LADDER + "requests:\n  dataset: data.jsonl\n"
    assert_one_line(*run_cli(text), where=where, key=key)


def test_the_dataset_bound_is_the_config_bound():
    from llmload import config
    from llmload.client import dataset

    assert dataset.MAX_TOKENS == config.MAX_TOKENS


# ------------------------------------------------------------------ 17: credentials in a target URL

@pytest.mark.parametrize(("target", "key"), [
    ("  url: http://admin:hunter2@127.0.0.1:99999\n", "target.url"),
    ("  urls: [http://127.0.0.1:8000, 'http://admin:hunter2@127.0.0.1:0']\n", "target.urls[1]"),
    ("  url: 'http://admin:hunter2@127.0.0.1:8000 x'\n", "target.url"),
])
def test_a_bad_url_never_echoes_its_credentials(run_cli, target, key):
    code, err = run_cli("target:\n" + target + LADDER)
    assert_one_line(code, err, where="bad.yaml:2", key=key)
    assert "hunter2" not in err and "admin" not in err, err


def test_credentials_differing_between_urls_are_one_line(tmp_path):
    from llmload.client.auth import Credentials
    from llmload.config import parse_config
    from llmload.errors import ConfigError

    config = parse_config({"target": {"urls": ["http://a:b@127.0.0.1:1", "http://a:c@127.0.0.1:2"]},
                           "shape": {"ladder": {"steps": [{"rate": 1, "duration": 1}]}}})
    with pytest.raises(ConfigError, match="target.urls: give the same user:password@ in every URL"):
        Credentials.from_target(config.target)


# ------------------------------------------------------------------ 19: bounded plans

@pytest.mark.parametrize(("shape", "where", "key"), [
    ("  ladder:\n    steps:\n      - {rate: 1, duration: 10s}\n      - {rate: 10000, duration: 720h}\n",
     "bad.yaml:5", "shape.ladder.steps: step 2 plans 25,920,100,000 arrivals"),
    ("  soak: {rate: 10000, duration: 720h, slice: 1h}\n", "bad.yaml:4", "shape.soak.slice: each slice plans"),
    ("  soak: {rate: 1, duration: 720h, slice: 1s}\n", "bad.yaml:4", "a soak may have at most 10,000"),
    ("  ladder:\n    steps:\n      - {rate: 100, duration: 10s}\n    refine: {duration: 720h}\n", "bad.yaml:7",
     "shape.ladder.refine: a refine step plans"),
])
def test_a_plan_too_big_to_hold_is_one_line(run_cli, shape, where, key):
    assert_one_line(*run_cli(TARGET + "shape:\n" + shape), where=where, key=key)


@pytest.mark.timeout(120)
def test_a_200000_step_ladder_is_refused_at_once(run_cli):
    steps = "".join("      - {rate: 1, duration: 1s}\n" for _ in range(200_000))
    assert_one_line(*run_cli(TARGET + "shape:\n  ladder:\n    steps:\n" + steps), where="bad.yaml",
                    key="a YAML file may be at most 1 MiB")


@pytest.mark.timeout(120)
def test_a_ladder_of_more_than_max_steps_is_one_line(run_cli):
    steps = ", ".join(["{rate: 1, duration: 1}"] * 10_001)
    assert_one_line(*run_cli(TARGET + f"shape:\n  ladder:\n    steps: [{steps}]\n"), where="bad.yaml:5",
                    key="shape.ladder.steps: list should have at most 10000 items")


@pytest.mark.timeout(120)
@pytest.mark.hypothesis
def test_any_alias_structure_loads_or_is_one_config_error():
    """Property: anchors and aliases in any arrangement (lists, mappings, merge keys) give data or one
    ConfigError, quickly; never a hang, a MemoryError or another exception."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from llmload.errors import ConfigError
    from llmload.yamlfile import parse_yaml

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.tuples(st.integers(1, 12), st.sampled_from(["list", "map", "merge"])), min_size=1,
                    max_size=14))
    def check(levels):
        lines = ['a0: &a0 {x: 1}']
        for i, (width, kind) in enumerate(levels, start=1):
            if kind == "list":
                lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
            elif kind == "map":
                lines.append(f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(width))}}}")
            else:
                lines.append(f"a{i}: &a{i} {{<<: *a{i - 1}, y{i}: {width}}}")
        try:
            data = parse_yaml("\n".join(lines) + "\n", file="fuzz.yaml")
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fuzz.yaml:")
        else:
            assert isinstance(data, dict)

    check()
