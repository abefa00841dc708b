#!/usr/bin/env bash
# Fine-tuning on long documents: how step time and peak memory grow with the sequence length.
# Documents of consecutive KJV verses (data/kjv.txt, which scripts/run.sh fetches; chapter headings
# dropped), about 0.95 words per token of --max-length each, labelled 0 (Old Testament) or 1 (New);
# 8 per class to train on and 2 to validate (3 and 1 at 32,768 tokens and above, where the New
# Testament holds no more; DOCS=N sets the training documents per class), then one epoch of
# `roformer finetune --batch 1` at each length. Prints tokens/s of the last step, the process's peak
# RSS and the wall time. A model whose vocabulary lacks these words reads [UNK]s: the same tokens.
# FLAGS adds options to every `roformer finetune` (FLAGS="--precision bf16").
#
#   bench/long_finetune.sh ROFORMER MODEL [LENGTH...]    (default lengths 1024 ... 32768)
#   bench/long_finetune.sh build/release/tools/roformer runs/mlm/step-000300
set -euo pipefail
roformer="$1" model="$2"
shift 2
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1024 2048 4096 8192 16384 32768)
work=build/long-finetune
mkdir -p "$work"
echo "| tokens | tokens/s | peak RSS MiB | wall s |"
echo "|---|---|---|---|"
for T in "${lengths[@]}"; do
  rm -rf "$work/$T" && mkdir -p "$work/$T"
  python3 - "$T" "$work/$T" "${DOCS:-0}" <<'PY'
import json, re, sys
T, out, docs_per_class = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
lines = open("data/kjv.txt", encoding="utf-8").read().split("\n")
nt = next(i for i, l in enumerate(lines) if l.startswith("Matthew 1"))
def words(a, b):
    return [w for l in lines[a:b] if l and not re.match(r"^\S+( \S+)? \d+$", l) for w in l.split()]
old, new = words(0, nt), words(nt, len(lines))
W, n = int(T * 0.95), docs_per_class or (8 if T < 32768 else 3)
def docs(ws, k):  # k documents of W words, spread over ws
    step = max(W, (len(ws) - W) // max(k - 1, 1))
    return [" ".join(ws[i * step: i * step + W]) for i in range(k)]
splits = {"train": (old[: len(old) // 2], new[: len(new) * 3 // 4], n),
          "validation": (old[len(old) // 2:], new[len(new) * 3 // 4:], max(1, n // 4))}
for name, (o, w, k) in splits.items():
    with open(f"{out}/{name}.jsonl", "w") as f:
        for a, b in zip(docs(o, k), docs(w, k)):
            f.write(json.dumps({"sentence": a, "label": 0}) + "\n" + json.dumps({"sentence": b, "label": 1}) + "\n")
PY
  /usr/bin/time -v "$roformer" finetune --model "$model" --train "$work/$T/train.jsonl" \
    --validation "$work/$T/validation.jsonl" --out "$work/$T/run" --max-length "$T" --batch 1 --epochs 1 \
    --threads 2 ${FLAGS:-} > "$work/$T/log" 2>&1
  tps=$(grep -E '^step' "$work/$T/log" | tail -1 | grep -oE '[0-9]+ tok/s' | cut -d' ' -f1)
  rss=$(grep 'Maximum resident' "$work/$T/log" | grep -oE '[0-9]+$')
  wall=$(grep 'Elapsed (wall' "$work/$T/log" | awk '{print $NF}')
  echo "| $T | $tps | $((rss / 1024)) | $wall |"
done
