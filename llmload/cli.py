"""The `llmload` command. Each subcommand builds its arguments and calls one library function.

Exit codes: 0 pass, 1 an SLO failed, 2 usage or config error, 3 invalid run (the generator fell behind,
or the target was unreachable).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from llmload.cliparams import (
    MAX_PROCESSES,
    MAX_SEED,
    FlagsApp,
    FlagsGroup,
    check_target_url,
    show_usage_error,
)
from llmload.errors import LLMLoadError

__all__ = ["app", "main"]

app = FlagsApp(
    cls=FlagsGroup,
    name="llmload",
    help="Capacity testing for LLM inference servers: at what sustained arrival rate, and under which "
    "bursts, does the service stop meeting its targets, and which target breaks first?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


#: the options `run` and `find` share
ReportFlag = Annotated[bool, typer.Option(
    help="Write report.html at the end (--no-report: summary.json, worksheet.csv and the records only; "
         "`llmload report RUN_DIR` draws the report later).")]
VirtualFlag = Annotated[bool, typer.Option(
    help="Rehearse it all in seconds against the simulated server in virtual time (a SIMULATION: the target "
         "is never contacted).")]
SimFile = Annotated[Optional[Path], typer.Option(
    help="With --virtual: the sim settings (YAML, as `llmload sim --config`) that stand in for the target "
         "(default: the demo's server).")]


def _show_version(value: bool) -> None:
    if value:
        from llmload import __version__

        print(f"llmload {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="Print llmload's version and exit.")] = False,
) -> None:
    """The options before a command (`llmload --version`)."""


@app.command()
def sim(
    flavor: Annotated[str, typer.Option(help="Which server to imitate: vllm, ollama, llamacpp or sglang.")] = "vllm",
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one and prints it.")] = 8000,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed for EOS draws and faults.")] = 0,
    config: Annotated[Optional[Path], typer.Option(help="Sim YAML (engine and fault settings).")] = None,
    ground_truth: Annotated[Optional[Path], typer.Option(help="Write one JSON line per request here.")] = None,
    model: Annotated[str, typer.Option(help="Model name the server reports.")] = "sim-model",
    reuse_port: Annotated[bool, typer.Option(
        "--reuse-port", help="Share the port with other sims started with this flag (SO_REUSEPORT): the kernel "
        "spreads connections over them, each with its own engine and ground-truth log (a sim past one core).")] = False,
) -> None:
    """Run the simulated inference server (vLLM, Ollama, llama.cpp or SGLang wire formats)."""
    from llmload.sim.server import serve

    serve(flavor=flavor, host=host, port=port, seed=seed, config_path=config,
          ground_truth_path=ground_truth, model=model, reuse_port=reuse_port)


@app.command()
def run(
    config: Annotated[Path, typer.Argument(help="Run configuration (YAML).")],
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default: a new one under output:).")] = None,
    web: Annotated[bool, typer.Option(help="Start Locust's web UI (with the LLM tab) instead of headless.")] = False,
    processes: Annotated[int, typer.Option(min=0, max=MAX_PROCESSES,
                                           help="Local worker processes (Locust --processes).")] = 0,
    master: Annotated[bool, typer.Option(help="Run as Locust master; workers join with --worker.")] = False,
    expect_workers: Annotated[int, typer.Option(min=1, max=MAX_PROCESSES, help="Master: workers to wait for.")] = 1,
    worker: Annotated[bool, typer.Option(help="Run as a Locust worker of a master elsewhere.")] = False,
    master_host: Annotated[str, typer.Option(help="Worker: the master's address.")] = "127.0.0.1",
    master_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help="Master's port (default 5557; with --processes a free loopback port).")] = None,
    locustfile: Annotated[Optional[Path], typer.Option(
        help="Your own locustfile (an LLMUser subclass, e.g. examples/locustfiles/multiturn.py) instead of "
             "llmload's.")] = None,
    metrics_port: Annotated[Optional[int], typer.Option(
        min=1, max=65535, help="Serve live Prometheus metrics (/metrics) on this port while the run is live "
                               "(with --web they are also at the web UI's /metrics).")] = None,
    metrics_host: Annotated[str, typer.Option(help="The address --metrics-port binds.")] = "127.0.0.1",
    master_bind_host: Annotated[str, typer.Option(
        help="Master: the interface to listen on for workers (0.0.0.0: all; loopback by default).")] = "127.0.0.1",
    worker_token_file: Annotated[Optional[Path], typer.Option(
        help="Master and workers: a file whose first line is the shared worker token (else the "
             "LLMLOAD_WORKER_TOKEN variable; docs/SECURITY.md).")] = None,
    virtual: VirtualFlag = False,
    sim: SimFile = None,
    report: ReportFlag = True,
) -> None:
    """Run a load test described by CONFIG and write a run directory."""
    if virtual or sim is not None:
        from llmload.runtime.virtual.run import run_virtual

        raise typer.Exit(run_virtual(config, out=out, sim_path=sim, report=report, live_flags={
            "--web": web, "--processes": processes, "--master": master, "--worker": worker,
            "--locustfile": locustfile, "--metrics-port": metrics_port}) if virtual else _sim_without_virtual())
    from llmload.runtime.launcher.run import run_config

    raise typer.Exit(run_config(config, out=out, web=web, processes=processes, master=master,
                                expect_workers=expect_workers, worker=worker, master_host=master_host,
                                master_port=master_port, locustfile=locustfile, metrics_port=metrics_port,
                                metrics_host=metrics_host, master_bind_host=master_bind_host,
                                worker_token_file=worker_token_file, report=report))


def _sim_without_virtual() -> int:
    print("llmload: error: --sim goes with --virtual (the sim stands in for the target only in a virtual run)",
          file=sys.stderr)
    return 2


@app.command()
def find(
    url: Annotated[str, typer.Argument(callback=check_target_url, help="Base URL of the server (http://host:port).")],
    slo: Annotated[list[str], typer.Option(
        "--slo", help="A target NAME=VALUE, repeated: ttft_p95=800ms, tpot_p95=100ms, e2e_p99=20s, "
                      "max_reject_ratio=0.01 (latency targets need a unit).")],
    model: Annotated[Optional[str], typer.Option(help="Model name (default: the first the server lists).")] = None,
    api: Annotated[str, typer.Option(help="openai-chat | openai-completions | ollama-chat | ollama-generate.")] = "openai-chat",
    input_tokens: Annotated[int, typer.Option(min=1, max=1_000_000, help="Prompt tokens per request.")] = 256,
    output_tokens: Annotated[int, typer.Option(min=1, max=1_000_000, help="Output tokens per request.")] = 128,
    budget: Annotated[str, typer.Option(help="Wall time for the whole search (8m, 600s).")] = "8m",
    precision: Annotated[float, typer.Option(min=0.001, max=0.999,
                                             help="Stop once the knee's interval is within this share of it.")] = 0.05,
    output: Annotated[Path, typer.Option(help="Folder for the run directory (and the config it ran).")] = Path("runs"),
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default: a new one under --output).")] = None,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Seed of the arrivals and request draws.")] = 1,
    report: ReportFlag = True,
    virtual: VirtualFlag = False,
    sim: SimFile = None,
) -> None:
    """Find the knee from a URL and targets alone: a short probe of the server's range, then steps placed
    across it and a knee search, within --budget (`shape: auto`; docs/FIND.md)."""
    if sim is not None and not virtual:
        raise typer.Exit(_sim_without_virtual())
    from llmload.runtime.launcher.find import run_find

    rehearse = None
    if virtual:
        from llmload.runtime.virtual.run import run_virtual

        def rehearse(path: Path) -> int:
            return run_virtual(path, out=out, sim_path=sim, report=report)

    raise typer.Exit(run_find(url, slo, model=model, api=api, input_tokens=input_tokens,
                              output_tokens=output_tokens, budget=budget, precision=precision, output=output,
                              seed=seed, out=out, report=report, virtual=rehearse))


@app.command()
def demo(
    out: Annotated[Optional[Path], typer.Option(help="Run directory (default: under runs/).")] = None,
) -> None:
    """Start the simulated server, run a ladder across its capacity and a burst replay, write a report."""
    from llmload.runtime.launcher.demo import run_demo

    raise typer.Exit(run_demo(out=out))


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    slo: Annotated[Optional[Path], typer.Option(help="Another SLO file (or config): new verdicts, no re-run.")] = None,
) -> None:
    """Re-analyse a run directory and rewrite its summary, worksheet and report."""
    from llmload.report.reanalyse import rereport

    raise typer.Exit(rereport(run_dir, slo_path=slo))


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Two or more run directories.")],
    out: Annotated[Optional[Path], typer.Option(help="Write the comparison (HTML) here.")] = None,
) -> None:
    """Compare runs step by step, with capacity, goodput per GPU, cost, and the conditions that differ."""
    from llmload.report.compare import compare_runs

    raise typer.Exit(compare_runs(runs, out=out))


@app.command()
def fit(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the sim YAML here (default: print it).")] = None,
) -> None:
    """Fit the simulated server's settings to a run: a twin for `llmload sim --config`, each with its error."""
    from llmload.report.twin import fit_command

    raise typer.Exit(fit_command(run_dir, output=output))


