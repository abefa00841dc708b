#!/usr/bin/env bash
# Builds the Python package (pip install . : scikit-build-core + nanobind) into a venv and runs its
# pytest suite (python/tests). A failure fails the script.
#   scripts/python-test.sh [VENV_DIR [TORCH_VERSION]]     default build/py-venv, Debian's PyTorch
# Without TORCH_VERSION the venv sits on Debian's Python, NumPy and PyTorch (1.13: no custom ops, so
# test_torch_ops.py is left out). With it, the venv is its own and gets that PyTorch from PyPI, for the
# custom op, opcheck and torch.compile tests (CI uses 2.5.1).
# The engine tests use ../shared's fixtures and, when built, build/release/tools/roformer (CI builds it first
# and sets ROFORMER_REQUIRE_CLI=1: then the tests that need the command line fail instead of skipping).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [VENV_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
venv="$(realpath -m "${1:-build/py-venv}")"
torch_version="${2:-}"
scripts/apt-install.sh python3 python3-venv python3-dev python3-numpy python3-torch >&2
leave_out=()
if [ -z "$torch_version" ]; then
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
  leave_out=(--ignore=test_torch_ops.py)
else
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "torch==$torch_version" numpy
fi
"$venv/bin/pip" install --quiet "nanobind>=2.0" "scikit-build-core>=0.10" pytest
"$venv/bin/pip" install --quiet --no-build-isolation .
# The engine tests compare with the roformer-hf fixtures and with the command line when it is built.
export ROFORMER_FIXTURES="${ROFORMER_FIXTURES:-$PWD/../shared/fixtures/roformer-hf}"
[ -x build/release/tools/roformer ] && export ROFORMER_CLI="${ROFORMER_CLI:-$PWD/build/release/tools/roformer}"
cd python/tests  # import the installed package, not the source tree
"$venv/bin/python" -c "import torch; print('pytest with torch', torch.__version__)"
"$venv/bin/python" -m pytest -q "${leave_out[@]}"
