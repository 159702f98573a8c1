"""What a report opens with and folds (issue 43 item 6): the question its run asked (rate, bursts, soak),
the queueing split's rows folded under the chart that says it."""

from __future__ import annotations

import pandas as pd
import pytest
from report_fakes import make_analysis, make_manifest

from llmload.report.answer import BURST_QUESTION, QUESTION, SOAK_QUESTION, question_of
from llmload.report.page import render_report

#: the page's text is read here, never its plots: each plot is built but not drawn (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("unrendered_plots")


def test_each_run_opens_with_its_own_question():
    assert question_of(pd.DataFrame({"phase": ["ladder", "ladder", "refine"]})) == QUESTION
    assert question_of(pd.DataFrame({"phase": ["probe", "ladder"]})) == QUESTION  # shape: auto
    assert question_of(pd.DataFrame({"phase": ["burst", "uniform"]})) == BURST_QUESTION
    assert question_of(pd.DataFrame({"phase": ["soak", "soak"]})) == SOAK_QUESTION


def test_a_burst_report_asks_the_burst_question_and_folds_the_split_rows():
    analysis = make_analysis()
    html = render_report(analysis, manifest=make_manifest())
    assert QUESTION in html  # the fake run has ladder steps
    analysis.steps = analysis.steps[analysis.steps["phase"].isin(["burst", "uniform"])].reset_index(drop=True)
    html = render_report(analysis, manifest=make_manifest())
    assert BURST_QUESTION in html and QUESTION not in html
    assert '<details class="fold" id="split-rows">' in html and 'id="split-table"' in html
