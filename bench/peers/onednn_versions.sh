#!/usr/bin/env bash
# Builds bench/peers/onednn_matmul.cc against each oneDNN at hand and runs the builds interleaved in
# rounds (round r: every ISA limit × thread count × build once), then prints, per ISA limit and thread
# count, each case's best GFLOP/s over the rounds per build and each build's ratio to Debian's 2.x.
# A peer benchmark, not part of the product build; nothing here is installed or committed elsewhere.
#
# Builds (one is skipped, with the reason printed, where its files are missing or it fails):
#   debian  Debian's libdnnl-dev (2.x, GNU OpenMP): /usr/include, -ldnnl.
#   gomp32  PyPI onednn-cpu-gomp 2023.2 (oneDNN 3.2, GNU OpenMP; the wheel has no headers): compiled with
#           the 3.x headers of onednn-devel behind an override directory holding a dnnl_config.h with the
#           CPU runtime and threading set to OpenMP and no GPU runtime, and a dnnl_version.h saying 3.2.0;
#           or, with GOMP_INCLUDE set, with the wheel's own headers (PyPI onednn-devel-cpu-gomp 2023.2.0,
#           its data/include folder; both gave the same kernels, GFLOP/s and check errors here).
#   sycl    PyPI onednn/onednn-devel 2026.1 (oneDNN 3.13, SYCL CPU runtime, TBB threading), loaded with
#           the libraries of the PyPI packages dpcpp-cpp-rt, intel-opencl-rt and tbb from a venv
#           ($ONEDNN_RT) and the CPU OpenCL driver named by OCL_ICD_FILENAMES (the wheel's .icd file
#           names a placeholder path).
# Threads: OMP_NUM_THREADS for the OpenMP builds; for the TBB build, the CPU affinity (taskset -c 0 for
# one thread, TBB's default, every core, for two). ISA limits: the machine's best, and AVX2
# (ONEDNN_MAX_CPU_ISA and DNNL_MAX_CPU_ISA both set).
#
# Usage: bench/peers/onednn_versions.sh [ROUNDS]          (default 3; about 6 minutes a round)
# Environment: MIN_TIME (0.2 s), REPS (3), ONLY (a case-name substring), THREADS ("1 2"),
#   ISAS ("native avx2"), OUT (results folder; default a new /tmp/onednn_versions.XXXX), IDLE_WAIT, and
#   the paths GOMP_LIB, GOMP_INCLUDE, ONEDNN313_LIB, ONEDNN313_INCLUDE, ONEDNN_RT below.
set -euo pipefail

