"""A short Poisson step draws fewer (or more) arrivals than its rate times its window: the demo's r5.50
offered 4.10 req/s. summary.json's `last_passing_rate` is the realised offered rate of the highest
passing step (`last_passing_target_rate` its label), so the answer, the CLI verdict table and the
demo's knee line state the load the server carried, never the label."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "analysis"))
from analysis_frames import plan_step, request, run_of  # noqa: E402

from analysis import analyze  # noqa: E402
from llmload.config import SLO  # noqa: E402
from llmload.report.answer import answer_sentences  # noqa: E402
from llmload.report.text import verdict_table  # noqa: E402
from llmload.runtime.demo import answer_lines  # noqa: E402

SLO_ = SLO.model_validate({"ttft_p95": "300ms", "min_samples": 10})
WINDOW = 10.0


def _step(label: str, index: int, rate: float, arrivals: int, ttft: float, seed: int) -> tuple[list, dict]:
    """`arrivals` Poisson-like arrival times (sorted uniforms) inside a `WINDOW`-s window labelled `rate`."""
    start = index * 100.0
    times = np.sort(np.random.default_rng(seed).uniform(0, WINDOW, arrivals))
    rows = [request(f"{label}-{k}", label, start + float(t), ttft=ttft, e2e=ttft + 0.2) for k, t in enumerate(times)]
    return rows, plan_step(label, index, rate=rate, start=start, length=WINDOW)


def _analysis(steps_spec):
    rows, steps = [], []
    for i, (label, rate, arrivals, ttft) in enumerate(steps_spec):
        r, s = _step(label, i, rate, arrivals, ttft, seed=i)
        rows += r
        steps.append(s)
    return analyze(run_of(rows, steps), SLO_)


def test_a_passing_rate_whose_realised_offer_is_far_off_its_label_is_stated_with_it():
    # r5.50 drew 41 arrivals in 10 s: offered 4.1 req/s (the demo's case); r6.00 fails on TTFT
    result = _analysis([("r4.00", 4.0, 40, 0.1), ("r5.50", 5.5, 41, 0.1), ("r6.00", 6.0, 60, 0.5)])
    row = result.steps.set_index("label").loc["r5.50"]
    assert row["verdict"] == "pass" and abs(row["offered_rate"] - 41 / WINDOW) < 1e-9  # ground truth: the records
    assert result.summary["last_passing_rate"] == 4.1 and result.summary["last_passing_target_rate"] == 5.5
    _, sentences = answer_sentences(result, {})
    assert "Last passing sustained rate: 4.1 req/s." in sentences
    assert verdict_table(result.steps, result.summary).splitlines()[-1].endswith(
        "last passing sustained rate: 4.1 req/s")


def test_a_realised_offer_within_ten_percent_keeps_the_plain_sentence():
    # 5.5 req/s labelled, 52 arrivals: 5.2 req/s, 5.5% under: Poisson noise of a short step, not stated
    result = _analysis([("r4.00", 4.0, 40, 0.1), ("r5.50", 5.5, 52, 0.1), ("r6.00", 6.0, 60, 0.5)])
    _, sentences = answer_sentences(result, {})
    assert "Last passing sustained rate: 5.2 req/s." in sentences
    assert verdict_table(result.steps, result.summary).splitlines()[-1].endswith("rate: 5.2 req/s")


def test_an_offer_above_its_label_is_stated_too_and_the_demo_knee_line_says_it(tmp_path):
    result = _analysis([("r2.00", 2.0, 26, 0.1), ("r3.00", 3.0, 30, 0.5)])  # 2.6 req/s offered under 2
    _, sentences = answer_sentences(result, {})
    assert "Last passing sustained rate: 2.6 req/s." in sentences
    (tmp_path / "ladder").mkdir()
    (tmp_path / "ladder" / "summary.json").write_text(json.dumps(result.summary, default=str))
    assert answer_lines(tmp_path)[0].startswith(
        "llmload demo: knee: last passing rate 2.6 req/s, first failing rate 3 req/s")
