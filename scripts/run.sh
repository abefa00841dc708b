#!/usr/bin/env bash
# The main job: install dependencies and the corpus (the King James Bible from Debian's bible-kjv),
# build the release preset, then train the default RoFormer causal LM (character level, RoPE) for
# about 5 minutes on 2 cores. It shows a progress bar, evaluates, checkpoints to runs/kjv-<time>,
# writes metrics.{jsonl,csv} and curves.png there, and prints a generated sample at the end.
# runs/kjv then names that run (the README's examples use it), and `roformer` is installed into
# build/install/bin (cmake --install); the last line is the `export PATH=...` that puts it on the PATH.
# Extra arguments go to `roformer train` (e.g. --steps 2000, --position sinusoidal, --task mlm).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/corpus.sh data/kjv.txt
cmake --preset release
cmake --build --preset release
cmake --install build/release --prefix build/install --component roformer > /dev/null
run="kjv-$(date +%Y%m%d-%H%M%S)"
build/install/bin/roformer train --data data/kjv.txt --out "runs/$run" "$@"
ln -sfn "$run" runs/kjv
echo "runs/kjv -> runs/$run; put roformer on the PATH with:"
echo "export PATH=\"$PWD/build/install/bin:\$PATH\""
