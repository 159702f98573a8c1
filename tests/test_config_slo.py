"""SLO thresholds are validated against the registry of SLO dimensions (`llmload.slo`): the metric must
be a registered latency dimension, the percentile strictly between 0 and 100, the value a duration more
than 0, each threshold given once. A bad one is one line naming file:line and key path, exit 2, no
traceback, through the real entry (`llmload run`, `llmload report --slo`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmload import slo as slo_dims
from llmload.cli import main
from llmload.config import SLO, load_config, load_slo
from llmload.errors import ConfigError

HEAD = "target:\n  url: http://127.0.0.1:8000\nshape:\n  ladder:\n    steps: [{rate: 1, duration: 10s}]\nslo:\n"
METRICS = "ttft, user_ttft, ttfa, user_ttfa, tpot, itl, e2e, user_e2e, client_wait, server_queue"
PCT = "percentile must be more than 0 and less than 100, got"


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    """`run_cli(slo_lines)` -> (exit code, stderr, path) of `llmload run` on a config with that slo section."""

    def not_started(*args, **kwargs):
        raise AssertionError("a bad SLO was accepted: the pre-flight was reached")

    monkeypatch.setattr("llmload.runtime.master.preflight.check_reachable", not_started)

    def run(slo_lines: str) -> tuple[int, str, str]:
        path = tmp_path / "run.yaml"
        path.write_text(HEAD + slo_lines, encoding="utf-8")
        code = main(["run", str(path)])
        return code, capsys.readouterr().err, str(path)

    return run


@pytest.mark.parametrize("slo_lines,where", [
    # the example: the first wrong field is named (the metric)
    ("  thresholds: [{metric: bogus, percentile: 250, value_s: -1}]\n",
     f'7 slo.thresholds[0].metric: unknown latency metric "bogus": expected one of {METRICS}'),
    ("  thresholds: [{metric: ttft, percentile: 250, value_s: 1}]\n", f"7 slo.thresholds[0].percentile: {PCT} 250"),
    ("  thresholds: [{metric: ttft, percentile: 0, value_s: 1}]\n", f"7 slo.thresholds[0].percentile: {PCT} 0"),
    ("  thresholds: [{metric: ttft, percentile: 100, value_s: 1}]\n", f"7 slo.thresholds[0].percentile: {PCT} 100"),
    ("  thresholds: [{metric: ttft, percentile: -5, value_s: 1}]\n", f"7 slo.thresholds[0].percentile: {PCT} -5"),
    ("  thresholds: [{metric: ttft, percentile: 95, value_s: -1}]\n",
     "7 slo.thresholds[0].value_s: expected a duration more than 0, got -1"),
    ("  thresholds: [{metric: ttft, percentile: 95, value_s: 0}]\n",
     "7 slo.thresholds[0].value_s: expected a duration more than 0, got 0"),
    ("  thresholds:\n    - metric: ttft\n      percentile: 95\n      value_s: 0ms\n",
     '10 slo.thresholds[0].value_s: expected a duration more than 0, got "0ms"'),
    ("  thresholds:\n    - {metric: ttft, percentile: 95, value_s: 1}\n    - {metric: send_lag, percentile: 99, value_s: 1}\n",
     f'9 slo.thresholds[1].metric: unknown latency metric "send_lag": expected one of {METRICS}'),
    ("  tpot_p95: 80ms\n  bogus_p95: 1s\n", f'8 slo.bogus_p95: unknown latency metric "bogus": expected one of {METRICS}'),
    ("  reject_ratio_p95: 1s\n", f'7 slo.reject_ratio_p95: unknown latency metric "reject_ratio": expected one of {METRICS}'),
    ("  ttft_p100: 1s\n", f"7 slo.ttft_p100: {PCT} 100"),
    ("  ttft_p0: 1s\n", f"7 slo.ttft_p0: {PCT} 0"),
    ("  ttft_p250: 1s\n", f"7 slo.ttft_p250: {PCT} 250"),
    ("  ttft_p95: 0ms\n", 'slo.ttft_p95: expected a duration more than 0, got "0ms"'),
    ("  ttft_p95: -1\n", "7 slo.ttft_p95: expected a duration more than 0, got -1"),
    ("  ttft_p95: 1s\n  thresholds: [{metric: ttft, percentile: 95, value_s: 2}]\n",
     "8 slo.thresholds: ttft_p95 is given twice"),
])
def test_bad_threshold_is_one_line_naming_the_key(run_cli, slo_lines, where):
    code, err, path = run_cli(slo_lines)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.strip().startswith(f"llmload: error: {path}:"), err
    assert err.strip().endswith(where), err


@pytest.mark.parametrize("value", ["0.5", "1", "1.5", "0.2", "high"])
def test_confidence_outside_half_to_one_is_one_line_naming_the_key(run_cli, value):
    code, err, _path = run_cli(f"  ttft_p95: 1s\n  confidence: {value}\n")
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "slo.confidence" in err, err


def test_confidence_defaults_to_ninety_percent():
    assert SLO().confidence == 0.9
    assert SLO(confidence=0.95).confidence == 0.95


def test_load_slo_rejects_a_bogus_threshold_with_its_line(tmp_path):
    """`llmload report RUN --slo FILE` reads the file with load_slo: the same check, the file's own line."""
    path = tmp_path / "slo.yaml"
    path.write_text("ttft_p95: 1s\nthresholds:\n  - {metric: ttft, percentile: 99.99, value_s: 2s}\n"
                    "  - {metric: bogus, percentile: 250, value_s: -1}\n")
    with pytest.raises(ConfigError) as err:
        load_slo(path)
    assert str(err.value) == f'{path}:4 thresholds[1].metric: unknown latency metric "bogus": expected one of {METRICS}'


