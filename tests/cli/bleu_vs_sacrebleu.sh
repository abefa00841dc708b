#!/usr/bin/env bash
# Runs bleu_vs_sacrebleu.py with a Python that has sacrebleu ($ROFORMER_PYTHON, build/hf-venv, ...:
# tests/hf/common.sh; scripts/hf-env.sh installs it). None: exit 77 (skip), or 1 with ROFORMER_REQUIRE_HF=1.
# Usage: bleu_vs_sacrebleu.sh ROFORMER_BINARY WORK_DIR FIXTURES
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/../hf/common.sh"
find_hf_python 'import sacrebleu; print(f"sacrebleu {sacrebleu.__version__}")'
"$python" "$here/bleu_vs_sacrebleu.py" "$1" "$2" "$3"
