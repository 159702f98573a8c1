"""Property: any malformed config (a wrong type, an extreme, NaN/inf, a duplicate key, a bad encoding, a bad
URL) given to the real entry (`llmload.cli.main`) is one line on stderr, exit 2, no traceback, and nothing
starts (the pre-flight and the sim are patched to fail if reached)."""

from __future__ import annotations

import contextlib
import copy
import io
import re
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import yaml

from llmload.cli import main

BASE = {
    "target": {"url": "http://127.0.0.1:8000", "api": "openai-chat", "model": "m", "timeout": "30s",
               "idle_timeout": "5s"},
    "shape": {"ladder": {"arrival": "poisson", "warmup": "1s", "drain_timeout": "5s", "burstiness": 1.0,
                         "steps": [{"rate": 1, "duration": "10s"}, {"rate": 2.5, "duration": "10s"}]}},
    "requests": {"input_tokens": {"dist": "uniform", "min": 10, "max": 20},
                 "output_tokens": {"dist": "fixed", "value": 8}, "temperature": 0.0, "seed": 1,
                 "shared_prefix": {"ratio": 0.1, "prefixes": 2, "tokens": 16}},
    "client": {"max_concurrency": 16, "max_rate_shortfall": 0.02, "max_worker_cpu": 0.9, "max_send_lag_p99": "25ms"},
    "slo": {"ttft_p95": "1s", "max_error_ratio": 0.01, "min_samples": 10},
    "telemetry": {"metrics_url": "auto", "interval": "1s", "gpu": "off", "timeout": "2s"},
    "conditions": {"gpus": 1, "cost_per_hour": 2.5, "owner": "team"},
}

NUMBERS = [("target", "timeout"), ("target", "idle_timeout"), ("shape", "ladder", "warmup"),
           ("shape", "ladder", "drain_timeout"), ("shape", "ladder", "burstiness"),
           ("shape", "ladder", "steps", 0, "rate"), ("shape", "ladder", "steps", 1, "duration"),
           ("requests", "input_tokens", "min"), ("requests", "input_tokens", "max"),
           ("requests", "output_tokens", "value"), ("requests", "temperature"), ("requests", "seed"),
           ("requests", "shared_prefix", "ratio"), ("requests", "shared_prefix", "prefixes"),
           ("requests", "shared_prefix", "tokens"), ("client", "max_concurrency"), ("client", "max_rate_shortfall"),
           ("client", "max_worker_cpu"), ("client", "max_send_lag_p99"), ("slo", "ttft_p95"),
           ("slo", "max_error_ratio"), ("slo", "min_samples"), ("telemetry", "interval"), ("telemetry", "timeout"),
           ("conditions", "gpus"), ("conditions", "cost_per_hour")]
STRINGS = [("target", "url"), ("target", "api"), ("target", "model"), ("shape", "ladder", "arrival"),
           ("requests", "input_tokens", "dist"), ("telemetry", "metrics_url"), ("telemetry", "gpu"),
           ("conditions", "owner")]
SECTIONS = [("target",), ("shape",), ("shape", "ladder"), ("shape", "ladder", "steps"), ("requests",), ("slo",),
            ("requests", "input_tokens")]


def _set(config: dict, path: tuple, value: object) -> dict:
    out = copy.deepcopy(config)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _text(config: dict) -> str:
    return yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


# --------------------------------------------------------------------------- malformations

