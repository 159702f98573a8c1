"""The run configuration (CONFIG.md is the contract): YAML in, typed and validated objects out.

Validation happens once, here. Every error is one line naming the file, the line and the key path:
`run.yaml:14 slo.ttft_p95: expected a duration like 800ms, got "fast"`. Numbers are finite and bounded
(`MAX_RATE`, `MAX_TOKENS`, ...; docs/CONFIG.md "Validation and limits"), URLs are parsed with their port,
and files the config names must exist; reading the YAML itself (UTF-8, no duplicate key) is `yamlfile`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from llmload import slo as slo_dims
from llmload.apis import api_names, unknown_api_message
from llmload.configbase import (  # the base of the models below (configbase says why it is apart)
    MAX_TOKENS,
    Dist,
    EmpiricalDist,
    FixedDist,
    Model,
    Tokens,
    _format_path,
    _min_max,
    _one_of,
    _raise_first,
    _shown,
)
from llmload.configbase import LognormalDist as LognormalDist  # re-exported with the other distributions
from llmload.configbase import NormalDist as NormalDist
from llmload.configbase import UniformDist as UniformDist
from llmload.errors import ConfigError
from llmload.units import parse_duration
from llmload.yamlfile import line_index as _line_index
from llmload.yamlfile import read_yaml as _read_yaml

__all__ = [
    "API_KINDS",
    "Client",
    "Conditions",
    "DEFAULT_MAX_ERROR_RATIO",
    "DEFAULT_MAX_REJECT_RATIO",
    "ConcurrencyShape",
    "Config",
    "Dist",
    "AutoShape",
    "LadderShape",
    "LadderStep",
    "MAX_CONCURRENCY",
    "MAX_RATE",
    "MAX_STEPS",
    "MAX_STEP_ARRIVALS",
    "MAX_TOKENS",
    "SHAPE_KINDS",
    "QualityCase",
    "Quality",
    "Requests",
    "SLO",
    "SLO_METRICS",
    "Shape",
    "SoakShape",
    "Target",
    "Telemetry",
    "Threshold",
    "TraceShape",
    "check_url",
    "config_notes",
    "load_config",
    "load_slo",
    "parse_config",
]

#: every `target.api` value: the modules of `llmload.apis` (one per server API)
API_KINDS = api_names()
#: the latency metrics an SLO threshold can name (`llmload.slo`, the registry of SLO dimensions)
SLO_METRICS = slo_dims.latency_names()


#: upper bounds (docs/CONFIG.md "Limits"): beyond them a value is a typo, not a test plan
MAX_RATE = 10_000.0  # requests per second
MAX_CONCURRENCY = 100_000  # requests in flight, users of a closed loop
MAX_FACTOR = 1_000.0  # trace speedup / rate_scale, gamma burstiness
MAX_TRACE_SCALES = 20  # shape.trace.scales: each is two steps
#: `slo.min_samples`' default: below 20 completions a step's autocorrelation time (batch means over 3 or
#: more blocks) and its rising-trend check (6 sub-windows of 2 or more) cannot be estimated, so no
#: interval is formed; from 20 on, a P95's interval can already lie wholly over a threshold (its low end
#: is about the 80th percentile at 90%), and a pass needs what the interval says (about 52 independent
#: completions for a P95 at 90%, more where requests queue together)
MIN_SAMPLES = 20
MAX_COUNT = 1_000_000  # requests per level, prefixes, refine steps, min_samples, samples
MAX_SEED = 2**63 - 1
MAX_STEPS = 10_000  # steps of a ladder, slices of a soak
MAX_STEP_ARRIVALS = 10_000_000  # arrivals one step plans: rate x (warmup + duration), rate x slice


def _duration(value: object) -> float:
    return parse_duration(value)


def check_url(value: str) -> str:
    """`value` if it is an http(s) URL with a host and a valid port, else ValueError saying why (a
    `user:password@` in the URL is never quoted back).

    >>> check_url("http://127.0.0.1:8000")
    'http://127.0.0.1:8000'
    """
    shown = _without_userinfo(value) if isinstance(value, str) else value
    if not isinstance(value, str) or not re.match(r"^https?://", value, re.IGNORECASE):
        raise ValueError(f'expected a URL like http://127.0.0.1:8000, got "{shown}"')
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:  # `http://[::1` (unclosed bracket), `:abc`, `:99999`
        reason = str(exc) if "@" not in str(exc) else "invalid"
        raise ValueError(f'bad URL "{shown}": {reason}') from None
    if not parts.hostname or any(c.isspace() for c in value):
        raise ValueError(f'bad URL "{shown}": expected a host like http://127.0.0.1:8000')
    if parts.netloc.endswith(":") or port == 0:
        raise ValueError(f'bad URL "{shown}": expected a port from 1 to 65535')
    return value


def _without_userinfo(url: str) -> str:
    """`url` with any `user:password@` replaced by `***@`, for messages."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1***@", url)


