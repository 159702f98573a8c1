"""Trace replay options on the real Azure conversation trace: counts and mean rates as expected."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from llmload.config import TraceShape
from llmload.errors import ConfigError
from llmload.traces import load_trace
from shapes.replay import (
    loop_trace,
    prepare_replay,
    speed_up,
    superpose,
    thin,
    to_trace_arrivals,
    trace_span_s,
    uniform_twin,
    window_trace,
)

CONV = Path(__file__).resolve().parents[2] / "examples" / "traces" / "AzureLLMInferenceTrace_conv.csv"
pytestmark = pytest.mark.skipif(not CONV.exists(), reason="the Azure traces are not here")


@pytest.fixture(scope="module")
def conv() -> pd.DataFrame:
    return load_trace(CONV)


def shape(**kw) -> TraceShape:
    return TraceShape(file=str(CONV), **kw)


def test_window_keeps_exactly_the_arrivals_in_it(conv):
    raw = conv["offset_s"].to_numpy()
    part = window_trace(conv, 600.0, 1200.0)
    assert len(part) == int(((raw >= 600.0) & (raw < 1200.0)).sum())
    assert part["offset_s"].min() >= 0 and part["offset_s"].max() < 600.0
    replay = prepare_replay(shape(window=("10m", "20m")), seed=1)
    assert len(replay.frame) == len(part) and replay.span_s == 600.0


def test_speed_up_multiplies_the_mean_rate(conv):
    base = prepare_replay(shape(window=("0s", "5m")), seed=1)
    fast = prepare_replay(shape(window=("0s", "5m"), speedup=4.0), seed=1)
    assert len(fast.frame) == len(base.frame)
    assert fast.span_s == pytest.approx(base.span_s / 4)
    assert fast.mean_rate == pytest.approx(4 * base.mean_rate)
    assert speed_up(conv, 0.5)["offset_s"].iloc[-1] == pytest.approx(2 * conv["offset_s"].iloc[-1])


def test_thinning_keeps_about_the_fraction_and_is_seeded(conv):
    kept = thin(conv, 0.25, np.random.default_rng(3))
    n = len(conv)
    assert abs(len(kept) - 0.25 * n) < 5 * np.sqrt(n * 0.25 * 0.75)
    again = thin(conv, 0.25, np.random.default_rng(3))
    pd.testing.assert_frame_equal(kept, again)
    a = prepare_replay(shape(rate_scale=0.5), seed=9)
    b = prepare_replay(shape(rate_scale=0.5), seed=9)
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert a.mean_rate == pytest.approx(0.5 * len(conv) / trace_span_s(conv["offset_s"]), rel=0.03)


def test_superposition_multiplies_the_rate_and_keeps_every_request(conv):
    part = window_trace(conv, 0.0, 600.0)
    doubled = superpose(part, 600.0, 2.0, np.random.default_rng(1))
    assert len(doubled) == 2 * len(part)
    assert doubled["offset_s"].is_monotonic_increasing and doubled["offset_s"].max() < 600.0
    assert sorted(doubled["input_tokens"]) == sorted(list(part["input_tokens"]) * 2)
    replay = prepare_replay(shape(window=("0s", "10m"), rate_scale=2.5, scale_method="superpose"), seed=1)
    expected = 2.5 * len(part)
    assert abs(len(replay.frame) - expected) < 5 * np.sqrt(len(part) * 0.25)
    assert replay.mean_rate == pytest.approx(2.5 * len(part) / 600.0, rel=0.05)


def test_superposition_overlays_shifted_copies_of_the_recorded_bursts(conv):
    part = window_trace(conv, 0.0, 600.0)
    doubled = superpose(part, 600.0, 2.0, np.random.default_rng(1))
    original = part["offset_s"].to_numpy()
    expected = np.sort(np.concatenate([original, (original + 300.0) % 600.0]))
    np.testing.assert_allclose(doubled["offset_s"].to_numpy(), expected)
    # the recorded gaps survive inside each copy; an even spread of the same rate has none of them
    assert _per_second_cv(doubled, 600.0) > 4 * _per_second_cv(uniform_twin(doubled, 600.0), 600.0)


def _per_second_cv(frame: pd.DataFrame, span_s: float) -> float:
    counts = np.bincount(frame["offset_s"].astype(int), minlength=int(span_s))
    return float(counts.std() / counts.mean())


def test_uniform_twin_same_requests_same_mean_rate(conv):
    replay = prepare_replay(shape(window=("5m", "15m")), seed=1)
    twin = uniform_twin(replay.frame, replay.span_s)
    assert twin["input_tokens"].tolist() == replay.frame["input_tokens"].tolist()
    gaps = np.diff(twin["offset_s"].to_numpy())
    np.testing.assert_allclose(gaps, replay.span_s / len(twin))
    assert twin["offset_s"].max() < replay.span_s


def test_thinning_cannot_raise_the_rate():
    with pytest.raises(ConfigError, match="shape.trace.rate_scale: thinning can only lower"):
        prepare_replay(shape(rate_scale=2.0), seed=1)


def test_empty_window_is_a_config_error():
    with pytest.raises(ConfigError, match="shape.trace.window: no arrivals"):
        prepare_replay(shape(window=("5h", "6h")), seed=1)


def test_loop_covers_a_longer_duration(conv):
    part = window_trace(conv, 0.0, 60.0)
    looped = loop_trace(part, 60.0, 150.0)
    assert len(looped) == 2 * len(part) + int((part["offset_s"] < 30.0).sum())
    assert looped["offset_s"].max() < 150.0


def test_failed_in_source_is_counted_not_replayed(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Request tokens,Response tokens\n0,5,1\n1,5,0\n2,5,3\n3,5,0\n")
    replay = prepare_replay(TraceShape(file=str(path)), seed=1)
    assert (len(replay.frame), replay.failed_in_source, replay.source_rows) == (2, 2, 4)


def test_trace_arrivals_are_plain_lists(conv):
    carried = to_trace_arrivals(conv.head(3))
    assert carried.input_tokens == [374, 396, 879]
    assert all(type(v) is float for v in carried.offsets_s)
    assert carried.prefix_id == [None] * 3 and carried.prompt is None
    assert to_trace_arrivals(conv.head(3), use_sizes=False).output_tokens == [None] * 3
