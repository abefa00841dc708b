#!/usr/bin/env bash
# Clients no one here wrote against `roformer serve`: OpenAI's Python client (client.embeddings.create)
# and huggingface_hub's InferenceClient (feature_extraction, sentence_similarity, fill_mask,
# text_classification) on the roformer-hf case1 fixture and a classifier made from it, and translation
# on a small translate-train model; their answers equal `roformer embed --normalize | similarity |
# fill-mask | classify | translate` (1e-5; translations exactly), and transformers' own classifier.
# Usage: serve_clients.sh ROFORMER_BINARY FIXTURES [WORK_DIR]
# Python: the first that imports openai and huggingface_hub ($ROFORMER_PYTHON only, when set;
# scripts/hf-env.sh installs them). None: exit 77 (ctest skip), or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"
find_hf_python 'import openai, huggingface_hub, transformers; print(f"openai {openai.__version__}, huggingface_hub {huggingface_hub.__version__}")'
make_work_dir "${3:-}"
export PYTHONDONTWRITEBYTECODE=1
"$python" "$here/serve_clients.py" "$1" "$2" "$work"
