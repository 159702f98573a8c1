"""The report's "What limited it" and "Bursts and recovery" sections, bursts on the timeline, and the charts
against offered rate left out when every step ran at one mean rate."""

from __future__ import annotations

from report_fakes import Page, make_analysis

from llmload.report import write_report

_LIMITS = {
    "r0.50": {"kind": "none", "evidence": {"running_at_slots_share": 0.1, "kv_usage_peak": 0.05}, "advice": "x"},
    "r1.00": {"kind": "none", "evidence": {"running_at_slots_share": 0.3, "kv_usage_peak": 0.08}, "advice": "x"},
    "r2.00": {"kind": "batch_slots", "advice": "raise max_num_seqs or add replicas",
              "evidence": {"slots": 6, "running_at_slots_share": 0.95, "waiting_mean": 3.1, "kv_usage_peak": 0.14,
                           "server_queue_mean_s": 0.9, "prefill_mean_s": 0.05, "capped_share": 0.0}},
    "burst": {"kind": "client_cap", "advice": "raise client.max_concurrency",
              "evidence": {"capped_share": 0.91, "client_wait_p95_s": 12.6, "max_concurrency": 32,
                           "received_rate": 5.1}},
}
_BURSTS = {"bursts": [{"step": "burst", "start": 1170.0, "end": 1174.0, "duration_s": 4.0, "arrivals": 80,
                       "peak_to_mean": 6.5, "queue_basis": "waiting", "pre_burst_queue": 0.0, "peak_queue": 30.0,
                       "drain_s": 6.0, "recovery_s": 5.0, "ttft_p95_s": 3.0, "good_share": 0.05,
                       "met_slo": False}],
           "burstiness": {"burst": {"interarrival_cv": 0.62, "peak_to_mean_10s": 2.6, "versus_poisson": "less"}}}


def _analysis():
    analysis = make_analysis()
    analysis.steps = analysis.steps.assign(limit=[_LIMITS.get(label) for label in analysis.steps["label"]])
    analysis.summary = {**analysis.summary, **_BURSTS}
    return analysis


def test_limits_and_bursts_sections(tmp_path):
    text = write_report(_analysis(), tmp_path).read_text()
    parsed = Page()
    parsed.feed(text)
    assert "limits" in parsed.ids and "bursts" in parsed.ids
    assert "plot-limits" in parsed.plots and "plot-timeline" in parsed.plots
    rows = {r[0]: r for r in parsed.tables["limits-table"][1:]}
    assert rows["r2.00"][2] == "batch_slots" and rows["r2.00"][3].startswith(
        "all 6 batch slots busy and requests waiting 900 ms on average in the server queue, KV cache at 14%")
    assert rows["burst"][2] == "client_cap" and "91% of arrivals waited" in rows["burst"][3]
    assert "r4.00" not in rows  # not run: no limit
    bursts = parsed.tables["bursts-table"]
    assert bursts[1][bursts[0].index("drain s")] == "6" and bursts[1][bursts[0].index("met SLO")] == "no"
    assert "inter-arrival coefficient of variation 0.62, peak-to-mean arrivals per 10 s 2.60: less bursty than " \
           "Poisson" in text
    # the burst is shaded on the timeline: one more red band than without bursts
    plain = make_analysis()
    plain_text = write_report(plain, tmp_path / "plain").read_text()
    assert text.count("#f4b6b0") > plain_text.count("#f4b6b0")


def test_one_mean_rate_drops_the_charts_against_rate(tmp_path):
    analysis = _analysis()
    analysis.steps = analysis.steps[analysis.steps["phase"].isin(["burst", "uniform"])].reset_index(drop=True)
    parsed = Page()
    text = write_report(analysis, tmp_path).read_text()
    parsed.feed(text)
    assert not {"plot-latency", "plot-goodput", "plot-tokens"} & set(parsed.plots)
    assert "single-rate-note" in parsed.ids and "plot-timeline" in parsed.plots
