"""`llmload gpu-agent`: NVML samples of this host served as Prometheus text for a remote run to scrape.

The page uses DCGM exporter names (`DCGM_FI_DEV_FB_USED`/`_FB_FREE` in MiB, `DCGM_FI_DEV_GPU_UTIL` in
percent) so a run reads it with `telemetry.gpu: dcgm:http://gpuhost:9401`, plus exact byte counts and
per-process memory under `llmload_gpu_*` names, which the DCGM poller prefers. Sampling runs in its own
thread every `interval`; a scrape returns the latest sample. Without NVML it refuses to start (exit 2).
"""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from llmload.errors import TelemetryError
from llmload.telemetry.exposition import render_exposition
from llmload.telemetry.gpu import MIB, GpuReading, NvmlSampler

__all__ = ["GpuAgent", "render_readings", "serve_gpu_agent"]

log = logging.getLogger("llmload.telemetry")


def render_readings(readings: list[GpuReading], names: dict[int, str] | None = None) -> str:
    """Prometheus text (DCGM names plus `llmload_gpu_*`) for one NVML sample of every GPU."""
    names = names or {}

    def labels(r: GpuReading) -> dict:
        return {"gpu": str(r["index"]), "modelName": names.get(r["index"], "")}

    fams: list[tuple[str, str, str, list]] = [
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
         [(labels(r), round(r["used_bytes"] / MIB)) for r in readings]),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
         [(labels(r), round((r["total_bytes"] - r["used_bytes"]) / MIB)) for r in readings]),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).",
         [(labels(r), r["utilization"] * 100.0) for r in readings if r["utilization"] is not None]),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).",
         [(labels(r), r["power_w"]) for r in readings if r.get("power_w") is not None]),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
         [(labels(r), round(r["energy_j"] * 1000.0)) for r in readings if r.get("energy_j") is not None]),
        ("llmload_gpu_memory_used_bytes", "gauge", "GPU memory used in bytes (NVML).",
         [(labels(r), r["used_bytes"]) for r in readings]),
        ("llmload_gpu_memory_total_bytes", "gauge", "GPU memory total in bytes (NVML).",
         [(labels(r), r["total_bytes"]) for r in readings]),
        ("llmload_gpu_process_memory_bytes", "gauge", "GPU memory used per process in bytes (NVML).",
         [({**labels(r), "pid": str(pid)}, used) for r in readings for pid, used in r["processes"].items()]),
    ]
    return render_exposition([f for f in fams if f[3]])


class GpuAgent:
    """Samples NVML every `interval_s` and serves the latest sample at `/metrics` (and `/`)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 9401, interval_s: float = 1.0,
                 nvml: object = None) -> None:
        if interval_s <= 0:
            raise TelemetryError(f"--interval must be positive, got {interval_s}")
        self.sampler = NvmlSampler(nvml)
        if not self.sampler.open(log_missing=False):
            raise TelemetryError(f"gpu-agent: no NVML on this host ({self.sampler.reason}); "
                                 "it needs an NVIDIA driver and GPU")
        self.names = {d["index"]: d.get("name") or "" for d in self.sampler.devices()}
        self.interval_s = interval_s
        self._page = render_readings(self.sampler.readings(), self.names)
        self._stop = threading.Event()
        agent = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server API)
                if self.path.split("?")[0] not in ("/", "/metrics"):
                    self.send_error(404)
                    return
                body = agent._page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            self.sampler.close()
            raise TelemetryError(f"gpu-agent: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/metrics"
        self._sampler_thread = threading.Thread(target=self._sample, daemon=True, name="llmload-gpu-agent")

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._page = render_readings(self.sampler.readings(), self.names)
            except TelemetryError as exc:
                log.warning("gpu-agent: %s", exc)

    def start(self) -> GpuAgent:
        """Serve in background threads (for tests and embedding); `stop()` ends it."""
        self._sampler_thread.start()
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def serve_forever(self) -> None:
        self._sampler_thread.start()
        try:
            self.server.serve_forever()
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.sampler.close()


def serve_gpu_agent(*, host: str, port: int, interval: float, nvml: object = None) -> None:
    """Blocking: serve NVML samples until interrupted. TelemetryError (exit 2) without NVML."""
    agent = GpuAgent(host=host, port=port, interval_s=interval, nvml=nvml)
    print(f"llmload gpu-agent: serving {len(agent.names)} GPU(s) at {agent.url} "
          f"(scrape with telemetry.gpu: dcgm:{agent.url})", flush=True)
    agent.serve_forever()