@app.command()
def plan(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with a passing sustained step.")],
    users: Annotated[Optional[int], typer.Option(min=1, max=10**9, help="Users in the population to plan for.")] = None,
    think_time: Annotated[Optional[str], typer.Option(help="Each user's think time between requests (30s, 2m).")] = None,
    slo: Annotated[Optional[Path], typer.Option(help="Another SLO file (or config) to judge the run with.")] = None,
    twin: Annotated[Optional[Path], typer.Option(help="A twin (llmload fit -o twin.yaml): what-if lines in virtual time.")] = None,
    slots: Annotated[Optional[int], typer.Option(min=1, max=100000, help="What if the server had this many slots (default: twice the twin's).")] = None,
    prompt_scale: Annotated[float, typer.Option(min=0.01, max=100, help="What if every prompt were this many times as long.")] = 2.0,
    replicas: Annotated[int, typer.Option(min=1, max=10000, help="What if there were this many replicas.")] = 2,
) -> None:
    """Little's law as a planning aid: what a user population would bring, from a passing run.

    The arrival rate and requests in flight to expect (steady state assumed; never a number of users
    supported). With --twin (llmload fit): the knee the server's twin predicts with more slots, longer
    prompts, more replicas, each with its range."""
    from llmload.report.planning import plan_run

    raise typer.Exit(plan_run(run_dir, users=users, think_time=think_time, slo_path=slo, twin=twin,
                              what_if={"slots": slots, "prompt_scale": prompt_scale, "replicas": replicas}))


