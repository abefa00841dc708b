#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan) in build/fuzz and runs each for the
# given number of seconds on a scratch copy of its seed corpus (fuzz/corpus/<target>/ plus the
# reproducers in fuzz/regressions/<target>/), niced, one libFuzzer job per target. Prints per target
# the executions, coverage (cov = edges, ft = features), corpus size and findings; exits 1 if any
# target crashed, leaked, timed out, ran out of memory, threw an undocumented exception or broke an
# invariant (the inputs are kept under the work folder). The differential target tokenizer_diff is not
# libFuzzer: random text through our tokenizer and transformers' (tests/hf/tokenizer_diff.py, a random
# seed), which must give the same ids; without a Python that has transformers it is skipped (a failure
# with ROFORMER_REQUIRE_HF=1, as in CI). The command-line fuzzer cli (fuzz/fuzz_cli.cc: command lines
# from the CLI's own option table, run in-process on small fixtures) needs the whole command line
# instrumented, so it is built and run only when named; CI runs its standalone build instead (the debug
# preset's ctest cli_fuzz). docs/reliability.md has the details.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     # default 600 s; targets: safetensors torch_bin config vocab tokenizer data tokenizer_diff
#   scripts/fuzz.sh 3600 cli                  # the command-line fuzzer (configures build/fuzz with the tools)
#   FUZZ_PARALLEL=2 scripts/fuzz.sh 10        # the CI smoke run (.ci/run)
#   FUZZ_PARALLEL=2 scripts/fuzz.sh 600       # two targets at a time
#   FUZZ_WORK=dir                             # scratch folder (default build/fuzz-work/<date-time>)
#   FUZZ_NO_DEPS=1                            # skip the apt-get step (packages already installed)
#   FUZZ_STRICT=1                             # known, unfixed findings (fuzz/regressions/*/known-*) fail too
#   FUZZ_CONTINUE=1                           # after a finding, keep it (findings/) and fuzz on for the time left
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds="${1:-600}"
shift || true
all_targets=(safetensors torch_bin config vocab tokenizer data tokenizer_diff)
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
parallel="${FUZZ_PARALLEL:-1}"
case "$seconds" in ''|*[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;; esac

if [ -z "${FUZZ_NO_DEPS:-}" ]; then
  scripts/deps.sh
  # clang 14 (Debian 12) with libFuzzer and the sanitizer runtimes; llvm for llvm-symbolizer.
  scripts/apt-install.sh clang libclang-rt-14-dev llvm
fi

# ---- build ----
build=build/fuzz
tools=OFF
build_targets=(fuzz_all)
for t in "${targets[@]}"; do
  [ "$t" = cli ] && tools=ON && build_targets+=(fuzz_cli)
done
if ! grep -qs '^ROFORMER_FUZZ:BOOL=ON' "$build/CMakeCache.txt" ||
   { [ "$tools" = ON ] && ! grep -qs '^ROFORMER_BUILD_TOOLS:BOOL=ON' "$build/CMakeCache.txt"; }; then
  CC=clang CXX=clang++ nice -n 19 cmake -S . -B "$build" -G Ninja -DROFORMER_FUZZ=ON \
    -DROFORMER_BUILD_TESTS=OFF -DROFORMER_BUILD_TOOLS="$tools" -DCMAKE_BUILD_TYPE= \
    -DCMAKE_C_FLAGS=-O2 -DCMAKE_CXX_FLAGS=-O2 -DCMAKE_UNITY_BUILD=ON >/dev/null  # unity: 40% less compile time
fi
t0=$(date +%s)
nice -n 19 cmake --build "$build" --target "${build_targets[@]}"
echo "fuzz build: $(( $(date +%s) - t0 )) s"

# ---- run ----
work="${FUZZ_WORK:-build/fuzz-work/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$work"
work=$(cd "$work" && pwd)
export TMPDIR="$work/tmp"   # fuzz_tokenizer's and fuzz_cli's scratch folders
export FUZZ_CLI_FIXTURE_CACHE="$TMPDIR/cli-fixtures"  # made by the first fuzz_cli process, reused by the rest
mkdir -p "$TMPDIR"
symbolizer=$(command -v llvm-symbolizer || command -v llvm-symbolizer-14 || true)
[ -n "$symbolizer" ] && export ASAN_SYMBOLIZER_PATH="$symbolizer"
export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:${ASAN_OPTIONS:-}"
# The cli target links static libraries built without _GLIBCXX_SANITIZE_VECTOR (oneDNN, benchmark, ...):
# where the linker keeps their copy of a std::vector member, ASan reports a false container-overflow.
asan_options() {
  case "$1" in cli) echo "$ASAN_OPTIONS:detect_container_overflow=0" ;; *) echo "$ASAN_OPTIONS" ;; esac
}
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"

