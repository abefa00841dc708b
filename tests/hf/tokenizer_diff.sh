#!/usr/bin/env bash
# Runs the differential tokenizer fuzzer (tokenizer_diff.py: our RoFormerTokenizer, through the
# fuzz/tokenizer_diff.cc driver, against transformers' BertTokenizer and RoFormerTokenizer with jieba).
# Usage: tokenizer_diff.sh DRIVER TOKENIZER_DIR WORK_DIR [--script NAME.py] [the script's options]
#   ctest (hf_tokenizer_diff): a fixed seed and a bounded number of texts (--seed N --cases N | --seconds S);
#   scripts/fuzz.sh: a random seed for its time budget;
#   ctest (hf_offsets): --script offsets_vs_fast.py, the same driver's offsets against transformers'
#   fast tokenizers (BertTokenizerFast, RoFormerTokenizerFast).
# Python: as tests/hf/roundtrip.sh ($ROFORMER_PYTHON, /work/venv-ref, build/hf-venv, python3), which
# must import transformers' tokenizers and rjieba or jieba. None: exit 77 (ctest skip), or 1 when
# ROFORMER_REQUIRE_HF=1.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
driver="$1" tokenizer_dir="$2" work_dir="$3"
shift 3
script=tokenizer_diff.py
if [ "${1:-}" = --script ]; then
  script="$2"
  shift 2
fi

source "$here/common.sh"
find_hf_python 'import transformers
from transformers import BertTokenizer, RoFormerTokenizer
try:
    import rjieba
except ImportError:
    import jieba
print(f"transformers {transformers.__version__}")'
make_work_dir "$work_dir"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$here/$script" "$driver" "$tokenizer_dir" "$work" "$@"
