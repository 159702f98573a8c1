"""`llmload compare` says when runs are not like for like, keeps every step, and fits a terminal (issue 17).

Hand-built run directories (report_fakes.write_run_dir): every request is ok, sent 1 ms after its
scheduled time, with the TTFT given per step, so each figure below is known before the analysis runs.
"""

from __future__ import annotations

import pytest
from report_fakes import Page, write_run_dir

from llmload.cli import main
from llmload.report.compare import baseline_index, load_figures, setup_diff, step_comparison

SLO = {"ttft_p95": "1s", "min_samples": 50}
MIX = {"input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 32}}


def test_burst_and_uniform_twin_at_the_same_rate_stay_two_rows(tmp_path, capsys):
    ladder, burst = tmp_path / "ladder", tmp_path / "burst"
    write_run_dir(ladder, steps=[("r2.00", 2.0, 0.2), ("r4.00", 4.0, 0.3)], gpus=1, cost_per_hour=None, slo=SLO)
    write_run_dir(burst, steps=[("burst", 4.28, 0.7, "burst"), ("uniform", 4.28, 0.1, "uniform")], gpus=1,
                  cost_per_hour=None, slo=SLO)
    rows = step_comparison([load_figures(ladder), load_figures(burst)]).set_index("phase")
    assert {"burst", "uniform"} <= set(rows.index)
    assert rows.loc["burst", "ttft_p95_s#1"] == pytest.approx(0.7, abs=1e-3)
    assert rows.loc["uniform", "ttft_p95_s#1"] == pytest.approx(0.1, abs=1e-3)
    assert main(["compare", str(ladder), str(burst)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:3] == ["uniform", "r4.28", "burst"] and " 100 " in f" {line} " for line in lines)
    assert any(line.split()[:3] == ["burst", "r4.28", "burst"] and " 700 " in f" {line} " for line in lines)


def test_runs_measured_differently_are_flagged(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    write_run_dir(a, steps=[("r1.00", 1.0, 0.2)], gpus=1, cost_per_hour=None, slo=SLO, requests=MIX, workers=1)
    write_run_dir(b, steps=[("r1.00", 1.0, 0.2)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "500ms", "min_samples": 50}, workers=2,
                  requests={"input_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5},
                            "output_tokens": {"dist": "lognormal", "mean": 64, "sigma": 0.5}})
    differing = dict(setup_diff([load_figures(a), load_figures(b)]))
    assert differing["slo.ttft_p95_s"] == [1.0, 0.5]
    assert differing["requests.input_tokens.dist"] == ["fixed", "lognormal"]
    assert differing["generator processes"] == [1, 2]
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "Not like for like" in out and "generator processes: a=1 | b=2" in out
    assert "slo.ttft_p95_s: a=1 | b=0.5" in out


def test_same_setup_is_not_flagged(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root, gpus in ((a, 1), (b, 2)):
        write_run_dir(root, steps=[("r1.00", 1.0, 0.2)], gpus=gpus, cost_per_hour=None, slo=SLO, requests=MIX,
                      workers=1)
    assert setup_diff([load_figures(a), load_figures(b)]) == []


def test_an_invalid_run_is_neither_the_baseline_nor_costed(tmp_path, capsys):
    bad, good = tmp_path / "behind", tmp_path / "good"
    # every request is sent 1 ms late: over a 0.5 ms send-lag limit, the run is invalid
    write_run_dir(bad, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.2)], gpus=1, cost_per_hour=2.0, slo=SLO,
                  client={"max_send_lag_p99": "0.5ms"})
    write_run_dir(good, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.2)], gpus=2, cost_per_hour=3.0, slo=SLO)
    runs = [load_figures(bad), load_figures(good)]
    assert runs[0].verdict == "invalid" and baseline_index(runs) == 1
    assert runs[0].goodput_per_gpu is None and runs[0].cost_per_million_good_tokens is None
    assert runs[0].cost_per_thousand_good_requests is None
    out_html = tmp_path / "cmp.html"
    assert main(["compare", str(bad), str(good), "--out", str(out_html)]) == 0
    out = capsys.readouterr().out
    assert "behind is invalid" in out and "against good, the first valid run" in out
    page = Page()
    page.feed(out_html.read_text())
    headers, *rows = page.tables["runs-table"]
    assert headers[-2:] == ["last passing ÷ good", "goodput/GPU ÷ good"]
    behind = {h: v for h, v in zip(headers, rows[0], strict=True)}
    assert behind["goodput/GPU"] == "" and behind["cost per 1M good tok"] == ""
    assert behind["last passing ÷ good"] == "" and behind["goodput/GPU ÷ good"] == ""


def test_three_runs_fit_a_terminal(tmp_path, capsys):
    dirs = []
    for i, ttft in enumerate((0.2, 0.3, 0.4)):
        root = tmp_path / f"20261130T1200{i:02d}Z-ladder-deployment-{i}"
        write_run_dir(root, steps=[("r1.00", 1.0, ttft), ("r2.00", 2.0, ttft * 3)], gpus=i + 1,
                      cost_per_hour=2.0 + i, slo=SLO)
        dirs.append(str(root))
    assert main(["compare", *dirs]) == 0
    out = capsys.readouterr().out
    widest = max(len(line) for line in out.splitlines())
    assert widest <= 120, f"widest line {widest} characters"
    for d in dirs:
        assert d.rsplit("/", 1)[-1] in out
