#!/usr/bin/env bash
# Training step time of two builds of the roformer command line, interleaved (base, new, base, new,
# ...) so that the machine's drift hits both: R rounds of `roformer train` (the default 4 × 256 causal
# LM, batch 16 × 128, 40 steps, no evaluation or checkpoint before the last step) on a generated
# corpus. Prints each run's median step time (steps 7..38, from metrics.jsonl's elapsed_s) and the
# ratio of the medians. Name the CPU beside the figure.
#   bench/ab_train_speed.sh BASE_BINARY NEW_BINARY [ROUNDS] [WORK_DIR]
set -euo pipefail
base="$1" new="$2" rounds="${3:-6}" w="${4:-/tmp/ab_train_speed}"
mkdir -p "$w"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
[ -s "$w/lm.txt" ] || python3 -c "
import random; r = random.Random(3); w = 'the river runs past the mill and the mill wheel turns the stone over and over'.split()
open('$w/lm.txt', 'w').write(' '.join(r.choice(w) for _ in range(200000)))"
for i in $(seq "$rounds"); do
  for v in base new; do
    rm -rf "$w/$v-$i"
    "${!v}" train --data "$w/lm.txt" --out "$w/$v-$i" --steps 40 --batch 16 --seq 128 --eval-every 0 --save-every 0 \
      --sample-tokens 0 --no-progress 2> /dev/null
  done
done
python3 - "$w" "$rounds" <<'PY'
import json, statistics, sys
w, rounds = sys.argv[1], int(sys.argv[2])
med = {}
for v in ("base", "new"):
    runs = []
    for i in range(1, rounds + 1):
        el = [json.loads(l)["elapsed_s"] for l in open(f"{w}/{v}-{i}/metrics.jsonl")]
        runs.append(statistics.median(b - a for a, b in zip(el[5:-2], el[6:-1])) * 1e3)
    med[v] = statistics.median(runs)
    print(f"{v}: ms/step per run", " ".join(f"{x:.1f}" for x in runs), f"(median {med[v]:.2f})")
print(f"new/base {med['new'] / med['base']:.4f}")
PY
