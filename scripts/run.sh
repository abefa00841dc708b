#!/usr/bin/env bash
# The main job: install dependencies and the corpus (the King James Bible from Debian's bible-kjv),
# build the release preset, then train the default RoFormer causal LM (character level, RoPE) for
# about 5 minutes on 2 cores. It shows a progress bar, evaluates, checkpoints to runs/kjv-<time>,
# writes metrics.{jsonl,csv} and curves.png there, and prints a generated sample at the end.
# Extra arguments go to `roformer train` (e.g. --steps 2000, --position sinusoidal, --task mlm).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/corpus.sh data/kjv.txt
cmake --preset release
cmake --build --preset release
build/release/tools/roformer train --data data/kjv.txt --out "runs/kjv-$(date +%Y%m%d-%H%M%S)" "$@"
