"""Read the sim the way real clients read servers: requests + sseclient-py, NDJSON lines, Prometheus text."""

from __future__ import annotations

import json

import requests
import sseclient
from prometheus_client.parser import text_string_to_metric_families

#: fast engine steps and no model load, so tests spend little wall time
FAST = {"step_base_s": 0.005, "decode_cost_s": 0.0001, "prefill_cost_s": 0.00001, "load_time_s": 0}


def post(url: str, body: dict, *, headers: dict | None = None, stream: bool = False,
         timeout: float = 15) -> requests.Response:
    return requests.post(url, json=body, headers=headers or {}, stream=stream, timeout=timeout)


def sse(url: str, body: dict, *, headers: dict | None = None) -> tuple[requests.Response, list]:
    """POST and read the SSE stream: each event's data as JSON (or the string `[DONE]`)."""
    resp = post(url, body, headers=headers, stream=True)
    resp.raise_for_status()
    events = []
    for event in sseclient.SSEClient(resp.raw).events():
        events.append(event.data if event.data == "[DONE]" else json.loads(event.data))
    resp.close()
    return resp, events


def ndjson(url: str, body: dict, *, headers: dict | None = None) -> tuple[requests.Response, list[dict]]:
    resp = post(url, body, headers=headers, stream=True)
    lines = [json.loads(line) for line in resp.iter_lines() if line.strip()]
    resp.close()
    return resp, lines


def metrics(url: str) -> dict[str, float]:
    """`/metrics` as {sample name with sorted labels: value}; also {bare sample name: sum over labels}."""
    text = requests.get(url + "/metrics", timeout=5).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}"] = sample.value
            out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


def content_of(events: list) -> str:
    """Concatenated output text of OpenAI chat / completion chunks."""
    text = ""
    for e in events:
        if isinstance(e, dict):
            for choice in e.get("choices", []):
                delta = choice.get("delta") or {}
                text += (delta.get("content") or "") + (choice.get("text") or "")
    return text
