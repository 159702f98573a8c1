"""Re-analysis with another SLO file, and `plan` after it (issue 17): what the file replaces, what a
short step over its target says, and which analysis `plan` follows.

The run directory (report_fakes.write_run_dir) ran with `ttft_p95: 1s, min_samples: 50`: step r1.00
has 100 requests with a TTFT of 200 ms, step r2.00 200 requests with 400 ms; both pass.

Tests that read no report page re-analyse with `unrendered_plots` (tests/conftest.py): the plots are built but not drawn to
SVG (matplotlib's savefig was ~70% of each `llmload report`'s CPU here). The test that reads the page
(`test_a_step_over_its_target_on_too_few_samples_says_so_by_name`) draws them; the drawn plots themselves
are tests/report/test_report_page.py's.
"""

from __future__ import annotations

import json

import pytest
from report_fakes import make_analysis, make_manifest, write_run_dir

from analysis.verdict import judge
from llmload.cli import main
from llmload.config import SLO
from llmload.report.answer import answer_sentences


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run"
    write_run_dir(root, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    return root


def slo_file(tmp_path, text: str):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def summary_of(run_dir) -> dict:
    """The re-analysis' summary (`report --slo s.yaml` writes it beside the run's own, issue 43)."""
    return json.loads((run_dir / "summary-slo-s.json").read_text())


def test_a_file_without_min_samples_keeps_the_runs(run_dir, unrendered_plots, tmp_path, capsys):
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "ttft_p95: 1s\n")]) == 0
    summary = summary_of(run_dir)
    assert summary["verdict"] == "pass" and summary["slo"]["thresholds"]["min_samples"] == 50
    assert summary["slo"]["settings"]["min_samples"] == 50 and summary["slo"]["source"].endswith("s.yaml")
    assert "kept from the run (not set in" in capsys.readouterr().out


def test_the_file_replaces_the_targets_as_a_whole(run_dir, unrendered_plots, tmp_path):
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "queue_growth: forbid\n")]) == 0
    summary = summary_of(run_dir)
    # max_reject_ratio and max_error_ratio have defaults (0.05, METRICS.md): a file that leaves them out
    # keeps them checked
    assert summary["slo"]["checked"] == ["max_reject_ratio", "max_error_ratio", "queue_growth"]
    assert "ttft_p95" in summary["slo"]["not_checked"]


def test_every_unchecked_key_is_in_the_warnings(run_dir, unrendered_plots, tmp_path):
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "ttft_p95: 1s\n")]) == 0
    summary = summary_of(run_dir)
    warning = next(w for w in summary["warnings"] if "not checked" in w)
    for key in summary["slo"]["not_checked"]:
        assert key in warning
    assert {"server_queue_p95", "allow_oom", "e2e_p95"} <= set(summary["slo"]["not_checked"])


def test_a_step_over_its_target_on_too_few_samples_says_so_by_name(run_dir, tmp_path, capsys):
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "ttft_p95: 100ms\nmin_samples: 500\n")]) == 3
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("r1.00"))
    assert "insufficient" in row and "over on too few samples: ttft_p95" in row
    summary = summary_of(run_dir)
    steps = {s["label"]: s for s in summary["steps"]}
    assert steps["r1.00"]["verdict"] == "insufficient" and steps["r1.00"]["over_on_few_samples"] == ["ttft_p95"]
    assert any("r1.00: ttft_p95 200 ms > 100 ms on only 100 completions" in w for w in summary["warnings"])
    html = (run_dir / "report-slo-s.html").read_text()
    assert "r1.00 (over its target anyway: ttft_p95 (200 ms &gt; 100 ms) on 100 completions; needs about" in html


def test_a_count_failure_on_few_samples_still_names_the_threshold_over():
    """The demo's case: a step fails on queue growth with 8 completions while its TTFT p95 is 2521 ms
    against 100 ms: the TTFT is named, not judged."""
    slo = SLO.model_validate({"ttft_p95": "100ms", "queue_growth": "forbid", "min_samples": 10})
    metrics = {"offered_rate": 6.0, "achieved_rate": 6.0, "send_lag_p99_s": 0.001, "worker_cpu_max": 0.1,
               "oom": 0, "reject_ratio": 0.0, "error_ratio": 0.0, "queue_growth": True, "completed": 8,
               "ttft_p95_s": 2.521}
    verdict, failing, details = judge(metrics, {"status": "run"}, slo)
    assert (verdict, failing) == ("fail", ["queue_growth"])
    assert details["over_on_few_samples"] == ["ttft_p95"]
    analysis = make_analysis()
    analysis.slo = slo
    analysis.steps.loc[2, ["completed", "ttft_p95_s"]] = [8, 2.521]
    analysis.steps["over_on_few_samples"] = [[], [], ["ttft_p95"], [], [], []]
    analysis.summary.update(first_failing_rate=2.0, failed_first=["queue_growth"])
    text = " ".join(answer_sentences(analysis, make_manifest())[1])
    assert "Also over its target there on too few samples to judge: ttft_p95 (2521 ms > 100 ms) on 8" in text


