"""Is `target.model` served? Decided from the model lists the pre-flight probe read (`check_reachable`).

A model the server does not serve answers every request with a 404: the run would spend its whole plan
on errors and end as an SLO failure. So a model missing from an endpoint's list stops the run before any
load (exit 2, one line naming what the endpoint serves and `target.model`), except where the server
takes any name:

- the API's body has no model field (`ApiSpec.names_model` False: SGLang's `/generate`);
- llama.cpp and SGLang (`target.server: llamacpp` / `sglang`, or a list whose entries say `owned_by:
  llamacpp` / `sglang`) and TGI (`target.server: tgi`) ignore the model field and answer with the model
  they loaded (SGLang checks it only when started with strict model validation);
- an endpoint that lists no models (no probe path, a 404, a body we cannot read, an empty list): a
  warning, since nothing says the name is wrong.

Ollama names carry a tag: `llama3` is `llama3:latest`, so either spelling matches the other.
"""

from __future__ import annotations

from typing import Any

from llmload.apis import get_api
from llmload.config import Config

__all__ = ["IGNORES_MODEL_OWNERS", "IGNORES_MODEL_SERVERS", "model_listed", "served_model_check"]

#: `target.server` hints whose servers answer any model name with the model they loaded
IGNORES_MODEL_SERVERS = ("llamacpp", "sglang", "tgi")
#: `owned_by` of the model lists of those servers (`/v1/models`)
IGNORES_MODEL_OWNERS = ("llamacpp", "sglang")
#: names quoted in the refusal (a server may list hundreds)
_SHOWN = 8


def model_listed(model: str, listed: list[str]) -> bool:
    """`model` is among `listed`, an Ollama `:latest` tag added or dropped."""
    names = set(listed)
    if model in names:
        return True
    base, _, tag = model.partition(":")
    return (not tag and f"{model}:latest" in names) or (tag == "latest" and base in names)


def served_model_check(config: Config, endpoints: dict[str, Any], *,
                       remedy: str = "set target.model to one of them") -> tuple[str | None, list[str]]:
    """(refusal, warnings) for `target.model` against `check_reachable`'s endpoints (base URL ->
    `{"status", "models", "ignores_model"}`): the refusal is one line ending in `remedy` (what the user
    changes: the config's key, or `llmload find`'s flag), None when the run may go on."""
    model, path = config.target.model, get_api(config.target.api).probe_path
    if not get_api(config.target.api).names_model or config.target.server in IGNORES_MODEL_SERVERS:
        return None, []
    warnings = []
    for base, info in endpoints.items():
        listed = [str(name) for name in info.get("models") or []]
        if info.get("ignores_model"):
            continue
        if not listed:
            status = info.get("status")
            why = f"HTTP {status}" if status != 200 else "no model list in the answer"
            warnings.append(f"{base} does not list its models (GET {path}: {why}): target.model {model!r} "
                            "is not checked")
            continue
        if not model_listed(model, listed):
            more = f" and {len(listed) - _SHOWN} more" if len(listed) > _SHOWN else ""
            return (f"{base} does not serve model {model!r}; it serves {', '.join(listed[:_SHOWN])}{more}: "
                    + remedy), warnings
    return None, warnings
