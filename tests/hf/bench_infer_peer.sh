#!/usr/bin/env bash
# The inference benchmark's peer script runs end to end and ours computes what transformers computes:
# bench/peers/roformer_infer_hf.py makes a random RoFormerModel (the tiny preset, seeded) with
# transformers, and `roformer bench infer` and RoFormerModel.from_pretrained both run it on two batch
# shapes; the script fails if their output checksums differ by more than 1e-4 (relative).
# Usage: bench_infer_peer.sh ROFORMER_BINARY [WORK_DIR]
# Python: as tests/hf/roundtrip.sh. None: exit 77 (ctest skip), or 1 when ROFORMER_REQUIRE_HF=1.
set -euo pipefail
roformer="$1"
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
source "$here/common.sh"
probe="$(hf_probe RoFormerModel)"
find_hf_python "$probe"
make_work_dir "${2:-}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 PYTHONDONTWRITEBYTECODE=1
"$python" "$repo/bench/peers/roformer_infer_hf.py" --roformer "$roformer" --preset tiny \
  --model-dir "$work/roformer-tiny" --shapes 1x16,3x77 --threads 1 --warmup 0 --min-reps 1 --min-time 0 --rounds 1 \
  --json "$work/infer.json"