#: seconds, written by users as `800ms`, `30s`, `2m`, `4h` or a bare number (at most 30 days)
Duration = Annotated[float, BeforeValidator(_duration), PlainSerializer(float)]
#: a duration that must be more than zero (a timeout, a step, a slice)
Positive = Annotated[Duration, Field(gt=0)]
Rate = Annotated[float, Field(gt=0, le=MAX_RATE, description="requests per second")]
Url = Annotated[str, AfterValidator(check_url)]
#: a server setting stated in `conditions:` (context length, slots, queue sizes)
ServerInt = Annotated[int, Field(ge=0, le=2**31 - 1)]


def _optional_duration(value: object) -> float | None:
    """`auto` (or nothing): None, the limit is derived; else a duration above zero."""
    if value is None or value == "auto":
        return None
    seconds = _duration(value)
    if not seconds > 0:
        raise ValueError(f'expected a duration above zero or "auto", got "{value}"')
    return seconds


# --------------------------------------------------------------------------- target

class Target(Model):
    """The server under test."""

    url: Url | None = None
    urls: list[Url] | None = None
    routing: Literal["round_robin", "least_outstanding", "random"] = "round_robin"
    #: one of `llmload.apis.api_names()`
    api: str = "openai-chat"
    model: str = "default"
    api_key_env: str | None = None
    api_key_file: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: Positive = 120.0
    idle_timeout: Positive = 30.0
    connect_timeout: Positive = 10.0
    server: Literal["vllm", "ollama", "llamacpp", "sglang", "tgi", "generic"] | None = None

    @field_validator("api")
    @classmethod
    def _known_api(cls, value: str) -> str:
        if value not in API_KINDS:
            raise ValueError(unknown_api_message(value))
        return value

    @model_validator(mode="after")
    def _one_url(self) -> Target:
        return _one_of(self, "url", "urls", given=bool)

    @property
    def endpoints(self) -> list[str]:
        """Base URLs without a trailing slash."""
        return [u.rstrip("/") for u in (self.urls or [self.url or ""])]


# --------------------------------------------------------------------------- requests

class SharedPrefix(Model):
    ratio: float = Field(default=0.0, ge=0, le=1)
    prefixes: int = Field(default=1, ge=1, le=MAX_COUNT)
    tokens: Tokens = 256


class FixedTime(Model):
    dist: Literal["fixed"]
    value: Duration


class UniformTime(Model):
    dist: Literal["uniform"]
    min: Duration
    max: Duration

    _ordered = model_validator(mode="after")(_min_max)


class ExponentialTime(Model):
    dist: Literal["exponential"]
    mean: Duration


#: a distribution of durations (think times): fixed, uniform or exponential
TimeDist = Annotated[Union[FixedTime, UniformTime, ExponentialTime], Field(discriminator="dist")]


class Sessions(Model):
    """Multi-turn sessions (CONFIG.md `requests.sessions`): each arrival starts a session; each turn
    sends the whole conversation so far plus `new_tokens_per_turn` of new user text; the next turn is
    sent once the answer is in plus a think time."""

    turns: Dist
    think_time: TimeDist = Field(default_factory=lambda: FixedTime(dist="fixed", value=0.0))
    new_tokens_per_turn: Dist = Field(default_factory=lambda: FixedDist(dist="fixed", value=64))
    system_prompt_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS)


