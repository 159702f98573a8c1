"""Small truths of the report page (issue 17): headings a reader can place, a ratio of 1 drawn as no
difference, timeline lines that do not break between steps."""

from __future__ import annotations

import numpy as np
from report_fakes import make_analysis, make_manifest

from llmload.report.page import render_report
from llmload.report.plots import RATIO_BETTER, RATIO_SAME, RATIO_WORSE, bridge_gaps, ratio_colours


def test_worksheet_heading_needs_no_seed_numbers():
    html = render_report(make_analysis(), manifest=make_manifest())
    assert "seed 000" not in html and "Load-test worksheet" in html and "worksheet.csv" in html


def test_a_ratio_of_one_is_neither_better_nor_worse():
    metrics = ["ttft_p95_s", "ttft_p95_s", "ttft_p95_s", "goodput", "goodput", "goodput"]
    ratios = np.array([1.0, 2.4, 0.5, 1.0, 0.62, 1.3])
    assert ratio_colours(metrics, ratios) == [RATIO_SAME, RATIO_WORSE, RATIO_BETTER,
                                              RATIO_SAME, RATIO_WORSE, RATIO_BETTER]
    assert ratio_colours(["e2e_p95_s"], np.array([1.004])) == [RATIO_SAME]  # within 1%: no difference


def test_a_difference_within_its_noise_is_not_coloured():
    """Client wait p95 1.45 ms against 1.01 ms: 44% apart but 0.44 ms, below the 5-ms latency floor: grey;
    the same ratio on 145 ms against 101 ms is a difference."""
    ratios = np.array([1.45 / 1.01, 1.45 / 1.01, 0.96 / 0.95, 0.5 / 1.0])
    differences = [0.00044, 0.044, 0.01, -0.5]
    metrics = ["client_wait_p95_s", "client_wait_p95_s", "slo_attainment", "goodput"]
    assert ratio_colours(metrics, ratios, differences) == [RATIO_SAME, RATIO_WORSE, RATIO_SAME, RATIO_WORSE]


def test_timeline_lines_bridge_the_gap_between_steps_but_not_a_long_outage():
    t = np.arange(30.0)
    values = np.where((t >= 10) & (t < 13), np.nan, 1.0)  # 3 s between steps: nothing sent, no TTFT
    x, y = bridge_gaps(t, values)
    assert not np.isnan(y).any() and x[9] == 9.0 and x[10] == 13.0
    values[15:28] = np.nan  # a 13 s outage stays a visible break
    x, y = bridge_gaps(t, values)
    assert np.isnan(y).sum() == 1 and x[np.isnan(x)].size == 1


def test_plot_ticks_are_nice_numbers_and_request_counts_whole():
    """Issue 32: ticks read 0, 2.5, 5, 7.5 (0, 3, 5, 8 once rounded) and 0.0, 1.3, 2.5 requests."""
    import re

    import pandas as pd
    from matplotlib.figure import Figure

    from llmload.report.plots import nice_ticks, timeline_plot

    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 13.0], [0, 0.7])
    nice_ticks(fig)
    for ticks in (ax.xaxis.get_majorticklocs(), ax.yaxis.get_majorticklocs()):
        step = float(ticks[1] - ticks[0])
        assert round(step / 10 ** np.floor(np.log10(step)), 6) in (1.0, 2.0, 5.0), ticks
    timeline = pd.DataFrame({"t": np.arange(20.0), "arrivals": [0, 1, 0, 0, 1] * 4, "completed": [1, 0, 0, 1, 0] * 4})
    svg, _ = timeline_plot(timeline, make_analysis().steps)
    labels = re.findall(r">([-−]?\d+(?:\.\d+)?)</text>", svg)
    assert labels and not [x for x in labels if "." in x], labels  # whole requests, never 0.5 or 1.5
