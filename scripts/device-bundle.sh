#!/usr/bin/env bash
# Packs scripts/amx-check.sh with what it runs, ready to carry to another machine that has no build,
# compiler or Debian packages: a lent device machine, whose host CPU may have AMX where this one has
# none. The archive holds tests/ops_tests and tools/roformer from BUILD (default build/release), every
# shared library they load (glibc and its loader included, so the host's own glibc version does not
# matter; each binary runs through a wrapper that starts the bundled loader), and the check scripts.
# It stays under the device tool's 64 MiB carry limit. There:
#
#   tar -xzf build/device-bundle.tar.gz -C build && build/device-bundle/scripts/amx-check.sh "$OUT/amx"
#
# (BUILD defaults to the bundle's own build/ there; without AMX the check prints the CPU and exits 2.)
#
#   scripts/device-bundle.sh [ARCHIVE]      # ARCHIVE defaults to build/device-bundle.tar.gz
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [ARCHIVE] (not an option: '$1')" >&2; exit 2 ;; esac
archive="$(realpath -m "${1:-build/device-bundle.tar.gz}")"
build="${BUILD:-build/release}"
if [ ! -x "$build/tests/ops_tests" ] || [ ! -x "$build/tools/roformer" ]; then
  cmake --preset release && cmake --build --preset release --target ops_tests roformer
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/device-bundle"
mkdir -p "$root/bin" "$root/lib" "$root/build/tests" "$root/build/tools" "$root/scripts"
binaries=("$build/tests/ops_tests" "$build/tools/roformer")
cp "${binaries[@]}" "$root/bin/"
# Every library the dynamic loader resolves for them, and the loader itself.
ldd "${binaries[@]}" | awk '/=> \// { print $3 } /^\t\/.*ld-linux/ { print $1 }' | sort -u |
  while read -r lib; do cp -L "$lib" "$root/lib/"; done
loader="$(basename "$(ldd "$build/tools/roformer" | awk '/ld-linux/ { print $1 }')")"
[ -f "$root/lib/$loader" ] || { echo "$(basename "$0"): the dynamic loader was not found" >&2; exit 1; }
# The paths amx-check.sh runs (BUILD/tests/ops_tests, BUILD/tools/roformer): the binaries through the
# bundled loader, the libraries on LD_LIBRARY_PATH (which roformer's re-execution with its default
# environment keeps: tools/roformer/main.cc).
for dest in build/tests/ops_tests build/tools/roformer; do
  cat > "$root/$dest" <<EOF
#!/bin/sh
root="\$(dirname "\$(readlink -f "\$0")")/../.."
LD_LIBRARY_PATH="\$root/lib" exec "\$root/lib/$loader" "\$root/bin/$(basename "$dest")" "\$@"
EOF
  chmod +x "$root/$dest"
done
cp scripts/amx-check.sh scripts/check-steps.sh "$root/scripts/"
# The bundle's own build/ by default.
sed -i 's|^build="${BUILD:-build/release}"|build="${BUILD:-build}"|' "$root/scripts/amx-check.sh"
grep -q '^build="${BUILD:-build}"' "$root/scripts/amx-check.sh" || { echo "amx-check.sh's BUILD line moved" >&2; exit 1; }
# A smoke test of the wrappers before packing: the bundled loader runs both.
"$root/build/tools/roformer" --version | grep -q '^roformer' || { echo "the bundled roformer does not run" >&2; exit 1; }
"$root/build/tests/ops_tests" --gtest_list_tests --gtest_filter='FlashAttentionBf16Amx.*' > /dev/null

mkdir -p "$(dirname "$archive")"
tar -C "$stage" -czf "$archive.tmp" device-bundle
mv "$archive.tmp" "$archive"
echo "$archive: $(du -m "$archive" | cut -f1) MiB ($(du -sm "$root" | cut -f1) MiB unpacked)"
