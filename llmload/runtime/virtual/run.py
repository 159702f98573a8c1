"""`llmload run CONFIG --virtual [--sim SIM.yaml]`: rehearse a whole run in seconds, against the simulated
server's engine in virtual time, before spending hours of a real server on it.

What runs is the run's own machinery: the config's plan (`shapes.plan`), the master's `StepController`
(steps, drains, judging, the knee search), `WORKERS` worker runtimes (`WorkerRuntime`: this shard's
arrivals, the queue, the user pool, records and shipped summaries) over an in-process link
(`link.InProcessLink`), and finalisation (`llmload.rundir.finalise`: records.parquet, summary.json,
worksheet.csv, report.html). Every one of them is handed one `VirtualClock`; the server is
`engine.EngineServer`, the engine of `llmload sim` built from `--sim` (else the demo's server,
`llmload.runtime.launcher.demo.DEMO_SIM`) for the config's `target.server` flavour. The target is never
contacted: no pre-flight; the manifest's probe and the telemetry (`telemetry.py`) read the simulated
server's own pages, sampled every `telemetry.interval` of virtual time into `telemetry.jsonl` as a live
run's are, and the server writes its ground-truth log to `GROUND_TRUTH` in the run directory (what
`llmload sim --ground-truth` writes). Virtual time starts at `VIRTUAL_EPOCH_S`, so a seed gives the
same run, and the same summary.json (paths and wall-clock stamps apart), every time.

plan.json's `simulation` (and from it summary.json's, and a warning on the report's first screen) says
plainly that the run was a simulation, of which server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent

from llmload.clocks import VirtualClock
from llmload.config import Config, load_config
from llmload.errors import ConfigError, LLMLoadError
from llmload.rundir.layout import claim_run_dir, new_run_dir, prepare_run_dir, remove_if_unused
from llmload.runtime.master.controller import StepController
from llmload.runtime.master.judging import live_judge
from llmload.runtime.master.preflight import write_run_manifest
from llmload.runtime.virtual.engine import EngineSender, EngineServer, unsupported
from llmload.runtime.virtual.link import InProcessLink
from llmload.runtime.virtual.telemetry import VirtualTelemetry, probe
from llmload.runtime.worker.scheduler import WorkerRuntime
from llmload.sim.groundtruth import GroundTruthWriter
from llmload.sim.settings import SimSettings, load_sim_settings

__all__ = ["GROUND_TRUTH", "VIRTUAL_EPOCH_S", "WORKERS", "VirtualRun", "run_virtual"]

#: where virtual time starts (2026-01-01T00:00:00Z): one fixed origin, so a seed's run repeats exactly
VIRTUAL_EPOCH_S = 1_767_225_600.0
#: worker runtimes of a virtual run (each its shard of every step, as Locust workers have)
WORKERS = 2
#: the simulated server's ground-truth log in the run directory (`llmload sim --ground-truth`'s format)
GROUND_TRUTH = "sim-ground-truth.jsonl"
#: virtual seconds after which a run is taken for one that never ends
LIMIT_S = 30 * 86_400.0


@dataclass(frozen=True)
class VirtualRun:
    """What `run_virtual(during=...)` is handed: the run's controller (`StepController`: `mark_stopping()`
    then `stop()` is what a stop signal does to it), its link (`InProcessLink.lose` kills a worker), the
    simulated server (`EngineServer.die` kills it) and its clock (`clock.sleep(s)`: wait `s` virtual
    seconds)."""

    controller: StepController
    link: InProcessLink
    server: EngineServer
    clock: VirtualClock


def sim_settings(sim_path: Path | None) -> tuple[SimSettings, str]:
    """The simulated server's settings and what they came from (`--sim`, else the demo's server)."""
    if sim_path is not None:
        return load_sim_settings(sim_path), str(sim_path)
    from llmload.runtime.launcher.demo import demo_sim

    return SimSettings.model_validate(demo_sim()), "the demo's simulated server (llmload demo)"


def run_virtual(config_path: Path, *, out: Path | None = None, sim_path: Path | None = None,
                report: bool = True, workers: int = WORKERS, live_flags: dict[str, Any] | None = None,
                during: Callable[[VirtualRun], None] | None = None) -> int:
    """Run `config_path` in virtual time (see the module docstring); returns the run's exit code.
    `live_flags`: `llmload run`'s flags of a live run (name: value); any one set is refused.
    `during`: called in a greenlet of its own as the run starts, with the run's `VirtualRun`: what
    happens to a live run from outside (a stop signal, a worker killed) at a virtual time of its choosing."""
    given = [name for name, value in (live_flags or {}).items() if value]
    if given:
        print(f"llmload: error: --virtual runs in one process without Locust: {', '.join(given)} "
              f"{'does' if len(given) == 1 else 'do'} not apply", file=sys.stderr)
        return 2
    if out is not None and (Path(out) / "plan.json").exists():
        print(f"llmload: error: {out} already holds a run: choose another --out", file=sys.stderr)
        return 2
    run_dir, made, claim = None, False, None
    try:
        config = load_config(config_path)
        missing = unsupported(config)
        if missing:
            raise ConfigError(f"--virtual does not simulate {', '.join(missing)}: run it live", key="--virtual")
        settings, source = sim_settings(sim_path)
        from shapes.plan import build_plan

        steps = build_plan(config, base_dir=Path(config_path).resolve().parent)
        where = ("--out", None) if out is not None else ("output", str(config_path))
        if out is not None:
            run_dir = Path(out)
            made = prepare_run_dir(run_dir, where=where)
        else:
            base = Path(config.output) if Path(config.output).is_absolute() else Path.cwd() / config.output
            run_dir = new_run_dir(config, base=base)
            made = prepare_run_dir(run_dir, where=where) or not any(run_dir.iterdir())
        claim = claim_run_dir(run_dir, where=where)
    except LLMLoadError as exc:
        if claim is not None:
            claim.release()
        print(f"llmload: error: {exc}", file=sys.stderr)
        remove_if_unused(run_dir if made else None)
        return exc.exit_code
    try:
        print(f"llmload: SIMULATION: {config_path} in virtual time against {source}; the target "
              f"{config.target.url} is not contacted", flush=True)
        return _run(config, config_path, run_dir, steps, settings, source, report=report, workers=workers,
                    during=during)
    finally:
        claim.release()


def _run(config: Config, config_path: Path, run_dir: Path, steps: list, settings: SimSettings, source: str, *,
         report: bool, workers: int, during: Callable[[VirtualRun], None] | None = None) -> int:
    from llmload.rundir.finalise import finalise_run
    from llmload.telemetry.manifest import shape_record
    from shapes.plan import ConfigSearch

    print(f"llmload: run directory {run_dir}", flush=True)
    base_dir = str(Path(config_path).resolve().parent)
    clock = VirtualClock(VIRTUAL_EPOCH_S, limit_s=LIMIT_S)
    flavor = config.target.server or "vllm"
    truth = GroundTruthWriter(run_dir / GROUND_TRUTH)
    server = EngineServer(settings, clock, flavor=flavor, model=config.target.model or "sim-model",
                          truth=truth)  # one server for all
    users = _pool_size(config)
    workers = max(1, min(workers, users))  # every worker runtime holds at least one of the pool's users
    max_in_flight = settings.max_num_queued_reqs if flavor == "vllm" else None

    def make_worker(send_message: Any) -> WorkerRuntime:
        def build_sender(config_dict: dict, **kwargs: Any) -> EngineSender:
            return EngineSender(Config.model_validate(config_dict), server, clock=clock,
                                base_dir=kwargs.get("base_dir", base_dir), max_in_flight=max_in_flight)

        return WorkerRuntime(send_message, build_sender=build_sender, clock=clock)

    link = InProcessLink(make_worker, workers)
    simulation = {"server": source, "flavor": config.target.server or "vllm",
                  "settings": settings.model_dump(mode="json"), "workers": workers,
                  "virtual_epoch_s": VIRTUAL_EPOCH_S}
    write_run_manifest(config, run_dir, checks={"skipped": "a virtual run (--virtual): the target is not contacted"},
                       workers=workers, config_path=str(config_path),
                       shape=shape_record(ConfigSearch(), steps, replaced_kind=None), servers=probe(config, server))
    telemetry = VirtualTelemetry(config, run_dir, server, clock)
    controller = StepController(config, run_dir, link, steps, judge=live_judge(run_dir, telemetry.recent),
                                telemetry=telemetry, base_dir=base_dir, clock=clock.now, sleep=clock.sleep)
    controller.plan.data["simulation"] = simulation
    link.controller = controller
    for index, (cid, runtime) in enumerate(link.runtimes.items()):
        for _ in range(users // workers + (index < users % workers)):  # the pool split as Locust splits it
            link.add_user(cid, gevent.spawn(_user, runtime))
    outside = None
    if during is not None:
        outside = gevent.spawn(during, VirtualRun(controller, link, server, clock))
        outside.link_exception(lambda g: controller.fail(f"what happened from outside the run failed "
                                                         f"({type(g.exception).__name__}: {g.exception})"))
    telemetry.start()
    try:
        controller.run()
        telemetry.sample_now()  # as a live run's last sample, after the last step drained
    except KeyboardInterrupt:  # seconds of CPU: a Ctrl-C means the rehearsal is not wanted
        print(f"llmload: SIMULATION stopped (Ctrl-C); what ran is in {run_dir} (`llmload report` reports it)",
              file=sys.stderr, flush=True)
        return 130
    finally:
        if outside is not None:
            outside.kill()
        gevent.killall([user for users in link.users.values() for user in users])
        for runtime in link.runtimes.values():
            runtime.close()
        server.close()
        telemetry.stop()
        truth.close()
    code = finalise_run(run_dir, config, report=report)
    if getattr(controller, "error", None) is not None:
        code = 3
    written = run_dir / ("report.html" if report else "summary.json")
    if written.exists():
        print(f"llmload: SIMULATION {'report' if report else 'summary'} {written} (exit code {code})", flush=True)
    return code


def _pool_size(config: Config) -> int:
    from shapes.plan import pool_size

    return pool_size(config)


def _user(runtime: WorkerRuntime) -> None:
    """One user of the pool: takes an arrival off the worker's queue and sends it, for ever."""
    while True:
        runtime.run(runtime.take())
