"""Request parameters the sim does not ignore: refused as the real server refuses them, refused with a
sim message where the real server would honour them and the sim cannot, and `stop` strings (honoured).

Read from: llama.cpp `tools/server/utils.hpp` `oaicompat_completion_params_parse` /
`oaicompat_chat_params_parse` (a `std::runtime_error`, so HTTP 500 `server_error`, as issue 18 saw);
Ollama `server/routes.go` (`think` on a model without the thinking capability, checked before the
load). From knowledge of the source, not re-read: vLLM `entrypoints/openai/serving_chat.py` (tools
without `--enable-auto-tool-choice`), Ollama's `tools` capability message. The sim's model is a plain
completion model. docs/SIM.md has the table.
"""

from __future__ import annotations

__all__ = ["EMBEDDINGS", "SGLANG_DEFAULT_MAX_NEW_TOKENS", "ParamRefusal", "check_model", "check_params",
           "embeddings_refusal", "sglang_as_common", "stop_strings"]

#: embedding endpoints: 501 (llama.cpp without `--embeddings`, server.cpp handle_embeddings_impl;
#: Ollama for a completion-only model, issue 18 item 7)
EMBEDDINGS = {"llamacpp": ("/embedding", "/embeddings", "/v1/embeddings"),
              "ollama": ("/api/embed", "/api/embeddings", "/v1/embeddings")}

_SIM = "llmload sim does not model {what} (see docs/SIM.md); {real}"


class ParamRefusal(Exception):
    """A parameter the server refuses: status, message (the body is worded by the flavour)."""

    def __init__(self, status: int, message: str, body: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.body = status, message, body


def embeddings_refusal(flavor: str, path: str) -> dict:
    """The 501 body of an embeddings request."""
    if flavor == "llamacpp":
        return {"error": {"code": 501, "type": "not_supported_error",
                          "message": "This server does not support embeddings. Start it with `--embeddings`"}}
    message = "this model does not support embeddings"
    if path.startswith("/api"):
        return {"error": message}
    return {"error": {"message": message, "type": "api_error", "param": None, "code": None}}


def check_model(flavor: str, body: dict, served: str) -> None:
    """vLLM and Ollama answer 404 for a model they do not serve (llama.cpp serves any name).
    vLLM `serving_engine._check_model` (no model given is fine); Ollama `server/routes.go`
    (`model 'x' not found`; `model is required` 400 natively; the `/v1` middleware wraps both)."""
    name = body.get("model")
    if flavor == "vllm" and name and name != served:
        raise ParamRefusal(404, "", {"error": {"message": f"The model `{name}` does not exist.",
                                               "type": "NotFoundError", "param": "model", "code": 404}})
    if flavor == "ollama":
        if not name:
            raise ParamRefusal(400, "model is required")
        if str(name).removesuffix(":latest") != served.removesuffix(":latest"):
            raise ParamRefusal(404, f"model '{name}' not found")


def _llamacpp_error(message: str) -> ParamRefusal:
    return ParamRefusal(500, message, {"error": {"code": 500, "message": message, "type": "server_error"}})


def check_params(flavor: str, kind: str, body: dict, model: str, *, thinking: bool = False) -> None:
    """Raise ParamRefusal for a parameter the flavour's server refuses or the sim cannot honour.
    `thinking`: the model reasons (the sim's `reasoning_tokens`), so Ollama accepts `think`."""
    openai = kind in ("chat", "completions")
    n = body.get("n", 1)
    if flavor == "llamacpp" and openai:
        if n not in (None, 1):
            raise _llamacpp_error("Only one completion choice is allowed")
        if kind == "completions" and body.get("echo"):
            raise _llamacpp_error("Only no echo is supported")
        for param in ("best_of", "suffix"):
            if kind == "completions" and param in body:
                raise _llamacpp_error(f"Unsupported param: {param}")
        if kind == "chat" and not body.get("logprobs") and body.get("top_logprobs") is not None:
            raise _llamacpp_error("top_logprobs requires logprobs to be set to true")
    if flavor == "ollama" and kind.startswith("ollama"):
        think = body.get("think")
        if not thinking and think not in (None, False, "") and think != "false":
            raise ParamRefusal(400, f'"{body.get("model")}" does not support thinking')
    if body.get("tools"):
        if flavor == "vllm" and body.get("tool_choice") in (None, "auto"):
            raise ParamRefusal(400, '"auto" tool choice requires --enable-auto-tool-choice and '
                                    "--tool-call-parser to be set")
        if flavor == "ollama":
            raise ParamRefusal(400, f"registry.ollama.ai/library/{_tagged(model)} does not support tools")
        if kind != "chat" and body.get("tool_choice") not in (None, "none"):
            raise ParamRefusal(400, _SIM.format(what="tool calls", real="the server would call the tool"))
    if openai and isinstance(n, int) and n > 1:
        raise ParamRefusal(400, _SIM.format(what="n > 1", real=f"vLLM would return {n} choices, "
                                                                 f"decoding {n} sequences"))
    best_of = body.get("best_of")
    if openai and (body.get("echo") or (isinstance(best_of, int) and best_of > 1)):
        raise ParamRefusal(400, _SIM.format(what="echo / best_of", real="vLLM would echo the prompt / "
                                                                        "sample best_of sequences"))
    if openai and (body.get("logprobs") or body.get("top_logprobs")):
        raise ParamRefusal(400, _SIM.format(what="logprobs", real="the server would return them"))
    fmt = body.get("response_format") if openai else body.get("format")
    if fmt and not (isinstance(fmt, dict) and fmt.get("type") == "text"):
        raise ParamRefusal(400, _SIM.format(what="structured output (response_format / format)",
                                            real="the server would constrain the output"))


def _tagged(model: str) -> str:
    return model if ":" in model else model + ":latest"


#: SGLang `SamplingParams.max_new_tokens` default (a `/generate` request that names no cap)
SGLANG_DEFAULT_MAX_NEW_TOKENS = 128


def sglang_as_common(body: dict) -> dict:
    """A `/generate` body (`GenerateReqInput`: `text`, `sampling_params`) in the keys the other
    endpoints use (`prompt`, `max_tokens`, `ignore_eos`, `stop`), so one admission path serves it."""
    given = body.get("sampling_params")
    sp = given if isinstance(given, dict) else {}
    out = {k: v for k, v in body.items() if k not in ("text", "sampling_params")}
    out["prompt"] = body.get("text", "")
    out["max_tokens"] = sp.get("max_new_tokens", SGLANG_DEFAULT_MAX_NEW_TOKENS)
    for key in ("ignore_eos", "stop", "temperature"):
        if key in sp:
            out[key] = sp[key]
    return out


def stop_strings(body: dict, kind: str) -> list[str]:
    """The request's stop strings (`stop`, or Ollama's `options.stop`), non-empty ones only."""
    given = body.get("options")
    opts = given if isinstance(given, dict) else {}
    stop = opts.get("stop") if kind.startswith("ollama") else body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    return [s for s in stop or [] if isinstance(s, str) and s]
