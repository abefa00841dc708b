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

probe='import torch, transformers
from transformers.utils import is_torch_available
assert is_torch_available(), "transformers cannot use this torch"
from transformers import RoFormerForSequenceClassification
assert "modeling_roformer" in RoFormerForSequenceClassification.__module__, "dummy RoFormer classes"
try:
    import rjieba
except ImportError:
    import jieba
print(f"transformers {transformers.__version__}, torch {torch.__version__}")'
python=""
candidates=(/work/venv-ref/bin/python "$repo/build/hf-venv/bin/python" python3 /usr/bin/python3)
[ -n "${ROFORMER_PYTHON:-}" ] && candidates=("$ROFORMER_PYTHON")
for candidate in "${candidates[@]}"; do
  command -v "$candidate" > /dev/null 2>&1 || continue
  if versions="$("$candidate" -c "$probe" 2> /dev/null)"; then
    python="$candidate"
    break
  fi
done
if [ -z "$python" ]; then
  echo "no Python with torch + transformers (RoFormer) + rjieba or jieba found; create one with" \
       "scripts/hf-env.sh or set ROFORMER_PYTHON" >&2
  [ "${ROFORMER_REQUIRE_HF:-0}" = 1 ] && exit 1
  exit 77
fi
echo "python: $python ($versions)"

if [ -n "${3:-}" ]; then
  work="$3"
  rm -rf "$work"
  mkdir -p "$work"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$here/serve_vs_hf.py" "$roformer" "$fixtures" "$work"
