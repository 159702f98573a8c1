"""The non-generation endpoints of each flavour: models, version, health, props, slots, Ollama's
`/api/tags`, `/api/ps`, `/api/show`, and `/tokenize` with the sim's token rule (ids are stable hashes).
"""

from __future__ import annotations

import json
import time
import zlib

from llmload.sim.settings import SimSettings
from llmload.sim.text import chat_prompt_tokens
from llmload.sim.wire import rfc3339
from llmload.tokens import split_tokens

__all__ = ["OLLAMA_VERSION", "VLLM_VERSION", "LLAMACPP_BUILD", "token_ids", "InfoPages"]

VLLM_VERSION = "0.33.0"
OLLAMA_VERSION = "0.12.3"
LLAMACPP_BUILD = "b6500-llmload-sim"
_SIZE = 4_920_753_328
_DIGEST = "365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1"


def token_ids(text: str) -> list[int]:
    """Stable fake token ids for `/tokenize` (one per token of the sim's rule)."""
    return [zlib.crc32(tok.encode()) % 32000 for tok in split_tokens(text)]


class InfoPages:
    """Builds the informational bodies of one server."""

    def __init__(self, *, model: str, settings: SimSettings, started_at: float) -> None:
        self.model, self.settings, self.started_at = model, settings, started_at

    @property
    def slot_ctx(self) -> int:
        """llama.cpp: the context of one slot (`--ctx-size` split across `--parallel`)."""
        return self.settings.ctx_size // self.settings.num_parallel

    def _details(self) -> dict:
        return {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                "parameter_size": "8.0B", "quantization_level": "Q4_K_M"}

    # ------------------------------------------------------------ vLLM
    def vllm_models(self) -> dict:
        return {"object": "list", "data": [{
            "id": self.model, "object": "model", "created": int(self.started_at), "owned_by": "vllm",
            "root": self.model, "parent": None, "max_model_len": self.settings.max_model_len,
            "permission": [{"id": "modelperm-sim", "object": "model_permission",
                            "created": int(self.started_at), "allow_create_engine": False,
                            "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
                            "allow_view": True, "allow_fine_tuning": False, "organization": "*",
                            "group": None, "is_blocking": False}]}]}

    def vllm_cache_info(self) -> dict[str, str]:
        """`vllm:cache_config_info` labels: every CacheConfig field as `str(value)` (vLLM's
        `CacheConfig.metrics_info()`, `vllm/config/cache.py` on main late 2025; no scheduler fields)."""
        s = self.settings
        return {"block_size": str(s.block_size), "gpu_memory_utilization": "0.9", "swap_space": "4",
                "cache_dtype": "auto", "is_attention_free": "False", "num_gpu_blocks_override": "None",
                "sliding_window": "None", "enable_prefix_caching": str(s.enable_prefix_caching),
                "prefix_caching_hash_algo": "sha256", "cpu_offload_gb": "0", "calculate_kv_scales": "False",
                "cpu_kvcache_space_bytes": "None", "mamba_page_size_padded": "None", "mamba_block_size": "None",
                "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto", "num_gpu_blocks": str(s.num_blocks),
                "num_cpu_blocks": "None", "kv_sharing_fast_prefill": "False", "kv_cache_memory_bytes": "None",
                "kv_offloading_size": "None", "kv_offloading_backend": "None"}

    def vllm_tokenize(self, body: dict) -> dict:
        if "messages" in body:
            text = " ".join(str(m.get("content", "")) for m in body["messages"])
            ids = token_ids(text)
            ids += [1] * (chat_prompt_tokens(body["messages"]) - len(ids))
        else:
            ids = token_ids(str(body.get("prompt", "")))
        return {"count": len(ids), "max_model_len": self.settings.max_model_len, "tokens": ids}

    # ------------------------------------------------------------ SGLang
    def sglang_models(self) -> dict:
        """`/v1/models` (`ModelCard`: id, object, created, owned_by, root, max_model_len)."""
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": int(self.started_at),
                                            "owned_by": "sglang", "root": self.model, "parent": None,
                                            "max_model_len": self.settings.max_model_len}]}

    def sglang_model_info(self) -> dict:
        return {"model_path": self.model, "tokenizer_path": self.model, "is_generation": True,
                "preferred_sampling_params": None, "weight_version": "default"}

    def sglang_tokenize(self, body: dict) -> dict:
        """`/tokenize` (`TokenizeRequest` {model, prompt} -> {tokens, count, max_model_len}), as vLLM's."""
        return self.vllm_tokenize({"prompt": body.get("prompt", "")})

    # ------------------------------------------------------------ Ollama
    def _ollama_model(self) -> dict:
        return {"name": self.model, "model": self.model, "modified_at": rfc3339(self.started_at),
                "size": _SIZE, "digest": _DIGEST, "details": self._details()}

    def ollama_tags(self) -> dict:
        return {"models": [self._ollama_model()]}

    def ollama_ps(self, *, loaded: bool, expires_at: float | None) -> dict:
        if not loaded:
            return {"models": []}
        ctx = self.settings.ctx_size
        size_vram = _SIZE + 131_072 * ctx * self.settings.num_parallel // 8
        expires = rfc3339(expires_at) if expires_at else "2318-08-21T00:00:00.000000000Z"
        entry = {k: v for k, v in self._ollama_model().items() if k != "modified_at"}
        entry.update({"size": size_vram, "expires_at": expires, "size_vram": size_vram,
                      "context_length": ctx})
        return {"models": [entry]}

    def ollama_show(self) -> dict:
        ctx = self.settings.ctx_size
        return {"modelfile": f"FROM {self.model}\n", "parameters": f"num_ctx {ctx}",
                "template": "{{ .Prompt }}", "details": self._details(),
                "model_info": {"general.architecture": "llama", "general.parameter_count": 8_030_261_248,
                               "llama.context_length": self.settings.max_model_len},
                "capabilities": ["completion"], "modified_at": rfc3339(self.started_at)}

    def _served(self, name: object) -> bool:
        return isinstance(name, str) and name.removesuffix(":latest") == self.model.removesuffix(":latest")

    def ollama_pull(self, body: dict) -> tuple[int, object, str]:
        """`/api/pull` of the served model: already present, so the progress ends at once (`status`
        lines, NDJSON unless `stream: false`). Any other name: the registry has no such manifest (the
        sim reaches no registry). Shapes from Ollama `server/routes.go` PullHandler †."""
        name = body.get("model") or body.get("name")
        if not self._served(name):
            return 500, {"error": "pull model manifest: file does not exist"}, "application/json"
        if body.get("stream") is False:
            return 200, {"status": "success"}, "application/json"
        lines = [{"status": "pulling manifest"},
                 {"status": f"pulling {_DIGEST[:12]}", "digest": f"sha256:{_DIGEST}", "total": _SIZE,
                  "completed": _SIZE},
                 {"status": "verifying sha256 digest"}, {"status": "writing manifest"}, {"status": "success"}]
        return 200, b"".join(json.dumps(x).encode() + b"\n" for x in lines), "application/x-ndjson"

    def ollama_copy(self, body: dict) -> tuple[int, object, str]:
        """`/api/copy`: 200 with no body when the source is the served model (the copy is not listed
        afterwards: the sim serves one model), else 404 `model 'x' not found`."""
        source = body.get("source")
        if not self._served(source):
            return 404, {"error": f"model '{source}' not found"}, "application/json"
        return 200, b"", "application/json"

    # ------------------------------------------------------------ llama.cpp
    def llamacpp_props(self) -> dict:
        """`/props` as llama-server b6500 writes it (tools/server/server.cpp handle_props)."""
        return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": self.slot_ctx,
                                                "speculative": False, "is_processing": False,
                                                "params": _llamacpp_params(-1), "prompt": "",
                                                "next_token": [_next_token(False, -1, 0)]},
                "total_slots": self.settings.num_parallel, "model_path": f"/models/{self.model}.gguf",
                "modalities": {"vision": False, "audio": False}, "chat_template": "{{ messages }}",
                "bos_token": "<s>", "eos_token": "</s>", "build_info": LLAMACPP_BUILD, "webui": True}

    def llamacpp_models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": int(time.time()),
                                            "owned_by": "llamacpp", "meta": {"n_ctx_train": self.settings.ctx_size}}]}

    def llamacpp_slots(self, busy: list[tuple[int, int, int, int]]) -> list[dict]:
        """`busy`: (task id, tokens decoded, the request's n_predict or -1, prompt tokens) of the running
        requests, one per busy slot. `next_token` is a list (one entry per completion) in current builds;
        `n_remain` is n_predict - decoded, -1 without a cap. A busy slot's `n_prompt_tokens` is the size of
        its token cache, which llama-server grows with each generated token (server-context.cpp
        `server_slot::to_json`: `prompt.tokens.size()`): the prompt plus the tokens decoded so far."""
        slots = []
        for i in range(self.settings.num_parallel):
            task = busy[i] if i < len(busy) else None
            n_predict = task[2] if task else -1
            remain = n_predict - task[1] if task and n_predict >= 0 else -1
            slots.append({"id": i, "id_task": task[0] if task else -1, "n_ctx": self.slot_ctx,
                          "speculative": False, "is_processing": task is not None,
                          "params": _llamacpp_params(n_predict),
                          "next_token": [_next_token(task is not None, remain, task[1] if task else 0)]})
            if task:
                slots[-1].update(n_prompt_tokens=task[3] + task[1], n_prompt_tokens_processed=task[3],
                                 n_prompt_tokens_cache=0)
        return slots


def _next_token(has_next: bool, n_remain: int, n_decoded: int) -> dict:
    return {"has_next_token": has_next, "has_new_line": False, "n_remain": n_remain, "n_decoded": n_decoded,
            "stopping_word": ""}


def _llamacpp_params(n_predict: int) -> dict:
    """A slot's `params` with llama.cpp's sampling defaults (common/common.h common_params_sampling)."""
    return {"n_predict": n_predict, "seed": 4294967295, "temperature": 0.8, "dynatemp_range": 0.0,
            "dynatemp_exponent": 1.0, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "top_n_sigma": -1.0,
            "xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0, "repeat_last_n": 64,
            "repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
            "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1, "mirostat": 0,
            "mirostat_tau": 5.0, "mirostat_eta": 0.1, "stop": [], "max_tokens": n_predict, "n_keep": 0,
            "n_discard": 0, "ignore_eos": False, "stream": True, "n_probs": 0, "min_keep": 0,
            "samplers": ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                         "temperature"],
            "timings_per_token": False, "post_sampling_probs": False, "lora": []}
