#!/usr/bin/env bash
# bench/long_commands.sh, the long-document table's script, at short lengths: it makes its model and
# classifier, runs embed, classify, fill-mask and a server's /embed on documents of exactly those
# tokens, and checks that the server, sent the tokens' ids, answers embed's vector; a row per command
# and length. Skipped (77) without data/kjv.txt (scripts/corpus.sh data/kjv.txt).
# Usage: long_commands.sh SOURCE_DIR ROFORMER WORK_DIR
set -euo pipefail
source_dir="$1" roformer="$2" work="$3"
[ -f "$source_dir/data/kjv.txt" ] || { echo "no data/kjv.txt (scripts/corpus.sh data/kjv.txt): skipped"; exit 77; }
rm -rf "$work"
cd "$source_dir"
table=$(WORK="$work" THREADS=1 bash bench/long_commands.sh "$roformer" 64 200)
echo "$table"
row='^\| (embed|classify|fill-mask|serve /embed) \| (64|200) \| [0-9.]+ \| [0-9]+ \| [0-9]+ \|$'
rows=$(grep -cE "$row" <<< "$table")
[ "$rows" -eq 8 ] || { echo "expected 8 rows (4 commands x 2 lengths), got $rows" >&2; exit 1; }