def _check_tools(tools: list[dict] | None) -> list[dict] | None:
    """OpenAI function tools: `{"type": "function", "function": {"name", "parameters": JSON Schema}}`;
    `parameters` must be a valid JSON Schema (checked with jsonschema's metaschema, imported here only)."""
    if tools is None:
        return None
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise ValueError(f'tools[{i}]: expected {{"type": "function", "function": {{"name": ..., '
                             '"parameters": {...}}}}')
        if not isinstance(fn.get("name"), str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", fn["name"]):
            raise ValueError(f"tools[{i}].function.name: expected letters, digits, _ or -, at most 64")
        params = fn.get("parameters", {})
        import jsonschema

        try:
            if not isinstance(params, dict):
                raise jsonschema.SchemaError(f"expected an object, got {type(params).__name__}")
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"tools[{i}].function.parameters is not a JSON Schema: "
                             f"{str(exc).splitlines()[0][:160]}") from None
    return tools


def _whole_seed(value: object) -> object:
    """A seed is an integer as written: `10000000000000.0` (a YAML float) is refused, not rounded."""
    if isinstance(value, float):
        raise ValueError("a seed is a whole number written without a decimal point or exponent")
    return value


Seed = Annotated[int, BeforeValidator(_whole_seed), Field(ge=-MAX_SEED, le=MAX_SEED)]


class Requests(Model):
    """The request mix: lengths, shared prefixes, dataset, seed."""

    input_tokens: Dist = Field(default_factory=lambda: FixedDist(dist="fixed", value=128))
    output_tokens: Dist = Field(default_factory=lambda: FixedDist(dist="fixed", value=64))
    ignore_eos: bool = True
    shared_prefix: SharedPrefix = Field(default_factory=SharedPrefix)
    dataset: str | None = None
    temperature: float = Field(default=0.0, ge=0, le=100)
    seed: Seed = 1
    #: server tokens per synthesised prompt word; null = measured by the pre-flight with the server's
    #: `/tokenize` (vLLM, llama.cpp, SGLang), else 1.0 (the sim's rule)
    tokens_per_word: float | None = Field(default=None, gt=0, le=1000)
    #: ask a reasoning model for this effort: OpenAI chat `reasoning_effort`, Ollama `think`; null: the
    #: server's default (nothing sent)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    #: multi-turn sessions; null: every arrival is one request
    sessions: Sessions | None = None
    #: OpenAI function tools sent with every chat request, and `tool_choice` (`auto`, `required`,
    #: `none` or `{"type": "function", "function": {"name": ...}}`); null: none
    tools: Annotated[list[dict] | None, AfterValidator(_check_tools)] = None
    tool_choice: Literal["auto", "required", "none"] | dict | None = None


class Client(Model):
    """The load generator: its concurrency cap and the limits it must hold to be trusted.

    A step's send-lag limit is `max_send_lag_p99` when set, else the smaller of
    `send_lag_share_of_interarrival` x the step's mean inter-arrival time (1 / offered rate) and, per
    judged latency threshold, `send_lag_share_of_target` x the threshold or the measured value's distance
    from it, whichever is larger (`analysis.validity`).
    """

    max_concurrency: int | None = Field(default=256, ge=1, le=MAX_CONCURRENCY)
    max_send_lag_p99: Annotated[float | None, BeforeValidator(_optional_duration)] = None
    send_lag_share_of_interarrival: float = Field(default=1.0, gt=0, le=1000)
    send_lag_share_of_target: float = Field(default=0.1, gt=0, le=1000)
    max_rate_shortfall: float = Field(default=0.02, ge=0, le=1)
    max_worker_cpu: float = Field(default=0.9, gt=0, le=1)


# --------------------------------------------------------------------------- shapes

class LadderStep(Model):
    rate: Rate
    duration: Positive


class Refine(Model):
    """The knee search after a ladder (`shapes.knee_search`): refine steps at the knee estimate until
    its interval is within `precision` of it (relative half-width), `budget` (wall time) runs out, or
    `max_steps` refine steps ran; an inconclusive step near the knee is run again up to
    `max_extensions` times. `resolution` is kept for old configs (the search no longer bisects).
    `prior`: where the knee is expected, a rate (req/s) or a twin (`llmload fit -o twin.yaml`, its knee
    for this config's mix and SLO computed when the search starts): the first two refine steps bracket
    it (`shapes.knee_search`); the answer is judged on the live steps alone."""

    resolution: float = Field(default=0.1, gt=0, le=MAX_RATE)
    max_steps: int = Field(default=6, ge=1, le=1000)
    duration: Positive | None = None
    precision: float = Field(default=0.05, gt=0, lt=1)
    budget: Positive = 600.0
    max_extensions: int = Field(default=2, ge=0, le=100)
    prior: Annotated[float, Field(gt=0, le=MAX_RATE)] | str | None = None


