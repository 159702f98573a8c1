"""The Little's-law planning aid for users: `llmload plan RUN_DIR --users N --think-time Z` and the report section.

On a hand-built run directory (report_fakes.write_run_dir): every request of step r1.00 has a user E2E of
0.001 (client wait) + 0.2 (TTFT) + 63 x 0.02 (tokens) = 1.461 s, of step r2.00 1.661 s; both pass.
"""

from __future__ import annotations

import re
from unittest import mock

import pytest
from report_fakes import Page, write_run_dir
from typer.testing import CliRunner

import analysis
from llmload.cli import app, main
from llmload.config import SLO
from llmload.report.page import render_report
from llmload.report.planning import plan_run

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")

R1, R2 = 0.001 + 0.2 + 63 * 0.02, 0.001 + 0.4 + 63 * 0.02


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run-p"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    return root


def numbers(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?", line)]


def line_with(out: str, start: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(start))


def test_plan_within_the_passing_rate_uses_the_covering_step(run_dir, capsys):
    assert main(["plan", str(run_dir), "--users", "10", "--think-time", "30s"]) == 0
    out = capsys.readouterr().out
    rate = 10 / (30 + R1)  # 0.318 req/s: step r1.00 covers it
    assert "r1.00" in line_with(out, "response time R")
    assert numbers(line_with(out, "response time R"))[0] == pytest.approx(R1, rel=2e-3)
    assert numbers(line_with(out, "arrival rate to expect"))[0] == pytest.approx(rate, rel=2e-3)
    assert numbers(line_with(out, "requests in flight to expect"))[0] == pytest.approx(rate * R1, rel=2e-3)
    assert "within it" in line_with(out, "highest passing step")
    assert "steady state" in line_with(out, "assumption")
    assert not re.search(r"\d+ users supported", out)


def test_plan_takes_the_next_step_when_the_lower_one_does_not_cover_the_rate(run_dir, capsys):
    assert main(["plan", str(run_dir), "--users", "50", "--think-time", "30s"]) == 0
    out = capsys.readouterr().out
    rate = 50 / (30 + R2)
    assert "r2.00" in line_with(out, "response time R")
    assert numbers(line_with(out, "requests in flight to expect"))[0] == pytest.approx(rate * R2, rel=2e-3)


def test_plan_beyond_the_last_passing_rate_says_so_and_exits_1(run_dir, capsys):
    assert main(["plan", str(run_dir), "--users", "100", "--think-time", "30s"]) == 1
    out = capsys.readouterr().out
    assert "BEYOND" in line_with(out, "highest passing step") and "test that rate" in out


def test_plan_follows_the_last_reanalysis_and_judges_by_the_knee(run_dir, tmp_path, capsys):
    """Issue 27: after `llmload report --slo` the plan reads the same knee as the report (TTFT p95 300 ms
    is crossed between r1.00 at 200 ms and r2.00 at 400 ms), not the run's own SLO, and the knee's
    interval decides the exit code."""
    import json
    import math

    from analysis.knee import knee_of, knee_sentence

    strict = tmp_path / "strict.yaml"
    strict.write_text("ttft_p95: 300ms\nmin_samples: 50\n")
    assert main(["report", str(run_dir), "--slo", str(strict)]) == 1
    capsys.readouterr()
    knee = knee_of(json.loads((run_dir / "summary-slo-strict.json").read_text()))
    assert knee is not None and knee.binding == "ttft_p95" and 1.0 <= knee.rate <= 2.0
    below = math.floor(0.9 * knee.low * (30 + R1))  # users whose rate (users / (Z + R1)) is under the interval
    assert main(["plan", str(run_dir), "--users", str(below), "--think-time", "30s"]) == 0
    out = capsys.readouterr().out
    assert line_with(out, "knee").strip() == f"{knee_sentence(knee)}: the expected rate is below the knee's interval"
    assert "the SLO of the last re-analysis" in out
    above = math.ceil(1.1 * knee.high * (30 + R1))
    assert main(["plan", str(run_dir), "--users", str(above), "--think-time", "30s"]) == 1
    assert "BEYOND the knee" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "key"), [(["--users", "0", "--think-time", "30s"], "--users"),
                                           (["--users", "5", "--think-time", "soon"], "--think-time"),
                                           (["--users", "5", "--think-time", "-3"], "--think-time")])
