"""Adding an SLO dimension is one `Dimension` entry in `llmload.slo`: with only that entry, a config may
set it, the verdict judges it against the step's percentile of its per-request column, goodput judges
each request on it, the summary lists it and the answer names it with its value."""

from __future__ import annotations

import numpy as np
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from llmload import slo as slo_dims
from llmload.config import SLO
from llmload.report.answer import answer_sentences


def test_one_registry_entry_is_enough_for_a_new_latency_dimension(monkeypatch):
    # a new name judged on an existing per-request column (client_wait_s)
    new = slo_dims.Dimension(name="wait_again", kind="latency", setting="wait_again", figure="wait_again_p{p}_s",
                             unit="s", display="wait again", request_column="client_wait_s")
    monkeypatch.setattr(slo_dims, "LATENCY", (*slo_dims.LATENCY, new))
    monkeypatch.setattr(slo_dims, "_BY_NAME", {**slo_dims._BY_NAME, new.name: new})

    slo = SLO.model_validate({"wait_again_p90": "50ms", "min_samples": 10})
    # 0 to 100 ms; ground truth p90 = 90 ms, 20 requests over 50 ms; scrambled in time (a steady ramp is
    # one autocorrelated trend, whose p90 interval straddles the target: inconclusive, not a clear fail)
    waits = np.linspace(0.0, 0.1, 40)[(np.arange(40) * 7) % 40]
    rows = [request(f"r{i}", "s", float(i), wait=float(w)) for i, w in enumerate(waits)]
    result = analyze(run_of(rows, [plan_step("s", 0, rate=1.0, length=40.0)]), slo)
    row = result.steps.iloc[0]
    assert abs(row["wait_again_p90_s"] - np.percentile(waits, 90)) < 1e-12
    assert row["verdict"] == "fail" and list(row["failing"]) == ["wait_again_p90"]
    good = result.requests["good"]
    assert int(good.sum()) == int((waits <= 0.05 + 1e-9).sum())  # goodput judged each request on it
    assert result.summary["slo"]["thresholds"]["wait_again_p90_s"] == 0.05
    _, sentences = answer_sentences(result, {})
    assert any("what failed first: wait_again_p90 (90 ms > 50 ms)" in s for s in sentences), sentences
