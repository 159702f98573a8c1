"""The run configuration (CONFIG.md is the contract): YAML in, typed and validated objects out.

Validation happens once, here. Every error is one line naming the file, the line and the key path:
`run.yaml:14 slo.ttft_p95: expected a duration like 800ms, got "fast"`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from llmload.errors import ConfigError
from llmload.units import parse_duration

__all__ = [
    "API_KINDS",
    "Client",
    "Conditions",
    "ConcurrencyShape",
    "Config",
    "Dist",
    "LadderShape",
    "LadderStep",
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
    "load_config",
    "load_slo",
    "parse_config",
]

API_KINDS = ("openai-chat", "openai-completions", "ollama-chat", "ollama-generate")
SLO_METRICS = ("ttft", "user_ttft", "tpot", "itl", "e2e", "user_e2e", "client_wait", "server_queue")


def _duration(value: object) -> float:
    return parse_duration(value)


#: seconds, written by users as `800ms`, `30s`, `2m`, `4h` or a bare number
Duration = Annotated[float, BeforeValidator(_duration), PlainSerializer(float)]


def _optional_duration(value: object) -> float | None:
    return None if value is None or value == "auto" else parse_duration(value)


Rate = Annotated[float, Field(gt=0, description="requests per second")]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- target

class Target(Model):
    """The server under test."""

    url: str | None = None
    urls: list[str] | None = None
    routing: Literal["round_robin", "least_outstanding", "random"] = "round_robin"
    api: Literal["openai-chat", "openai-completions", "ollama-chat", "ollama-generate"] = "openai-chat"
    model: str = "default"
    api_key_env: str | None = None
    api_key_file: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = 120.0
    idle_timeout: Duration = 30.0
    connect_timeout: Duration = 10.0
    server: Literal["vllm", "ollama", "llamacpp", "sglang", "tgi", "generic"] | None = None

    @model_validator(mode="after")
    def _one_url(self) -> Target:
        if bool(self.url) == bool(self.urls):
            raise ValueError("give exactly one of url or urls")
        for u in self.endpoints:
            if not re.match(r"^https?://[^/\s]+", u):
                raise ValueError(f'expected a URL like http://127.0.0.1:8000, got "{u}"')
        return self

    @property
    def endpoints(self) -> list[str]:
        """Base URLs without a trailing slash."""
        return [u.rstrip("/") for u in (self.urls or [self.url or ""])]


# --------------------------------------------------------------------------- requests

class FixedDist(Model):
    dist: Literal["fixed"]
    value: int = Field(ge=1)


class UniformDist(Model):
    dist: Literal["uniform"]
    min: int = Field(ge=1)
    max: int = Field(ge=1)


class NormalDist(Model):
    dist: Literal["normal"]
    mean: float = Field(gt=0)
    std: float = Field(ge=0)
    min: int = Field(default=1, ge=1)
    max: int | None = None


class LognormalDist(Model):
    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0)
    min: int = Field(default=1, ge=1)
    max: int | None = None


class EmpiricalDist(Model):
    """Lengths drawn from a list of values or a file (one integer per line, or a CSV column)."""

    dist: Literal["empirical"]
    values: list[int] | None = None
    file: str | None = None
    column: str | None = None

    @model_validator(mode="after")
    def _source(self) -> EmpiricalDist:
        if bool(self.values) == bool(self.file):
            raise ValueError("give exactly one of values or file")
        return self


Dist = Annotated[
    Union[FixedDist, UniformDist, NormalDist, LognormalDist, EmpiricalDist],
    Field(discriminator="dist"),
]


class SharedPrefix(Model):
    ratio: float = Field(default=0.0, ge=0, le=1)
    prefixes: int = Field(default=1, ge=1)
    tokens: int = Field(default=256, ge=1)


class Requests(Model):
    """The request mix: lengths, shared prefixes, dataset, seed."""

    input_tokens: Dist = Field(default_factory=lambda: FixedDist(dist="fixed", value=128))
    output_tokens: Dist = Field(default_factory=lambda: FixedDist(dist="fixed", value=64))
    ignore_eos: bool = True
    shared_prefix: SharedPrefix = Field(default_factory=SharedPrefix)
    dataset: str | None = None
    temperature: float = Field(default=0.0, ge=0)
    seed: int = 1
    #: server tokens per synthesised prompt word; null = measured by the pre-flight with the server's
    #: `/tokenize` (vLLM, llama.cpp, SGLang), else 1.0 (the sim's rule)
    tokens_per_word: float | None = Field(default=None, gt=0)


class Client(Model):
    """The load generator: its concurrency cap and the limits it must hold to be trusted.

    A step's send-lag limit is `max_send_lag_p99` when set, else the smaller of
    `send_lag_share_of_interarrival` x the step's mean inter-arrival time (1 / offered rate) and, per
    judged latency threshold, `send_lag_share_of_target` x the threshold or the measured value's distance
    from it, whichever is larger (`analysis.validity`).
    """

    max_concurrency: int | None = Field(default=256, ge=1)
    max_send_lag_p99: Annotated[float | None, BeforeValidator(_optional_duration)] = None
    send_lag_share_of_interarrival: float = Field(default=1.0, gt=0)
    send_lag_share_of_target: float = Field(default=0.1, gt=0)
    max_rate_shortfall: float = Field(default=0.02, ge=0, le=1)
    max_worker_cpu: float = Field(default=0.9, gt=0, le=1)


# --------------------------------------------------------------------------- shapes

class LadderStep(Model):
    rate: Rate
    duration: Duration = Field(gt=0)


class Refine(Model):
    resolution: float = Field(default=0.1, gt=0)
    max_steps: int = Field(default=6, ge=1)
    duration: Duration | None = None


class LadderShape(Model):
    """Open-loop rate ladder: one arrival rate per step, drained between steps."""

    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0)
    warmup: Duration = 10.0
    drain_timeout: Duration = 60.0
    steps: list[LadderStep] = Field(min_length=1)
    refine: Refine | None = None


class ConcurrencyShape(Model):
    """Closed loop: a fixed number of users, each sending its next request when the last ends."""

    levels: list[int] = Field(min_length=1)
    requests_per_level: int = Field(default=50, ge=1)
    duration: Duration | None = None
    drain_timeout: Duration = 60.0


class TraceShape(Model):
    """Replay of recorded arrivals with their request sizes."""

    file: str
    format: Literal["auto", "llmload", "azure", "burstgpt", "mooncake"] = "auto"
    speedup: float = Field(default=1.0, gt=0)
    window: tuple[Duration, Duration] | None = None
    rate_scale: float = Field(default=1.0, gt=0)
    scale_method: Literal["thin", "superpose"] = "thin"
    uniform_twin: bool = False
    use_sizes: bool = True
    warmup: Duration = 0.0
    drain_timeout: Duration = 60.0
    seed: int | None = None


class SoakShape(Model):
    """Long constant or trace-driven load, analysed in time slices."""

    rate: Rate | None = None
    duration: Duration = Field(gt=0)
    slice: Duration = 600.0
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    burstiness: float = Field(default=1.0, gt=0)
    trace: TraceShape | None = None
    drain_timeout: Duration = 60.0

    @model_validator(mode="after")
    def _rate_or_trace(self) -> SoakShape:
        if (self.rate is None) == (self.trace is None):
            raise ValueError("give exactly one of rate or trace")
        return self


class Shape(Model):
    """Exactly one of ladder, concurrency, trace, soak."""

    ladder: LadderShape | None = None
    concurrency: ConcurrencyShape | None = None
    trace: TraceShape | None = None
    soak: SoakShape | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Shape:
        given = [k for k in ("ladder", "concurrency", "trace", "soak") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of ladder, concurrency, trace, soak (got {given or 'none'})")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("ladder", "concurrency", "trace", "soak") if getattr(self, k) is not None)

    @property
    def spec(self) -> LadderShape | ConcurrencyShape | TraceShape | SoakShape:
        return getattr(self, self.kind)


# --------------------------------------------------------------------------- SLO

class Threshold(Model):
    """`metric` at `percentile` must stay at or under `value_s` (seconds)."""

    metric: str
    percentile: float
    value_s: float

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.percentile:g}"


_THRESHOLD_KEY = re.compile(r"^(" + "|".join(SLO_METRICS) + r")_p(\d{1,2}(?:\.\d+)?)$")


class SLO(Model):
    """The product's targets, written before the run. A missing threshold is not checked."""

    thresholds: list[Threshold] = Field(default_factory=list)
    max_reject_ratio: float | None = Field(default=None, ge=0, le=1)
    max_error_ratio: float | None = Field(default=None, ge=0, le=1)
    allow_oom: bool | None = None
    queue_growth: Literal["forbid", "allow"] | None = None
    min_samples: int = Field(default=200, ge=1)
    trend_alpha: float = Field(default=0.05, gt=0, lt=1)
    sub_windows: int = Field(default=6, ge=3)

    @model_validator(mode="before")
    @classmethod
    def _collect_thresholds(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        thresholds = list(data.get("thresholds", []))
        for key, value in data.items():
            match = _THRESHOLD_KEY.match(str(key))
            if match:
                try:
                    seconds = parse_duration(value)
                except ValueError as exc:
                    raise ValueError(f"{key}: {exc}") from None
                thresholds.append({"metric": match.group(1), "percentile": float(match.group(2)),
                                   "value_s": seconds})
            elif key != "thresholds":
                out[key] = value
        out["thresholds"] = thresholds
        return out

    def threshold(self, metric: str) -> Threshold | None:
        return next((t for t in self.thresholds if t.metric == metric), None)

    @property
    def checked(self) -> list[str]:
        """Names of what this SLO checks, for reports ("not checked" is everything else)."""
        names = [t.key for t in self.thresholds]
        for key in ("max_reject_ratio", "max_error_ratio", "allow_oom", "queue_growth"):
            if getattr(self, key) is not None:
                names.append(key)
        return names


# --------------------------------------------------------------------------- quality, telemetry, conditions

class Expect(Model):
    contains: str | None = None
    regex: str | None = None
    exact: str | None = None
    json_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one(self) -> Expect:
        if sum(v is not None for v in (self.contains, self.regex, self.exact, self.json_schema)) != 1:
            raise ValueError("give exactly one of contains, regex, exact, json_schema")
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
    max_tokens: int = Field(default=32, ge=1)

    @model_validator(mode="after")
    def _prompt(self) -> QualityCase:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class Quality(Model):
    required: bool = True
    cases: list[QualityCase] = Field(default_factory=list)
    sample_under_load: float = Field(default=0.0, ge=0, le=1)


class Telemetry(Model):
    metrics_url: str = "auto"
    interval: Duration = Field(default=1.0, gt=0)
    gpu: str = "auto"
    timeout: Duration = Field(default=2.0, gt=0)

    @field_validator("metrics_url", "gpu", mode="before")
    @classmethod
    def _off(cls, v: object) -> object:
        # YAML 1.1 reads a bare `off` as false: take it as the word the user wrote
        return "off" if v is False else v

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        if v in ("auto", "nvml", "off") or v.startswith("dcgm:"):
            return v
        raise ValueError(f'expected auto, nvml, dcgm:<url> or off, got "{v}"')


class Conditions(Model):
    """Fixed conditions the server cannot report; recorded in the manifest."""

    gpus: int | None = Field(default=None, ge=0)
    gpu_model: str | None = None
    instances: int | None = Field(default=None, ge=1)
    cost_per_hour: float | None = Field(default=None, ge=0)
    owner: str = ""
    notes: str = ""
    model_revision: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    max_num_seqs: int | None = None
    prefix_cache: str | None = None
    ollama_num_parallel: int | None = None
    ollama_max_queue: int | None = None
    ollama_context_length: int | None = None
    ollama_keep_alive: str | None = None
    server_admission_cap: int | None = None
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

def _line_index(text: str) -> dict[tuple, int]:
    """Map each key path (as a tuple of keys / list indexes) to its 1-based line in the YAML text."""
    index: dict[tuple, int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return index

    def walk(node: yaml.Node, path: tuple) -> None:
        index[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                key = (path + (key_node.value,))
                index[key] = key_node.start_mark.line + 1
                walk(value_node, key)
                index[key] = key_node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    if root is not None:
        walk(root, ())
    return index


def _key_path(loc: tuple) -> tuple:
    """Drop pydantic's union-tag entries (`fixed`, `function-after[...]`) from an error location."""
    out = []
    for part in loc:
        if isinstance(part, str) and (part.startswith(("function-", "tagged-union[")) or "[" in part):
            continue
        out.append(part)
    return tuple(out)


def _format_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(err: dict) -> str:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("float_parsing", "float_type", "int_parsing", "int_type", "bool_parsing", "bool_type",
                "string_type", "literal_error", "union_tag_invalid", "dict_type", "list_type"):
        shown = f'"{value}"' if isinstance(value, str) else repr(value)
        return f"{msg[0].lower()}{msg[1:]}, got {shown}"
    return msg[0].lower() + msg[1:] if msg else kind


def _raise_first(exc: ValidationError, *, file: str, lines: dict[tuple, int], prefix: tuple = ()) -> None:
    err = exc.errors()[0]
    path = prefix + _key_path(err["loc"])
    message = _message(err)
    child = re.match(r"^(\w+): (.*)$", message)
    if child and path + (child.group(1),) in lines:
        path, message = path + (child.group(1),), child.group(2)
    line = None
    probe = path
    while probe and line is None:
        line = lines.get(probe)
        probe = probe[:-1]
    if line is None:
        line = lines.get(())
    raise ConfigError(message, file=file, line=line, key=_format_path(path) or None) from None


def _read_yaml(path: str | Path) -> tuple[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ConfigError("file not found", file=str(path))
    if p.is_dir():
        raise ConfigError("is a directory, expected a YAML file", file=str(path))
    text = p.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(f"invalid YAML: {problem}", file=str(path),
                          line=mark.line + 1 if mark else None) from None
    return text, data


def parse_config(data: Any, *, file: str = "<config>", text: str = "") -> Config:
    """Validate an already-loaded mapping. `text` (the YAML source) gives line numbers to errors."""
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping with at least target: and shape:", file=file, line=1)
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        _raise_first(exc, file=file, lines=_line_index(text))
    raise AssertionError("unreachable")


def load_config(path: str | Path) -> Config:
    """Read and validate a run configuration file. Raises ConfigError with file:line key: reason."""
    text, data = _read_yaml(path)
    return parse_config(data, file=str(path), text=text)


def load_slo(path: str | Path) -> SLO:
    """An SLO file: the `slo:` keys at the top level, or a whole config whose `slo:` section is used."""
    text, data = _read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of SLO keys", file=str(path), line=1)
    prefix: tuple = ()
    if "slo" in data:
        data, prefix = data["slo"] or {}, ("slo",)
    try:
        return SLO.model_validate(data)
    except ValidationError as exc:
        _raise_first(exc, file=str(path), lines=_line_index(text), prefix=prefix)
    raise AssertionError("unreachable")
