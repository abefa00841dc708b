#!/usr/bin/env bash
# Installs the Debian packages roformer.cpp builds with (non-interactive; skipped when present).
set -euo pipefail
packages=(cmake g++ ninja-build pkg-config libhwy-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libgtest-dev libbenchmark-dev libopenblas-openmp-dev libcairo2-dev libfontconfig-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
