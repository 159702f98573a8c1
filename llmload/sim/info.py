"""The non-generation endpoints of each flavour: models, version, health, props, slots, Ollama's
`/api/tags`, `/api/ps`, `/api/show`, and `/tokenize` with the sim's token rule (ids are stable hashes).
"""

from __future__ import annotations

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

    # ------------------------------------------------------------ llama.cpp
    def llamacpp_props(self) -> dict:
        return {"default_generation_settings": {"n_ctx": self.slot_ctx, "id": 0, "is_processing": False,
                                                "params": {"n_predict": -1, "temperature": 0.8}},
                "total_slots": self.settings.num_parallel, "model_path": f"/models/{self.model}.gguf",
                "chat_template": "{{ messages }}", "modalities": {"vision": False, "audio": False},
                "build_info": LLAMACPP_BUILD}

    def llamacpp_models(self) -> dict:
        return {"object": "list", "data": [{"id": self.model, "object": "model", "created": int(time.time()),
                                            "owned_by": "llamacpp", "meta": {"n_ctx_train": self.settings.ctx_size}}]}

    def llamacpp_slots(self, busy: list[tuple[int, int]]) -> list[dict]:
        """`busy`: (task id, tokens decoded) of the running requests, one per busy slot."""
        slots = []
        for i in range(self.settings.num_parallel):
            task = busy[i] if i < len(busy) else None
            slot = {"id": i, "id_task": task[0] if task else -1, "n_ctx": self.slot_ctx, "speculative": False,
                    "is_processing": task is not None, "params": {"n_predict": -1},
                    "next_token": {"has_next_token": task is not None, "n_remain": -1,
                                   "n_decoded": task[1] if task else 0}}
            slots.append(slot)
        return slots