def test_plan_follows_the_run_directorys_current_analysis(run_dir, unrendered_plots, tmp_path, capsys):
    assert main(["plan", str(run_dir), "--users", "30", "--think-time", "30s"]) == 0
    assert "judged with the run's configured SLO" in capsys.readouterr().out
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "ttft_p95: 100ms\n")]) == 1
    assert summary_of(run_dir)["last_passing_rate"] is None
    capsys.readouterr()
    assert main(["plan", str(run_dir), "--users", "30", "--think-time", "30s"]) == 3
    out = capsys.readouterr().out
    assert "no passing sustained step" in out and "last passing sustained rate" not in out
    assert "judged with the SLO of the last re-analysis" in out and "s.yaml" in out
    assert main(["report", str(run_dir)]) == 0  # back to the run's own SLO: plan follows again
    capsys.readouterr()
    assert main(["plan", str(run_dir), "--users", "30", "--think-time", "30s"]) == 0


def test_no_capacity_claim_above_an_invalid_top_step():
    analysis = make_analysis()
    steps = analysis.steps
    steps.loc[2, ["verdict", "failing"]] = ["invalid", None]
    steps.at[2, "failing"] = ["send_lag"]
    analysis.summary.update(verdict="invalid", last_passing_rate=1.0, first_failing_rate=None, failed_first=[])
    sentences = answer_sentences(analysis, make_manifest())[1]
    text = " ".join(sentences)
    assert "capacity is above the highest rate tested" not in text
    assert "the rates above 1 req/s gave no verdict (r2.00 invalid, r4.00 not run)" in text
    assert "at least 1 req/s" in text
    steps.loc[2, "verdict"] = "pass"
    steps.loc[3, "status"] = "run"
    steps.loc[3, "verdict"] = "pass"
    analysis.summary.update(verdict="pass", last_passing_rate=4.0)
    assert any("capacity is above the highest rate tested" in s
               for s in answer_sentences(analysis, make_manifest())[1])


def test_compare_follows_the_last_reanalysis_and_says_so(run_dir, unrendered_plots, tmp_path, capsys):
    """Issue 27: `llmload compare` showed a re-analysed run with its old verdicts and no note."""
    other = tmp_path / "other"
    write_run_dir(other, steps=[("r1.00", 1.0, 0.2), ("r2.00", 2.0, 0.4)], gpus=1, cost_per_hour=None,
                  slo={"ttft_p95": "1s", "min_samples": 50})
    assert main(["report", str(run_dir), "--slo", slo_file(tmp_path, "ttft_p95: 300ms\n")]) == 1
    knee = summary_of(run_dir)["knee"]
    capsys.readouterr()
    assert main(["compare", str(run_dir), str(other)]) == 0
    out = capsys.readouterr().out
    assert "llmload: note: run was re-analysed: its figures follow the SLO of the last re-analysis" in out
    assert "other was re-analysed" not in out
    verdicts = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert verdicts.split()[1:] == ["fail", "pass"]  # the re-analysis' verdict, not the run's own
    knees = next(line for line in out.splitlines() if line.startswith("knee req/s"))
    assert f"{knee['rate']:.1f}" in knees and "90%" in knees  # the knee of summary.json, with its interval


def test_a_knee_placed_without_a_failing_step_is_not_said_to_be_unlocated():
    """Issue 43 item 4: a knee estimated from inconclusive steps beside 'No tested rate failed ... the
    boundary is not located' contradicted itself; the answer now says where the knee came from, and rounds."""
    analysis = make_analysis()
    steps = analysis.steps
    steps.loc[2, "verdict"] = "inconclusive"
    steps.at[2, "failing"] = []
    analysis.summary.update(verdict="inconclusive", last_passing_rate=1.0 + 2 / 3, first_failing_rate=None,
                            failed_first=[],
                            knee={"rate": 1.9, "low": 1.6, "high": 2.2, "confidence": 0.9, "binding": "ttft_p95"},
                            search={"stopped": "budget", "steps": 3, "extensions": 1})
    text = " ".join(answer_sentences(analysis, make_manifest())[1])
    assert "Knee 1.9 req/s (1.6 to 2.2, 90%): TTFT p95 binds" in text
    assert "boundary is not located" not in text and "No step failed outright" in text and "(r2.00)" in text
    assert "3 refine steps (1 of them a repeat of an inconclusive step near the knee)" in text
    assert "1.66667" not in text
