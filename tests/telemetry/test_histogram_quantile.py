"""Quantiles from histogram deltas, as Prometheus `histogram_quantile`, and counter deltas over windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmload.telemetry.histogram import (
    histogram_bucket_range,
    histogram_buckets_between,
    histogram_quantile,
    histogram_quantile_between,
    queue_time_quantile,
)
from llmload.telemetry.series import counter_delta, series_deltas
from llmload.telemetry.sink import telemetry_frame

INF = math.inf
BOUNDS = [0.3, 0.5, 1.0, INF]


@pytest.mark.parametrize(("counts", "q", "value", "resolution"), [
    ([4, 6, 9, 10], 0.5, 0.3 + 0.2 * (5 - 4) / 2, 0.2),     # inside (0.3, 0.5]
    ([4, 6, 9, 10], 0.2, 0.3 * 2 / 4, 0.3),                  # first bucket: lower bound 0
    ([4, 6, 9, 10], 0.9, 1.0, 0.5),                          # rank 9 exactly at the top of (0.5, 1]
    ([4, 6, 9, 10], 0.95, 1.0, INF),                         # in +Inf: highest finite bound
    ([0, 0, 0, 0], 0.5, None, math.nan),                     # nothing observed
])
def test_histogram_quantile_like_prometheus(counts, q, value, resolution) -> None:
    got, res = histogram_quantile(BOUNDS, counts, q)
    if value is None:
        assert got is None and math.isnan(res)
    else:
        assert got == pytest.approx(value) and res == pytest.approx(resolution)


def test_non_monotonic_buckets_are_repaired_and_missing_inf_refused() -> None:
    assert histogram_quantile(BOUNDS, [4, 3, 9, 10], 0.4) == histogram_quantile(BOUNDS, [4, 4, 9, 10], 0.4)
    assert histogram_quantile([0.3, 0.5], [1, 2], 0.5) == (None, pytest.approx(math.nan, nan_ok=True))
    with pytest.raises(ValueError):
        histogram_quantile(BOUNDS, [1, 2, 3, 4], 1.5)


def _hist_rows(t: float, counts: list[float], source: str = "server:a", step: str | None = None) -> list[dict]:
    names = ["0.3", "0.5", "1.0", "+Inf"]
    rows = [{"t": t, "source": source, "metric": "queue_time_seconds_bucket", "value": c,
             "step": step, "labels": f"le={n}"} for n, c in zip(names, counts, strict=True)]
    rows.append({"t": t, "source": source, "metric": "scrape_error", "value": 0.0, "step": step, "labels": ""})
    return rows


def test_window_quantile_uses_deltas_not_totals() -> None:
    # before the window 100 fast requests; during it 10 slow ones
    frame = telemetry_frame(_hist_rows(0.0, [100, 100, 100, 100]) + _hist_rows(10.0, [100, 100, 105, 110])
                            + _hist_rows(20.0, [100, 100, 105, 110]))
    bounds, counts = histogram_buckets_between(frame, "queue_time_seconds", 5.0, 15.0)
    assert counts == [0, 0, 5, 10]
    value, res = queue_time_quantile(frame, 5.0, 15.0, 0.25)
    assert value == pytest.approx(0.5 + 0.5 * 2.5 / 5) and res == pytest.approx(0.5)
    # a window before any observation of the slow ones: nothing to say
    assert queue_time_quantile(frame, 0.0, 5.0, 0.5) == (None, pytest.approx(math.nan, nan_ok=True))


def test_sources_are_summed_or_selected() -> None:
    frame = telemetry_frame(_hist_rows(0.0, [0, 0, 0, 0], "server:a") + _hist_rows(0.0, [0, 0, 0, 0], "server:b")
                            + _hist_rows(9.0, [4, 4, 4, 4], "server:a") + _hist_rows(9.0, [0, 0, 0, 4], "server:b"))
    assert histogram_buckets_between(frame, "queue_time_seconds", 1, 10)[1] == [4, 4, 4, 8]
    assert queue_time_quantile(frame, 1, 10, 0.5, source="server:b")[1] == INF
    assert queue_time_quantile(frame, 1, 10, 0.5, source="server:a")[0] == pytest.approx(0.15)


def test_written_on_change_only_still_exact() -> None:
    # buckets written only when they changed: the +Inf bucket last moved long before t0
    rows = _hist_rows(0.0, [1, 2, 3, 4])
    rows += [{"t": 8.0, "source": "server:a", "metric": "queue_time_seconds_bucket", "value": 5.0,
              "step": None, "labels": f"le={le}"} for le in ("0.3",)]
    rows += [{"t": 8.0, "source": "server:a", "metric": "queue_time_seconds_bucket", "value": v,
              "step": None, "labels": f"le={le}"} for le, v in (("0.5", 6.0), ("1.0", 7.0), ("+Inf", 8.0))]
    frame = telemetry_frame(rows)
    assert histogram_buckets_between(frame, "queue_time_seconds", 1.0, 9.0)[1] == [4, 4, 4, 4]


def test_counter_deltas_baselines_and_resets() -> None:
    def row(t, v, metric="preemptions_total", source="server:a", labels=""):
        return {"t": t, "source": source, "metric": metric, "value": v, "step": None, "labels": labels}

    frame = telemetry_frame([row(0, 10), row(5, 12), row(10, 20), row(15, 3),   # restart at 15
                             row(0, 0, "scrape_error"), row(12, 7, "preemptions_total", labels="engine=1"),
                             row(11, 0, "scrape_error", "server:late"), row(12, 5, source="server:late")])
    assert counter_delta(frame, "preemptions_total", 5, 10, source="server:a") == 8 + 0  # engine=1 not yet
    # engine=1 appeared after t0 on a source already answering: from zero
    assert counter_delta(frame, "preemptions_total", 5, 12, source="server:a") == 8 + 7
    # reset: the later value counts (3), plus engine=1 from zero (7)
    assert counter_delta(frame, "preemptions_total", 10, 15, source="server:a") == 3 + 7
    # a source that did not answer by t0 has no baseline: left out
    deltas = series_deltas(frame, "preemptions_total", 5, 13)
    assert set(deltas["source"]) == {"server:a"}
    assert counter_delta(frame, "nothing", 0, 10) is None


def test_quantile_matches_exact_quantile_within_resolution() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(0.4, 500)
    bounds = [0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 5.0, INF]
    counts = [float((values <= b).sum()) for b in bounds]
    rows = [{"t": 1.0, "source": "s", "metric": "h_bucket", "value": 0.0, "step": None,
             "labels": f"le={'+Inf' if b == INF else repr(b)}"} for b in bounds]
    rows += [{"t": 2.0, "source": "s", "metric": "h_bucket", "value": c, "step": None,
              "labels": f"le={'+Inf' if b == INF else repr(b)}"} for b, c in zip(bounds, counts, strict=True)]
    frame = telemetry_frame(rows)
    for q in (0.5, 0.9, 0.95):
        value, res = histogram_quantile_between(frame, "h", 1.5, 2.5, q)
        assert abs(value - np.quantile(values, q)) <= res


@pytest.mark.parametrize(("counts", "q", "expected"), [
    ([4, 6, 9, 10], 0.5, (0.3, 0.5)),     # rank 5 in (0.3, 0.5]
    ([4, 6, 9, 10], 0.2, (0.0, 0.3)),     # first bucket: from 0
    ([4, 6, 9, 10], 0.9, (0.5, 1.0)),     # rank 9 exactly at the top of (0.5, 1]
    ([4, 6, 9, 10], 0.95, (1.0, INF)),    # past the last finite bound: no upper bound
    ([0, 0, 0, 0], 0.5, None),            # nothing observed
])
def test_histogram_bucket_range_holds_the_nearest_rank_value(counts, q, expected) -> None:
    assert histogram_bucket_range(BOUNDS, counts, q) == expected


def test_bucket_range_contains_the_true_quantile_of_random_samples() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        values = rng.exponential(rng.uniform(0.05, 2.0), size=int(rng.integers(5, 300)))
        counts = [float((values <= b).sum()) for b in BOUNDS]
        low, high = histogram_bucket_range(BOUNDS, counts, 0.95)
        truth = float(np.percentile(values, 95, method="inverted_cdf"))
        assert low < truth <= high
