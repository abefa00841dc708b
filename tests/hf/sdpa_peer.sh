#!/usr/bin/env bash
# The torch SDPA peer's RoFormer (bench/peers/roformer_sdpa.py) computes what transformers' RoFormerModel
# computes: tests/hf/sdpa_vs_hf.py, fp32, 1e-4, with padding; and bench/peers/roformer_infer_hf.py's
# torch-sdpa runner runs and agrees with `roformer bench infer` and transformers (its checksum, 1e-4
# relative) on the tiny preset; and the training peer's SDPA blocks (bench/peers/roformer_torch.py
# --attention sdpa) give its eager blocks' outputs (its --self-test).
# Usage: sdpa_peer.sh ROFORMER_BINARY [WORK_DIR]
# Python: $ROFORMER_TORCH2_PYTHON, else build/torch2-venv (scripts/torch2-env.sh), else as
# tests/hf/roundtrip.sh; it needs torch >= 2.0 (scaled_dot_product_attention) and transformers. None:
# exit 77 (ctest skip) even with ROFORMER_REQUIRE_HF=1, since CI's transformers Python runs torch 1.13.
set -euo pipefail
roformer="$1"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"
if [ -n "${ROFORMER_TORCH2_PYTHON:-}" ]; then
  ROFORMER_PYTHON="$ROFORMER_TORCH2_PYTHON"
elif [ -x "$repo/build/torch2-venv/bin/python" ]; then
  ROFORMER_PYTHON="$repo/build/torch2-venv/bin/python"
fi
ROFORMER_REQUIRE_HF=0
find_hf_python "$(hf_probe RoFormerModel 'import torch.nn.functional as F, safetensors
assert hasattr(F, "scaled_dot_product_attention"), "torch < 2.0: no SDPA"')"
make_work_dir "${2:-}"
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$here/sdpa_vs_hf.py" "$work"
"$python" "$repo/bench/peers/roformer_infer_hf.py" --roformer "$roformer" --preset tiny --runners ours,torch,torch-sdpa \
  --model-dir "$work/roformer-tiny" --shapes 3x77 --threads 1 --warmup 0 --min-reps 1 --min-time 0 --rounds 1
"$python" "$repo/bench/peers/roformer_torch.py" --self-test --threads 1
