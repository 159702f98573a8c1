"""Parsing exposition text and the label encoding of the long format."""

from __future__ import annotations

import pytest

from llmload.errors import TelemetryError
from llmload.telemetry.exposition import (
    format_bound,
    format_labels,
    parse_exposition,
    parse_labels,
    render_exposition,
)

from .exposition_samples import VLLM


def test_parse_keeps_total_names_and_drops_created() -> None:
    samples = parse_exposition(VLLM)
    names = {s.name for s in samples}
    assert "vllm:num_preemptions_total" in names
    assert not any(n.endswith("_created") for n in names)
    bucket = next(s for s in samples if s.name == "vllm:request_queue_time_seconds_bucket")
    assert bucket.labels == {"engine": "0", "le": "0.3", "model_name": "m"} and bucket.value == 4.0


@pytest.mark.parametrize("text", ["<html><body>502 Bad Gateway</body></html>",
                                  "vllm:num_requests_running{model_name=\"m\" 3\n",
                                  "metric_a 1\nmetric_b not-a-number\n"])
def test_malformed_text_is_one_telemetry_error(text: str) -> None:
    with pytest.raises(TelemetryError, match="malformed exposition"):
        parse_exposition(text)


def test_nan_values_are_skipped() -> None:
    assert parse_exposition("a 1\nb NaN\n") == [("a", {}, 1.0)]


@pytest.mark.parametrize("labels", [{}, {"le": "+Inf"}, {"model": "a,b=c\\d", "pid": "7"},
                                    {"x": ""}, {"path": "/v1/chat"}])
def test_labels_round_trip(labels: dict) -> None:
    assert parse_labels(format_labels(labels)) == labels


def test_labels_are_sorted_and_bounds_canonical() -> None:
    assert format_labels({"b": 1, "a": "x"}) == "a=x,b=1"
    assert format_bound("1") == format_bound("1.0") == "1.0"
    assert format_bound("+Inf") == "+Inf"


def test_rendered_text_parses_back() -> None:
    text = render_exposition([("g", "gauge", "help", [({"gpu": "0", "name": 'A "quoted"'}, 2.5)])])
    [sample] = parse_exposition(text)
    assert sample.labels == {"gpu": "0", "name": 'A "quoted"'} and sample.value == 2.5
