"""Config validation: every error names file, line and key, in one line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from llmload.config import load_config, load_slo
from llmload.errors import ConfigError

BASE = """\
target:
  url: http://127.0.0.1:8000
  api: openai-chat
shape:
  ladder:
    steps:
      - {rate: 0.5, duration: 2m}
      - {rate: 1, duration: 30s}
slo:
  ttft_p95: 1s
  tpot_p95: 80ms
"""


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_valid_config_has_units_in_seconds(tmp_path):
    cfg = load_config(write(tmp_path, BASE))
    assert cfg.shape.kind == "ladder"
    assert [s.duration for s in cfg.shape.ladder.steps] == [120.0, 30.0]
    assert cfg.slo.threshold("ttft").value_s == 1.0
    assert cfg.slo.threshold("tpot").value_s == pytest.approx(0.08)
    assert cfg.slo.threshold("e2e") is None
    assert cfg.target.endpoints == ["http://127.0.0.1:8000"]


def test_bad_duration_names_file_line_and_key(tmp_path):
    path = write(tmp_path, BASE.replace("ttft_p95: 1s", "ttft_p95: fast"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f'{path}:10 slo.ttft_p95: expected a duration like 800ms, got "fast"'


def test_unknown_key_is_an_error(tmp_path):
    path = write(tmp_path, BASE + "  tfft_p95: 2s\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    # a typo of a threshold key is named with the valid metrics (llmload.slo), not just "unknown key"
    assert str(err.value) == (f'{path}:12 slo.tfft_p95: unknown latency metric "tfft": expected one of '
                              "ttft, user_ttft, ttfa, user_ttfa, tpot, itl, e2e, user_e2e, client_wait, server_queue")


def test_unknown_top_level_key(tmp_path):
    path = write(tmp_path, BASE + "telemetri: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:12 telemetri: unknown key"


def test_wrong_type_in_a_list_item(tmp_path):
    path = write(tmp_path, BASE.replace("rate: 1,", "rate: lots,"))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:8 shape.ladder.steps[1].rate: ")
    assert '"lots"' in str(err.value)


def test_a_float_seed_is_refused_not_rounded(tmp_path):
    # the config fuzzer's find: pydantic's lax int took 10000000000000.0 as a seed
    path = write(tmp_path, BASE + "requests:\n  seed: 10000000000000.0\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}:13 requests.seed: a seed is a whole number written without a decimal "
                              "point or exponent")
    assert load_config(write(tmp_path, BASE + "requests:\n  seed: 10000000000000\n")).requests.seed == 10**13


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "nope.yaml")
    assert str(err.value) == f"{tmp_path / 'nope.yaml'}: file not found"


def test_missing_target(tmp_path):
    path = write(tmp_path, "shape:\n  ladder:\n    steps: [{rate: 1, duration: 1s}]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:1 target: required key is missing"


def test_two_shapes_is_an_error(tmp_path):
    path = write(tmp_path, BASE + "  concurrency: {levels: [1, 2]}\n".replace("  conc", "  conc"))
    text = BASE.replace("shape:\n", "shape:\n  concurrency: {levels: [1, 2]}\n")
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "shape: give exactly one of ladder, concurrency, trace, soak" in str(err.value)


def test_invalid_yaml(tmp_path):
    path = write(tmp_path, "target: [unclosed\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:")
    assert "invalid YAML" in str(err.value)


def test_slo_file_top_level_or_whole_config(tmp_path):
    slo = load_slo(write(tmp_path, "ttft_p99: 2s\nmax_reject_ratio: 0.01\n", "slo.yaml"))
    assert slo.threshold("ttft").percentile == 99
    assert slo.max_reject_ratio == 0.01
    whole = load_slo(write(tmp_path, BASE))
    assert whole.threshold("tpot").value_s == pytest.approx(0.08)


def test_slo_file_error_has_line(tmp_path):
    path = write(tmp_path, "ttft_p95: 1s\ne2e_p95: soon\n", "slo.yaml")
    with pytest.raises(ConfigError) as err:
        load_slo(path)
    assert str(err.value) == f'{path}:2 e2e_p95: expected a duration like 800ms, got "soon"'


def test_bare_off_is_the_word_off(tmp_path):
    cfg = load_config(write(tmp_path, BASE + "telemetry:\n  gpu: off\n  metrics_url: off\n"))
    assert cfg.telemetry.gpu == "off"
    assert cfg.telemetry.metrics_url == "off"


@pytest.mark.parametrize("block, key, message", [
    ("target:\n  api: openai-chat\n", "target", "give exactly one of url or urls"),
    ("target:\n  urls: []\n", "target", "give exactly one of url or urls"),
    ("requests:\n  input_tokens: {dist: empirical, values: []}\n", "requests.input_tokens",
     "give exactly one of values or file"),
    ("shape:\n  soak: {duration: 10m}\n", "shape.soak", "give exactly one of rate or trace"),
    ("quality:\n  cases:\n    - {prompt: hi, messages: [], expect: {contains: a}}\n", "quality.cases[0]",
     "give exactly one of prompt or messages"),
    ("quality:\n  cases:\n    - {prompt: hi, expect: {contains: a, exact: b}}\n", "quality.cases[0].expect",
     "give exactly one of contains, regex, exact, json_schema"),
])
def test_exactly_one_of_names_the_choices(tmp_path, block, key, message):
    """Each "exactly one of" block (one check, `config._one_of`) names its choices; empty counts as absent
    where the field is a list or text (urls, values)."""
    top = block.split(":", 1)[0]
    blocks = [b for b in BASE.replace("\nshape:", "\n\nshape:").replace("\nslo:", "\n\nslo:").split("\n\n")
              if not b.startswith(top + ":")]
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, "\n".join(blocks) + block))
    assert f"{key}: {message}" in str(err.value)


REFINE_BASE = """\
target: {url: "http://127.0.0.1:9", api: openai-chat, model: m}
shape:
  ladder:
    warmup: 5s
    steps: [{rate: 1, duration: 10s}, {rate: 2, duration: 20s}]
    refine: {REFINE}
