#!/usr/bin/env bash
# Training asks for transparent huge pages by default: `roformer bench train` (a training command) runs
# with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 unless the environment sets GLIBC_TUNABLES (then the
# environment's value stays), and where the kernel gives huge pages to those who ask (THP "madvise")
# the default run has memory on them. Usage: huge_pages.sh ROFORMER_BINARY
set -euo pipefail
roformer="$1"
run() {  # ENV... : the run's JSON fields glibc_tunables and huge_pages_mib (an integer), one line
  env "$@" "$roformer" bench train --preset small --steps 1 --warmup 0 --threads 1 --no-sgemm --json |
    python3 -c 'import json, sys; r = json.load(sys.stdin)["runs"][0]; print(r["glibc_tunables"], int(r["huge_pages_mib"]))'
}
read -r tunables default_mib <<< "$(run -u GLIBC_TUNABLES)"
[ "$tunables" = glibc.malloc.hugetlb=1 ] || { echo "expected GLIBC_TUNABLES=glibc.malloc.hugetlb=1, got '$tunables'" >&2; exit 1; }
read -r tunables off_mib <<< "$(run GLIBC_TUNABLES=glibc.malloc.hugetlb=0)"
[ "$tunables" = glibc.malloc.hugetlb=0 ] || { echo "the environment's GLIBC_TUNABLES was replaced by '$tunables'" >&2; exit 1; }
mode="$(cat /sys/kernel/mm/transparent_hugepage/enabled 2> /dev/null || true)"
echo "THP mode: $mode; on huge pages: $default_mib MiB by default, $off_mib MiB with hugetlb=0"
if [[ "$mode" == *"[madvise]"* ]]; then
  [ "$off_mib" -eq 0 ] || { echo "expected no huge pages with hugetlb=0 in madvise mode" >&2; exit 1; }
fi
