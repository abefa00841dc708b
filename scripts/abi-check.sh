#!/usr/bin/env bash
# librope's ABI policy, checked (docs/rope.md, "ABI"). Builds librope with debug information, then
# compares it with libabigail's abidiff against abi/librope.abi, the ABI of the last release
# (abi/BASELINE names its version and struct generation):
#   - a removed function, a changed parameter or return type, a struct member that moved, changed or
#     went, a changed enumerator: incompatible; allowed only with a new ROPE_VERSION_MAJOR (a new
#     SONAME) and a new baseline;
#   - additions (functions, enumerators, struct members at the end): need a larger ROPE_VERSION_MINOR,
#     and a struct that grew needs a larger ROPE_ABI_VERSION;
#   - no change: nothing to do.
# `scripts/abi-check.sh --update` writes the baseline from this build (at a release).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/apt-install.sh abigail-tools
build=build/abi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
{ cmake -S . -B "$build" -G Ninja -DROFORMER_LIBROPE_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DROFORMER_CUDA=OFF \
        -DROFORMER_BUILD_TESTS=OFF && cmake --build "$build" --target rope; } > "$log" 2>&1 || { cat "$log" >&2; exit 1; }
header=include/rope/rope.h
macro() { sed -n "s/^#define $1 \([0-9]*\).*/\1/p" "$header"; }
version="$(macro ROPE_VERSION_MAJOR).$(macro ROPE_VERSION_MINOR).$(macro ROPE_VERSION_PATCH)"
generation="$(macro ROPE_ABI_VERSION)"
lib="$build/src/rope/librope.so.$(macro ROPE_VERSION_MAJOR)"
dump() { abidw --exported-interfaces-only --no-show-locs --no-corpus-path --type-id-style hash "$lib" --out-file "$1"; }
if [ "${1:-}" = --update ]; then
  dump abi/librope.abi
  printf 'version %s\ngeneration %s\n' "$version" "$generation" > abi/BASELINE
  echo "abi-check: abi/librope.abi is now librope $version (struct generation $generation)"
  exit 0
fi
base_version="$(sed -n 's/^version //p' abi/BASELINE)"
base_generation="$(sed -n 's/^generation //p' abi/BASELINE)"
fail() { echo "abi-check: $*" >&2; exit 1; }
[ "${version%%.*}" = "${base_version%%.*}" ] ||
  fail "ROPE_VERSION_MAJOR is ${version%%.*} but the baseline is librope $base_version: write the new major's baseline (scripts/abi-check.sh --update)"
report="$log"
rc=0
# --harmless: abidiff hides added enumerators otherwise, and an addition must raise MINOR.
abidiff --harmless --exported-interfaces-only abi/librope.abi "$lib" > "$report" || rc=$?
(( rc & 3 )) && { cat "$report" >&2; fail "abidiff could not compare (status $rc)"; }
if (( rc == 0 )); then
  echo "abi-check: librope $version has the ABI of librope $base_version (struct generation $generation)"
  exit 0
fi
cat "$report"
# What breaks a caller built against the baseline header, in abidiff's words.
incompatible="offset changed|data members? deletions?:|type of '.*' changed|[1-9][0-9]* Removed|enumerators? (deletion|change)s?:|from value '|return type changed|parameter [0-9]+ of type .* changed from|size of .* changed"
if (( rc & 8 )) || grep -Eq "$incompatible" "$report"; then
  fail "an incompatible change to librope.so.${version%%.*} (above): keep the old layout and add instead, or raise ROPE_VERSION_MAJOR"
fi
[ "$(macro ROPE_VERSION_MINOR)" -gt "$(echo "$base_version" | cut -d. -f2)" ] ||
  fail "librope's ABI grew (above): raise ROPE_VERSION_MINOR past the baseline's $base_version"
if grep -q "type size changed" "$report" && [ "$generation" -le "$base_generation" ]; then
  fail "a public struct grew (above): raise ROPE_ABI_VERSION past $base_generation and read the new fields only from that generation (src/rope/abi.cc)"
fi
echo "abi-check: librope $version adds to the ABI of librope $base_version compatibly"
