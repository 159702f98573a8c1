"""The telemetry package's public surface, pinned."""

from __future__ import annotations

import llmload.telemetry as telemetry


def test_exported_members() -> None:
    assert set(telemetry.__all__) == {
        "LIVE_METRICS", "PROFILES", "TELEMETRY_SCHEMA", "DcgmPoller", "GpuAgent", "NvmlSampler", "Point",
        "TelemetryCollector", "TelemetrySink", "build_manifest", "counter_delta", "derive_ollama_queue",
        "detect_flavor_from_names", "diff_conditions", "finalise_telemetry", "fingerprint", "gpu_memory_peak",
        "gpu_memory_peak_per_step", "histogram_buckets_between", "histogram_quantile",
        "histogram_quantile_between", "histogram_summary", "normalise", "ollama_timings", "probe_server", "queue_time_quantile",
        "read_manifest", "read_telemetry", "redact_config", "series_deltas", "serve_gpu_agent", "write_manifest",
    }
    for name in telemetry.__all__:
        assert getattr(telemetry, name) is not None
