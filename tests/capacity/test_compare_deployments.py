"""`llmload compare` of a 1-instance and a 2-instance deployment (issue 10, seed 003).

The expected figures are worked out here from each run directory's own `summary.json` (which rate
passed last), `plan.json` (the window) and `records.parquet` (which requests were good), by the
definitions the comparison prints, then checked against what `llmload compare` reports (3 significant
digits in the page).
"""

from __future__ import annotations

import pytest
from capacity_helpers import (
    COST_PER_HOUR,
    E2E_SLO_S,
    RATES,
    good_mask,
    html_table,
    read_json,
    window_requests,
)

from llmload.cli import main

# quiet: the live 2-instance run's verdicts and generator checks (tests/capacity/conftest.py) need the load it
# measures to be most of the load (beside the busy part's workers and two CPU hogs they came out invalid)
pytestmark = [pytest.mark.slow, pytest.mark.quiet]


def expected_figures(run_dir, gpus: int) -> dict:
    summary = read_json(run_dir, "summary.json")
    last = summary["last_passing_rate"]
    plan = {s["target_rate"]: s for s in read_json(run_dir, "plan.json")["steps"]}
    step = plan[last]
    records, windows = window_requests(run_dir)
    start, end = windows[step["label"]]
    mine = records[(records["step"] == step["label"]) & records["in_window"]]
    good = mine[good_mask(mine, e2e_s=E2E_SLO_S)]
    goodput = len(good) / (end - start)
    # good output tokens/s: of those good requests, the ones that also finished (stream closed) in the
    # window, as output tokens/s counts them (docs/METRICS.md: good never exceeds all)
    finished = good["closed_at"].fillna(good["last_token_at"])
    tokens_s = good.loc[(finished >= start) & (finished < end), "output_tokens"].sum() / (end - start)
    cost = COST_PER_HOUR[gpus]
    return {"last": last, "goodput": goodput, "tokens_s": tokens_s, "per_gpu": goodput / gpus,
            "per_million_tokens": cost / (tokens_s * 3600) * 1e6,
            "per_thousand_requests": cost / (goodput * 3600) * 1e3}


def test_compare_reports_capacity_ratios_and_cost_from_each_run(deployments, tmp_path, capsys):
    one, two = deployments.one, deployments.two
    s_one, s_two = read_json(one, "summary.json"), read_json(two, "summary.json")
    # one instance falls behind at the higher rate; two instances hold it (see tests/capacity/conftest.py)
    assert (s_one["last_passing_rate"], s_one["first_failing_rate"]) == RATES, deployments.outputs["one"]
    assert s_two["last_passing_rate"] == RATES[1], deployments.outputs["two"]
    exp_one, exp_two = expected_figures(one, 1), expected_figures(two, 2)

    out = tmp_path / "compare.html"
    capsys.readouterr()
    assert main(["compare", str(one), str(two), "--out", str(out)]) == 0  # in this process: no 1.5 s interpreter
    printed = capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    rows = {r["run"]: r for r in html_table(page, "runs-table")}
    shown = {name: rows[name] for name in ("one", "two")}

    def num(text: str) -> float:
        return float(text.replace(",", ""))

    for name, exp, gpus in (("one", exp_one, 1), ("two", exp_two, 2)):
        row = shown[name]
        assert num(row["last passing req/s"]) == pytest.approx(exp["last"])
        assert num(row["goodput@SLO req/s"]) == pytest.approx(exp["goodput"], rel=0.006)
        assert num(row["good tok/s"]) == pytest.approx(exp["tokens_s"], rel=0.006)
        assert num(row["GPUs"]) == gpus and num(row["cost/h"]) == COST_PER_HOUR[gpus]
        assert num(row["goodput/GPU"]) == pytest.approx(exp["per_gpu"], rel=0.006)
        assert num(row["cost per 1M good tok"]) == pytest.approx(exp["per_million_tokens"], rel=0.006)
        assert num(row["cost per 1k good req"]) == pytest.approx(exp["per_thousand_requests"], rel=0.006)
    assert num(shown["two"]["last passing ÷ one"]) == pytest.approx(exp_two["last"] / exp_one["last"], rel=0.006)
    assert num(shown["two"]["goodput/GPU ÷ one"]) == pytest.approx(exp_two["per_gpu"] / exp_one["per_gpu"],
                                                                   rel=0.006)
    assert num(shown["one"]["last passing ÷ one"]) == 1.0
    # the fixed conditions that differ are named, with each run's value
    differing = {r["condition"]: r for r in html_table(page, "conditions-table")}
    assert differing["conditions.gpus"]["one"] == "1" and differing["conditions.gpus"]["two"] == "2"
    assert "conditions.cost_per_hour" in differing
    # the command's printed table says the same
    assert "cost per 1M good tok" in printed and "fixed conditions that differ" in printed
