#!/usr/bin/env bash
# scripts/device-bundle.sh: the archive fits the device tool's 64 MiB carry limit, and unpacked elsewhere
# its binaries load every library from the bundle and run through the bundled loader with an empty
# environment (the FlashAttentionBf16Amx tests, roformer --version, a training step re-executed with
# roformer's default environment); its amx-check.sh exits 2, naming the CPU, where there is no
# AMX-BF16 (with AMX the full check would run: minutes, so not here).
# Usage: device_bundle.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
source_dir="$1" build="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
BUILD="$build" bash "$source_dir/scripts/device-bundle.sh" "$work/bundle.tar.gz"
size=$(stat -c %s "$work/bundle.tar.gz")
[ "$size" -lt $((64 * 1024 * 1024)) ] || { echo "the bundle is $size bytes: over the 64 MiB carry limit" >&2; exit 1; }
tar -xzf "$work/bundle.tar.gz" -C "$work"
bundle="$work/device-bundle"
# Every library the bundled loader resolves lies in the bundle (the host's own may differ or be missing).
for binary in roformer ops_tests; do
  outside=$(LD_LIBRARY_PATH="$bundle/lib" "$bundle/lib/ld-linux-x86-64.so.2" --list "$bundle/bin/$binary" |
    awk -v lib="$bundle/lib/" '/=>/ && index($3, lib) != 1 { print $1 " => " $3 }')
  [ -z "$outside" ] || { echo "$binary loads libraries from outside the bundle:" >&2; echo "$outside" >&2; exit 1; }
done
env -i PATH=/usr/bin:/bin "$bundle/build/tools/roformer" --version | grep '^roformer'
# A training command, which roformer re-executes with its default environment (GOMP_SPINCOUNT, and
# GLIBC_TUNABLES for training): through the loader too.
env -i PATH=/usr/bin:/bin "$bundle/build/tools/roformer" bench train --preset small --batch 1 --seq 16 --steps 1 \
  --warmup 0 --threads 1 --no-sgemm --json > "$work/train.json"
grep -q '"glibc_tunables": *"glibc.malloc.hugetlb=1"' "$work/train.json" ||
  { echo "bench train in the bundle did not run with roformer's default environment:" >&2; cat "$work/train.json" >&2; exit 1; }
env -i PATH=/usr/bin:/bin "$bundle/build/tests/ops_tests" --gtest_brief=1 \
  --gtest_filter='FlashAttentionBf16Amx.TheDotProductsStayTheDefault:FlashAttentionBf16Amx.NoAmxWhereLinuxListsNone'
if ! grep -q -w amx_bf16 /proc/cpuinfo; then
  rc=0
  env -i PATH=/usr/bin:/bin "$bundle/scripts/amx-check.sh" "$work/out" > "$work/amx.log" 2>&1 || rc=$?
  cat "$work/amx.log"
  [ "$rc" -eq 2 ] && grep -q 'no AMX-BF16' "$work/amx.log" ||
    { echo "amx-check.sh in the bundle: expected exit 2 and 'no AMX-BF16', got $rc" >&2; exit 1; }
fi
echo "device bundle: $((size / 1024 / 1024)) MiB, runs here"
