"""Per-turn metrics of sessions: the turn table on hand-built records, and the report's section."""

from __future__ import annotations

import numpy as np
import pytest
from analysis_frames import plan_step, request, run_of

from analysis import analyze
from analysis.turns import turn_table
from llmload.config import SLO
from llmload.report.page import render_report

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")


def _session_rows() -> list[dict]:
    rows = []
    for s in range(10):
        for turn in range(3):
            row = request(f"s{s}-t{turn}", "s", s + 0.3 * turn, ttft=0.1 * (turn + 1) + 0.001 * s)
            rows.append({**row, "session_id": f"s{s}", "turn": turn, "cached_tokens": 16 * turn})
    return rows


def test_turn_table_per_turn_index() -> None:
    result = analyze(run_of(_session_rows(), [plan_step("s", 0, rate=1.0, length=20.0)]), SLO())
    table = turn_table(result.requests)
    assert list(table["turn"]) == [0, 1, 2] and list(table["requests"]) == [10, 10, 10]
    for turn in range(3):
        ttft = 0.1 * (turn + 1) + 0.001 * np.arange(10)
        assert np.isclose(table.loc[turn, "ttft_p95_s"], np.percentile(ttft, 95))
        assert table.loc[turn, "cached_tokens_mean"] == 16 * turn
    assert "Sessions: TTFT by turn" in render_report(result)


def test_no_sessions_no_turn_table() -> None:
    result = analyze(run_of([request("r0", "s", 0.0)], [plan_step("s", 0, rate=1.0)]), SLO())
    assert turn_table(result.requests) is None
    assert "TTFT by turn" not in render_report(result)
