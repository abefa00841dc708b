#!/usr/bin/env bash
# The main job's corpus: the King James Bible (public domain), 4.3 MB of plain text, from Debian's
# bible-kjv package (its `bible` program prints the text stored in bible-kjv-text). Writes
# data/kjv.txt (or the path given) atomically; the corpus is never committed.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data/kjv.txt}"
if [ -s "$out" ]; then echo "corpus: $out already present"; exit 0; fi
command -v bible >/dev/null || scripts/apt-install.sh bible-kjv bible-kjv-text
mkdir -p "$(dirname "$out")"
bible "gen1:1-rev22:21" > "$out.tmp"
mv "$out.tmp" "$out"
echo "corpus: $out ($(wc -c < "$out") bytes)"
