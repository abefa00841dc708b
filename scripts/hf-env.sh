#!/usr/bin/env bash
# Creates the Python environment tests/hf/roundtrip.sh (ctest hf_roundtrip) runs Hugging Face
# transformers in, and prints its python on stdout (everything else goes to stderr):
#   export ROFORMER_PYTHON="$(scripts/hf-env.sh)"          # default VENV_DIR: build/hf-venv
#   scripts/hf-env.sh VENV_DIR
# Debian 12's PyTorch (python3-torch 1.13.1, apt) plus, in a venv with --system-site-packages,
# transformers 4.40.2 from PyPI: the version the roformer-hf fixtures were made with, known to run on
# torch 1.13 (recent releases disable PyTorch < 2.1, e.g. the 4.57 in /work/venv-ref); sacrebleu 2.6.0,
# the reference of `roformer bleu`; accelerate 0.30.1, which transformers' Trainer needs
# (bench/peers/finetune_hf.py); seqeval 1.2.2 (token classification's metrics) on Debian's scikit-learn;
# openai and huggingface_hub, whose clients tests/hf/serve_clients.py runs against `roformer serve`;
# sentence-transformers 2.7.0 (the last to run on transformers 4.40 and torch 1.13; with Pillow 10.3.0,
# which it imports) without its PyPI dependencies, the reference of tests/hf/sentence_transformers_vs_hf.py.
# Idempotent: a venv that already runs transformers' RoFormer and sacrebleu is kept as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [VENV_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
venv="${1:-build/hf-venv}"
pins=(transformers==4.40.2 tokenizers==0.19.1 safetensors==0.4.3 "huggingface-hub>=0.19.3,<0.24" sacrebleu==2.6.0
      accelerate==0.30.1 openai==3.57.0 requests)
probe='import torch, safetensors.torch, transformers
from transformers.utils import is_torch_available
assert is_torch_available(), "transformers cannot use this torch"
from transformers import RoFormerForMaskedLM, RoFormerForCausalLM
assert "modeling_roformer" in RoFormerForMaskedLM.__module__
import sacrebleu, accelerate, openai, requests
from seqeval.metrics import f1_score'

# Installed without their dependencies (they would bring a numpy that Debian's torch cannot use).
no_deps_pins=(seqeval==1.2.2 sentence-transformers==2.7.0 pillow==10.3.0)

mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$probe" > /dev/null 2>&1; then
  if ! "$venv/bin/python" -c 'import sentence_transformers' > /dev/null 2>&1; then  # a venv made before the pin
    "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q --no-deps "${no_deps_pins[@]}" >&2
  fi
  echo "$venv/bin/python"
  exit 0
fi

{
  scripts/apt-install.sh python3 python3-venv python3-torch python3-sklearn
  # Debian's interpreter, which python3-torch belongs to (not whatever python3 is first on PATH).
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q "${pins[@]}"
  # seqeval (token classification's metrics) on Debian's scikit-learn and numpy, and sentence-transformers.
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q --no-deps "${no_deps_pins[@]}"
  "$venv/bin/python" -c "$probe"
  "$venv/bin/python" -c 'import torch, transformers; print(f"hf-env: transformers {transformers.__version__}, torch {torch.__version__}")'
} >&2
echo "$venv/bin/python"
