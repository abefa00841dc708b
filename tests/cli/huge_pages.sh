#!/usr/bin/env bash
# Training runs on transparent huge pages by default: `roformer bench train` (a training command)
# reports memory on them when the kernel gives them to those who ask (THP "madvise" or "always"), and
# none when GLIBC_TUNABLES in the environment says otherwise under "madvise" (the environment wins).
# Skipped (77) where the kernel has THP off. Usage: huge_pages.sh ROFORMER_BINARY
set -euo pipefail
roformer="$1"
mode="$(cat /sys/kernel/mm/transparent_hugepage/enabled 2> /dev/null || true)"
case "$mode" in
  *"[always]"* | *"[madvise]"*) ;;
  *) echo "transparent huge pages are off here ($mode): skipped"; exit 77 ;;
esac
huge_mib() {  # the run's huge_pages_mib, as an integer
  "$@" bench train --preset small --steps 1 --warmup 0 --threads 1 --no-sgemm --json |
    python3 -c 'import json, sys; print(int(json.load(sys.stdin)["runs"][0]["huge_pages_mib"]))'
}
default="$(huge_mib env -u GLIBC_TUNABLES "$roformer")"
[ "$default" -gt 0 ] || { echo "expected memory on huge pages by default, got $default MiB" >&2; exit 1; }
if [[ "$mode" == *"[madvise]"* ]]; then
  off="$(huge_mib env GLIBC_TUNABLES=glibc.malloc.hugetlb=0 "$roformer")"
  [ "$off" -eq 0 ] || { echo "expected no huge pages with GLIBC_TUNABLES=glibc.malloc.hugetlb=0, got $off MiB" >&2; exit 1; }
fi
echo "ok: $default MiB on huge pages by default"
