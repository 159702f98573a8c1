#!/usr/bin/env bash
# Build (or reuse from ~/.cache/llmload) llama.cpp's llama-server and the Gemma 3 270M model, then print
# the `export` lines the real-engine tests read (progress goes to stderr):
#   eval "$(scripts/build_llama_server.sh)"
# Everything is done by `llmload engine` (llmload/llama_server.py); this is the shell entry for CI and humans.
set -euo pipefail
llmload engine build >&2
llmload engine model >&2
llmload engine path