class LadderShape(Model):
    """Open-loop rate ladder: one arrival rate per step, drained between steps."""

    arrival: Literal["constant", "poisson", "poisson_exact", "gamma"] = "poisson_exact"
    burstiness: float = Field(default=1.0, gt=0, le=MAX_FACTOR)
    warmup: Duration = 10.0
    drain_timeout: Duration = 60.0
    steps: list[LadderStep] = Field(min_length=1, max_length=MAX_STEPS)
    refine: Refine | None = None
    #: after this many failing steps the rest of the ladder is `not_run` (the boundary search still
    #: runs); 1 keeps one failing step past the knee; null runs every step
    stop_after_failures: int | None = Field(default=1, ge=1, le=1000)

    @model_validator(mode="after")
    def _bounded_steps(self) -> LadderShape:
        for number, step in enumerate(self.steps, start=1):
            _check_arrivals(step.rate * (self.warmup + step.duration), f"steps: step {number}")
        if self.refine is not None and self.refine.duration is not None:
            top = max(step.rate for step in self.steps)
            _check_arrivals(top * (self.warmup + self.refine.duration), "refine: a refine step")
        return self


class ConcurrencyShape(Model):
    """Closed loop: a fixed number of users, each sending its next request when the last ends."""

    levels: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(min_length=1)
    requests_per_level: int = Field(default=50, ge=1, le=MAX_COUNT)
    duration: Positive | None = None
    drain_timeout: Duration = 60.0


