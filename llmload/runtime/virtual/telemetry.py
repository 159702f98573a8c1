"""A virtual run's telemetry and manifest probe: the simulated server scraped as a live run scrapes `llmload sim`.

The live collector (`llmload.telemetry.collector.TelemetryCollector`) polls each endpoint's pages over
HTTP every `telemetry.interval`; here the same collector polls `SimPages`, which reads the same pages
off the `EngineServer` (`EngineServer.page`) and turns them into points with the live pollers' own code:
`/metrics` through the flavour's profile (`normalise`; vLLM's samples read off its registry, the ones
`parse_exposition` gives back from the rendered page), llama.cpp `/slots`
(`slots_points`), Ollama `/api/ps` (`ps_points`), each poller's `scrape_error`, as `EndpointSource` does.
Samples are stamped on the run's virtual clock and written to the same `telemetry.jsonl`, and kept in
the same `RecentSamples` the live judge reads. No GPU is sampled: a virtual run has none.

`probe` is the manifest's probe of the target (`llmload.telemetry.probe.probe_server`) asked of the
simulated server's pages: the target is never contacted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent

from llmload.clocks import Clock
from llmload.config import Config
from llmload.errors import TelemetryError
from llmload.runtime.virtual.engine import EngineServer
from llmload.telemetry.collector import TelemetryCollector, metrics_urls
from llmload.telemetry.exposition import Sample, parse_exposition
from llmload.telemetry.http import public_url
from llmload.telemetry.probe import probe_server
from llmload.telemetry.profiles import normalise
from llmload.telemetry.sink import Point
from llmload.telemetry.sources import error_label, ps_points, slots_points

__all__ = ["SimPages", "VirtualTelemetry", "probe"]


class SimPages:
    """The target endpoint's pages as the live `EndpointSource` polls them, read off the simulated server."""

    def __init__(self, config: Config, server: EngineServer, clock: Clock) -> None:
        self.server, self.clock = server, clock
        base = public_url(config.target.endpoints[0])
        self.source = f"server:{base}"
        polls: list[tuple[str, Callable[[], list[Point]]]] = []
        if server.flavor == "ollama":
            polls.append((f"ollama_ps:{base}", self._ps))
        else:
            if metrics_urls(config):  # `telemetry.metrics_url: off` scrapes no /metrics
                polls.append((self.source, self._metrics))
            if server.flavor == "llamacpp":
                polls.append((f"slots:{base}", self._slots))
        self.polls = polls

    def poll(self) -> list[Point]:
        """Every page's points, each poller's `scrape_error` after them (a dead server: refused)."""
        points: list[Point] = []
        for source, poll in self.polls:
            try:
                points.extend(poll())
                points.append(Point(source, "scrape_error", 0.0))
            except TelemetryError as exc:
                points.append(Point(source, "scrape_error", 1.0, error_label(exc)))
        return points

    def _page(self, path: str) -> Any:
        answer = self.server.page(path)
        if answer is None:
            raise TelemetryError(f"{path}: connection refused")
        return answer

    def _metrics(self) -> list[Point]:
        vllm = self.server.vllm_metrics
        if vllm is None or self.server.dead:
            samples = parse_exposition(self._page("/metrics"))
        else:  # the samples the page is rendered from: what parsing it gives back, at a tenth of the CPU
            samples = [Sample(s.name, dict(s.labels), float(s.value))
                       for family in vllm.registry.collect() for s in family.samples]
        # `llmload sim` turns prometheus-client's `_created` series off (`disable_created_metrics`, process
        # wide): here they are left out instead, so this process's other registries keep theirs
        samples = [s for s in samples if not s.name.endswith("_created")]
        return normalise(samples, flavor=self.server.flavor, source=self.source)

    def _slots(self) -> list[Point]:
        return slots_points(self.polls[-1][0], self._page("/slots"))

    def _ps(self) -> list[Point]:
        return ps_points(self.polls[0][0], self._page("/api/ps")["models"], self.clock.now())


class VirtualTelemetry(TelemetryCollector):
    """The live collector over `SimPages`, polled every `telemetry.interval` of virtual time (`start`)."""

    def __init__(self, config: Config, run_dir: str | Path, server: EngineServer, clock: Clock) -> None:
        super().__init__(config, run_dir, clock=clock.now, pollers=[SimPages(config, server, clock)])
        self.vclock = clock
        self._poller: gevent.Greenlet | None = None

    def start(self) -> None:
        """Poll now and every interval after, in a greenlet on the virtual clock (until `stop`)."""
        if self._poller is None:
            self._poller = gevent.spawn(self._poll_loop)

    def _poll_loop(self) -> None:
        while True:
            self.sample_now()
            self.vclock.sleep(self.interval_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._poller is not None:
            self._poller.kill(block=False)
            self._poller = None
        super().stop(timeout_s)


def probe(config: Config, server: EngineServer) -> list[dict]:
    """The manifest's probe of the target, answered by the simulated server's pages."""
    return [probe_server(config.target.endpoints[0], flavor=server.flavor, model=config.target.model, pages=server.page)]
