"""End to end in virtual time: `shape.trace.scales` of a whole `llmload run --virtual` (the real plan,
controller, worker runtimes, analysis and report; the sim's engine answering): one trace with a known burst
replayed at two mean rates, each with its uniform twin (four steps); summary.json's each step's TTFT p95 and
`burst_knee` are checked against the sim's engine alone replaying the same time-scaled trace, and the
report says it in one sentence. The live path of a trace replay (Locust, the sim's HTTP) is
tests/analysis/test_bursts_e2e.py's."""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from support import run_said, write_config

from llmload.runtime.virtual.run import run_virtual as run_whole
from llmload.sim.truth import engine_limits, run_virtual
from shapes.replay import scale_to_rate, uniform_twin

pytestmark = pytest.mark.slow

SIM = {"max_num_seqs": 2, "step_base_s": "20ms"}
SPAN_S = 12.0
SLO_S = 0.3


def _virtual_p95(offsets: np.ndarray, rate: float, *, uniform: bool = False) -> float:
    """TTFT p95 of the trace time-scaled to `rate` (or its uniform twin), served by the sim's engine in
    virtual time."""
    scaled, span = scale_to_rate(pd.DataFrame({"offset_s": offsets}), SPAN_S, rate)
    if uniform:
        scaled = uniform_twin(scaled, span)
    n = len(scaled)
    ttft = run_virtual(engine_limits(SIM), scaled["offset_s"].to_numpy(), np.full(n, 16), np.full(n, 8))["ttft_s"]
    return float(np.percentile(ttft, 95))


def _true_burst_knee(offsets: np.ndarray) -> float:
    lo, hi = 3.0, 12.0
    assert _virtual_p95(offsets, lo) < SLO_S < _virtual_p95(offsets, hi)
    while hi - lo > 0.02:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _virtual_p95(offsets, mid) > SLO_S else (mid, hi)
    return (lo + hi) / 2


def test_trace_scales_run_writes_the_burst_knee(tmp_path, unrendered_plots):
    # the report's text is read (its sentence, the plot's figure and the table), not its drawn plots
    sim = tmp_path / "sim.yaml"
    sim.write_text(yaml.safe_dump(SIM), encoding="utf-8")
    # 24 arrivals over 12 s: one a second, and 12 more packed into 1.5 s from 5 s
    offsets = np.sort(np.concatenate([np.arange(0.0, SPAN_S, 1.0), 5.0 + np.arange(12) * 0.125 + 0.01]))
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n" + "".join(f"{t:.3f},16,8\n" for t in offsets))
    # the discard port: a run that contacted the target would fail its requests
    config = {"target": {"url": "http://127.0.0.1:9", "api": "openai-chat", "model": "sim-model", "server": "vllm"},
              "requests": {"ignore_eos": True},
              "shape": {"trace": {"file": str(trace), "format": "llmload", "window": ["0s", f"{SPAN_S:g}s"],
                                  "scales": [3, 12], "drain_timeout": "20s"}},
              "slo": {"ttft_p95": f"{SLO_S:g}s", "min_samples": 5},
              "client": {"max_concurrency": 64, "max_send_lag_p99": "500ms"},
              "telemetry": {"gpu": "off", "interval": "250ms"}}
    run_dir = tmp_path / "run"
    code = run_whole(write_config(tmp_path, config), out=run_dir, sim_path=sim)
    assert code in (0, 1), run_said(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = {s["label"]: s for s in summary["steps"]}
    assert list(steps) == ["burst-r3.00", "uniform-r3.00", "burst-r12.00", "uniform-r12.00"]
    assert steps["burst-r3.00"]["verdict"] == "pass" and steps["burst-r12.00"]["verdict"] == "fail", \
        run_said(run_dir)
    assert steps["uniform-r12.00"]["verdict"] == "pass", run_said(run_dir)

    # each step's TTFT p95 is the engine's alone on the same time-scaled trace (the step's percentile
    # and the window's requests are the analysis's own: not to the microsecond)
    for label, step in steps.items():
        rate = 3.0 if label.endswith("r3.00") else 12.0
        truth = _virtual_p95(offsets, rate, uniform=label.startswith("uniform"))
        assert step["ttft_p95_s"] == pytest.approx(truth, rel=0.35, abs=0.06), (label, step["ttft_p95_s"], truth)
    # two mean rates bracket the knee: the estimate lies between them, as does the true crossing; with
    # two points 4x apart the interpolation is coarse (tests/analysis/test_trace_knee.py checks the
    # estimate's precision with seven)
    knee = summary["burst_knee"]
    truth = _true_burst_knee(offsets)
    assert knee["binding"] == "ttft_p95" and 3.0 <= knee["rate"] <= 12.0 and 3.0 <= truth <= 12.0, (knee, truth)
    assert knee["rates_run"] == [pytest.approx(3.0, rel=0.05), pytest.approx(12.0, rel=0.05)]
    assert knee["bracket"] == [pytest.approx(3.0, rel=0.05), pytest.approx(12.0, rel=0.05)]
    # evenly spaced the same trace held at both mean rates: no uniform knee inside the rates run
    assert knee["uniform"]["rate"] is None and knee["uniform"]["binding"] is None
    # said in the answer and in the bursts section
    report = html.unescape((run_dir / "report.html").read_text())
    assert report.count("With this trace's bursts the service holds") >= 2, report[:3000]
    assert 'id="plot-burst-knee"' in report and 'id="burst-knee-table"' in report
