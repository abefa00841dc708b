#!/usr/bin/env bash
# Builds and runs the test suite. `scripts/test.sh` uses the release preset; `scripts/test.sh debug`
# the AddressSanitizer + UBSan one (without hf_vocab, whose 100 s are transformers' Python tokenizer over
# a corpus; the release run has it, and `roformer vocab` runs under the sanitizers in
# cli_train_resume_is_bit_exact); `scripts/test.sh mpi` installs Open MPI, builds the command line
# with it and runs the data-parallel tests (ctest label mpi; the rest is the release suite's).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
if [ "$preset" = mpi ]; then
  scripts/deps.sh mpi
  cmake --preset mpi
  cmake --build --preset mpi --target roformer
  ctest --preset mpi -L mpi
  exit
fi
scripts/deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset"
ctest --preset "$preset"
