"""`llmload compare` of two hand-built runs: capacity, goodput per GPU and cost figures worked out by hand.

Run A: 1 GPU at 2.0/h; r1.00 passes (TTFT 200 ms), r2.00 fails (TTFT 1.5 s > 1 s).
Run B: 2 GPUs at 3.0/h; both pass. Every request is ok with 64 output tokens over a 100 s window.

    A: last passing 1 req/s; goodput 100 good / 100 s = 1.0 req/s; good tokens: those of the good requests
       that finished in the window (the basis of output tokens/s): the last one, sent at 99 s, ends 1.461 s
       later, so 99 x 64 / 100 s = 63.36 tok/s; goodput/GPU 1.0; cost per 1M good tokens
       2.0 / (63.36 x 3600) x 1e6 = 8.768; per 1k good req 2.0 / (1.0 x 3600) x 1e3 = 0.5556
    B: last passing 2 req/s; goodput 2.0 req/s; 1.661 s each, the last three (98.5 s on) end after the
       window: 197 x 64 / 100 s = 126.08 tok/s; goodput/GPU 1.0; per 1M 3.0 / (126.08 x 3600) x 1e6 = 6.6096; per 1k 3.0 / (2.0 x 3600) x 1e3 = 0.41667
"""

from __future__ import annotations

import pytest
from report_fakes import Page, write_run_dir

from llmload.cli import main
from llmload.errors import ConfigError
from llmload.report.compare import compare_runs, condition_diff, load_figures, step_comparison

SLO = {"ttft_p95": "1s", "min_samples": 50}


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "one-gpu", tmp_path / "two-gpu"
    write_run_dir(a, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 1.5)], gpus=1, cost_per_hour=2.0, slo=SLO)
    write_run_dir(b, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=2, cost_per_hour=3.0, slo=SLO)
    return a, b


def test_figures_worked_by_hand(runs):
    a, b = (load_figures(r) for r in runs)
    assert (a.verdict, a.last_passing_rate, b.verdict, b.last_passing_rate) == ("fail", 1.0, "pass", 2.0)
    assert a.goodput_at_slo == pytest.approx(1.0) and b.goodput_at_slo == pytest.approx(2.0)
    assert a.good_tokens_per_s == pytest.approx(63.36) and b.good_tokens_per_s == pytest.approx(126.08)
    assert a.goodput_per_gpu == pytest.approx(1.0) and b.goodput_per_gpu == pytest.approx(1.0)
    assert a.cost_per_million_good_tokens == pytest.approx(2.0 / (63.36 * 3600) * 1e6)
    assert a.cost_per_thousand_good_requests == pytest.approx(2.0 / 3600 * 1e3)
    assert b.cost_per_million_good_tokens == pytest.approx(3.0 / (126.08 * 3600) * 1e6)
    assert b.cost_per_thousand_good_requests == pytest.approx(0.41667, rel=1e-4)

    steps = step_comparison([a, b]).set_index("step")
    assert steps.loc["r2.00", "ttft_p95_s#ratio1"] == pytest.approx(0.4 / 1.5)
    assert steps.loc["r2.00", "goodput#diff1"] == pytest.approx(2.0 - 0.0)  # A's r2.00 had no good request
    assert steps.loc["r1.00", "goodput#ratio1"] == pytest.approx(1.0)
    assert list(steps[["verdict#0", "verdict#1"]].loc["r2.00"]) == ["fail", "pass"]


def test_conditions_that_differ(runs):
    a, b = (load_figures(r) for r in runs)
    differing = dict(condition_diff([a.manifest, b.manifest]))
    assert differing["conditions.gpus"] == [1, 2] and differing["conditions.cost_per_hour"] == [2.0, 3.0]
    assert "conditions.owner" not in differing


def test_cli_prints_table_and_writes_html(runs, tmp_path, capsys):
    out = tmp_path / "cmp" / "compare.html"
    assert main(["compare", str(runs[0]), str(runs[1]), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "one-gpu" in text and "two-gpu" in text and "cost_per_hour ÷ (good tokens per second" in text
    assert "conditions.gpus: one-gpu=1 | two-gpu=2" in text
    page = Page()
    page.feed(out.read_text())
    assert page.plots == ["plot-compare-goodput", "plot-compare-ttft"] and page.resources == []
    rows = {r[0]: r for r in page.tables["runs-table"][1:]}
    assert rows["one-gpu"][4] == "1" and rows["two-gpu"][4] == "2"
    assert rows["one-gpu"][10] == "8.77" and rows["two-gpu"][11] == "0.417"
    assert rows["two-gpu"][12] == "2" and rows["two-gpu"][13] == "1"  # twice the rate, same per GPU
    assert "to" in rows["one-gpu"][2] and "90%" in rows["one-gpu"][2] and rows["one-gpu"][3] == "ttft_p95"
    steps = {r[1]: r for r in page.tables["steps-table"][1:]}  # columns: phase, step, verdicts, ...
    assert steps["r2.00"][0] == "ladder"
    assert steps["r2.00"][2:4] == ["fail", "pass"]  # the verdicts first
    assert steps["r2.00"][9:12] == ["1500", "400", "-1100"]  # TTFT p95 ms A, B and B - A


def test_needs_two_runs_and_real_directories(runs, tmp_path):
    with pytest.raises(ConfigError, match="at least two"):
        compare_runs([runs[0]])
    with pytest.raises(ConfigError, match="run directory not found"):
        compare_runs([runs[0], tmp_path / "missing"])


def test_cost_and_gpus_from_a_real_manifest_shape():
    """build_manifest records server-reported conditions; cost_per_hour and owner live in the config."""
    import pandas as pd

    from llmload.report.compare import run_figures

    steps = pd.DataFrame([{"label": "r1.00", "phase": "ladder", "status": "run", "target_rate": 1.0,
                           "offered_rate": 1.0, "goodput": 0.5, "window_s": 10.0, "verdict": "pass"}])
    requests = pd.DataFrame({"step": ["r1.00"] * 3, "in_window": [True, True, False],
                             "good": [True, False, True], "output_tokens": [100, 100, 100]})
    manifest = {"conditions": {"gpus": 4, "model": "m", "cost_per_hour": None},
                "config": {"conditions": {"gpus": 4, "cost_per_hour": 7.2, "owner": "ops"}}}
    fig = run_figures("x", steps, {"verdict": "pass", "last_passing_rate": 1.0}, manifest, requests)
    assert (fig.gpus, fig.cost_per_hour, fig.goodput_per_gpu) == (4.0, 7.2, 0.125)
    assert fig.good_tokens_per_s == pytest.approx(10.0)  # one good in-window request of 100 tokens / 10 s
    assert fig.cost_per_million_good_tokens == pytest.approx(7.2 / (10.0 * 3600) * 1e6)
    assert fig.cost_per_thousand_good_requests == pytest.approx(7.2 / (0.5 * 3600) * 1e3)
