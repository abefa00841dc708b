#!/usr/bin/env bash
# `roformer spm-train`, `spm-encode`, `spm-decode` as a user runs them, on a generated English/Spanish
# parallel TSV (source<TAB>target, no header), its JSONL twin and a plain-text file:
#  - a joint model trained on both TSV columns round-trips every line through ids and through pieces;
#  - the same text as TSV, as JSONL ({"source", "target"}) and as plain lines gives the same .model;
#  - retraining gives a byte-identical .model (unigram and BPE);
#  - bad input (a missing file, a short TSV row, a JSONL row without "target", an id out of range, a
#    vocabulary larger than the text gives, a model that is not one) ends with one error line naming
#    the file (and line), and status 1.
# Usage: spm.sh ROFORMER_BINARY WORK_DIR
set -euo pipefail
roformer="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work"

python3 - "$work" <<'PY'
import json, random, sys
work = sys.argv[1]
rng = random.Random(3)
EN = "in the beginning god created heaven and earth the lord said unto moses go into the land light water".split()
ES = "en el principio creó dios los cielos y la tierra el señor dijo a moisés ve está dónde aquí luz agua".split()
rows = []
for i in range(300):
    n = rng.randint(3, 12)
    en = " ".join(rng.choice(EN) for _ in range(n)).capitalize() + "."
    es = " ".join(rng.choice(ES) for _ in range(n)).capitalize() + "."
    rows.append((en, "¿" + es[:-1] + "?" if i % 3 == 0 else es))
rows.append(("Where is he?", "¿Dónde está? ¡Aquí, Señor!"))
with open(f"{work}/pairs.tsv", "w", encoding="utf-8") as f:
    for en, es in rows: f.write(f"{en}\t{es}\n")
with open(f"{work}/pairs.jsonl", "w", encoding="utf-8") as f:
    for en, es in rows: f.write(json.dumps({"source": en, "target": es, "id": len(en)}, ensure_ascii=False) + "\n")
with open(f"{work}/lines.txt", "w", encoding="utf-8") as f:
    for en, es in rows: f.write(f"{en}\n{es}\n")
with open(f"{work}/both.txt", "w", encoding="utf-8") as f:  # what a round trip must give back
    for en, es in rows: f.write(f"{en}\n{es}\n")
PY

fail() { echo "FAIL: $*" >&2; exit 1; }

for type in unigram bpe; do
  "$roformer" spm-train --input "$work/pairs.tsv" --model-prefix "$work/$type/tsv" --vocab-size 120 --model-type "$type"
  [ -s "$work/$type/tsv.model" ] && [ -s "$work/$type/tsv.vocab" ] || fail "$type: no .model/.vocab"
  [ "$(wc -l < "$work/$type/tsv.vocab")" = 120 ] || fail "$type: .vocab has $(wc -l < "$work/$type/tsv.vocab") lines"
  head -4 "$work/$type/tsv.vocab" | cut -f1 | tr '\n' ' ' | grep -qx '<pad> <unk> <s> </s> ' || fail "$type: special ids"
  # Round trips: ids and pieces.
  "$roformer" spm-encode --model "$work/$type/tsv.model" --input "$work/both.txt" > "$work/$type/ids.txt"
  grep -qE '^[0-9]+( [0-9]+)*$' "$work/$type/ids.txt" || fail "$type: ids output"
  "$roformer" spm-decode --model "$work/$type/tsv.model" < "$work/$type/ids.txt" > "$work/$type/decoded.txt"
  cmp "$work/both.txt" "$work/$type/decoded.txt" || fail "$type: ids round trip"
  "$roformer" spm-encode --model "$work/$type/tsv.model" --pieces < "$work/both.txt" \
    | "$roformer" spm-decode --model "$work/$type/tsv.model" --pieces > "$work/$type/decoded_pieces.txt"
  cmp "$work/both.txt" "$work/$type/decoded_pieces.txt" || fail "$type: pieces round trip"
  [ "$(echo '¿Dónde está?' | "$roformer" spm-encode --model "$work/$type/tsv.model" \
       | "$roformer" spm-decode --model "$work/$type/tsv.model")" = '¿Dónde está?' ] || fail "$type: ¿Dónde está?"
  # The same sentences in three formats, and a second run: one .model, byte for byte.
  "$roformer" spm-train --input "$work/pairs.jsonl" --model-prefix "$work/$type/jsonl" --vocab-size 120 --model-type "$type"
  "$roformer" spm-train --input "$work/lines.txt" --model-prefix "$work/$type/text" --vocab-size 120 --model-type "$type"
  "$roformer" spm-train --input "$work/pairs.tsv" --columns 1,2 --model-prefix "$work/$type/again" --vocab-size 120 --model-type "$type"
  for other in jsonl text again; do
    cmp "$work/$type/tsv.model" "$work/$type/$other.model" || fail "$type: $other.model differs from tsv.model"
  done
done

# One column only: the English side has no "ñ".
"$roformer" spm-train --input "$work/pairs.tsv" --columns 1 --model-prefix "$work/en" --vocab-size 60
! cut -f1 "$work/en.vocab" | grep -q 'ñ' || fail "--columns 1 took the Spanish side"

expect_error() {  # expect_error PATTERN COMMAND...: status 1 and one stderr line matching PATTERN
  local pattern="$1"; shift
  local status=0
  "$@" > /dev/null 2> "$work/err.txt" || status=$?
  [ "$status" = 1 ] || fail "status $status (want 1): $*"
  [ "$(wc -l < "$work/err.txt")" = 1 ] || { cat "$work/err.txt" >&2; fail "not one error line: $*"; }
  grep -q -- "$pattern" "$work/err.txt" || { cat "$work/err.txt" >&2; fail "error does not match '$pattern': $*"; }
}
printf 'one\ttwo\nthree\n' > "$work/short.tsv"
echo '{"source": "a"}' > "$work/half.jsonl"
model="$work/unigram/tsv.model"
expect_error "$work/missing.txt: cannot open" "$roformer" spm-train --input "$work/missing.txt" --model-prefix "$work/x"
expect_error "$work/short.tsv:2: has 1 fields; --columns needs field 2" \
  "$roformer" spm-train --input "$work/short.tsv" --columns 1,2 --model-prefix "$work/x"
expect_error "$work/half.jsonl:1: no \"target\" key" "$roformer" spm-train --input "$work/half.jsonl" --model-prefix "$work/x"
expect_error "$work/pairs.tsv: vocab_size 50000 is more pieces than this text gives (at most [0-9]*)" \
  "$roformer" spm-train --input "$work/pairs.tsv" --model-prefix "$work/x" --vocab-size 50000
expect_error "stdin:2: $model: id 120 is outside the vocabulary" \
  bash -c "printf '5 6\n7 120\n' | '$roformer' spm-decode --model '$model'"
expect_error "stdin:1: 'x' is not an id" bash -c "echo '5 x' | '$roformer' spm-decode --model '$model'"
expect_error "$work/both.txt: not a SentencePiece model" "$roformer" spm-encode --model "$work/both.txt" --input "$work/both.txt"
[ ! -e "$work/x.model" ] || fail "a failed run wrote $work/x.model"
echo "spm: OK"
