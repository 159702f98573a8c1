"""`llmload find URL --slo ttft_p95=800ms ...`: the knee from a URL and targets, in one line.

It builds a run configuration with `shape: {auto: {budget, precision}}` (`shapes.auto`: a closed-loop
probe of the server's range, open-loop steps placed across it, the knee search) and runs it as `llmload
run` does: the same run directory, summary.json `knee`, report and exit codes. The request sizes,
API and model come from flags with defaults; the model, when not given, is the first one the server
lists (`/v1/models`, or `/api/tags` for Ollama's APIs). The config is written into the run directory's
parent as it is run (`find-<UTC time>.yaml`), so the run can be repeated with `llmload run`.

Mistakes answer with one line and exit code 2 within seconds, before any load: an `--slo` whose name is
not an SLO key, a latency target without a unit (`800` is not `800ms`), a URL that does not answer HTTP
within `REACH_TIMEOUT_S`, a server that lists no model when `--model` is not given, a `--model` the server
does not list (a server that serves any name, as llama.cpp's, takes any).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llmload.errors import ConfigError, LLMLoadError

__all__ = ["REACH_TIMEOUT_S", "VIRTUAL_MODEL", "find_config", "parse_slo_flags", "run_find", "served_model"]

#: the model a virtual find names when `--model` is not given (the simulated server serves any name)
VIRTUAL_MODEL = "sim-model"
#: seconds the server has to answer `GET /v1/models` (or `/api/tags`) before `find` gives up
REACH_TIMEOUT_S = 5.0
#: the smallest number of completions a step is judged on (the windows are sized for a judgement;
#: a slow server's short step is still judged, with its interval)
MIN_SAMPLES = 10
_UNITS = ("ms", "s", "m", "h")


def parse_slo_flags(flags: list[str]) -> dict[str, Any]:
    """`--slo NAME=VALUE` flags as the config's `slo:` mapping. A latency target (`ttft_p95`, `tpot_p99`,
    ...) needs a unit; other SLO keys (`max_reject_ratio=0.01`, `min_samples=50`, `queue_growth=forbid`)
    take their plain values. ConfigError (key `--slo`) for an unknown name, a missing `=` or unit.

    >>> parse_slo_flags(["ttft_p95=800ms", "max_reject_ratio=0"])
    {'ttft_p95': '800ms', 'max_reject_ratio': '0'}
    """
    from llmload import slo as slo_dims
    from llmload.config import SLO

    others = set(SLO.model_fields) - {"thresholds"}
    out: dict[str, Any] = {}
    for flag in flags:
        name, sep, value = flag.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(f"expected NAME=VALUE (e.g. ttft_p95=800ms), got {flag!r}", key="--slo")
        parsed = slo_dims.parse_threshold_key(name)
        if parsed is not None and parsed[0] in slo_dims.latency_names():
            if not value.endswith(_UNITS) or value.rstrip("mshd.0123456789") != "":
                raise ConfigError(f"{name}={value}: give the target with a unit (e.g. {name}={value}ms or "
                                  f"{name}={value}s)", key="--slo")
        elif name not in others:
            known = ", ".join(f"{n}_pNN" for n in slo_dims.latency_names())
            raise ConfigError(f"unknown SLO name {name!r} (latency targets: {known}; or one of "
                              f"{', '.join(sorted(others))})", key="--slo")
        if name in out:
            raise ConfigError(f"{name} is given twice", key="--slo")
        out[name] = value
    return out


def find_config(url: str, slo: dict[str, Any], *, model: str, api: str = "openai-chat", input_tokens: int = 256,
                output_tokens: int = 128, budget: str = "8m", precision: float = 0.05, output: str = "runs/",
                seed: int = 1) -> dict[str, Any]:
    """The run configuration `llmload find` runs (a plain mapping; `llmload.config.parse_config` checks it)."""
    return {"target": {"url": url, "api": api, "model": model},
            "requests": {"input_tokens": {"dist": "fixed", "value": int(input_tokens)},
                         "output_tokens": {"dist": "fixed", "value": int(output_tokens)}, "ignore_eos": True,
                         "seed": int(seed)},
            "shape": {"auto": {"budget": budget, "precision": float(precision)}},
            "slo": {"min_samples": MIN_SAMPLES, **slo},
            "output": output}


def served_model(config: Any, *, timeout_s: float = REACH_TIMEOUT_S, given: bool = False) -> str | None:
    """The first model the target lists (None when it lists none). A target that does not answer
    HTTP within `timeout_s`: ConfigError (exit 2: the URL is the user's to fix). `given`: the config's
    model came from `--model`; a server that lists its models without it is a ConfigError naming the
    flag (the run's pre-flight would refuse it the same way, naming `target.model`)."""
    from llmload.runtime.master.preflight import PreflightFailed, check_reachable, served_model_check

    try:
        found = check_reachable(config, timeout_s=timeout_s)
    except PreflightFailed as exc:
        raise ConfigError(str(exc), key="URL") from None
    if given:
        refusal, _ = served_model_check(config, found, remedy="give --model one of them")
        if refusal:
            raise ConfigError(refusal, key="--model")
    for info in found.values():
        if info["models"]:
            return str(info["models"][0])
    return None


def run_find(url: str, slo_flags: list[str], *, model: str | None = None, api: str = "openai-chat",
             input_tokens: int = 256, output_tokens: int = 128, budget: str = "8m", precision: float = 0.05,
             output: Path = Path("runs"), seed: int = 1, out: Path | None = None, report: bool = True,
             virtual: Callable[[Path], int] | None = None) -> int:
    """Build the `shape: auto` config, check it and the target, run it (`run_config`); the exit code.
    `report` False: no report.html, as `llmload run --no-report`. `virtual`: runs the written config in
    virtual time instead (the CLI's `llmload run --virtual` call: this room does not load the virtual
    runtime); the URL is not contacted, and the model is `--model` or `VIRTUAL_MODEL`."""
    import yaml

    from llmload.config import parse_config

    output_dir = Path(output).expanduser().resolve()
    try:
        slo = parse_slo_flags(slo_flags)
        data = find_config(url, slo, model=model or "-", api=api, input_tokens=input_tokens,
                           output_tokens=output_tokens, budget=budget, precision=precision,
                           output=str(output_dir), seed=seed)
        config = parse_config(data, file="llmload find")
        if virtual is not None:
            model = model or VIRTUAL_MODEL
            data["target"]["model"] = model
        elif model is None:
            model = served_model(config)
            if model is None:
                raise ConfigError(f"{url} lists no model: name one with --model", key="--model")
            data["target"]["model"] = model
        else:
            served_model(config, given=True)  # the URL answers and serves it (llama.cpp serves any name)
        output_dir.mkdir(parents=True, exist_ok=True)
        path = output_dir / f"find-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    except LLMLoadError as exc:
        print(f"llmload: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"llmload: error: {output_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"llmload find: {model} at {url}, targets {', '.join(f'{k}={v}' for k, v in slo.items())}; "
          f"budget {budget} (config: {path})", flush=True)
    if virtual is not None:
        return virtual(path)
    from llmload.runtime.launcher.run import run_config

    return run_config(path, out=out, report=report)
