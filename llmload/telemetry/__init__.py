"""Server, GPU and fixed-condition telemetry (issue 5).

    TelemetryCollector(config, run_dir)   polls /metrics, /slots, /api/ps, NVML or DCGM on the master,
                                          appending `telemetry.jsonl`; `finalize_telemetry` -> Parquet
    queue_time_quantile(df, t0, t1, q)    server queue quantile from histogram deltas (+ resolution)
    build_manifest / write_manifest       fixed conditions, fingerprint, `diff_conditions` for compare
    serve_gpu_agent                       `llmload gpu-agent`: NVML as Prometheus text for remote runs
"""

from llmload.telemetry.collector import LIVE_METRICS, TelemetryCollector
from llmload.telemetry.gpu import DcgmPoller, NvmlSampler
from llmload.telemetry.gpu_agent import GpuAgent, serve_gpu_agent
from llmload.telemetry.histogram import (
    histogram_buckets_between,
    histogram_quantile,
    histogram_quantile_between,
    histogram_summary,
    queue_time_quantile,
)
from llmload.telemetry.manifest import (
    build_manifest,
    diff_conditions,
    fingerprint,
    read_manifest,
    redact_config,
    write_manifest,
)
from llmload.telemetry.ollama import derive_ollama_queue, ollama_timings
from llmload.telemetry.probe import probe_server
from llmload.telemetry.profiles import PROFILES, detect_flavor_from_names, normalise
from llmload.telemetry.series import counter_delta, gpu_memory_peak, gpu_memory_peak_per_step, series_deltas
from llmload.telemetry.sink import TELEMETRY_SCHEMA, Point, TelemetrySink, finalize_telemetry, read_telemetry

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
    "finalize_telemetry",
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
