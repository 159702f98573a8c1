"""The simulated inference server: vLLM, Ollama, llama.cpp or SGLang wire formats over a batching engine model.

Start one and talk to it as to the real server (it binds 127.0.0.1 by default and says so)::

    llmload sim --flavor vllm --port 8000 --ground-truth gt.jsonl
    curl -N http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' \\
      -d '{"model":"sim-model","messages":[{"role":"user","content":"What is 2+2?"}],
           "max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}'
    curl http://127.0.0.1:8000/metrics

    llmload sim --flavor ollama --port 11434
    curl -N http://127.0.0.1:11434/api/generate -d '{"model":"sim-model","prompt":"Hi","options":{"num_predict":5}}'

    llmload sim --flavor sglang --port 30000
    curl -N http://127.0.0.1:30000/generate -d '{"text":"Hi","sampling_params":{"max_new_tokens":5},"stream":true}'

    llmload sim --flavor llamacpp --port 8080 --config examples/sim/default.yaml
    curl -N http://127.0.0.1:8080/completion -d '{"prompt":"Hi","n_predict":5,"stream":true}'

Parts: `settings` (the sim YAML and its defaults), `engine` (pure continuous-batching model), `prefix`
(vLLM prefix caching),
`loop` (real-time driver), `wire` (each server's events), `http` (lean HTTP/1.1), `metrics`
(`/metrics`), `residency` (Ollama model load / keep-alive), `faults` (seeded per-request draws),
`groundtruth` (the per-request JSONL log), `info` (models, props, slots, tags...), `server` (`serve`).
"""

from importlib import import_module

#: public name -> submodule, imported on first use (`llmload.sim.process`, which `llmload run` loads to
#: start a calibration sim, must not pull in the server, gevent and prometheus_client)
_LAZY = {"Engine": "engine", "EngineLimits": "engine", "Sequence": "engine", "StepResult": "engine",
         "SimServer": "server", "serve": "server", "FLAVORS": "settings", "Faults": "settings",
         "SimSettings": "settings", "load_sim_settings": "settings"}

__all__ = ["FLAVORS", "Engine", "EngineLimits", "Faults", "Sequence", "SimServer", "SimSettings", "StepResult",
           "load_sim_settings", "serve"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"llmload.sim.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
