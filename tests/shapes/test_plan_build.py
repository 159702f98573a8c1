"""Plans built from configs for every shape kind; steps survive a Locust message; step timing queries."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest

from llmload.arrivals import plan_arrivals, step_offsets
from llmload.config import load_config, parse_config
from llmload.errors import ConfigError
from shapes.plan import build_plan, knee_search, rate_label, refine_step
from shapes.steps import StepSpec, active_step, step_bounds

CONV = Path(__file__).resolve().parents[2] / "examples" / "traces" / "AzureLLMInferenceTrace_conv.csv"
needs_azure = pytest.mark.skipif(not CONV.exists(), reason="the Azure traces are not here")
TARGET = {"url": "http://127.0.0.1:9"}


def config(shape: dict, **rest):
    return parse_config({"target": TARGET, "shape": shape, **rest})


LADDER = {"ladder": {"arrival": "constant", "warmup": "5s", "drain_timeout": "20s",
                     "steps": [{"rate": 0.5, "duration": "1m"}, {"rate": 2, "duration": "30s"},
                               {"rate": 2, "duration": "30s"}],
                     "refine": {"resolution": 0.25, "max_steps": 4}}}


def test_ladder_steps_labels_windows_and_seeds():
    steps = build_plan(config(LADDER, requests={"seed": 3}))
    assert [s.label for s in steps] == ["r0.50", "r2.00", "r2.00-2"]
    assert {s.phase for s in steps} == {"ladder"}
    first = steps[0]
    assert (first.target_rate, first.warmup_s, first.duration_s, first.drain_timeout_s) == (0.5, 5.0, 60.0, 20.0)
    assert len({s.seed for s in steps}) == 3
    assert [s.seed for s in build_plan(config(LADDER, requests={"seed": 3}))] == [s.seed for s in steps]
    assert len(step_offsets(first)) == 33  # constant 0.5/s over warm-up + window = 65 s
    bounds = step_bounds(first, 100.0)
    assert (bounds.window_start, bounds.window_end, bounds.drain_deadline) == (105.0, 165.0, 185.0)
    in_window = [a for a in plan_arrivals(first, 100.0, 0, 1) if bounds.window_start <= a.scheduled_at]
    assert len(in_window) == 30


def test_refine_steps_extend_the_ladder_with_unique_labels():
    cfg = config(LADDER)
    steps = build_plan(cfg)
    search = knee_search(cfg, [], estimate=lambda rows: SimpleNamespace(rate=1.25, low=1.0, high=1.5,
                                                                        half_width_rel=0.2, binding="ttft_p95"))
    rate = search.next_step().rate
    step = refine_step(cfg.shape.ladder, rate, index=len(steps), seed=1, taken=[s.label for s in steps])
    assert (step.label, step.phase, step.index, step.duration_s) == ("r1.25", "refine", 3, 60.0)
    again = refine_step(cfg.shape.ladder, 2.0, index=4, seed=1, taken=[s.label for s in steps])
    assert again.label == "r2.00-3" and again.duration_s == 30.0
    assert knee_search(config({"ladder": {"steps": [{"rate": 1, "duration": "1m"}]}})) is None
    assert rate_label(0.333) == "r0.333"


def test_concurrency_ladder_is_a_named_closed_loop():
    steps = build_plan(config({"concurrency": {"levels": [1, 2, 4, 8], "requests_per_level": 40}}))
    assert [s.label for s in steps] == ["c1", "c2", "c4", "c8"]
    assert {(s.phase, s.arrival, s.requests, s.duration_s) for s in steps} == {("concurrency", "closed", 40, None)}
    timed = build_plan(config({"concurrency": {"levels": [4], "duration": "2m"}}))[0]
    assert (timed.requests, timed.duration_s, timed.concurrency) == (None, 120.0, 4)


@needs_azure
def test_trace_plan_has_burst_then_uniform_at_the_same_mean_rate():
    steps = build_plan(config({"trace": {"file": str(CONV), "window": ["0s", "10m"], "speedup": 0.5,
                                         "uniform_twin": True, "warmup": "30s"}}))
    burst, uniform = steps
    assert (burst.label, burst.phase, uniform.label, uniform.phase) == ("burst", "burst", "uniform", "uniform")
    assert len(burst.trace) == len(uniform.trace) == 2867  # arrivals in the first 10 minutes
    assert burst.duration_s == uniform.duration_s == 1200.0 - 30.0
    assert burst.target_rate == uniform.target_rate == pytest.approx(2867 / 1200.0)
    assert burst.trace.input_tokens == uniform.trace.input_tokens


def test_trace_file_relative_to_the_config_folder(tmp_path):
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n0,5,5\n1,6,6\n2,7,7\n")
    path = tmp_path / "run.yaml"
    path.write_text(f"target: {{url: {TARGET['url']}}}\nshape:\n  trace: {{file: t.csv}}\n")
    steps = build_plan(load_config(path), base_dir=tmp_path)
    assert [s.label for s in steps] == ["burst"] and steps[0].trace.offsets_s == [0.0, 1.0, 2.0]
    with pytest.raises(ConfigError, match="t.csv: trace file not found"):
        build_plan(load_config(path), base_dir=tmp_path / "elsewhere")


def test_soak_by_rate_is_sliced_without_pauses():
    steps = build_plan(config({"soak": {"rate": 2, "duration": "25m", "slice": "10m", "arrival": "poisson"}}))
    assert [s.label for s in steps] == ["soak-000", "soak-001", "soak-002"]
    assert [s.duration_s for s in steps] == [600.0, 600.0, 300.0]
    assert [s.drain for s in steps] == [False, False, True]
    assert {s.drain_timeout_s for s in steps} == {60.0}  # no slice's requests are cut at its end
    assert {s.phase for s in steps} == {"soak"} and len({s.seed for s in steps}) == 3


@needs_azure
def test_trace_driven_soak_loops_the_trace():
    steps = build_plan(config({"soak": {"duration": "150s", "slice": "1m",
                                        "trace": {"file": str(CONV), "window": ["0s", "1m"]}}}))
    assert [s.duration_s for s in steps] == [60.0, 60.0, 30.0]
    first, second, third = (len(s.trace) for s in steps)
    assert first == second and 0 < third < first
    assert steps[1].trace.offsets_s == pytest.approx(steps[0].trace.offsets_s, abs=1e-9)


def test_soak_trace_refuses_options_of_a_two_phase_replay():
    with pytest.raises(ConfigError, match="shape.soak.trace.uniform_twin: does not apply to a soak"):
        build_plan(config({"soak": {"duration": "1m", "trace": {"file": "x.csv", "uniform_twin": True}}}))


def test_steps_survive_a_locust_message_and_plan_json():
    for step in build_plan(config(LADDER)) + build_plan(config({"concurrency": {"levels": [2]}})):
        packed = msgpack.unpackb(msgpack.packb(step.to_dict()))
        assert StepSpec.from_dict(packed) == step
        assert StepSpec.from_dict(json.loads(json.dumps(step.to_dict()))) == step


def test_invalid_steps_are_refused():
    with pytest.raises(ValueError, match="phase"):
        StepSpec(label="x", index=0, phase="warp", arrival="poisson", target_rate=1, duration_s=1)
    with pytest.raises(ValueError, match="needs target_rate"):
        StepSpec(label="x", index=0, phase="ladder", arrival="poisson", duration_s=1)
    with pytest.raises(ValueError, match="needs concurrency"):
        StepSpec(label="x", index=0, phase="concurrency", arrival="closed", requests=3)


def test_active_step_and_step_parts_at_chosen_times():
    steps = build_plan(config(LADDER))  # windows of 65 s (with warm-up), 35 s, 35 s; drain 20 s
    starts = [0.0, 70.0, None]
    assert active_step(steps, starts, -1.0) is None
    assert active_step(steps, starts, 3.0) is steps[0]
    assert active_step(steps, starts, 69.0) is steps[0]  # draining
    assert active_step(steps, starts, 70.0) is steps[1]
    assert active_step(steps, starts, 130.0) is None  # past step 2's drain deadline (125 s)
    bounds = step_bounds(steps[1], 70.0)
    assert [bounds.part_at(t) for t in (60, 72, 80, 110, 130)] == ["before", "warmup", "window", "drain", "after"]
