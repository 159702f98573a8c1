"""Bad config input through the real entry (`llmload.cli.main`): one line naming file:line and key, exit 2,
before anything starts (issue 19 items 10-16). Nothing may reach the pre-flight or start a sim: both are
patched to fail."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from support import assert_one_line, bad_input_cli

TARGET = "target:\n  url: {url}\n"
LADDER = "shape:\n  ladder:\n    steps:\n      - {{rate: {rate}, duration: {duration}}}\n"


def config_text(*, url: str = "http://127.0.0.1:8000", rate: str = "1", duration: str = "10s", extra: str = "") -> str:
    return TARGET.format(url=url) + LADDER.format(rate=rate, duration=duration) + textwrap.dedent(extra)


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    """`run_cli(text_or_bytes, command=("run",))` -> (exit code, stderr) for a config file holding that."""
    return bad_input_cli(tmp_path, monkeypatch, capsys, what="a bad config")


# ------------------------------------------------------------------ 10: URLs

@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:abc", "http://127.0.0.1:99999", '"http://127.0.0.1:"',
                                 "http://127.0.0.1:0", "http://:8000", "ftp://127.0.0.1", "not a url"])
def test_bad_target_url(run_cli, url):
    assert_one_line(*run_cli(config_text(url=url)), where="bad.yaml:2", key="target.url")


def test_bad_url_in_urls_names_its_index(run_cli):
    text = "target:\n  urls:\n    - http://127.0.0.1:8000\n    - http://127.0.0.1:70000\n" + LADDER.format(rate=1, duration="5s")
    assert_one_line(*run_cli(text), where="bad.yaml:4", key="target.urls[1]")


@pytest.mark.parametrize("extra,key", [("telemetry: {metrics_url: not a url}\n", "telemetry.metrics_url"),
                                       ("telemetry: {metrics_url: 'http://h:99999/metrics'}\n", "telemetry.metrics_url"),
                                       ("telemetry: {gpu: 'dcgm:http://[::1'}\n", "telemetry.gpu"),
                                       ("telemetry: {gpu: 'dcgm:localhost:9400'}\n", "telemetry.gpu")])
def test_bad_telemetry_urls(run_cli, extra, key):
    assert_one_line(*run_cli(config_text(extra=extra)), where="bad.yaml:7", key=key)


def test_good_telemetry_urls_pass_validation(tmp_path):
    from llmload.config import load_config

    path = tmp_path / "ok.yaml"
    path.write_text(config_text(extra="telemetry: {metrics_url: '{url}/metrics', gpu: 'dcgm:http://[::1]:9400'}\n"))
    assert load_config(path).telemetry.gpu == "dcgm:http://[::1]:9400"


# ------------------------------------------------------------------ 11: encodings

LATIN1 = config_text(extra="conditions: {owner: 'Zoë'}\n")


@pytest.mark.parametrize("command", [("run",), ("sim",)])
@pytest.mark.parametrize("content,line", [(LATIN1.encode("latin-1"), 7), (bytes(range(256)), 2),
                                          (LATIN1.encode("utf-16"), 1)])
def test_binary_or_latin1_file(run_cli, command, content, line):
    assert_one_line(*run_cli(content, command), where=f"bad.yaml:{line}", key="not UTF-8")


def test_control_characters_are_one_line(run_cli):
    assert_one_line(*run_cli(config_text() + "notes: \x07\n"), where="bad.yaml:7", key="invalid YAML")


# ------------------------------------------------------------------ 12: levels, slice

@pytest.mark.parametrize("shape,key", [("{concurrency: {levels: [0, -3]}}", "shape.concurrency.levels[0]"),
                                       ("{concurrency: {levels: [2, -3]}}", "shape.concurrency.levels[1]"),
                                       ("{soak: {rate: 1, duration: 10s, slice: 0s}}", "shape.soak.slice")])
def test_levels_and_slice(run_cli, shape, key):
    assert_one_line(*run_cli(TARGET.format(url="http://127.0.0.1:8000") + f"shape: {shape}\n"),
                    where="bad.yaml:3", key=key)


# ------------------------------------------------------------------ 13: duplicate keys

def test_duplicate_top_level_block(run_cli):
    text = config_text(extra="slo:\n  ttft_p95: 1s\nslo:\n  tpot_p95: 80ms\n")
    code, err = run_cli(text)
    assert_one_line(code, err, where="bad.yaml:9", key="slo")
    assert "first at line 7" in err


def test_duplicate_nested_key(run_cli):
    text = config_text(extra="requests:\n  seed: 1\n  input_tokens: {dist: fixed, value: 5, value: 6}\n")
    assert_one_line(*run_cli(text), where="bad.yaml:9", key="requests.input_tokens.value")


def test_duplicate_key_in_sim_config(run_cli):
    assert_one_line(*run_cli("num_parallel: 2\nfaults:\n  http_503: 0.1\nnum_parallel: 4\n", ("sim",)),
                    where="bad.yaml:4", key="num_parallel")


def test_merge_keys_are_not_duplicates(tmp_path):
    from llmload.config import load_config

    path = tmp_path / "ok.yaml"
    path.write_text(config_text(extra="requests:\n  input_tokens: &d {dist: fixed, value: 5}\n"
                                      "  output_tokens:\n    <<: *d\n    value: 7\n"))
    assert load_config(path).requests.output_tokens.value == 7


# ------------------------------------------------------------------ 14: non-finite and absurd values

@pytest.mark.parametrize("kwargs,key", [
    ({"rate": "1e308"}, "shape.ladder.steps[0].rate"),
    ({"rate": "1.0e+308"}, "shape.ladder.steps[0].rate"),
    ({"rate": ".inf"}, "shape.ladder.steps[0].rate"),
    ({"rate": ".nan"}, "shape.ladder.steps[0].rate"),
    ({"duration": "99999999999999999999h"}, "shape.ladder.steps[0].duration"),
    ({"duration": ".inf"}, "shape.ladder.steps[0].duration"),
    ({"extra": "client: {max_concurrency: 1e23}\n"}, "client.max_concurrency"),
    ({"extra": "requests: {output_tokens: {dist: fixed, value: 99999999999999999999}}\n"},
     "requests.output_tokens.value"),
    ({"extra": "requests: {input_tokens: {dist: lognormal, median: 100, sigma: 1e300}}\n"}, "requests.input_tokens.sigma"),
    ({"extra": "slo: {ttft_p95: .inf}\n"}, "slo.ttft_p95"),
    ({"extra": "conditions: {cost_per_hour: .nan}\n"}, "conditions.cost_per_hour"),
    ({"extra": "conditions: {gpus: 1000000000000}\n"}, "conditions.gpus"),
])
def test_non_finite_and_absurd_values(run_cli, kwargs, key):
    assert_one_line(*run_cli(config_text(**kwargs)), where="bad.yaml:", key=key)


# ------------------------------------------------------------------ 15: files named by the config

@pytest.mark.parametrize("extra,key", [("requests: {dataset: prompts.jsonl}\n", "requests.dataset"),
                                       ("requests: {input_tokens: {dist: empirical, file: lengths.txt}}\n",
                                        "requests.input_tokens.file")])
def test_missing_files_found_at_validation(run_cli, extra, key):
    assert_one_line(*run_cli(config_text(extra=extra)), where="bad.yaml:7", key=key)


def test_named_files_resolve_from_the_config_folder(tmp_path, monkeypatch):
    from llmload.config import load_config

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "lengths.txt").write_text("5\n6\n")
    path = tmp_path / "cfg" / "run.yaml"
    path.write_text(config_text(extra="requests: {input_tokens: {dist: empirical, file: lengths.txt}}\n"))
    monkeypatch.chdir(tmp_path)
    assert load_config(Path("cfg/run.yaml")).requests.input_tokens.file == "lengths.txt"


# ------------------------------------------------------------------ 16: zero timeouts, min > max

@pytest.mark.parametrize("target,key", [("  timeout: 0s\n", "target.timeout"), ("  idle_timeout: 0\n", "target.idle_timeout"),
                                        ("  connect_timeout: 0ms\n", "target.connect_timeout")])
def test_zero_timeouts(run_cli, target, key):
    text = TARGET.format(url="http://127.0.0.1:8000") + target + LADDER.format(rate=1, duration="5s")
    assert_one_line(*run_cli(text), where="bad.yaml:3", key=key)


@pytest.mark.parametrize("dist", ["{dist: uniform, min: 10, max: 5}", "{dist: normal, mean: 50, std: 5, min: 9, max: 3}",
                                  "{dist: lognormal, median: 50, sigma: 1, min: 90, max: 30}"])
def test_min_above_max(run_cli, dist):
    assert_one_line(*run_cli(config_text(extra=f"requests: {{input_tokens: {dist}}}\n")), where="bad.yaml:7",
                    key="requests.input_tokens: min")


def test_trace_window_end_before_start(run_cli):
    text = TARGET.format(url="http://127.0.0.1:8000") + "shape: {trace: {file: t.csv, window: [10s, 5s]}}\n"
    assert_one_line(*run_cli(text), where="bad.yaml:3", key="shape.trace.window")
