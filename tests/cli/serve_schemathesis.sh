#!/usr/bin/env bash
# schemathesis (PyPI) against `roformer serve`'s /openapi.json on the roformer-hf case1 fixture and on
# a small translate-train encoder-decoder: every route (and its /models/{model}/ form) with its examples, its schema's boundary cases and generated bodies; no 5xx, every status
# documented, every answer of the documented content type and schema.
# Usage: serve_schemathesis.sh ROFORMER_BINARY FIXTURES WORK_DIR
# schemathesis's `st`: $ROFORMER_SCHEMATHESIS (a path to st) or `st` on PATH; none: exit 77 (skip),
# and a ROFORMER_SCHEMATHESIS that does not run fails (CI sets it: scripts/st-env.sh makes the venv).
#   ROFORMER_SCHEMATHESIS="$(scripts/st-env.sh)" ctest --test-dir build/release -R serve_schemathesis
set -euo pipefail
roformer="$1" fixtures="$2" work="$3"
st="${ROFORMER_SCHEMATHESIS:-$(command -v st || true)}"
if [ -z "$st" ] || ! "$st" --version 2> /dev/null | grep -q '^st, version'; then  # schemathesis's, not another st
  if [ -n "${ROFORMER_SCHEMATHESIS:-}" ]; then
    echo "ROFORMER_SCHEMATHESIS=$ROFORMER_SCHEMATHESIS is not schemathesis's st" >&2
    exit 1
  fi
  echo "schemathesis not found (set ROFORMER_SCHEMATHESIS): skipped"
  exit 77
fi
case "$st" in */*) st="$(cd "$(dirname "$st")" && pwd)/$(basename "$st")" ;; esac  # the run below is in $work
rm -rf "$work" && mkdir -p "$work/model"
cp "$fixtures"/case1_mlm_basic/{config.json,model.safetensors} "$work/model/"
cp "$fixtures"/tokenizer/{vocab.txt,tokenizer_config.json,special_tokens_map.json} "$work/model/"
# A small translate-train encoder-decoder too: /translate's parameters get the same treatment.
python3 -c "
import sys
en, es = 'one two three four five'.split(), 'uno dos tres cuatro cinco'.split()
for i in range(200):
    idx = [(i * 7 + k * 3) % 5 for k in range(2 + i % 4)]
    print(' '.join(en[j] for j in idx) + '\t' + ' '.join(es[j] for j in idx))" > "$work/pairs.tsv"
"$roformer" translate-train --train "$work/pairs.tsv" --validation "$work/pairs.tsv" --out "$work/mt" --vocab-size 30 \
  --layers 1 --hidden 32 --heads 2 --ff 64 --max-positions 32 --steps 10 --warmup 2 --eval-every 10 --bleu-sentences 2 \
  --no-progress 2> "$work/mt.log"

check() {  # MODEL_DIR [ST_ARGS...]: schemathesis against a server of it, which then stops cleanly
  "$roformer" serve --model "$1" --port 0 --no-access-log 2> "$work/server.log" &
  server=$!
  trap 'kill $server 2> /dev/null || true' EXIT
  port=""
  for _ in $(seq 600); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/server.log" | grep -o '[0-9]*$' || true)
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$work/server.log"; exit 1; }
  local model="$1"
  shift
  (cd "$work" && "$st" run "http://127.0.0.1:$port/openapi.json" --max-examples 50 --seed 1 "$@" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance)
  kill -TERM $server
  wait $server
  echo "schemathesis on $model: ok, the server stopped cleanly"
}
check "$work/model"
# The /models/{model}/ROUTE paths are the same routes through the same dispatch: checked on the encoder only.
check "$work/mt/step-000010" --exclude-path-regex '^/models/'
