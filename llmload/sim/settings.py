"""The sim YAML: engine, admission and fault settings, validated once with file:line errors.

Every key is optional and flat (faults nest under `faults:`). Durations take `ms`, `s`, `m`, `h` or a bare
number of seconds. Defaults resemble a 7-8B model on one GPU (about 25 ms per decode step at batch 1,
0.2 ms per prefill token):

| key | default | meaning |
|---|---|---|
| `max_num_seqs` | 256 | vLLM (SGLang `--max-running-requests`): most sequences running in one engine step (continuous batching) |
| `max_num_batched_tokens` | 2048 | tokens per step (prefill chunks + one per decoding sequence): chunked prefill |
| `num_blocks` | 4096 | KV cache blocks; a request holds blocks for its prompt plus generated tokens |
| `block_size` | 16 | tokens per KV block (4096 x 16 = 65,536 tokens of KV cache) |
| `step_base_s` | 24ms | fixed cost of one engine step |
| `prefill_cost_s` | 0.2ms | cost per prompt token computed in a step |
| `decode_cost_s` | 0.25ms | cost per sequence in a step (batch 64: 24 + 16 = 40 ms per step) |
| `decode_step_s` | null | a step's cost per batch size, a list (`[28ms, 54ms, 86ms, 72ms]`): n sequences cost entry n, plus `prefill_cost_s` x prefill tokens; `step_base_s` and `decode_cost_s` are then not used. Past the list's end an extrapolation: the line through its last two entries, or where the last is the cheaper of them (or the only one) the line through the origin and the last. For a server whose step is not a line in the batch size (llama.cpp on a CPU); `llmload fit` writes it then; null: the line |
| `max_num_queued_reqs` | null | vLLM `--max-num-queued-reqs`: requests in flight (waiting + running) before 503; null = none |
| `max_model_len` | 8192 | vLLM and SGLang context: prompt + max_tokens; a longer prompt is a 400, max_tokens is capped |
| `num_parallel` | 4 | Ollama `OLLAMA_NUM_PARALLEL` / llama.cpp `--parallel`: slots running at once |
| `prompt_tail_tokens` | 0 | llama.cpp flavour: a prompt's last this many tokens (and its first token) in an engine step of their own, after the rest of the prompt in one before; llama.cpp's server does so with a sliding-window model (Gemma 3: 4) to save a context checkpoint; 0: one step per prompt (within `max_num_batched_tokens`) |
| `ctx_size` | 4096 | llama.cpp `--ctx-size` (split across slots) and Ollama's context length |
| `max_queue` | 512 | Ollama `OLLAMA_MAX_QUEUE`: requests waiting for a model load before 503 |
| `load_time_s` | 1s | model load: Ollama on the first request after an unload; llama.cpp `/health` 503 and vLLM not listening for this long after start |
| `keep_alive_s` | 5m | Ollama: unload the model after this long idle (a request's `keep_alive` overrides) |
| `eos_probability` | 0.0 | chance per generated token of a seeded EOS (finish_reason stop) unless `ignore_eos` |
| `enable_prefix_caching` | true | vLLM flavour: automatic prefix caching (vLLM's default; `--no-enable-prefix-caching` is false): full KV blocks of a prompt prefix already computed are reused, so that prefill is skipped |
| `default_max_tokens` | 256 | a request with no max_tokens / num_predict / n_predict: the model stops (EOS, finish_reason stop) after this many tokens; with `ignore_eos` it runs to the context limit, as the real servers do |
| `step_cost_growth_s_per_min` | 0 | injected slow leak (soak tests): each engine step costs this much more per minute since start |
| `reasoning_tokens` | null | a length distribution (`{dist: fixed, value: 20}`, as `requests.input_tokens`): chat answers start with this many reasoning tokens, in each flavour's own field (`llmload.sim.wire`), out of the request's output tokens; a request with `think: false` or `reasoning_effort: none` gets none; null: no reasoning |
| `kv_leak_blocks_per_min` | 0 | injected memory leak: this many KV blocks per minute since start are lost for good (at most half the cache); they show in KV usage |

`faults:` (each a probability per request, drawn from the request's seeded generator, unless a time):
`disconnect` (connection dropped mid-stream), `stall` (the stream pauses `stall_s`, default 2s, mid-stream),
`malformed` (one broken chunk mid-stream) - without streaming these drop the connection before the body,
delay the body, or cut the body short - `http_429`, `http_503`, `http_500` (an error answer instead of a
stream), `oom` (a `CUDA out of memory` error), `slow_headers_s` (a time: every response's headers wait this
long), `exit_after_s` (a time: the process exits this long after it started listening), and `windows:`, a
list of `{fault, start_s, end_s}`: between those times after the start every request gets that fault
(`{fault: http_503, start_s: 30s, end_s: 40s}` is a 10-second outage).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    model_validator,
)

from llmload.configbase import Dist, _raise_first  # the project's file:line machinery, not the run config's
from llmload.errors import ConfigError
from llmload.units import parse_duration

__all__ = ["FAULT_NAMES", "FLAVORS", "FaultWindow", "Faults", "SimSettings", "load_sim_settings"]

FLAVORS = ("vllm", "ollama", "llamacpp", "sglang")

Seconds = Annotated[float, BeforeValidator(parse_duration), PlainSerializer(float)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


FAULT_NAMES = ("disconnect", "stall", "malformed", "http_429", "http_503", "http_500", "oom")


class FaultWindow(_Model):
    """A time window (seconds after the server started listening) in which every request gets `fault`."""

    fault: Literal["disconnect", "stall", "malformed", "http_429", "http_503", "http_500", "oom"]
    start_s: Seconds
    end_s: Seconds

    @model_validator(mode="after")
    def _ordered(self) -> FaultWindow:
        if self.end_s <= self.start_s:
            raise ValueError("end_s must be after start_s")
        return self


class Faults(_Model):
    """Injected faults: probabilities per request, or times."""

    disconnect: Probability = 0.0
    stall: Probability = 0.0
    stall_s: Seconds = 2.0
    malformed: Probability = 0.0
    http_429: Probability = 0.0
    http_503: Probability = 0.0
    http_500: Probability = 0.0
    oom: Probability = 0.0
    slow_headers_s: Seconds = 0.0
    exit_after_s: Seconds | None = None
    windows: list[FaultWindow] = Field(default_factory=list)

    def at(self, elapsed_s: float) -> Faults:
        """These faults with every window open at `elapsed_s` raised to probability 1."""
        hits: dict[str, Any] = {w.fault: 1.0 for w in self.windows if w.start_s <= elapsed_s < w.end_s}
        return self.model_copy(update=hits) if hits else self


class SimSettings(_Model):
    """Engine, admission and fault settings of the simulated server (see the module docstring)."""

    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int = Field(default=2048, ge=1)
    num_blocks: int = Field(default=4096, ge=1)
    block_size: int = Field(default=16, ge=1)
    step_base_s: Seconds = 0.024
    prefill_cost_s: Seconds = 0.0002
    decode_cost_s: Seconds = 0.00025
    decode_step_s: list[Seconds] | None = Field(default=None, min_length=1)
    max_num_queued_reqs: int | None = Field(default=None, ge=1)
    max_model_len: int = Field(default=8192, ge=2)
    num_parallel: int = Field(default=4, ge=1)
    prompt_tail_tokens: int = Field(default=0, ge=0)
    ctx_size: int = Field(default=4096, ge=2)
    max_queue: int = Field(default=512, ge=0)
    load_time_s: Seconds = 1.0
    keep_alive_s: Seconds = 300.0
    eos_probability: Probability = 0.0
    default_max_tokens: int = Field(default=256, ge=1)
    enable_prefix_caching: bool = True
    step_cost_growth_s_per_min: Seconds = Field(default=0.0, ge=0)
    kv_leak_blocks_per_min: float = Field(default=0.0, ge=0)
    reasoning_tokens: Dist | None = None
    faults: Faults = Field(default_factory=Faults)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds."""
        return self.num_blocks * self.block_size


def load_sim_settings(path: str | Path | None) -> SimSettings:
    """Read a sim YAML (None: the defaults). Raises ConfigError `file:line key: reason` on any mistake."""
    if path is None:
        return SimSettings()
    from llmload.yamlfile import read_yaml  # PyYAML: ~0.01 s of CPU that a sim without a file does not pay

    _, data, lines = read_yaml(path)
    if data is None:
        return SimSettings()
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping of sim settings", file=str(path), line=1)
    try:
        return SimSettings.model_validate(data)
    except ValidationError as exc:
        _raise_first(exc, file=str(path), lines=lines)
    raise AssertionError("unreachable")
