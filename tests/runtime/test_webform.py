"""The start form's run options: what the form shows for a config and the config a form makes."""

from __future__ import annotations

import argparse

import pytest

from llmload.config import Config
from llmload.errors import ConfigError
from llmload.runtime.master.start_form import (
    RATES,
    SLO_OPTION,
    add_form_options,
    apply_form,
    form_help,
    form_values,
)


def _config(shape: dict | None = None, **extra) -> Config:
    data = {"target": {"url": "http://127.0.0.1:8000", "api": "openai-chat", "model": "m"},
            "shape": shape or {"ladder": {"arrival": "constant", "warmup": "0s",
                                          "steps": [{"rate": 2, "duration": "30s"}, {"rate": 6, "duration": "1m"}]}},
            "slo": {"ttft_p95": "500ms", "tpot_p95": "80ms", "max_reject_ratio": 0.0, "min_samples": 50}}
    data.update(extra)
    return Config.model_validate(data)


def test_the_form_shows_the_configs_rates_slo_and_shape():
    config = _config()
    assert form_values(config) == {RATES: "2, 6", SLO_OPTION: "ttft_p95=500ms, tpot_p95=80ms, max_reject_ratio=0, "
                                                              "max_error_ratio=0.05, min_samples=50"}
    helps = form_help(config)
    assert "ladder of 2 step(s) of 30s / 60s, constant arrivals" in helps[RATES] and "req/s per step" in helps[RATES]
    assert "openai-chat" in helps[SLO_OPTION] and "model m" in helps[SLO_OPTION]


def test_the_form_shows_the_queue_growth_and_min_samples_checks_that_apply():
    """Issue 32: the SLO field hid `queue_growth` and `min_samples`, which still judged the run."""
    config = _config(slo={"ttft_p95": "1s", "queue_growth": "forbid", "allow_oom": False, "min_samples": 30})
    shown = form_values(config)[SLO_OPTION]
    assert shown == "ttft_p95=1s, max_reject_ratio=0.05, max_error_ratio=0.05, allow_oom=false, queue_growth=forbid, min_samples=30"
    run, changed = apply_form(config, slo=shown)  # shown as is: nothing changes
    assert changed == {} and run == config
    run, changed = apply_form(config, slo=shown.replace("queue_growth=forbid", "queue_growth=allow"))
    assert run.slo.queue_growth == "allow" and run.slo.min_samples == 30 and run.slo.allow_oom is False
    assert changed["slo"]["queue_growth"] == "allow"
    assert "min_samples=20" in form_values(_config(slo={"ttft_p95": "1s"}))[SLO_OPTION]  # the default applies


def test_options_are_typed_strings_with_empty_defaults_on_the_parser_itself():
    parser = argparse.ArgumentParser()
    add_form_options(parser)
    options = parser.parse_args([])
    assert getattr(options, RATES) == "" and getattr(options, SLO_OPTION) == ""


def test_unchanged_or_empty_form_values_change_nothing():
    config = _config()
    shown = form_values(config)
    for rates, slo, host in (("", "", ""), (shown[RATES], shown[SLO_OPTION], "http://127.0.0.1:8000/"),
                             ("2,6", "ttft_p95=500ms,tpot_p95=80ms,max_reject_ratio=0,max_error_ratio=0.05,min_samples=50", "")):
        run, changed = apply_form(config, rates, slo, host)
        assert changed == {} and run == config


def test_edited_rates_make_the_ladder_steps_with_the_config_durations():
    run, changed = apply_form(_config(), "5, 10, 20")
    steps = run.shape.ladder.steps
    assert [s.rate for s in steps] == [5.0, 10.0, 20.0]
    assert [s.duration for s in steps] == [30.0, 60.0, 60.0]  # an added step takes the last step's duration
    assert changed == {"rates": [5.0, 10.0, 20.0]}
    assert run.slo == _config().slo


def test_edited_slo_replaces_the_thresholds_and_keeps_the_other_keys():
    run, changed = apply_form(_config(), slo="ttft_p95=1.5s, e2e_p99=20s")
    assert {t.key: t.value_s for t in run.slo.thresholds} == {"ttft_p95": 1.5, "e2e_p99": 20.0}
    assert run.slo.max_reject_ratio == 0.0 and run.slo.min_samples == 50
    assert changed["slo"] == {"ttft_p95": 1.5, "e2e_p99": 20.0, "max_reject_ratio": 0.0, "max_error_ratio": 0.05,
                              "min_samples": 50}


def test_host_is_the_target_url():
    run, changed = apply_form(_config(), host="http://10.0.0.5:8000")
    assert run.target.url == "http://10.0.0.5:8000" and changed == {"target_url": "http://10.0.0.5:8000"}


def test_concurrency_levels_and_a_soak_rate_are_editable():
    conc = _config({"concurrency": {"levels": [1, 2, 4]}})
    assert form_values(conc)[RATES] == "1, 2, 4"
    assert apply_form(conc, "2, 8")[0].shape.concurrency.levels == [2, 8]
    soak = _config({"soak": {"rate": 2, "duration": "1h"}})
    assert apply_form(soak, "3")[0].shape.soak.rate == 3.0


@pytest.mark.parametrize(("rates", "slo", "host", "named"), [
    ("2, fast", "", "", "--llmload-rates"),
    ("0, 4", "", "", "--llmload-rates"),
    ("", "ttft_p95=quick", "", "--llmload-slo"),
    ("", "ttft_p95", "", "--llmload-slo"),
    ("", "latency_p95=1s", "", "--llmload-slo"),
    ("", "", "not a url", "Host"),
])
def test_bad_form_values_are_one_line_naming_the_option(rates, slo, host, named):
    with pytest.raises(ConfigError) as err:
        apply_form(_config(), rates, slo, host)
    assert str(err.value).startswith(named) and "\n" not in str(err.value)


def test_trace_and_fractional_levels_are_refused():
    conc = _config({"concurrency": {"levels": [1, 2]}})
    with pytest.raises(ConfigError, match="whole numbers"):
        apply_form(conc, "1.5")
    trace = _config({"trace": {"file": "t.csv"}})
    assert form_values(trace)[RATES] == ""
    with pytest.raises(ConfigError, match="cannot be edited"):
        apply_form(trace, "3")
