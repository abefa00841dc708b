#!/usr/bin/env bash
# The encoder commands on one long document: wall time, tokens/s and peak RSS of `roformer embed`,
# `classify`, `fill-mask` (one [MASK]) and `serve` (one POST /embed) at each length.
# The model has RoFormer-base's shape (12 layers × 768, 12 heads, ff 3072) with 32,768 positions and an
# 8,000-token WordPiece vocabulary learned on data/kjv.txt (scripts/corpus.sh data/kjv.txt), pre-trained
# one step (`roformer train --task mlm`: its weights are as good as random, its speed is RoFormer-base's);
# the classifier is it fine-tuned one epoch on 8 short rows. A document is KJV words cut to exactly
# LENGTH tokens by --truncate --max-length ([CLS] and [SEP] included); the server is sent those tokens'
# ids, and its embedding must be embed's. The commands' wall time includes loading the model (about
# 1 s); the server's is the request's alone, after it listens and has served a short request.
# THREADS (default 2) sets --threads of each; WORK the directory it writes (default build/long-commands).
#
#   bench/long_commands.sh ROFORMER [LENGTH...]    (default lengths 8192 32768)
#   bench/long_commands.sh build/release/tools/roformer
set -euo pipefail
roformer="$1"
shift
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(8192 32768)
threads="${THREADS:-2}"
work="${WORK:-build/long-commands}"
mkdir -p "$work"
mlm="$work/mlm/step-000001" cls="$work/cls/best"

logged() {  # LOG COMMAND...: run it with its output in LOG, shown if it fails
  local log="$1"
  shift
  "$@" > "$log" 2>&1 || { tail -n 20 "$log" >&2; exit 1; }
}
if [ ! -f "$mlm/config.json" ]; then
  logged "$work/vocab.log" "$roformer" vocab --data data/kjv.txt --size 8000 --out-dir "$work/tokenizer"
  logged "$work/mlm.log" "$roformer" train --data data/kjv.txt --task mlm --tokenizer wordpiece \
    --vocab "$work/tokenizer" --layers 12 --hidden 768 --heads 12 --ff 3072 --max-positions 32768 --batch 1 \
    --seq 64 --steps 1 --out "$work/mlm" --no-progress
fi
if [ ! -f "$cls/config.json" ]; then
  for i in 1 2 3 4; do
    printf '{"sentence": "In the beginning God created the heaven and the earth.", "label": 0}\n'
    printf '{"sentence": "Blessed are the meek: for they shall inherit the earth.", "label": 1}\n'
  done > "$work/cls-train.jsonl"
  logged "$work/cls.log" "$roformer" finetune --model "$mlm" --train "$work/cls-train.jsonl" \
    --validation "$work/cls-train.jsonl" --out "$work/cls" --max-length 64 --batch 4 --epochs 1 --threads "$threads"
fi

# Documents: 1.3 words a token of KJV text (chapter headings dropped) on one line, the fill-mask one
# with word 100 (or LENGTH / 4) replaced by [MASK], inside the first LENGTH tokens; the server's
# request sends the tokens the commands' --truncate keeps ([CLS], the first LENGTH - 2, [SEP]) as ids.
python3 - "$roformer" "$mlm" "$work" "${lengths[@]}" <<'PY'
import json, re, subprocess, sys
roformer, model, work, lengths = sys.argv[1], sys.argv[2], sys.argv[3], [int(t) for t in sys.argv[4:]]
words = [w for l in open("data/kjv.txt", encoding="utf-8") if l.strip() and not re.match(r"^\S+( \S+)? \d+$", l.strip())
         for w in l.split()]
for T in lengths:
    doc = words[: int(T * 1.3) + 200]
    open(f"{work}/doc-{T}.txt", "w").write(" ".join(doc) + "\n")
    at = min(100, T // 4)
    open(f"{work}/mask-{T}.txt", "w").write(" ".join(doc[:at] + ["[MASK]"] + doc[at + 1:]) + "\n")
    ids = json.loads(subprocess.run([roformer, "tokenize", "--model", model, "--input", f"{work}/doc-{T}.txt"],
                                    check=True, capture_output=True, text=True).stdout)["input_ids"]
    assert len(ids) > T, f"the document has {len(ids)} tokens, fewer than {T}"
    json.dump({"inputs": ids[: T - 1] + ids[-1:]}, open(f"{work}/embed-{T}.json", "w"))
PY

echo "| command | tokens | wall s | tokens/s | peak RSS MiB |"
echo "|---|---|---|---|---|"
row() {  # command tokens seconds KiB
  awk -v c="$1" -v t="$2" -v s="$3" -v k="$4" \
    'BEGIN { printf "| %s | %d | %.1f | %.0f | %d |\n", c, t, s, t / s, k / 1024 }'
}
for T in "${lengths[@]}"; do
  for cmd in embed classify fill-mask; do
    model="$mlm" input="$work/doc-$T.txt"
    [ "$cmd" = classify ] && model="$cls"
    [ "$cmd" = fill-mask ] && input="$work/mask-$T.txt"
    /usr/bin/time -f '%e %M' -o "$work/$cmd-$T.time" "$roformer" "$cmd" --model "$model" --input "$input" \
      --truncate --max-length "$T" --threads "$threads" > "$work/$cmd-$T.out"
    read -r seconds kib < "$work/$cmd-$T.time"
    row "$cmd" "$T" "$seconds" "$kib"
  done
  "$roformer" serve --model "$mlm" --port 0 --threads "$threads" > "$work/serve-$T.log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2> /dev/null || true' EXIT  # the server goes with the script, whatever ends it
  port=""
  for _ in $(seq 600); do  # the line comes once the socket listens: requests queue from then on
    port=$(grep -oE 'listening on http://127\.0\.0\.1:[0-9]+' "$work/serve-$T.log" | grep -oE '[0-9]+$' || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    echo "roformer serve did not listen within 60 s:" >&2
    tail -n 20 "$work/serve-$T.log" >&2
    exit 1
  fi
  curl -sf -H 'Content-Type: application/json' -d '{"inputs": "In the beginning"}' "http://127.0.0.1:$port/embed" \
    > /dev/null  # a short request first: the timed one is not the server's first
  start=$(date +%s.%N)
  curl -sf -H 'Content-Type: application/json' --data-binary "@$work/embed-$T.json" \
    "http://127.0.0.1:$port/embed" -o "$work/serve-$T.out"
  end=$(date +%s.%N)
  kib=$(awk '/VmHWM/ { print $2 }' "/proc/$pid/status")
  kill "$pid" && wait "$pid" || true
  python3 - "$work/embed-$T.out" "$work/serve-$T.out" <<'PY'  # the same tokens: embed's vector, normalised as /embed's
import json, math, sys
a, b = json.loads(open(sys.argv[1]).readline())["embedding"], json.load(open(sys.argv[2]))
norm = math.sqrt(sum(x * x for x in a))
diff = max(abs(x / norm - y) for x, y in zip(a, b[0]))
assert len(b) == 1 and len(b[0]) == len(a) and diff < 1e-5, f"serve's embedding differs from embed's by {diff}"
PY
  row "serve /embed" "$T" "$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')" "$kib"
done
