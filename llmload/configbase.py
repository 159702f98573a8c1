"""The base of the config models, what `llmload.sim.settings` shares with `llmload.config`: the `Model`
base class (unknown keys refused, no booleans for numbers), the token-length distributions (`Dist`) and
the one-line error of a validation failure (`_raise_first`, file:line key: message).

Here and not in `llmload.config` so that `llmload sim` (whose settings take a `Dist`) starts without
building the run config's models: 0.25 s of CPU per sim start, a few hundred starts in the test suite.
`llmload.config` re-exports every name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmload.errors import ConfigError

MAX_TOKENS = 1_000_000  # tokens in one prompt or one answer
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_numbers(cls, data: Any) -> Any:
        # pydantic reads `true` as 1 for a number; YAML turns `yes`/`on` into true: refuse both
        if isinstance(data, dict):
            numeric = _numeric_fields(cls)
            for name, value in data.items():
                items = value if isinstance(value, list) else [value]
                if name in numeric and any(isinstance(v, bool) for v in items):
                    raise ValueError(f"{name}: expected a number, got {str(value).lower()}")
        return data


_M = TypeVar("_M", bound=BaseModel)


def _one_of(model: _M, *names: str, given: Callable[[Any], bool] = lambda v: v is not None) -> _M:
    """`model` when exactly one of its fields `names` is given (by default: not None); else the error
    `give exactly one of a or b` (more names: `a, b, c`)."""
    if sum(given(getattr(model, name)) for name in names) != 1:
        raise ValueError(f"give exactly one of {' or '.join(names) if len(names) == 2 else ', '.join(names)}")
    return model


@functools.cache
def _numeric_fields(model: type[BaseModel]) -> frozenset[str]:
    """Names of `model`'s fields that hold numbers (or lists of numbers), optional or not."""
    names = set()
    for name, info in model.model_fields.items():
        args = set(get_args(info.annotation)) or {info.annotation}
        args = {get_args(a)[0] if get_origin(a) is list else a for a in args} - {type(None)}
        args = {get_args(a)[0] if get_origin(a) is Annotated else a for a in args}
        if args and args <= {int, float}:
            names.add(name)
    return frozenset(names)


def _min_max(dist: Any) -> Any:
    if dist.max is not None and dist.min > dist.max:
        raise ValueError(f"min ({dist.min}) is more than max ({dist.max})")
    return dist


class FixedDist(Model):
    dist: Literal["fixed"]
    value: Tokens


class UniformDist(Model):
    dist: Literal["uniform"]
    min: Tokens
    max: Tokens

    _ordered = model_validator(mode="after")(_min_max)


class NormalDist(Model):
    dist: Literal["normal"]
    mean: float = Field(gt=0, le=MAX_TOKENS)
    std: float = Field(ge=0, le=MAX_TOKENS)
    min: Tokens = 1
    max: Tokens | None = None

    _ordered = model_validator(mode="after")(_min_max)


class LognormalDist(Model):
    dist: Literal["lognormal"]
    median: float = Field(gt=0, le=MAX_TOKENS)
    sigma: float = Field(ge=0, le=10)
    min: Tokens = 1
    max: Tokens | None = None

    _ordered = model_validator(mode="after")(_min_max)


class EmpiricalDist(Model):
    """Lengths drawn from a list of values or a file (one integer per line, or a CSV column)."""

    dist: Literal["empirical"]
    values: list[Tokens] | None = None
    file: str | None = None
    column: str | None = None

    @model_validator(mode="after")
    def _source(self) -> EmpiricalDist:
        return _one_of(self, "values", "file", given=bool)


Dist = Annotated[
    Union[FixedDist, UniformDist, NormalDist, LognormalDist, EmpiricalDist],
    Field(discriminator="dist"),
]


_DIST_KINDS = ("fixed", "uniform", "normal", "lognormal", "empirical")


def _key_path(loc: tuple) -> tuple:
    """Drop pydantic's union-tag entries (`fixed`, `function-after[...]`) from an error location."""
    out: list = []
    for part in loc:
        if isinstance(part, str) and (part.startswith(("function-", "tagged-union[")) or "[" in part):
            continue
        if out and out[-1] in ("input_tokens", "output_tokens") and part in _DIST_KINDS:
            continue  # the discriminated union's tag, not a key the user wrote
        out.append(part)
    return tuple(out)


def _format_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(err: Mapping[str, Any]) -> str:
    kind, msg, value = err["type"], err["msg"], err.get("input")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("float_parsing", "float_type", "int_parsing", "int_type", "bool_parsing", "bool_type",
                "string_type", "literal_error", "union_tag_invalid", "dict_type", "list_type"):
        return f"{msg[0].lower()}{msg[1:]}, got {_shown(value)}"
    return msg[0].lower() + msg[1:] if msg else kind


def _shown(value: object) -> str:
    shown = f'"{value}"' if isinstance(value, str) else repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _raise_first(exc: ValidationError, *, file: str, lines: Mapping[tuple, int], prefix: tuple = ()) -> None:
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
