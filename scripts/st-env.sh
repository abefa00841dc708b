#!/usr/bin/env bash
# Creates the Python environment that runs schemathesis (tests/cli/serve_schemathesis.sh: ctest
# serve_schemathesis, property-based requests against `roformer serve`'s /openapi.json) and prints the
# path of its `st` on stdout (everything else goes to stderr):
#   export ROFORMER_SCHEMATHESIS="$(scripts/st-env.sh)"    # default VENV_DIR: build/st-venv
#   scripts/st-env.sh VENV_DIR
# A venv of its own (schemathesis 4.32.5 from PyPI): its dependencies (hypothesis, jsonschema, httpx,
# ...) stay out of the transformers environment. Idempotent: a venv whose st runs is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [VENV_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
venv="${1:-build/st-venv}"
mkdir -p "$(dirname "$venv")"
venv="$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")"
if [ -x "$venv/bin/st" ] && "$venv/bin/st" --version > /dev/null 2>&1; then
  echo "$venv/bin/st"
  exit 0
fi
{
  scripts/apt-install.sh python3 python3-venv
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --no-input --disable-pip-version-check -q schemathesis==4.32.5
  "$venv/bin/st" --version
} >&2
echo "$venv/bin/st"
