#!/usr/bin/env bash
# Builds the Python package (pip install . : scikit-build-core + nanobind) into a venv on Debian's
# Python, PyTorch and NumPy, and runs its pytest suite (python/tests). A failure fails the script.
# The engine tests use ../shared's fixtures and, when built, build/release/tools/roformer (CI builds it first).
#   scripts/python-test.sh [VENV_DIR]     default build/py-venv
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$(realpath -m "${1:-build/py-venv}")"
scripts/apt-install.sh python3 python3-venv python3-dev python3-numpy python3-torch >&2
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv --system-site-packages "$venv"
"$venv/bin/pip" install --quiet "nanobind>=2.0" "scikit-build-core>=0.10" pytest
"$venv/bin/pip" install --quiet --no-build-isolation .
# The engine tests compare with the roformer-hf fixtures and with the command line when it is built.
export ROFORMER_FIXTURES="${ROFORMER_FIXTURES:-$PWD/../shared/fixtures/roformer-hf}"
[ -x build/release/tools/roformer ] && export ROFORMER_CLI="${ROFORMER_CLI:-$PWD/build/release/tools/roformer}"
cd python/tests  # import the installed package, not the source tree
"$venv/bin/python" -m pytest -q