def test_valid_thresholds_still_load(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(HEAD + "  ttft_p99.9: 2s\n  user_e2e_p50: 1.5\n  itl_p95: 40ms\n"
                           "  thresholds: [{metric: server_queue, percentile: 0.5, value_s: 500ms}]\n")
    slo = load_config(path).slo
    assert [(t.key, t.value_s) for t in slo.thresholds] == [
        ("server_queue_p0.5", 0.5), ("ttft_p99.9", 2.0), ("user_e2e_p50", 1.5), ("itl_p95", 0.04)]


def test_every_registered_latency_dimension_is_a_valid_metric_and_nothing_else():
    for name in slo_dims.latency_names():
        assert SLO.model_validate({f"{name}_p95": "1s"}).thresholds[0].metric == name
    for dim in slo_dims.LIMITS:  # ratio and flag dimensions are keys of their own, not percentiles
        with pytest.raises(ValueError, match="unknown latency metric"):
            SLO.model_validate({"thresholds": [{"metric": dim.name, "percentile": 95, "value_s": 1}]})


def test_every_ratio_and_flag_dimension_has_its_slo_field_and_step_figure():
    from analysis.metrics import empty_metrics

    row = empty_metrics({"label": "s"})
    fields = SLO.model_fields
    for dim in slo_dims.LIMITS:
        assert dim.setting in fields, dim
        assert dim.figure_of() in row, dim
    for dim in slo_dims.LATENCY:
        assert dim.figure_of(95) in row and dim.figure_of(99) in row, dim


def test_standard_keys_are_the_documented_ones():
    """CONFIG.md's standard SLO: an absent key is reported as not checked."""
    assert slo_dims.standard_keys() == ("ttft_p95", "tpot_p95", "e2e_p95", "client_wait_p95", "server_queue_p95",
                                        "max_reject_ratio", "max_error_ratio", "allow_oom", "queue_growth")
    assert SLO().checked == ["max_reject_ratio", "max_error_ratio"]


def test_registry_imports_no_locust_or_gevent():
    code = ("import sys, llmload.slo, llmload.config\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
