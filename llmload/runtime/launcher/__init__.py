"""The launcher: the parent process of `llmload run` and `llmload demo` (no gevent, no Locust)."""