def _malformed():
    """Any of the malformations: a wrong type, an extreme, NaN/inf, a duplicate key, a bad encoding, a bad URL."""
    from hypothesis import strategies as st

    wrong_type = st.one_of(
        st.tuples(st.sampled_from(NUMBERS), st.sampled_from([{"x": 1}, [1, 2], "zz-not-valid", "", True])),
        st.tuples(st.sampled_from(STRINGS), st.sampled_from([{"x": 1}, [1, 2], None])),
        st.tuples(st.sampled_from(SECTIONS), st.sampled_from([7, "text", [1]])),
    ).map(lambda pv: _text(_set(BASE, *pv)))

    extreme = st.tuples(st.sampled_from(NUMBERS), st.one_of(
        st.integers(min_value=10**19, max_value=10**400), st.integers(min_value=-(10**400), max_value=-(10**19)),
        st.floats(min_value=1e13, max_value=1e308), st.floats(min_value=-1e308, max_value=-1e13),
        st.builds(lambda d, unit: f"{d}{unit}", st.integers(min_value=10**13, max_value=10**30), st.sampled_from(["s", "h"])),
    )).map(lambda pv: _text(_set(BASE, *pv)))

    non_finite = st.tuples(st.sampled_from(NUMBERS), st.sampled_from([float("nan"), float("inf"), float("-inf")])).map(
        lambda pv: _text(_set(BASE, *pv)))


    @st.composite
    def duplicate(draw: st.DrawFn) -> str:
        lines = _text(BASE).splitlines()
        keyed = [i for i, line in enumerate(lines) if re.match(r"^\s*[A-Za-z_]\w*:( |$)", line)]
        i = draw(st.sampled_from(keyed))
        repeat = lines[i] if lines[i].rstrip().endswith(":") else re.sub(r":.*$", ": 3", lines[i])
        return "\n".join(lines[: i + 1] + [repeat] + lines[i + 1:]) + "\n"


    @st.composite
    def bad_encoding(draw: st.DrawFn) -> bytes:
        text = _text(_set(BASE, ("conditions", "owner"), draw(st.sampled_from(["Zoë", "ß", "naïve café", "Ä"]))))
        how = draw(st.sampled_from(["latin-1", "utf-16", "utf-32", "insert"]))
        if how != "insert":
            return text.encode(how)
        raw = text.encode("utf-8")
        at = draw(st.integers(min_value=0, max_value=len(raw)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xe2\x28\xa1", b"\x80", b"\xf0\x28\x8c\xbc"]))
        return raw[:at] + junk + raw[at:]


    _bad_port = st.one_of(st.integers(min_value=65536, max_value=10**9).map(str), st.just(""), st.just("0"),
                          st.text(alphabet="abcxyz-", min_size=1, max_size=5), st.integers(max_value=-1).map(str))
    _bad_url = st.one_of(
        st.builds(lambda host, port: f"http://{host}:{port}", st.sampled_from(["127.0.0.1", "localhost", "[::1]", "h.example"]),
                  _bad_port),
        st.sampled_from(["http://[::1", "http://[::1:8000", "http://", "http://:8000", "ftp://127.0.0.1:8000",
                         "127.0.0.1:8000", "not a url", "http:/127.0.0.1", "https://host name:80"]),
        st.text(max_size=20).filter(lambda s: not s.strip().lower().startswith(("http://", "https://"))
                                    and s.strip().lower() not in ("auto", "off", "none", "")),
    )
    bad_url = st.one_of(
        _bad_url.map(lambda u: _text(_set(BASE, ("target", "url"), u))),
        _bad_url.map(lambda u: _text(_set(BASE, ("telemetry", "metrics_url"), u))),
        _bad_url.map(lambda u: _text(_set(BASE, ("telemetry", "gpu"), f"dcgm:{u}"))),
        _bad_url.map(lambda u: _text(_set(_set(BASE, ("target", "url"), None), ("target", "urls"),
                                          ["http://127.0.0.1:8000", u]))),
    )

    return st.one_of(wrong_type, extreme, non_finite, duplicate(), bad_encoding(), bad_url)


def _not_started(*args: object, **kwargs: object) -> None:
    raise AssertionError("a malformed config was accepted")


def _run(args: list[str], content: str | bytes, folder: Path) -> tuple[int, str]:
    path = folder / "fuzz.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    err = io.StringIO()
    with mock.patch("llmload.runtime.master.preflight.check_reachable", _not_started), \
            mock.patch("llmload.sim.server.SimServer", _not_started), contextlib.redirect_stderr(err):
        code = main([a.replace("{path}", str(path)) for a in args])
    return code, err.getvalue()


def _assert_one_line_exit_2(code: int, err: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("llmload: error: ") and "fuzz.yaml" in lines[0], err


def test_the_base_config_is_valid(tmp_path):
    from llmload.config import load_config

    (tmp_path / "ok.yaml").write_text(_text(BASE))
    assert load_config(tmp_path / "ok.yaml").shape.ladder.steps[1].rate == 2.5


def _check_each(strategy, args: list[str], *, examples: int) -> None:
    """`examples` configs drawn from `strategy`, each given to `main(args)` as `{path}`: one line, exit 2.
    hypothesis is imported here, not when the module is collected (tests/conftest.py: `hypothesis` tests run on
    one xdist worker, the only one that pays for it)."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(content=strategy)
    def check(content):
        with tempfile.TemporaryDirectory() as folder:
            _assert_one_line_exit_2(*_run(args, content, Path(folder)))

    check()


@pytest.mark.hypothesis
def test_malformed_run_config_is_one_line_exit_2():
    _check_each(_malformed(), ["run", "{path}"], examples=150)


SIM_NUMBERS = ["max_num_seqs", "num_blocks", "step_base_s", "decode_cost_s", "load_time_s", "eos_probability",
               "kv_leak_blocks_per_min", "step_cost_growth_s_per_min", "max_queue"]


def _sim_malformed():
    from hypothesis import strategies as st

    return st.one_of(
        st.tuples(st.sampled_from(SIM_NUMBERS),
                  st.sampled_from([float("nan"), float("inf"), -(10**400), {"x": 1}, [1]]))
        .map(lambda kv: _text({"num_parallel": 2, kv[0]: kv[1]})),
        st.sampled_from(SIM_NUMBERS).map(lambda k: f"{k}: 1\nfaults:\n  http_503: 0.1\n{k}: 2\n"),
        st.sampled_from(["latin-1", "utf-16"]).map(lambda enc: "faults: {http_503: 0.1}\nnotes_é: 1\n".encode(enc)),
    )


@pytest.mark.hypothesis
def test_malformed_sim_config_is_one_line_exit_2():
    _check_each(_sim_malformed(), ["sim", "--port", "0", "--config", "{path}"], examples=40)
