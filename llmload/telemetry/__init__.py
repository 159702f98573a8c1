"""Server, GPU and fixed-condition telemetry (issue 5).

    TelemetryCollector(config, run_dir)   polls /metrics, /slots, /api/ps, NVML or DCGM on the master,
                                          appending `telemetry.jsonl`; `finalise_telemetry` -> Parquet
    queue_time_quantile(df, t0, t1, q)    server queue quantile from histogram deltas (+ resolution)
    build_manifest / write_manifest       fixed conditions, fingerprint, `diff_conditions` for compare
    serve_gpu_agent                       `llmload gpu-agent`: NVML as Prometheus text for remote runs
"""

from importlib import import_module

#: public name -> submodule, imported on first use: the master writes the manifest and starts the
#: collector before the first arrival, and neither needs pandas / pyarrow (the histograms, the series
#: and the Parquet sink do, later)
_LAZY = {"LIVE_METRICS": "collector", "TelemetryCollector": "collector", "DcgmPoller": "gpu", "NvmlSampler": "gpu",
         "GpuAgent": "gpu_agent", "serve_gpu_agent": "gpu_agent", "histogram_buckets_between": "histogram",
         "histogram_quantile": "histogram", "histogram_quantile_between": "histogram",
         "histogram_summary": "histogram", "queue_time_quantile": "histogram", "build_manifest": "manifest",
         "diff_conditions": "manifest", "fingerprint": "manifest", "read_manifest": "manifest",
         "redact_config": "manifest", "write_manifest": "manifest", "derive_ollama_queue": "ollama",
         "ollama_timings": "ollama", "probe_server": "probe", "PROFILES": "profiles",
         "detect_flavor_from_names": "profiles", "normalise": "profiles", "counter_delta": "series",
         "gpu_memory_peak": "series", "gpu_memory_peak_per_step": "series", "series_deltas": "series",
         "TELEMETRY_SCHEMA": "sink", "Point": "sink", "TelemetrySink": "sink", "finalise_telemetry": "sink",
         "read_telemetry": "sink"}

__all__ = [
    "LIVE_METRICS",
    "PROFILES",
    "TELEMETRY_SCHEMA",
    "DcgmPoller",
    "GpuAgent",
    "NvmlSampler",
    "Point",
    "TelemetryCollector",
    "TelemetrySink",
    "build_manifest",
    "counter_delta",
    "derive_ollama_queue",
    "detect_flavor_from_names",
    "diff_conditions",
    "finalise_telemetry",
    "fingerprint",
    "gpu_memory_peak",
    "gpu_memory_peak_per_step",
    "histogram_buckets_between",
    "histogram_quantile",
    "histogram_quantile_between",
    "histogram_summary",
    "normalise",
    "ollama_timings",
    "probe_server",
    "queue_time_quantile",
    "read_manifest",
    "read_telemetry",
    "redact_config",
    "series_deltas",
    "serve_gpu_agent",
    "write_manifest",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f"llmload.telemetry.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'llmload.telemetry' has no attribute {name!r}")
