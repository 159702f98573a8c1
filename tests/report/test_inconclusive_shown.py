"""The verdict `inconclusive` (a percentile target's interval straddles its threshold) is shown and
coloured wherever a verdict is, and a run whose verdict it is exits 3 (no conclusion), like insufficient."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from report_fakes import make_analysis, make_manifest

from analysis.summary import exit_code
from llmload.report.html import _cell_class
from llmload.report.page import write_report
from llmload.report.text import verdict_table
from llmload.runtime.launcher.run import verdict_exit_code

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")

REPO = Path(__file__).resolve().parents[2]


def test_an_inconclusive_run_exits_3(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"verdict": "inconclusive"}))
    assert verdict_exit_code(tmp_path) == 3 and exit_code({"verdict": "inconclusive"}) == 3


def test_the_report_colours_it_in_the_badge_and_the_step_tables(tmp_path):
    analysis = make_analysis()
    steps = analysis.steps.copy()
    steps.loc[steps.index[0], "verdict"] = "inconclusive"
    analysis = replace(analysis, steps=steps, summary={**analysis.summary, "verdict": "inconclusive"})
    text = write_report(analysis, tmp_path, manifest=make_manifest()).read_text()
    assert 'class="badge b-inconclusive" id="run-verdict">inconclusive<' in text
    assert '<td class="v-inconclusive">inconclusive</td>' in text
    assert ".b-inconclusive{background:var(--inconclusive)}" in text and "td.v-inconclusive{" in text
    assert _cell_class("inconclusive") == "v-inconclusive"


def test_the_text_table_names_the_undecided_targets():
    steps = pd.DataFrame([{"label": "r4.60", "target_rate": 4.6, "offered_rate": 4.6, "verdict": "inconclusive",
                           "failing": [], "undecided_targets": ["ttft_p95"], "status": "run", "phase": "refine"}])
    table = verdict_table(steps, {"verdict": "inconclusive"})
    assert "inconclusive  undecided: ttft_p95" in table


def test_the_web_ui_colours_it():
    js = (REPO / "llmload" / "runtime" / "locustglue" / "webui_tab.js").read_text()
    colours = js[js.index("VERDICT_COLORS = {"):js.index("};", js.index("VERDICT_COLORS = {"))]
    assert "inconclusive:" in colours
