"""The server APIs llmload speaks: one module per API, each declaring one `ApiSpec` as `SPEC`.

    from llmload.apis import get_api, api_names
    spec = get_api("sglang-generate")      # path, body builder, framing, parser, probe/tokenize paths
    spec.build(model=..., max_tokens=..., prompt=..., messages=..., temperature=0.0,
               ignore_eos=False, server=None)  -> dict
    spec.decoder()                           # feed(bytes) / flush() -> [StreamChunk]

Every module of this package except `spec` is an API: the registry imports each one and takes its
`SPEC`, so adding an API is adding a module (plus its sim flavour and tests: docs/ARCHITECTURE.md).
An unknown name raises `UnknownApi` (a ValueError) with one line that lists the known names.
"""

from __future__ import annotations

import importlib
import pkgutil

from llmload.apis.spec import ApiSpec

__all__ = ["ApiSpec", "UnknownApi", "all_apis", "api_names", "get_api", "unknown_api_message"]


class UnknownApi(ValueError):
    """A `target.api` no module of `llmload.apis` declares."""


def _discover() -> dict[str, ApiSpec]:
    found: dict[str, ApiSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "spec" or info.name.startswith("_"):
            continue
        spec = getattr(importlib.import_module(f"{__name__}.{info.name}"), "SPEC", None)
        if not isinstance(spec, ApiSpec):
            raise TypeError(f"llmload.apis.{info.name} declares no SPEC (an ApiSpec)")
        if spec.name in found:
            raise TypeError(f"api {spec.name!r} is declared twice (llmload.apis.{info.name})")
        found[spec.name] = spec
    return found


_REGISTRY = _discover()


def api_names() -> tuple[str, ...]:
    """Every known `target.api` value, sorted."""
    return tuple(_REGISTRY)


def all_apis() -> tuple[ApiSpec, ...]:
    return tuple(_REGISTRY.values())


def unknown_api_message(name: object) -> str:
    shown = str(name) if len(str(name)) <= 60 else str(name)[:57] + "..."
    return f'unknown api "{shown}", expected one of {", ".join(_REGISTRY)}'


def get_api(name: str) -> ApiSpec:
    """The spec of `name`; `UnknownApi` (one line naming the known APIs) otherwise."""
    spec = _REGISTRY.get(name)
    if spec is None:
        raise UnknownApi(unknown_api_message(name))
    return spec
