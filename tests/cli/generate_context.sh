#!/usr/bin/env bash
# `roformer generate` (and train's final sample) at the end of the model's context: a prompt that
# fills max_position_embeddings is refused with one error line naming --prompt and the limit (nothing
# on stdout); a prompt that leaves fewer positions than --tokens generates what fits and says so on
# stderr; a request that fits prints no note; --kv-cache bf16 runs, and a cache type it does not know is one
# error line; `roformer bench generate` runs on it and refuses a context it cannot hold. A 2-step
# character-level model with a 64-token context.
# Usage: generate_context.sh ROFORMER_BINARY WORK_DIR
set -euo pipefail
roformer="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=2
awk 'BEGIN { for (i = 0; i < 400; i++) print "the river and the mountain " i }' > "$work/corpus.txt"
long=$(printf 'the river %.0s' {1..8})  # 80 characters: 80 tokens of the character-level model
"$roformer" train --data "$work/corpus.txt" --layers 1 --hidden 16 --heads 2 --ff 32 --seq 16 --batch 2 \
  --max-positions 64 --steps 2 --sample-tokens 20 --sample-prompt "$long" --no-progress --out "$work/m" \
  > "$work/train.out" 2> "$work/train.err"
grep -q "^no sample: --sample-prompt is 80 tokens, but the context (--max-positions) is 64$" "$work/train.err"
model="$work/m/step-000002"

echo "== a prompt longer than the context: refused"
if "$roformer" generate --model "$model" --prompt "$long" --tokens 5 > "$work/long.out" 2> "$work/long.err"; then
  echo "generate accepted an 80-token prompt with a 64-token context" >&2; exit 1
fi
cat "$work/long.err"
[ "$(wc -l < "$work/long.err")" -eq 1 ] && [ ! -s "$work/long.out" ]
grep -q -- "--prompt is 80 tokens, but the model's context is 64 tokens (max_position_embeddings in $model/config.json).* at most 63 tokens" "$work/long.err"

echo "== a prompt that fills the context exactly: refused (no room for one new token)"
if "$roformer" generate --model "$model" --prompt "${long:0:64}" --tokens 1 2> "$work/full.err" > /dev/null; then
  echo "generate accepted a 64-token prompt with a 64-token context" >&2; exit 1
fi
grep -q -- "--prompt is 64 tokens" "$work/full.err"

echo "== fewer positions left than --tokens: what fits, with a note"
"$roformer" generate --model "$model" --prompt "${long:0:50}" --tokens 20 --seed 1 > "$work/near.out" 2> "$work/near.err"
cat "$work/near.err"
grep -q "^roformer generate: generating 14 tokens, not --tokens 20: the prompt's 50 tokens and the new ones must fit the model's context of 64 tokens (max_position_embeddings)$" "$work/near.err"
[ "$(head -c 50 "$work/near.out")" = "${long:0:50}" ]
# The same 14 tokens as asking for 14: nothing else changed.
"$roformer" generate --model "$model" --prompt "${long:0:50}" --tokens 14 --seed 1 > "$work/fits.out" 2> "$work/fits.err"
cmp "$work/near.out" "$work/fits.out"
[ ! -s "$work/fits.err" ]

echo "== --kv-cache bf16 decodes to the end of the context; an unknown cache type is one error line"
"$roformer" generate --model "$model" --prompt "${long:0:50}" --tokens 14 --seed 1 --kv-cache bf16 > "$work/bf16.out" 2> "$work/bf16.err"
[ ! -s "$work/bf16.err" ] && [ "$(head -c 50 "$work/bf16.out")" = "${long:0:50}" ] && [ "$(wc -c < "$work/bf16.out")" -ge 64 ]
if "$roformer" generate --model "$model" --prompt the --kv-cache fp16 > /dev/null 2> "$work/kv.err"; then
  echo "generate accepted --kv-cache fp16" >&2; exit 1
fi
grep -q -- "--kv-cache: unknown key/value cache type 'fp16' (fp32, bf16)" "$work/kv.err"

echo "== bench generate: the server's decoding steps on this model; a context it cannot hold is one error line"
"$roformer" bench generate --model "$model" --rows 3 --prompt 10 --tokens 5 --threads 2 --json > "$work/bench.json"
python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["runs"][0]; assert r["rows"] == 3 and r["tokens"] == 5 and r["tokens_per_s"] > 0 and r["step_ms_mean"] > 0 and len(r["rounds"]) == 3, r' "$work/bench.json"
if "$roformer" bench generate --model "$model" --prompt 60 --tokens 5 > /dev/null 2> "$work/bench.err"; then
  echo "bench generate accepted 60 + 5 tokens with a 64-token context" >&2; exit 1
fi
[ "$(wc -l < "$work/bench.err")" -eq 1 ]
grep -q -- "--prompt 60 + --tokens 5 exceed max_position_embeddings 64 of $model" "$work/bench.err"
echo "ok"
