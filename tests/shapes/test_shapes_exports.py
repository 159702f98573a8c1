"""The public surface of the planning layer: a change here is a change other parts depend on."""

from __future__ import annotations

import llmload.arrivals
import llmload.traces
import shapes


def test_exports_are_pinned():
    assert sorted(shapes.__all__) == sorted([
        "PHASES", "Ask", "KneeSearch", "Replay", "SearchAnswer", "StepBounds", "StepSpec", "TraceArrivals",
        "active_step", "build_plan", "derive_seed", "knee_search", "prepare_replay", "rate_label",
        "refine_step", "step_bounds",
    ])
    assert {"Arrival", "plan_arrivals", "planned_count", "step_offsets", "closed_loop_users",
            "closed_loop_arrival", "request_id"} <= set(llmload.arrivals.__all__)
    assert {"load_trace", "sniff_format", "TRACE_COLUMNS"} <= set(llmload.traces.__all__)
    for module in (shapes, llmload.arrivals, llmload.traces):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_planning_never_imports_locust():
    import subprocess
    import sys

    code = "import sys, shapes, llmload.arrivals, llmload.traces; print('locust' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_docstring_examples_run():
    import doctest

    import shapes.probe
    import shapes.steps

    for module in (llmload.arrivals, shapes.steps, shapes.probe):  # shapes.steps: rate_label, unique_label
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