class TraceShape(Model):
    """Replay of recorded arrivals with their request sizes."""

    file: str
    format: Literal["auto", "llmload", "azure", "burstgpt", "mooncake", "conversation"] = "auto"
    speedup: float = Field(default=1.0, gt=0, le=MAX_FACTOR)
    window: tuple[Duration, Duration] | None = None
    rate_scale: float = Field(default=1.0, gt=0, le=MAX_FACTOR)
    scale_method: Literal["thin", "superpose"] = "thin"
    uniform_twin: bool = False
    use_sizes: bool = True
    warmup: Duration = 0.0
    drain_timeout: Duration = 60.0
    seed: Seed | None = None
    #: mean rates (req/s) to replay the same trace at, time-scaled, each with its uniform twin (the
    #: trace's own knee: summary.json `burst_knee`); None: the trace once at its own rate
    scales: list[Rate] | None = Field(default=None, max_length=MAX_TRACE_SCALES)

    @field_validator("window")
    @classmethod
    def _window(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and v[1] <= v[0]:
            raise ValueError("the window's end must be after its start")
        return v

    @field_validator("scales")
    @classmethod
    def _scales(cls, v: list[float] | None) -> list[float] | None:
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("give at least two mean rates (one is the plain replay: leave scales out)")
        if len(set(v)) != len(v):
            raise ValueError("each mean rate at most once")
        return sorted(v)


class SoakShape(Model):
    """Long constant or trace-driven load, analysed in time slices."""

    rate: Rate | None = None
    duration: Positive
    slice: Positive = 600.0
    arrival: Literal["constant", "poisson", "poisson_exact", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0, le=MAX_FACTOR)
    trace: TraceShape | None = None
    drain_timeout: Duration = 60.0

    @model_validator(mode="after")
    def _rate_or_trace(self) -> SoakShape:
        return _one_of(self, "rate", "trace")

    @model_validator(mode="after")
    def _bounded_slices(self) -> SoakShape:
        if self.duration / self.slice > MAX_STEPS:
            raise ValueError(f"slice: duration / slice is {math.ceil(self.duration / self.slice):,} slices; "
                             f"a soak may have at most {MAX_STEPS:,} (make slice longer)")
        if self.rate is not None:
            _check_arrivals(self.rate * self.slice, "slice: each slice")
        return self


class AutoShape(Model):
    """The knee from a URL and targets alone (`shapes.auto`): a short closed-loop probe measures the
    server's range (idle latency, saturation throughput), open-loop steps placed across that range
    bracket the knee, then the knee search refines it. Every step's window is sized from the samples
    its judgement needs at its rate, within `budget` (the whole run's wall time) and until the knee's
    relative half-width is at most `precision`."""

    budget: Positive = 480.0
    precision: float = Field(default=0.05, gt=0, lt=1)
    #: refine steps at most (after the probe and the placement steps)
    max_steps: int = Field(default=12, ge=1, le=1000)
    max_extensions: int = Field(default=2, ge=0, le=100)
    arrival: Literal["constant", "poisson", "poisson_exact", "gamma"] = "poisson_exact"
    burstiness: float = Field(default=1.0, gt=0, le=MAX_FACTOR)
    #: the closed-loop probe raises its users from 1 (4x, then 2x once loaded) up to this (and the
    #: client cap) until the throughput stops growing
    probe_max_concurrency: int = Field(default=64, ge=2, le=MAX_CONCURRENCY)
    drain_timeout: Duration = 60.0

    @model_validator(mode="after")
    def _budget_holds_a_search(self) -> AutoShape:
        if self.budget < MIN_AUTO_BUDGET_S:
            raise ValueError(f"budget: {self.budget:g}s is too short for a probe, placement steps and a "
                             f"search; give at least {MIN_AUTO_BUDGET_S:g}s")
        return self


#: the shortest `shape.auto.budget`: a probe, three placement steps and two refine steps of 10 s
MIN_AUTO_BUDGET_S = 60.0


def _check_arrivals(count: float, where: str) -> None:
    """ValueError when one step would plan more than `MAX_STEP_ARRIVALS` arrivals (held in memory)."""
    if count > MAX_STEP_ARRIVALS:
        raise ValueError(f"{where} plans {count:,.0f} arrivals (rate x time); a step may plan at most "
                         f"{MAX_STEP_ARRIVALS:,}: shorten it or lower the rate")


#: the `shape:` kinds, in the order they are named; each has a LoadTestShape class (`shapes.loadshapes`)
SHAPE_KINDS = ("ladder", "concurrency", "trace", "soak", "auto")


class Shape(Model):
    """Exactly one of ladder, concurrency, trace, soak, auto."""

    ladder: LadderShape | None = None
    concurrency: ConcurrencyShape | None = None
    trace: TraceShape | None = None
    soak: SoakShape | None = None
    auto: AutoShape | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Shape:
        given = [k for k in SHAPE_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(SHAPE_KINDS)} (got {given or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in SHAPE_KINDS if getattr(self, k) is not None)

    @property
    def spec(self) -> LadderShape | ConcurrencyShape | TraceShape | SoakShape | AutoShape:
        return getattr(self, self.kind)


# --------------------------------------------------------------------------- SLO

def _threshold_seconds(value: object) -> float:
    """A threshold's seconds: a duration more than 0."""
    negative = isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0
    if negative or not parse_duration(value) > 0:
        raise ValueError(f"expected a duration more than 0, got {_shown(value)}")
    return parse_duration(value)


class Threshold(Model):
    """`metric` at `percentile` must stay at or under `value_s` (seconds): `metric` one of the registered
    latency dimensions (`llmload.slo.LATENCY`), `percentile` strictly between 0 and 100, `value_s` more
    than 0."""

    metric: str
    percentile: float
    value_s: Duration

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        slo_dims.check_threshold(v, 50.0, 1.0)
        return v

    @field_validator("percentile")
    @classmethod
    def _percentile(cls, v: float) -> float:
        slo_dims.check_threshold(SLO_METRICS[0], v, 1.0)
        return v

    @field_validator("value_s", mode="before")
    @classmethod
    def _value(cls, v: object) -> float:
        return _threshold_seconds(v)

    @property
    def key(self) -> str:
        return slo_dims.threshold_key(self.metric, self.percentile)


#: the error-ratio limit when the SLO writes none (`max_error_ratio: null` turns the check off): a step
#: where more than this share of the arrivals failed (http_error, malformed, timeout, disconnect, connect_error,
#: oom, cancelled) never passes just because no limit was written
DEFAULT_MAX_ERROR_RATIO = 0.05

#: the rejection-ratio limit when the SLO writes none (`max_reject_ratio: null` turns the check off): a
#: step where more than this share of the arrivals was refused (429, 503, an engine's admission refusal)
#: fails on `reject_ratio`, never passes and never merely "insufficient" for want of a written limit
DEFAULT_MAX_REJECT_RATIO = 0.05


class SLO(Model):
    """The product's targets, written before the run. A missing threshold is not checked, except the
    error and rejection ratios, which have defaults (`DEFAULT_MAX_ERROR_RATIO`, `DEFAULT_MAX_REJECT_RATIO`)."""

    thresholds: list[Threshold] = Field(default_factory=list)
    max_reject_ratio: float | None = Field(default=DEFAULT_MAX_REJECT_RATIO, ge=0, le=1)
    max_error_ratio: float | None = Field(default=DEFAULT_MAX_ERROR_RATIO, ge=0, le=1)
    #: the share of a step's arrivals whose usage may disagree with the request (METRICS.md "Usage
    #: mismatch"); not checked unless written (the count and a warning are always there)
    max_usage_mismatch_ratio: float | None = Field(default=None, ge=0, le=1)
    allow_oom: bool | None = None
    queue_growth: Literal["forbid", "allow"] | None = None
    #: the floor below which a step's percentiles are not judged (no interval is formed): above it the
    #: intervals decide, whatever the count (`analysis.verdict`, METRICS.md "Verdict of a step")
    min_samples: int = Field(default=MIN_SAMPLES, ge=1, le=MAX_COUNT)
    trend_alpha: float = Field(default=0.05, gt=0, lt=1)
    sub_windows: int = Field(default=6, ge=3, le=1000)
    #: two-sided confidence of every step's percentile intervals and of the knee's interval
    confidence: float = Field(default=0.9, gt=0.5, lt=1)

    @model_validator(mode="before")
    @classmethod
    def _collect_thresholds(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        thresholds = list(data.get("thresholds", []))
        for key, value in data.items():
            parsed = slo_dims.parse_threshold_key(str(key))
            if parsed:
                try:
                    seconds = _threshold_seconds(value)
                    slo_dims.check_threshold(*parsed, seconds)
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None
                thresholds.append({"metric": parsed[0], "percentile": parsed[1], "value_s": seconds})
            elif key != "thresholds":
                out[key] = value
        out["thresholds"] = thresholds
        return out

    @model_validator(mode="after")
    def _once_each(self) -> SLO:
        seen: set[str] = set()
        for t in self.thresholds:
            if t.key in seen:
                raise ValueError(f"thresholds: {t.key} is given twice")
            seen.add(t.key)
        return self

    def threshold(self, metric: str) -> Threshold | None:
        return next((t for t in self.thresholds if t.metric == metric), None)

    def setting(self, dim: slo_dims.Dimension) -> Any:
        """This SLO's setting of a ratio or flag dimension (None: not checked)."""
        return getattr(self, dim.setting)

    @property
    def checked(self) -> list[str]:
        """Names of what this SLO checks, for reports ("not checked" is everything else)."""
        names = [t.key for t in self.thresholds]
        names += [d.setting for d in slo_dims.LIMITS if self.setting(d) is not None]
        return names


# --------------------------------------------------------------------------- quality, telemetry, conditions

class Expect(Model):
    contains: str | None = None
    regex: str | None = None
    exact: str | None = None
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> Expect:
        _one_of(self, "contains", "regex", "exact", "json_schema")
        if self.json_schema is not None:  # `client.checks` needs it: loaded here, not mid-load at the first check
            import jsonschema  # noqa: F401
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"bad regex: {exc}") from None
        return self


class QualityCase(Model):
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    expect: Expect
    max_tokens: Tokens = 32

    @model_validator(mode="after")
    def _prompt(self) -> QualityCase:
        return _one_of(self, "prompt", "messages")


class Quality(Model):
    required: bool = True
    cases: list[QualityCase] = Field(default_factory=list)
    sample_under_load: float = Field(default=0.0, ge=0, le=1)


class Telemetry(Model):
    metrics_url: str = "auto"
    interval: Positive = 1.0
    gpu: str = "auto"
    timeout: Positive = 2.0

    @field_validator("metrics_url", "gpu", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `off` as false: take it as the word the user wrote
        return "off" if v is False else v

    @field_validator("metrics_url")
    @classmethod
    def _metrics_url(cls, v: str) -> str:
        if v.strip().lower() in ("auto", "off", "none", ""):
            return v
        try:
            check_url(v.strip().replace("{url}", "http://127.0.0.1:8000"))
        except ValueError:
            raise ValueError(f'expected auto, off, a URL or a template like {{url}}/metrics, got "{v}"') from None
        return v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        if v in ("auto", "nvml", "off"):
            return v
        if v.startswith("dcgm:"):
            check_url(v[len("dcgm:"):].strip())
            return v
        raise ValueError(f'expected auto, nvml, dcgm:<url> or off, got "{v}"')


class Conditions(Model):
    """Fixed conditions the server cannot report; recorded in the manifest."""

    gpus: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    gpu_model: str | None = None
    instances: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    cost_per_hour: float | None = Field(default=None, ge=0, le=1e9)
    owner: str = ""
    notes: str = ""
    model_revision: str | None = None
    quantization: str | None = None
    context_length: ServerInt | None = None
    max_num_seqs: ServerInt | None = None
    prefix_cache: str | None = None
    ollama_num_parallel: ServerInt | None = None
    ollama_max_queue: ServerInt | None = None
    ollama_context_length: ServerInt | None = None
    ollama_keep_alive: str | None = None
    server_admission_cap: ServerInt | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class Config(Model):
    """A whole run configuration."""

    target: Target
    shape: Shape
    requests: Requests = Field(default_factory=Requests)
    client: Client = Field(default_factory=Client)
    slo: SLO = Field(default_factory=SLO)
    quality: Quality = Field(default_factory=Quality)
    telemetry: Telemetry = Field(default_factory=Telemetry)
    conditions: Conditions = Field(default_factory=Conditions)
    output: str = "runs/"


# --------------------------------------------------------------------------- loading with line numbers

def parse_config(data: Any, *, file: str = "<config>", text: str = "",
                 lines: Mapping[tuple, int] | None = None) -> Config:
    """Validate an already-loaded mapping. `text` (the YAML source) or `lines` (its `LineIndex`) gives
    line numbers to errors."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with at least target: and shape:", file=file, line=1)
    lines = _line_index(text) if lines is None else lines  # parsed at its first lookup: only on an error
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        _raise_first(exc, file=file, lines=lines)
    _check_refine_budget(config, file=file, lines=lines)
    _check_auto_targets(config, file=file, lines=lines)
    return config


def _check_auto_targets(config: Config, *, file: str, lines: Mapping[tuple, int]) -> None:
    """`shape.auto` searches for the rate where a percentile target is crossed: it needs one."""
    if config.shape.auto is None or config.slo.thresholds:
        return
    raise ConfigError("shape: auto needs at least one percentile target to search for (e.g. ttft_p95: 1s)",
                      file=file, line=lines.get(("slo",)) or lines.get(("shape", "auto")), key="slo")


def refine_step_s(ladder: LadderShape) -> float:
    """The shortest refine step a ladder can run: warm-up plus `refine.duration`, else plus the
    shortest ladder window (`shapes.plan.refine_step` takes the window of a ladder step)."""
    window = ladder.refine.duration if ladder.refine and ladder.refine.duration else min(s.duration for s in ladder.steps)
    return float(ladder.warmup) + float(window)


def _check_refine_budget(config: Config, *, file: str, lines: Mapping[tuple, int]) -> None:
    """`shape.ladder.refine.budget` must hold one refine step (else the search could never run one)."""
    ladder = config.shape.ladder
    if ladder is None or ladder.refine is None:
        return
    step_s = refine_step_s(ladder)
    if ladder.refine.budget < step_s:
        path = ("shape", "ladder", "refine", "budget")
        raise ConfigError(f"{ladder.refine.budget:g}s is shorter than one refine step (warm-up + window: "
                          f"{step_s:g}s)", file=file, line=lines.get(path) or lines.get(path[:-1]),
                          key=_format_path(path))


#: keys accepted for old configs that no longer do anything: (key path, what to write instead)
LEGACY_KEYS = {
    ("shape", "ladder", "refine", "resolution"): "the knee search no longer bisects; it stops at refine.precision "
                                                 "or refine.budget (default 10m): set those instead",
}


def config_notes(config: Config, *, file: str = "<config>", text: str = "") -> list[str]:
    """One `llmload: note:` line per key of `LEGACY_KEYS` the config sets (`file:line key: ...`)."""
    lines = _line_index(text) if text else {}
    notes = []
    for path, instead in LEGACY_KEYS.items():
        node: Any = config
        for part in path[:-1]:
            node = getattr(node, part, None)
        if node is not None and path[-1] in node.model_fields_set:
            line = lines.get(path)
            where = f"{file}:{line}" if line else file
            notes.append(f"llmload: note: {where} {_format_path(path)} is kept for old configs and does nothing: "
                         f"{instead}")
    return notes


def load_config(path: str | Path, *, notes: list[str] | None = None) -> Config:
    """Read and validate a run configuration file. Raises ConfigError with file:line key: reason; appends
    to `notes` a line per legacy key the file sets (`config_notes`), for the caller to print.

    Files the config names (`requests.dataset`, an `empirical` lengths `file`, `target.api_key_file`) must
    exist, relative to the config's folder, so a typo stops the run before it starts rather than in its
    first request. `target.api_key_file` comes back as an absolute path, so every reader of the key (the
    pre-flight, telemetry, the load's workers) reads the same file whatever their current folder."""
    text, data, lines = _read_yaml(path)
    config = parse_config(data, file=str(path), lines=lines)
    base_dir = Path(path).resolve().parent
    if config.target.api_key_file:  # one key file for the pre-flight, telemetry and the load alike
        key_file = str(base_dir / Path(config.target.api_key_file).expanduser())
        config = config.model_copy(update={"target": config.target.model_copy(update={"api_key_file": key_file})})
    _check_files(config, base_dir=base_dir, file=str(path), lines=lines)
    config = _resolve_prior(config, base_dir=base_dir, file=str(path), lines=lines)
    if notes is not None:
        notes.extend(config_notes(config, file=str(path), text=text))
    return config


#: the first line `llmload fit` writes for a run that does not fit the engine's model (analysis.fit)
TWIN_MISFIT_MARK = "# NOT A TWIN"


def _resolve_prior(config: Config, *, base_dir: Path, file: str, lines: Mapping[tuple, int]) -> Config:
    """A `refine.prior` naming a twin: an absolute path, checked now (a missing file, or a fit that said
    the run does not fit its model, stops the run before it starts; its settings are read when the
    search starts, `llmload.sim.whatif.twin_prior`)."""
    ladder = config.shape.ladder
    prior = ladder.refine.prior if ladder is not None and ladder.refine is not None else None
    if not isinstance(prior, str) or ladder is None or ladder.refine is None:
        return config
    key = ("shape", "ladder", "refine", "prior")
    path = base_dir / Path(prior).expanduser()
    if not path.is_file():
        raise ConfigError(f'file "{prior}" not found (relative paths start at the config\'s folder)',
                          file=file, line=lines.get(key), key=_format_path(key))
    try:
        head = path.read_text(encoding="utf-8").splitlines()[:1]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the twin: {exc}", file=file, line=lines.get(key), key=_format_path(key)) from None
    if head and head[0].startswith(TWIN_MISFIT_MARK):
        raise ConfigError(f"the fit said the run does not fit the twin's model "
                          f"({head[0][len(TWIN_MISFIT_MARK):].strip(' :')}); it is no prior",
                          file=file, line=lines.get(key), key=_format_path(key))
    refine = ladder.refine.model_copy(update={"prior": str(path.resolve())})
    return config.model_copy(update={"shape": config.shape.model_copy(
        update={"ladder": ladder.model_copy(update={"refine": refine})})})


def _check_files(config: Config, *, base_dir: Path, file: str, lines: Mapping[tuple, int]) -> None:
    named: list[tuple[tuple[str, ...], str | None]] = [
        (("requests", "dataset"), config.requests.dataset), (("target", "api_key_file"), config.target.api_key_file)]
    for key in ("input_tokens", "output_tokens"):
        dist = getattr(config.requests, key)
        if isinstance(dist, EmpiricalDist) and dist.file:
            named.append((("requests", key, "file"), dist.file))
    for path, name in named:
        if name and not (base_dir / name).is_file():
            raise ConfigError(f'file "{name}" not found (relative paths start at the config\'s folder)',
                              file=file, line=lines.get(path), key=_format_path(path))
    if config.requests.dataset:  # every line checked now: a bad one stops the run before its pre-flight
        from llmload.client.dataset import load_dataset

        load_dataset(base_dir / config.requests.dataset)


def load_slo(path: str | Path) -> SLO:
    """An SLO file: the `slo:` keys at the top level, or a whole config whose `slo:` section is used."""
    _, data, lines = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of SLO keys", file=str(path), line=1)
    prefix: tuple = ()
    if "slo" in data:
        data, prefix = data["slo"] or {}, ("slo",)
    try:
        return SLO.model_validate(data)
    except ValidationError as exc:
        _raise_first(exc, file=str(path), lines=lines, prefix=prefix)
    raise AssertionError("unreachable")
