#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds a C consumer twice: with
# find_package(rope) and with pkg-config; both must run. Args: BUILD_DIR SOURCE_DIR [COMPONENT]
# (librope alone, which needs only the rope target built; default everything).
set -euo pipefail
build="$1"; source="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
component=()
[ -n "${3:-}" ] && component=(--component "$3")
cmake --install "$build" --prefix "$tmp/prefix" "${component[@]}" > /dev/null
cmake -S "$source/tests/package" -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/prefix" > /dev/null
cmake --build "$tmp/cmake" > /dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" "$tmp/cmake/consumer"
pc_dir="$(dirname "$(find "$tmp/prefix" -name rope.pc | head -n 1)")"
export PKG_CONFIG_PATH="$pc_dir"
# shellcheck disable=SC2046
cc "$source/tests/package/consumer.c" -o "$tmp/consumer_pc" $(pkg-config --cflags --libs rope) -lm
LD_LIBRARY_PATH="$(pkg-config --variable=libdir rope):${LD_LIBRARY_PATH:-}" "$tmp/consumer_pc"
