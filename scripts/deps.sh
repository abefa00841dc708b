#!/usr/bin/env bash
# Installs the Debian packages roformer.cpp builds with (non-interactive; skipped when present).
# `scripts/deps.sh mpi` adds Open MPI for the mpi preset (data-parallel training).
set -euo pipefail
packages=(cmake g++ ninja-build ccache pkg-config libhwy-dev nlohmann-json3-dev libcli11-dev libfmt-dev
          libgtest-dev libbenchmark-dev libopenblas-openmp-dev libcairo2-dev libfontconfig-dev
          libminizip-dev zlib1g-dev libutf8proc-dev python3-jieba libsentencepiece-dev
          libdnnl-dev ocl-icd-opencl-dev opencl-headers  # dnnl-config.cmake finds OpenCL
          libcpp-httplib-dev)  # roformer serve (header-only httplib.h)
[ "${1:-}" = mpi ] && packages+=(openmpi-bin libopenmpi-dev iproute2)
"$(dirname "$0")/apt-install.sh" "${packages[@]}"
