#!/usr/bin/env bash
# OpenAI's own Python client against `roformer serve`: client.embeddings.create on the roformer-hf
# case1 fixture gives `roformer embed --normalize`'s vectors (1e-5), as floats and as base64.
# Usage: serve_openai.sh ROFORMER_BINARY FIXTURES [WORK_DIR]
# Python: the first that imports openai ($ROFORMER_PYTHON only, when set; scripts/hf-env.sh installs it).
# None: exit 77 (ctest skip), or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"
find_hf_python 'import openai; print(f"openai {openai.__version__}")'
make_work_dir "${3:-}"
export PYTHONDONTWRITEBYTECODE=1
"$python" "$here/serve_openai.py" "$1" "$2" "$work"