@app.command()
def calibrate(
    processes: Annotated[int, typer.Option(min=1, max=MAX_PROCESSES, help="Worker processes to calibrate.")] = 1,
    target: Annotated[Optional[str], typer.Option(callback=check_target_url,
                                                  help="Target URL (default: a built-in sim).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Where to save the envelope (JSON).")] = None,
    quick: Annotated[bool, typer.Option(help="A short ramp (for smoke tests).")] = False,
) -> None:
    """Measure how much load this machine's generator can offer while keeping its timing exact."""
    from llmload.calibrate import run_calibrate

    raise typer.Exit(run_calibrate(processes=processes, target=target, out=out, quick=quick))


@app.command()
def engine(
    action: Annotated[str, typer.Argument(
        help="build (llama-server and the model) | model (the model only) | serve | path")] = "build",
    port: Annotated[int, typer.Option(min=0, max=65535, help="serve: port (0 = free).")] = 8080,
    parallel: Annotated[int, typer.Option(min=1, max=MAX_PROCESSES, help="serve: slots.")] = 4,
    threads: Annotated[int, typer.Option(min=1, max=MAX_PROCESSES, help="serve: CPU threads.")] = 1,
) -> None:
    """Build and serve the real engine: llama.cpp's llama-server with Gemma 3 270M."""
    from llmload.llama_server import engine_command

    raise typer.Exit(engine_command(action, port=port, parallel=parallel, threads=threads))


@app.command(name="gpu-agent")
def gpu_agent(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0 = free).")] = 9401,
    interval: Annotated[float, typer.Option(min=0.01, max=3600, help="Sampling interval in seconds.")] = 1.0,
) -> None:
    """Serve this host's NVML GPU samples as Prometheus text for a remote llmload run to scrape."""
    from llmload.telemetry.gpu_agent import serve_gpu_agent

    serve_gpu_agent(host=host, port=port, interval=interval)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; a project error becomes one line on stderr and its exit code."""
    from llmload import startsignal
    from llmload.blas import one_blas_thread
    from llmload.redaction import install_console_redaction

    startsignal.restore()  # a Ctrl-C from here on is KeyboardInterrupt, caught below or by the command
    one_blas_thread()  # before numpy loads: its BLAS threads' start-up spin cost each process ~0.07 s of CPU

    install_console_redaction(handlers=False)  # an API key read by this process is never printed
    try:
        # with standalone_mode=False a command's `raise typer.Exit(code)` comes back as the return value
        code = app(args=argv, standalone_mode=False)
        return code if isinstance(code, int) else 0
    except LLMLoadError as exc:
        print(f"llmload: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        print("llmload: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # click usage errors (typer >= 0.29 raises those of its vendored `typer._click`)
        names = {cls.__name__ for cls in type(exc).__mro__}
        if "ClickException" in names:
            return show_usage_error(exc)
        if "Abort" in names:
            return 130
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