max_len() {
  case "$1" in safetensors|torch_bin) echo 16384 ;; cli) echo 128 ;; *) echo 4096 ;; esac
}
dict() {  # libFuzzer's -dict option (the cli target draws its values from its own table)
  case "$1" in torch_bin) echo "-dict=$root/fuzz/dict/pickle.dict" ;; cli) ;; *) echo "-dict=$root/fuzz/dict/json.dict" ;; esac
}
timeout_s() {  # a command line may train a tiny model for two steps
  case "$1" in cli) echo 30 ;; *) echo 10 ;; esac
}
extra() {  # cli: a few executions a second; long command lines from the start (no slow growth of the length limit)
  case "$1" in cli) echo "-len_control=0" ;; esac
}
# The cli target runs commands in-process: one OpenMP thread (as --threads 1) keeps its runs comparable.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# Each file in fuzz/regressions/<target>/ is replayed first, on its own. A file must pass, except
# known-*: the reproducer of a reported, still unfixed finding (docs/reliability.md), listed as
# "known" while it fails and as "fixed?" once it passes (then drop the known- prefix: from then on it
# is a regression test). FUZZ_STRICT=1 makes a failing known-* file a failure too.
replay_regressions() {
  local t=$1 dir="$work/$1" bin="$root/$build/fuzz/fuzz_$1" f name
  [ -d "fuzz/regressions/$t" ] || return 0
  for f in fuzz/regressions/"$t"/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f")
    if (cd "$dir" && nice -n 19 env ASAN_OPTIONS="$(asan_options "$t")" "$bin" -timeout="$(timeout_s "$t")" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
          -artifact_prefix="$dir/replay-" "$root/$f" >>"$dir/regressions.log" 2>&1); then
      case "$name" in known-*) echo "fixed?:$name" ;; esac
    else
      case "$name" in
        known-*) if [ -n "${FUZZ_STRICT:-}" ]; then echo "FAIL:$name"; else echo "known:$name"; fi ;;
        *) echo "FAIL:$name" ;;
      esac
    fi
  done >"$dir/regressions.txt"
}

