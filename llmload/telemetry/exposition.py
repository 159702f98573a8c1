"""Prometheus text exposition in and out: parse samples, and encode labels for the long telemetry format.

Parsing uses prometheus-client's text parser; anything it rejects (HTML, truncated lines) becomes one
`TelemetryError`, so a bad scrape is recorded as a gap rather than stopping the run. Labels are stored in
`telemetry.parquet` as one string `k=v,k=v` (sorted keys; `\\`, `,` and `=` in values escaped) so the
long format stays four plain columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from llmload.errors import TelemetryError

__all__ = [
    "Sample",
    "format_bound",
    "format_labels",
    "parse_exposition",
    "parse_labels",
    "render_exposition",
]


class Sample(NamedTuple):
    """One exposed sample: the full sample name (`..._total`, `..._bucket`), its labels, its value."""

    name: str
    labels: dict[str, str]
    value: float


def parse_exposition(text: str) -> list[Sample]:
    """All samples of a Prometheus text page, minus `_created` timestamps and NaN values.

    Raises TelemetryError when the text is not valid exposition format.
    """
    samples: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created") or math.isnan(s.value):
                    continue
                samples.append(Sample(s.name, dict(s.labels), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise TelemetryError(f"malformed exposition text: {str(exc)[:120]}") from None
    return samples


def format_bound(le: str | float) -> str:
    """A bucket bound in one canonical spelling (`0.1`, `1.0`, `+Inf`) so `1` and `1.0` match."""
    value = float(le)
    return "+Inf" if value == math.inf else repr(value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def format_labels(labels: Mapping[str, object]) -> str:
    """`{"b": 1, "a": "x"}` -> `a=x,b=1` (sorted; separators inside values escaped)."""
    return ",".join(f"{_escape(str(k))}={_escape(str(v))}" for k, v in sorted(labels.items()))


def parse_labels(text: str | None) -> dict[str, str]:
    """Inverse of `format_labels`."""
    out: dict[str, str] = {}
    if not text:
        return out
    key, buf, in_value, escaped = "", [], False, False
    for ch in text:
        if escaped:
            buf.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == "=" and not in_value:
            key, buf, in_value = "".join(buf), [], True
        elif ch == "," and in_value:
            out[key] = "".join(buf)
            key, buf, in_value = "", [], False
        else:
            buf.append(ch)
    if in_value:
        out[key] = "".join(buf)
    return out


def _label_value(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_exposition(families: list[tuple[str, str, str, list[tuple[dict, float]]]]) -> str:
    """Prometheus text for `(name, type, help, [(labels, value), ...])` families."""
    lines: list[str] = []
    for name, kind, help_text, samples in families:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            body = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {value!r}" if body else f"{name} {value!r}")
    return "\n".join(lines) + "\n"
