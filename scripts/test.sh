#!/usr/bin/env bash
# Builds and runs the test suite: scripts/test.sh [release|debug|mpi] [--peers]
#   release (default)  the whole suite on the release preset, with the main job's corpus (data/kjv.txt,
#                      scripts/corpus.sh) for the documentation's commands (ctest docs_commands);
#   debug              the AddressSanitizer + UBSan preset: every unit test, the command-line suites,
#                      the fuzz regressions and random command lines (ctest cli_fuzz), the server's
#                      HTTP tests and schemathesis; not the Python comparisons with transformers
#                      (hf_*), whose numbers the release run checks on the same code, nor the load test
#                      and the benchmark smoke tests, which measure rather than check memory, nor ten
#                      long numeric sweeps whose code paths shorter tests cover; each unit-test
#                      executable runs in 4 shards, not a process per test (docs/reliability.md);
#   mpi                Open MPI, the command line built with it, the data-parallel tests (label mpi).
# --peers first makes the Python environments the comparison tests need (transformers, sacreBLEU,
# seqeval, the OpenAI and huggingface_hub clients: scripts/hf-env.sh; schemathesis: scripts/st-env.sh)
# and requires those tests to run; without it they skip (ctest's exit 77) where the environments are
# missing, and the last line says how many did.
# ROFORMER_UNITY_BUILD=1 configures release and mpi as unity builds (CI sets it: a cold build in about
# 60% of the time; the debug preset is one already). Without it they compile file by file, which keeps
# a developer's rebuilds after an edit short.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=release
for arg in "$@"; do
  case "$arg" in
    release | debug | mpi) preset="$arg" ;;
    --peers)
      ROFORMER_PYTHON="$(scripts/hf-env.sh build/hf-venv)"
      ROFORMER_SCHEMATHESIS="$(scripts/st-env.sh build/st-venv)"
      export ROFORMER_PYTHON ROFORMER_SCHEMATHESIS ROFORMER_REQUIRE_HF=1
      ;;
    *) echo "scripts/test.sh: unknown argument '$arg' (release, debug, mpi, --peers)" >&2; exit 2 ;;
  esac
done
unity=()  # said every time, so that the build directory's cache does not keep the last run's choice
if [ "$preset" != debug ]; then
  unity=(-DCMAKE_UNITY_BUILD=OFF)
  [ "${ROFORMER_UNITY_BUILD:-0}" = 1 ] && unity=(-DCMAKE_UNITY_BUILD=ON)
fi
if [ "$preset" = mpi ]; then
  scripts/deps.sh mpi
  cmake --preset mpi "${unity[@]}"
  cmake --build --preset mpi --target roformer
  ctest --preset mpi -L mpi
  exit
fi
scripts/deps.sh
[ "$preset" = release ] && scripts/corpus.sh data/kjv.txt  # the main job's corpus, which docs_commands reads
cmake --preset "$preset" "${unity[@]}"
cmake --build --preset "$preset"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
ctest --preset "$preset" 2>&1 | tee "$log"
skipped="$(grep -c '(Skipped)$' "$log" || true)"
if [ "$skipped" -gt 0 ]; then
  # Three reasons to skip, counted apart: no GPU, no native bf16 (or AMX) in this CPU, a missing peer.
  gpu="$(grep -c 'Cuda.*(Skipped)$' "$log" || true)"
  bf16="$(grep -v 'Cuda' "$log" | grep -ciE '(bf16|amx).*\(Skipped\)$' || true)"
  peers=$((skipped - gpu - bf16))
  echo "scripts/test.sh: $skipped tests skipped (listed above): $gpu are librope's CUDA tests, which need a GPU (or," \
       "one of them, its absence); $bf16 test bf16 or AMX kernels, which need a CPU with AVX512-BF16 or AMX; $peers" \
       "run only inside their own script (RoformerRoundTrip.*, in hf_roundtrip) or compare with transformers," \
       "sacreBLEU, seqeval, schemathesis, PyTorch 2 or the OpenAI and huggingface_hub clients (docs_commands, the" \
       "documentation's commands, queries the server with the last two) where those are not installed:" \
       "'scripts/test.sh $preset --peers' installs them (Python venvs under build/) and runs them too."
else
  echo "scripts/test.sh: no test skipped."
fi