def test_bad_input_is_one_line_and_exit_2(run_dir, capsys, args, key):
    assert main(["plan", str(run_dir), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("llmload: error:") and key in err and "\n" not in err


def test_missing_run_dir_and_missing_option_exit_2(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope"), "--users", "5", "--think-time", "1s"]) == 2
    assert "run directory not found" in capsys.readouterr().err
    assert main(["plan", str(tmp_path), "--users", "5"]) == 2  # a usage error, not a traceback


def test_no_passing_step_exits_3(tmp_path, capsys):
    root = tmp_path / "run-f"
    write_run_dir(root, steps=[("r1.00", 1.0, 2.0)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    assert main(["plan", str(root), "--users", "5", "--think-time", "10s"]) == 3
    assert "no passing sustained step" in capsys.readouterr().out


def test_cli_passes_its_arguments_to_plan_run(tmp_path):
    with mock.patch("llmload.report.planning.plan_run", return_value=0) as plan_run:
        result = CliRunner().invoke(app, ["plan", str(tmp_path), "--users", "40", "--think-time", "2m",
                                          "--slo", str(tmp_path / "slo.yaml")])
    assert result.exit_code == 0
    plan_run.assert_called_once_with(tmp_path, users=40, think_time="2m", slo_path=tmp_path / "slo.yaml", twin=None,
                                     what_if={"slots": None, "prompt_scale": 2.0, "replicas": 2})


def test_report_has_the_planning_section_with_its_assumptions(run_dir):
    result = analysis.analyze(analysis.load_run(run_dir), SLO.model_validate({"ttft_p95": "1s", "min_samples": 50}))
    page = Page()
    html = render_report(result)
    page.feed(html)
    assert "planning" in page.ids and "planning-table" in page.ids
    rows = {r[0]: r[1] for r in page.tables["planning-table"]}
    reference = next(v for k, v in rows.items() if k.startswith("reference step"))
    assert reference.startswith("r2.00")
    r_shown = float(next(v for k, v in rows.items() if k.startswith("mean user E2E")).split()[0])
    assert r_shown == pytest.approx(R2, rel=2e-3)
    assert "steady state" in html and "llmload plan RUN_DIR --users N --think-time 30s" in html
    assert not re.search(r"\d+ users supported", html)


def test_report_without_a_passing_step_has_no_planning_section(tmp_path):
    root = tmp_path / "run-f"
    write_run_dir(root, steps=[("r1.00", 1.0, 2.0)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    result = analysis.analyze(analysis.load_run(root), SLO.model_validate({"ttft_p95": "1s", "min_samples": 50}))
    page = Page()
    page.feed(render_report(result))
    assert "planning" not in page.ids


def test_report_planning_rows_agree_with_their_own_arithmetic(run_dir):
    """Each figure has one definition (METRICS.md: mean in-flight ≈ completion rate × mean E2E) and the
    check is measured ÷ expected of the figures shown; the label rate is not one of them."""
    result = analysis.analyze(analysis.load_run(run_dir), SLO.model_validate({"ttft_p95": "1s", "min_samples": 50}))
    page = Page()
    page.feed(render_report(result))
    rows = {r[0]: r[1] for r in page.tables["planning-table"]}

    def figure(start: str) -> float:
        return float(next(v for k, v in rows.items() if k.startswith(start)).split()[0])

    step = result.steps.set_index("label").loc["r2.00"]
    completion, e2e_mean = figure("completion rate there, X"), figure("mean E2E there, W")
    assert completion == pytest.approx(step["completion_throughput"], rel=2e-3)
    assert e2e_mean == pytest.approx(step["e2e_mean_s"], rel=2e-3)
    expected, measured = figure("requests in flight Little"), figure("requests in flight measured")
    assert expected == pytest.approx(completion * e2e_mean, rel=5e-3)
    assert figure("Little's law check") == pytest.approx(measured / expected, rel=5e-3)
    assert figure("Little's law check") == pytest.approx(step["littles_law_ratio"], rel=2e-3)


TWIN = """# llmload fit of somewhere: a sim twin (llmload sim --flavor vllm --config THIS_FILE)
# each value: ± one standard error, and where it came from
max_num_seqs: 4  # 4 sequences (read from the server); the manifest's conditions.max_num_seqs
step_base_s: 20ms  # 20 ms ± 1 ms; intercept of the median inter-token gap against batch size 1-4
decode_cost_s: 2ms  # 2 ms ± 0.1 ms; slope of the median inter-token gap against batch size 1-4
prefill_cost_s: 0.2ms  # 0.2 ms ± 0.01 ms; slope of the first-token step against prompt tokens
"""


@pytest.mark.slow  # the twin's knees in virtual time: a minute on a busy core
def test_plan_with_a_twin_prints_the_what_if_lines(tmp_path, capsys):
    root = tmp_path / "run"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    path = tmp_path / "twin.yaml"
    path.write_text(TWIN)
    assert plan_run(root, users=None, think_time=None, twin=path, what_if={"arrivals": 800, "replicas": 3}) == 0
    out = capsys.readouterr().out
    for start in ("what if (the twin", "  as fitted: knee", "  slots 8: knee", "  prompts x2: knee",
                  "  replicas 3: knee", "  the ranges: "):
        assert start in out, out
    assert "users with a think time" not in out  # no population asked
    assert "NOT OBSERVED" not in out  # slots and the three costs are the twin's own
    path.write_text(TWIN.replace("max_num_seqs: 4", "# max_num_seqs: not observed"))
    assert plan_run(root, users=None, think_time=None, twin=path, what_if={"arrivals": 300, "slots": 8}) == 0
    assert "NOT OBSERVED, the sim's defaults: max_num_seqs" in capsys.readouterr().out


def test_plan_refuses_a_misfit_twin_and_wants_users_or_a_twin(tmp_path, capsys):
    root = tmp_path / "run"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    bad = tmp_path / "bad.yaml"
    bad.write_text("# NOT A TWIN: the step cost drifted\n" + TWIN)
    assert main(["plan", str(root), "--twin", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "does not fit the twin's model" in err and err.count("\n") == 1
    assert main(["plan", str(root)]) == 2
    assert "--twin" in capsys.readouterr().err