"""


@pytest.mark.parametrize("refine,key", [
    ("{precision: 0}", "shape.ladder.refine.precision"),
    ("{precision: 1.5}", "shape.ladder.refine.precision"),
    ("{budget: 8s}", "shape.ladder.refine.budget"),  # shorter than warm-up 5 s + the shortest window 10 s
    ("{duration: 30s, budget: 20s}", "shape.ladder.refine.budget"),
    ("{max_extensions: -1}", "shape.ladder.refine.max_extensions"),
    ("{prior: 0}", "shape.ladder.refine.prior"),
    ("{prior: nowhere.yaml}", "shape.ladder.refine.prior"),
])
def test_bad_knee_search_settings_are_one_line_naming_the_key_and_exit_2(tmp_path, capsys, refine, key):
    from llmload.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(REFINE_BASE.replace("{REFINE}", refine))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and key in err[0] and "bad.yaml" in err[0]


def test_knee_search_settings_default_and_old_keys_still_accepted(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(REFINE_BASE.replace("{REFINE}", "{resolution: 0.5, max_steps: 2, budget: 15s}"))
    refine = load_config(path).shape.ladder.refine
    assert (refine.precision, refine.budget, refine.max_extensions, refine.max_steps) == (0.05, 15.0, 2, 2)


def test_knee_search_prior_is_a_rate_or_a_twin_read_at_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(REFINE_BASE.replace("{REFINE}", "{prior: 1.5}"))
    assert load_config(path).shape.ladder.refine.prior == 1.5
    (tmp_path / "twin.yaml").write_text("max_num_seqs: 4  # 4 ± 0.5 sequences; plateau\nstep_base_s: 20ms  # 20 ms ± 1 ms; x\n")
    path.write_text(REFINE_BASE.replace("{REFINE}", "{prior: twin.yaml}"))
    assert load_config(path).shape.ladder.refine.prior == str((tmp_path / "twin.yaml").resolve())
    (tmp_path / "twin.yaml").write_text("# NOT A TWIN: the step cost drifted\nmax_num_seqs: 4\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "shape.ladder.refine.prior" in str(err.value) and "does not fit the twin's model" in str(err.value)


@pytest.mark.parametrize(("key", "text"), [("duration", "٣٠s"), ("duration", "３０s"), ("rate", "٣")])
def test_digits_other_than_ascii_are_refused_alike_in_durations_and_rates(tmp_path, key, text):
    """Arabic-Indic or full-width digits were a valid duration (`\\d` and float() read them) while the same
    digits in `rate` were refused: both are refused now, in one line (issue 44 item 9)."""
    old = "duration: 30s" if key == "duration" else "rate: 1,"
    path = write(tmp_path, BASE.replace(old, f'{key}: "{text}"' + ("," if key == "rate" else "")))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert len(str(err.value).splitlines()) == 1 and f"{key}:" in str(err.value), str(err.value)


def test_a_duration_error_is_one_line_whatever_the_value():
    from llmload.units import parse_duration

    with pytest.raises(ValueError) as err:
        parse_duration("3\n0s")
    assert len(str(err.value).splitlines()) == 1 and "3\\n0s" in str(err.value)
