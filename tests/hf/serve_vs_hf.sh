#!/usr/bin/env bash
# The inference subcommands (fill-mask, classify, embed) give transformers' own pipeline outputs:
# serve_vs_hf.py runs both on the roformer-hf case1 fixture and on RoFormerForSequenceClassification
# checkpoints that transformers saves (safetensors and pytorch_model.bin).
# Usage: serve_vs_hf.sh ROFORMER_BINARY FIXTURES [WORK_DIR]
# Python: as tests/hf/roundtrip.sh ($ROFORMER_PYTHON, /work/venv-ref, build/hf-venv, python3), which
# must also import rjieba or jieba. None: exit 77 (ctest skip), or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
roformer="$1"
fixtures="$2"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

source "$(dirname "$0")/common.sh"
probe="$(hf_probe RoFormerForSequenceClassification 'try:
    import rjieba
except ImportError:
    import jieba')"
find_hf_python "$probe"
make_work_dir "${3:-}"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$here/serve_vs_hf.py" "$roformer" "$fixtures" "$work"
