"""The run's shape and SLO as Locust options, shown (and editable) in the web UI's start form.

Two options, typed strings with empty defaults (they travel to workers and Locust shows them under
"Custom parameters"; empty = as in the config file):

- `--llmload-rates "2,6,12"`: the ladder's rates in req/s (one step each; steps past the config's
  take its last step's duration), a soak's one rate, or a concurrency shape's levels (users). A trace
  replay's arrivals come from its file and cannot be edited here.
- `--llmload-slo "ttft_p95=500ms, tpot_p95=80ms"`: the SLO thresholds (`<metric>_p<NN>=<duration>`,
  the config's keys) and any other `slo:` key (`max_reject_ratio=0`). The thresholds given replace the
  config's thresholds; other keys not given keep the config's values. The form shows every check that
  applies: the thresholds, then `max_reject_ratio`, `max_error_ratio`, `allow_oom`, `queue_growth` when
  set and `min_samples`.

`form_values(config)` is what the form shows for a config; `apply_form(config, rates, slo)` returns the
config as run (validated like the file: a bad value is one `ConfigError` line naming the option).
Locust's own Host field shows the target URL; a changed Host is the run's `target.url` (one-URL configs);
a Host of another origin than the config's target gets none of its credentials (docs/SECURITY.md).
Pure functions: no Locust, no I/O.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from llmload.config import SLO, Config
from llmload.errors import ConfigError
from llmload.telemetry.http import public_url

__all__ = ["RATES", "SLO_OPTION", "add_form_options", "apply_form", "form_help", "form_values",
           "format_seconds", "shape_summary", "target_text"]

#: the options' `dest` names (what the form posts and `parsed_options` holds)
RATES = "step_rates"
SLO_OPTION = "SLO"

_THRESHOLD = re.compile(r"^[a-z_]+_p\d")
#: the SLO's checks besides the thresholds that the form shows when set (min_samples always is)
_FORM_CHECKS = ("max_reject_ratio", "max_error_ratio", "max_usage_mismatch_ratio", "allow_oom", "queue_growth",
                "min_samples")


def _check_text(value: Any) -> str:
    """A check's value as the config file would write it: 0.05, false, forbid, 200."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def add_form_options(parser: Any) -> None:
    """Add the two options (on Locust's parser itself: options added to a group are not shown in the UI).
    The web UI labels a field by its option's `dest` (`step_rates`: "Step Rates"; `SLO`: "SLO")."""
    parser.add_argument("--llmload-rates", dest=RATES, type=str, default="",
                        help="steps of this run: req/s per ladder step, comma-separated (concurrency: users "
                             "per level; soak: one rate); empty = as in the config")
    parser.add_argument("--llmload-slo", dest=SLO_OPTION, type=str, default="",
                        help="SLO of this run, e.g. ttft_p95=500ms, tpot_p95=80ms; empty = as in the config")


def format_seconds(value_s: float) -> str:
    """0.5 -> "500ms", 20.0 -> "20s" (what the config file would say)."""
    if 0 < value_s < 1:
        return f"{value_s * 1000:g}ms"
    return f"{value_s:g}s"


def _rates_of(config: Config) -> list[float] | None:
    shape = config.shape  # exactly one kind is set (`llmload.config.Shape`)
    if shape.ladder is not None:
        return [float(s.rate) for s in shape.ladder.steps]
    if shape.concurrency is not None:
        return [float(level) for level in shape.concurrency.levels]
    if shape.soak is not None and shape.soak.rate is not None:
        return [float(shape.soak.rate)]
    return None


def form_values(config: Config) -> dict[str, str]:
    """What the start form shows for `config`: `{RATES: "2, 6, 12", SLO_OPTION: "ttft_p95=500ms, ..."}`."""
    rates = _rates_of(config)
    slo = [f"{t.key}={format_seconds(t.value_s)}" for t in config.slo.thresholds]
    for key in _FORM_CHECKS:  # every other check that applies, so the form hides none of them
        value = getattr(config.slo, key)
        if value is not None:
            slo.append(f"{key}={_check_text(value)}")
    return {RATES: ", ".join(f"{r:g}" for r in rates) if rates is not None else "",
            SLO_OPTION: ", ".join(slo)}


def shape_summary(config: Config) -> str:
    """One line on the run's shape: kind, arrivals, steps and their durations."""
    shape = config.shape  # exactly one kind is set (`llmload.config.Shape`)
    if (ladder := shape.ladder) is not None:
        durations = list(dict.fromkeys(format_seconds(float(step.duration)) for step in ladder.steps))
        return (f"ladder of {len(ladder.steps)} step(s) of {' / '.join(durations)}, {ladder.arrival} arrivals, "
                f"warm-up {format_seconds(float(ladder.warmup))}" + (", then a knee search" if ladder.refine else ""))
    if (c := shape.concurrency) is not None:
        return f"closed loop, {len(c.levels)} level(s), {c.requests_per_level} requests per level"
    if (soak := shape.soak) is not None:
        what = f"{soak.rate:g} req/s {soak.arrival}" if soak.rate is not None else "a trace"
        return (f"soak at {what} for {format_seconds(float(soak.duration))}, "
                f"slices of {format_seconds(float(soak.slice))}")
    if (a := shape.auto) is not None:
        return (f"auto: a probe, placed steps and a knee search within {format_seconds(float(a.budget))}, "
                f"precision {a.precision:g} (rates not editable)")
    t = shape.trace
    if t is None:
        raise ValueError(f"a shape of no known kind: {shape.kind}")
    return f"trace replay of {t.file} (speed-up {t.speedup:g}, rate scale {t.rate_scale:g}; rates not editable)"


