#!/usr/bin/env bash
# BLIS beside OpenBLAS and oneDNN on RoFormer-base's linear shapes, in one run (issue 15: the GEMM
# choice). Unpacks Debian's libblis4-openmp and its headers into build/peers/blis (apt-get download +
# dpkg -x: nothing is installed, the system's libblas.so.3 alternative stays as it is), builds
# bench/peers/gemm_blis.c against it, runs it, then `roformer bench gemm` with the same threads.
# Usage: bench/peers/gemm_blis.sh [ROFORMER] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
roformer=${1:-build/release/tools/roformer}
threads=${2:-2}
dir=build/peers/blis
if [ ! -f "$dir/built" ]; then
  rm -rf "$dir" && mkdir -p "$dir/deb" "$dir/root"
  (cd "$dir/deb" && apt-get download libblis4-openmp libblis-openmp-dev libblis-dev > /dev/null 2>&1) ||
    { echo "gemm_blis.sh: apt-get download of libblis4-openmp failed" >&2; exit 1; }
  for deb in "$dir"/deb/*.deb; do dpkg -x "$deb" "$dir/root"; done
  lib=$(dirname "$(find "$dir/root" -name 'libblis.so.4*' | head -1)")
  inc=$(dirname "$(find "$dir/root" -name cblas.h | grep -i blis | head -1)")
  cc -O2 -I"$inc" bench/peers/gemm_blis.c -o "$dir/gemm_blis" "$lib"/libblis.so.4 -Wl,-rpath,"$(cd "$lib" && pwd)" -fopenmp
  touch "$dir/built"
fi
echo "BLIS (Debian $(dpkg-deb -f "$dir"/deb/libblis4-openmp_*.deb Version)), $threads threads:"
OMP_NUM_THREADS=$threads BLIS_NUM_THREADS=$threads "$dir/gemm_blis"
echo
"$roformer" bench gemm --threads "$threads"