# A timeout whose input replays well within the limit is not a finding: on a shared machine the
# process can be paused (SIGSTOP, seen here for minutes at a time) while an input runs. Such an
# input goes to spurious/ and the target resumes on its corpus for the time that is left; every
# other artifact ends the target's run. Each run segment's log is kept as seg-N.log.
run_target() {
  local t=$1 dir="$work/$1"
  local bin="$root/$build/fuzz/fuzz_$t"
  mkdir -p "$dir/corpus" "$dir/artifacts" "$dir/spurious"
  cp fuzz/corpus/"$t"/* "$dir/corpus/"
  replay_regressions "$t"
  local deadline=$(( $(date +%s) + seconds )) seg=0 left f
  while :; do
    left=$(( deadline - $(date +%s) ))
    [ "$left" -ge 1 ] || break
    (
      cd "$dir"
      nice -n 19 env ASAN_OPTIONS="$(asan_options "$t")" "$bin" corpus -jobs=1 -workers=1 -max_total_time="$left" -timeout="$(timeout_s "$t")" \
        -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len="$(max_len "$t")" $(dict "$t") $(extra "$t") \
        -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$dir/artifacts/" >"$dir/driver.log" 2>&1 || true
      [ -f fuzz-0.log ] && mv fuzz-0.log "seg-$seg.log"
    )
    seg=$((seg + 1))
    if [ -n "${FUZZ_CONTINUE:-}" ] && ls "$dir/artifacts" | grep -qE '^(crash|leak|oom|timeout)-'; then
      mkdir -p "$dir/findings"
      mv "$dir"/artifacts/{crash,leak,oom,timeout}-* "$dir/findings/" 2>/dev/null || true
      continue
    fi
    ls "$dir/artifacts" | grep -qE '^(crash|leak|oom)-' && break
    local resumed=0
    for f in "$dir"/artifacts/timeout-*; do
      [ -f "$f" ] || continue
      if (cd "$dir" && timeout 120 nice -n 19 env ASAN_OPTIONS="$(asan_options "$t")" "$bin" -timeout="$(timeout_s "$t")" \
            -rss_limit_mb=2048 -malloc_limit_mb=1024 "$f" >"$dir/spurious/$(basename "$f").log" 2>&1); then
        mv "$f" "$dir/spurious/" && resumed=1
      fi
    done
    [ "$resumed" = 1 ] || break
  done
}

# The differential tokenizer fuzzer for the time budget; its log (seed, texts, differences with the
# text escaped) is tokenizer_diff/driver.log, its exit status tokenizer_diff/status (77: skipped).
run_diff() {
  local dir="$work/tokenizer_diff" status=0
  mkdir -p "$dir"
  nice -n 19 bash tests/hf/tokenizer_diff.sh "$root/$build/fuzz/tokenizer_diff" fuzz/data/roformer-tokenizer "$dir/run" \
    --seconds "$seconds" >"$dir/driver.log" 2>&1 || status=$?
  echo "$status" >"$dir/status"
}

echo "fuzzing ${targets[*]} for ${seconds} s each (parallel $parallel) in $work"
pids=()
for t in "${targets[@]}"; do
  if [ "$t" = tokenizer_diff ]; then
    run_diff &
    pids+=($!)
    while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
    continue
  fi
  [ -x "$build/fuzz/fuzz_$t" ] || { echo "no such target: $t" >&2; exit 2; }
  run_target "$t" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
done
wait

# ---- report ----
status=0
printf '\n%-12s %12s %8s %8s %7s %10s  %s\n' target execs exec/s cov ft corpus findings
for t in "${targets[@]}"; do
  dir="$work/$t"
  if [ "$t" = tokenizer_diff ]; then
    rc=$(cat "$dir/status" 2>/dev/null || echo "?")
    summary=$(grep -E '^tokenizer_diff: [0-9]+ texts' "$dir/driver.log" || true)
    texts=$(echo "$summary" | sed -nE 's/^tokenizer_diff: ([0-9]+) texts.*/\1/p')
    rate=$(echo "$summary" | sed -nE 's/.*\(([0-9]+) texts\/s\).*/\1/p')
    case "$rc" in
      0) findings="none ($(grep -oE 'seed [0-9]+' "$dir/driver.log" | head -1))" ;;
      77) findings="skipped: no Python with transformers (ROFORMER_PYTHON)" ;;  # with ROFORMER_REQUIRE_HF=1: status 1
      *) findings="differences or errors: $dir/driver.log"; status=1 ;;
    esac
    printf '%-12s %12s %8s %8s %7s %10s  %s\n' "$t" "${texts:--}" "${rate:--}" - - - "$findings"
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then  # the differences (escaped texts, both sides' ids), else the log's end
      grep -A6 '^DIFFERENCE' "$dir/driver.log" | head -40 || tail -5 "$dir/driver.log"
    fi
    continue
  fi
  mapfile -t logs < <(ls -v "$dir"/seg-*.log 2>/dev/null || true)
  [ ${#logs[@]} -gt 0 ] || logs=("$dir/driver.log")
  log="${logs[$(( ${#logs[@]} - 1 ))]}"
  last=$(grep -hE '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  # Executions summed over the segments; exec/s over the whole run.
  # (a segment that ended in a finding has no final stats: its last status line counts)
  execs=$(for l in "${logs[@]}"; do
            n=$(grep -oE 'stat::number_of_executed_units: +[0-9]+' "$l" | grep -oE '[0-9]+$' || true)
            [ -z "$n" ] && n=$(grep -oE '^#[0-9]+' "$l" | tail -1 | tr -d '#')
            echo "${n:-0}"
          done | awk '{n += $1} END {if (NR) print n}')
  rate=$([ -n "$execs" ] && [ "$seconds" -gt 0 ] && echo $(( execs / seconds )) || true)
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+')
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+')
  corp=$(echo "$last" | grep -oE 'corp: [0-9]+/[0-9]+[a-zA-Z]*' | cut -d' ' -f2)
  spurious=$(ls "$dir/spurious" 2>/dev/null | grep -c '^timeout-[0-9a-f]*$' || true)
  findings=$(ls "$dir/artifacts" "$dir/findings" 2>/dev/null | grep -E '^(crash|leak|timeout|oom)-' || true)
  errors=$(grep -hE '^==[0-9]+==ERROR|FUZZ FINDING|runtime error:|ERROR: libFuzzer' "$log" | grep -vc 'libFuzzer: timeout' || true)
  [ -n "$(ls "$dir/artifacts" 2>/dev/null | grep -E '^timeout-')" ] && errors=1
  if grep -qs '^FAIL:' "$dir/regressions.txt"; then
    findings="$findings regression-failed:$(grep '^FAIL:' "$dir/regressions.txt" | cut -d: -f2- | tr '\n' ' ')"
  fi
  known=$(grep -E '^(known|fixed\?):' "$dir/regressions.txt" 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "$findings" ] || [ "${errors:-0}" != 0 ] || [ -z "$last" ]; then
    status=1
    [ -z "$findings" ] && findings="error in $log"
  fi
  printf '%-12s %12s %8s %8s %7s %10s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" \
    "$(echo ${findings:-none} | tr '\n' ' ')${known:+ [$known]}$([ "${spurious:-0}" != 0 ] && echo " (${spurious} spurious timeouts: paused, resumed)")"
done
echo "logs, corpora and artifacts: $work"
chmod -R u+w "$TMPDIR"  # the cli target's fixtures are read-only
rm -rf "$TMPDIR"
exit $status
