"""A short Poisson step draws fewer (or more) arrivals than its rate times its window: the demo's r5.50
offered 4.10 req/s. The answer, the CLI verdict table and the demo's knee line then state the realised
offered rate next to the target label whenever the two differ by more than 10%, so "highest passing
rate 5.5" is never read as the load the server carried."""

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
from llmload.runtime.launcher.demo import answer_lines  # noqa: E402

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


def test_a_passing_step_is_stated_at_its_realised_offered_rate_never_its_label():
    # r5.50 drew 41 arrivals in 10 s: offered 4.1 req/s (the demo's case); r6.00 fails on TTFT
    result = _analysis([("r4.00", 4.0, 40, 0.1), ("r5.50", 5.5, 41, 0.1), ("r6.00", 6.0, 60, 0.5)])
    row = result.steps.set_index("label").loc["r5.50"]
    assert row["verdict"] == "pass" and abs(row["offered_rate"] - 41 / WINDOW) < 1e-9  # ground truth: the records
    assert result.summary["last_passing_rate"] == 4.1 and result.summary["last_passing_target_rate"] == 5.5
    _, sentences = answer_sentences(result, {})
    assert "Highest passing step: 4.1 req/s offered (step r5.50)." in sentences
    assert any(s.startswith("First failing step: 6 req/s offered (step r6.00)") for s in sentences)
    assert not any("5.5 req/s" in s for s in sentences)  # the label never stands in for the load
    assert verdict_table(result.steps, result.summary).splitlines()[-1].endswith(
        "highest passing step: 4.1 req/s offered (step r5.50)")


def test_the_answer_leads_with_the_knee_and_its_interval_and_the_demo_says_the_same(tmp_path):
    result = _analysis([("r2.00", 2.0, 20, 0.1), ("r3.00", 3.0, 30, 0.5)])
    _, sentences = answer_sentences(result, {})
    from analysis.knee import knee_of, knee_sentence

    said = knee_sentence(knee_of(result.summary))
    assert said.startswith("knee ") and "None" not in said
    assert sentences[0].startswith("K" + said[1:])
    (tmp_path / "ladder").mkdir()
    (tmp_path / "ladder" / "summary.json").write_text(json.dumps(result.summary, default=str))
    assert answer_lines(tmp_path)[0] == f"llmload demo: {said}"