def form_help(config: Config) -> dict[str, str]:
    """The form's help text per option for this config (Locust shows it in the field's label)."""
    unit = "users per level" if config.shape.kind == "concurrency" else "req/s per step"
    target = config.target
    return {RATES: f"{shape_summary(config)}; {unit}, comma-separated",
            SLO_OPTION: f"for {target.api}, model {target.model} at Host; <metric>_p<NN>=<duration>, comma-separated"}


def _parse_rates(text: str, kind: str) -> list[float]:
    parts = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(f'--llmload-rates: expected numbers like "2, 6, 12", got "{text}"') from None
    if not values or any(not v > 0 for v in values):
        raise ConfigError(f'--llmload-rates: every value must be above 0, got "{text}"')
    if kind == "concurrency" and any(v != int(v) for v in values):
        raise ConfigError(f'--llmload-rates: concurrency levels are whole numbers of users, got "{text}"')
    return values


def _with_rates(config: Config, values: list[float]) -> Config:
    shape = config.shape  # exactly one kind is set (`llmload.config.Shape`)
    kind = shape.kind
    spec: BaseModel
    if shape.ladder is not None:
        steps = shape.ladder.steps
        new_steps = [steps[min(i, len(steps) - 1)].model_copy(update={"rate": v}) for i, v in enumerate(values)]
        spec = shape.ladder.model_copy(update={"steps": new_steps})
    elif shape.concurrency is not None:
        spec = shape.concurrency.model_copy(update={"levels": [int(v) for v in values]})
    elif shape.soak is not None and shape.soak.rate is not None:
        if len(values) != 1:
            raise ConfigError("--llmload-rates: a soak has one rate")
        spec = shape.soak.model_copy(update={"rate": values[0]})
    else:
        raise ConfigError(f"--llmload-rates: a {kind} shape's arrivals cannot be edited (its file sets them)")
    return config.model_copy(update={"shape": shape.model_copy(update={kind: spec})})


def _parse_slo(text: str, base: SLO) -> SLO:
    given: dict[str, Any] = {}
    for part in [p.strip() for p in re.split(r"[,;\n]+", text) if p.strip()]:
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ConfigError(f'--llmload-slo: expected key=value like "ttft_p95=500ms", got "{part}"')
        given[key] = value if _THRESHOLD.match(key) else yaml.safe_load(value)
    data = base.model_dump(exclude={"thresholds"}, exclude_none=True) | given
    try:
        slo = SLO.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(x) for x in error.get("loc", ())) or "slo"
        raise ConfigError(f"--llmload-slo: {where}: {error.get('msg')}") from None
    for t in slo.thresholds:
        if not t.value_s > 0:
            raise ConfigError(f"--llmload-slo: {t.key} must be above 0")
    return slo


def target_text(config: Config) -> str:
    """The target as the form's Host field shows it."""
    return config.target.url or ", ".join(config.target.urls or [])


def _with_host(config: Config, host: str) -> Config:
    """`config` aimed at `host`. Another origin (scheme, host or port) than the config's target gets none
    of its credentials (`api_key_env`, `api_key_file`, secret `target.headers`): the key goes only where
    the config file sends it; a `user:password@` typed in the Host field is the user's own and goes."""
    from llmload.client.auth import is_secret_header, same_origin
    from llmload.config import check_url

    if config.target.urls:
        raise ConfigError("Host: this config has several target.urls: edit them in the config file")
    if not re.match(r"^https?://[^/\s]+", host):
        raise ConfigError('Host: expected a URL like http://127.0.0.1:8000')
    try:
        check_url(host)
    except ValueError as exc:
        raise ConfigError(f"Host: {exc}") from None
    update: dict[str, Any] = {"url": host.rstrip("/")}
    if not same_origin(config.target.url or "", host):
        update |= {"api_key_env": None, "api_key_file": None,
                   "headers": {k: v for k, v in config.target.headers.items() if not is_secret_header(k)}}
    return config.model_copy(update={"target": config.target.model_copy(update=update)})


def apply_form(config: Config, rates: str = "", slo: str = "", host: str = "") -> tuple[Config, dict]:
    """`config` with the form's rates, SLO and Host (the target URL) applied (an empty string, or the
    config's own value, changes nothing); returns (config as run, what was changed:
    `{"rates": [...], "slo": {...}, "target_url": ...}`)."""
    shown = form_values(config)
    changed: dict[str, Any] = {}
    host = host.strip()
    if host and host.rstrip("/") != target_text(config).rstrip("/"):
        before = config.target
        config = _with_host(config, host)
        changed["target_url"] = public_url(config.target.url or "")
        if (before.api_key_env, before.api_key_file, before.headers) != (
                config.target.api_key_env, config.target.api_key_file, config.target.headers):
            changed["credentials"] = "not sent: the Host is not the config's target (edit the config file to send them)"
    if rates.strip() and _norm(rates) != _norm(shown[RATES]):
        values = _parse_rates(rates, config.shape.kind)
        config = _with_rates(config, values)
        changed["rates"] = values
    if slo.strip() and _norm(slo) != _norm(shown[SLO_OPTION]):
        new = _parse_slo(slo, config.slo)
        config = config.model_copy(update={"slo": new})
        changed["slo"] = {t.key: t.value_s for t in new.thresholds} | {
            k: getattr(new, k) for k in _FORM_CHECKS if getattr(new, k) is not None}
    return config, changed


def _norm(text: str) -> str:
    return re.sub(r"[\s,;]+", ",", text.strip()).strip(",")

