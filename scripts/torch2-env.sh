#!/usr/bin/env bash
# Creates the Python environment of the PyTorch 2 peers (scaled_dot_product_attention: the torch-sdpa
# runner of bench/peers/roformer_infer_hf.py, bench/peers/attention_sdpa.py, ctest hf_sdpa_peer) and
# prints its python on stdout (everything else goes to stderr):
#   export ROFORMER_TORCH2_PYTHON="$(scripts/torch2-env.sh)"   # default VENV_DIR: build/torch2-venv
#   scripts/torch2-env.sh VENV_DIR
# A venv of its own (not over Debian's torch 1.13) with PyPI's torch 2.15.0 (the newest when this was
# written; its Linux x86-64 wheel brings NVIDIA's CUDA libraries, about 5.5 GB installed, which it loads
# at import even on the CPU: the CPU-only index download.pytorch.org/whl/cpu is not reachable everywhere),
# and transformers 4.40.2 with numpy < 2, the versions of build/hf-venv (scripts/hf-env.sh), for the
# runners that load RoFormerModel. TORCH_VERSION=2.x.y in the environment picks another torch.
# Idempotent: a venv whose torch is that version and runs SDPA and transformers' RoFormer is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [VENV_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
venv="${1:-build/torch2-venv}"
torch_version="${TORCH_VERSION:-2.15.0}"
pins=("torch==$torch_version" "numpy<2" transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.3
      "huggingface-hub>=0.19.3,<0.24")
probe="import torch, torch.nn.functional as F, safetensors.torch, transformers
assert torch.__version__.split('+')[0] == '$torch_version', torch.__version__
assert hasattr(F, 'scaled_dot_product_attention')
from transformers import RoFormerModel
assert 'modeling_roformer' in RoFormerModel.__module__"

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$probe" > /dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi
{
  scripts/apt-install.sh python3 python3-venv
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q "${pins[@]}"
  "$venv/bin/python" -c "$probe"
  "$venv/bin/python" -c 'import torch, transformers; print(f"torch2-env: torch {torch.__version__}, transformers {transformers.__version__}")'
} >&2
echo "$venv/bin/python"