ROUNDS=${1:-3}
MIN_TIME=${MIN_TIME:-0.2}
REPS=${REPS:-3}
ONLY=${ONLY:-}
THREADS=${THREADS:-"1 2"}
ISAS=${ISAS:-"native avx2"}
# The PyPI builds, fetched into PEERS (default build/onednn-peers) when missing: the wheels unpacked
# (pip download, no install) and the SYCL runtime in a venv.
PEERS=${PEERS:-build/onednn-peers}
fetch() {  # PACKAGE==VERSION: its wheel unpacked into $PEERS
  local dir="$PEERS/${1%%==*}"
  [ -d "$dir" ] && return
  mkdir -p "$dir" && python3 -m pip download -q --no-deps -d "$dir" "$1" && (cd "$dir" && unzip -qo ./*.whl)
}
if [ -z "${GOMP_LIB:-}${ONEDNN313_LIB:-}" ]; then
  for p in onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 onednn==2026.1.0 onednn-devel==2026.1.0; do
    fetch "$p" || echo "could not fetch $p"
  done
  [ -d "$PEERS/rt" ] || { python3 -m venv "$PEERS/rt" && "$PEERS/rt/bin/pip" install -q dpcpp-cpp-rt intel-opencl-rt tbb; } ||
    echo "could not install the SYCL runtime"
  GOMP_INCLUDE=${GOMP_INCLUDE:-$PEERS/onednn-devel-cpu-gomp/onednn_devel_cpu_gomp-2023.2.0.data/data/include}
fi
GOMP_LIB=${GOMP_LIB:-$PEERS/onednn-cpu-gomp/onednn_cpu_gomp-2023.2.0.data/data/lib}
ONEDNN313_LIB=${ONEDNN313_LIB:-$PEERS/onednn/onednn-2026.1.0.data/data/lib}
ONEDNN313_INCLUDE=${ONEDNN313_INCLUDE:-$PEERS/onednn-devel/onednn_devel-2026.1.0.data/data/include}
ONEDNN_RT=${ONEDNN_RT:-$PEERS/rt}
OUT=${OUT:-$(mktemp -d /tmp/onednn_versions.XXXX)}
SRC=$(cd "$(dirname "$0")" && pwd)/onednn_matmul.cc
CXX=${CXX:-g++}
CXXFLAGS="-O2 -std=c++17 -Wall"
mkdir -p "$OUT/raw"

echo "== machine"
lscpu | grep -E '^Model name|^CPU\(s\)|^Thread\(s\) per core' | sed 's/  */ /g'
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni|amx[a-z0-9_]*)$' | tr '\n' ' ')"
grep -qw amx_tile /proc/cpuinfo || echo "(no AMX on this CPU: AMX kernels cannot be measured here)"
echo "out: $OUT"

BUILDS=()
build_debian() {
  "$CXX" $CXXFLAGS "$SRC" -o "$OUT/debian" -ldnnl
}
build_gomp32() {
  [ -e "$GOMP_LIB/libdnnl.so.3" ] || { echo "no $GOMP_LIB/libdnnl.so.3"; return 1; }
  if [ -n "${GOMP_INCLUDE:-}" ]; then
    "$CXX" $CXXFLAGS -I"$GOMP_INCLUDE" "$SRC" -o "$OUT/gomp32" -L"$GOMP_LIB" -l:libdnnl.so.3 -Wl,-rpath,"$GOMP_LIB"
    return
  fi
  [ -e "$ONEDNN313_INCLUDE/oneapi/dnnl/dnnl.hpp" ] || { echo "no 3.x headers in $ONEDNN313_INCLUDE"; return 1; }
  local o="$OUT/include-gomp32/oneapi/dnnl"
  mkdir -p "$o"
  # dnnl.h includes "oneapi/dnnl/dnnl_config.h": found in the first -I directory that has it.
  sed -e 's/^#define DNNL_CPU_THREADING_RUNTIME .*/#define DNNL_CPU_THREADING_RUNTIME DNNL_RUNTIME_OMP/' \
      -e 's/^#define DNNL_CPU_RUNTIME .*/#define DNNL_CPU_RUNTIME DNNL_RUNTIME_OMP/' \
      -e 's/^#define DNNL_GPU_RUNTIME .*/#define DNNL_GPU_RUNTIME DNNL_RUNTIME_NONE/' \
      "$ONEDNN313_INCLUDE/oneapi/dnnl/dnnl_config.h" > "$o/dnnl_config.h"
  grep -q '^#define DNNL_CPU_RUNTIME DNNL_RUNTIME_OMP' "$o/dnnl_config.h" || { echo "dnnl_config.h override failed"; return 1; }
  cat > "$o/dnnl_version.h" <<'EOF'
#ifndef ONEAPI_DNNL_DNNL_VERSION_H
#define ONEAPI_DNNL_DNNL_VERSION_H
#define DNNL_VERSION_MAJOR 3
#define DNNL_VERSION_MINOR 2
#define DNNL_VERSION_PATCH 0
#endif
EOF
  "$CXX" $CXXFLAGS -I"$OUT/include-gomp32" -I"$ONEDNN313_INCLUDE" "$SRC" -o "$OUT/gomp32" \
    -L"$GOMP_LIB" -l:libdnnl.so.3 -Wl,-rpath,"$GOMP_LIB"
}
sycl_env() {
  env LD_LIBRARY_PATH="$ONEDNN_RT/lib" OCL_ICD_FILENAMES="$ONEDNN_RT/lib/libintelocl.so" "$@"
}
build_sycl() {
  [ -e "$ONEDNN313_LIB/libdnnl.so.3" ] || { echo "no $ONEDNN313_LIB/libdnnl.so.3"; return 1; }
  [ -e "$ONEDNN_RT/lib/libsycl.so.9" ] || { echo "no SYCL runtime in $ONEDNN_RT/lib (pip install dpcpp-cpp-rt intel-opencl-rt tbb)"; return 1; }
  # libdnnl's own dependencies (libsycl, libsvml, ...) are found at run time through LD_LIBRARY_PATH.
  "$CXX" $CXXFLAGS -I"$ONEDNN313_INCLUDE" "$SRC" -o "$OUT/sycl" -L"$ONEDNN313_LIB" -l:libdnnl.so.3 \
    -Wl,-rpath,"$ONEDNN313_LIB" -Wl,--allow-shlib-undefined
  sycl_env "$OUT/sycl" --only no_such_case > "$OUT/sycl.probe" 2>&1 || { echo "engine: $(grep -m1 -E 'error' "$OUT/sycl.probe")"; return 1; }
}
echo "== builds"
for b in debian gomp32 sycl; do
  if msg=$(build_$b 2>&1); then
    BUILDS+=("$b")
    echo "$b: built, $("$([ $b = sycl ] && echo sycl_env || echo env)" "$OUT/$b" --only no_such_case 2>/dev/null | grep onednn_library)"
  else
    echo "$b: SKIPPED: $(echo "$msg" | grep -m3 -E 'error|no |failed|engine' | tr '\n' ' ')"
  fi
done

# The machine may be shared: before each run, wait (up to IDLE_WAIT seconds, default 45) for a half
# second in which the CPUs were at least 85% idle; the idle share seen last is logged with the run.
IDLE_WAIT=${IDLE_WAIT:-45}
idle_percent() {
  read -r _ a1 a2 a3 a4 a5 _ < /proc/stat; sleep 0.5; read -r _ b1 b2 b3 b4 b5 _ < /proc/stat
  local busy=$(( (b1 + b2 + b3) - (a1 + a2 + a3) )) idle=$(( (b4 + b5) - (a4 + a5) ))
  echo $(( 100 * idle / (busy + idle + 1) ))
}
wait_idle() {
  local until=$(( $(date +%s) + IDLE_WAIT )) p
  while p=$(idle_percent); [ "$p" -lt 85 ] && [ "$(date +%s)" -lt "$until" ]; do :; done
  echo "$p"
}
run_one() {  # build isa threads round
  local b=$1 isa=$2 t=$3 r=$4 f="$OUT/raw/$1.$2.t$3.r$4.txt"
  local -a e=(env OMP_NUM_THREADS="$t")
  [ "$isa" = avx2 ] && e+=(ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2)
  if [ "$b" = sycl ]; then
    e+=(LD_LIBRARY_PATH="$ONEDNN_RT/lib" OCL_ICD_FILENAMES="$ONEDNN_RT/lib/libintelocl.so")
    [ "$t" = 1 ] && e+=(taskset -c 0)
  fi
  local -a args=(--min-time "$MIN_TIME" --reps "$REPS")
  [ -n "$ONLY" ] && args+=(--only "$ONLY")
  local idle; idle=$(wait_idle)
  echo "+ ${e[*]} $OUT/$b ${args[*]}" > "$f"
  echo "idle_before ${idle}%" >> "$f"
  "${e[@]}" "$OUT/$b" "${args[@]}" >> "$f" 2>&1 || echo "exit $?" >> "$f"
}
echo "== runs ($ROUNDS rounds of: ISA {$ISAS} × threads {$THREADS} × builds {${BUILDS[*]}})"
for r in $(seq 1 "$ROUNDS"); do
  start=$(date +%s)
  for isa in $ISAS; do for t in $THREADS; do for b in "${BUILDS[@]}"; do run_one "$b" "$isa" "$t" "$r"; done; done; done
  echo "round $r: $(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg), idle before each run: $(grep -h idle_before "$OUT"/raw/*.r"$r".txt | cut -d' ' -f2 | tr '\n' ' ')"
done
echo "example command: $(head -1 "$OUT/raw/debian.native.t1.r1.txt" | cut -c3-)"

python3 - "$OUT/raw" "${BUILDS[@]}" <<'EOF'
import collections, glob, math, os, re, sys
raw, builds = sys.argv[1], sys.argv[2:]
best = collections.defaultdict(dict)   # (isa, t) -> {(case, build): [gflops per round]}
impl, fails, cases = {}, [], []
for path in sorted(glob.glob(os.path.join(raw, '*.txt'))):
    b, isa, t, r = os.path.basename(path)[:-4].split('.')
    for line in open(path):
        m = re.match(r'case (\S+) (\S+) (.*)', line)
        if not m: continue
        c, g, rest = m.group(1), float(m.group(2)), m.group(3)
        if c not in cases: cases.append(c)
        best[(isa, t)].setdefault((c, b), []).append(g)
        impl[(isa, b, c)] = rest.split()[0]
        if 'FAIL' in rest: fails.append(f'{b} {isa} {t} {r} {c} {rest}')
def fmt(x): return '   n/a' if x is None or math.isnan(x) else f'{x:6.1f}'
group_of = lambda c: '_'.join(c.split('_')[:2])
for (isa, t) in sorted(best, key=lambda k: (k[0] != 'native', k[0], k[1])):
    d = best[(isa, t)]
    print(f'\n== ISA {isa}, {t[1:]} thread(s): GFLOP/s, best over rounds (spread = worst/best over rounds); ratio = build / debian')
    head = f'{"case":34}' + ''.join(f'{b:>9}' for b in builds) + ''.join(f'{b+"/deb":>12}' for b in builds[1:]) + '  spread(min)'
    print(head)
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for c in cases:
        vals = {b: (max(d[(c, b)]) if (c, b) in d and not all(math.isnan(x) for x in d[(c, b)]) else None) for b in builds}
        spreads = [min(d[(c, b)]) / max(d[(c, b)]) for b in builds if vals[b]]
        line = f'{c:34}' + ''.join(f'{fmt(vals[b]):>9}' for b in builds)
        for b in builds[1:]:
            ratio = vals[b] / vals['debian'] if vals[b] and vals.get('debian') else None
            line += f'{(f"{ratio:.2f}" if ratio else "n/a"):>12}'
            if ratio: groups[group_of(c)][b].append(ratio)
        line += f'  {min(spreads):.2f}' if spreads else '   n/a'
        print(line)
    print('group geometric means of the ratios:')
    for g, per in groups.items():
        print(f'  {g:14}' + ''.join(f'  {b}/debian {math.exp(sum(map(math.log, v)) / len(v)):.2f} (min {min(v):.2f}, max {max(v):.2f})' for b, v in per.items()))
print('\n== implementations (per build and ISA, by case group)')
for isa in sorted({k[0] for k in impl}):
    for b in builds:
        seen = collections.OrderedDict()
        for c in cases:
            if (isa, b, c) in impl: seen.setdefault(group_of(c), set()).add(impl[(isa, b, c)])
        print(f'  {isa:6} {b:7} ' + '; '.join(f'{g}: {",".join(sorted(s))}' for g, s in seen.items()))
print('\n== checks: ' + ('all ok' if not fails else f'{len(fails)} FAILED'))
for f in fails[:20]: print('  ' + f)
EOF
