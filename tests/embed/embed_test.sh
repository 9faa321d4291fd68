#!/usr/bin/env bash
# Usage: embed_test.sh BUILD_DIR EXAMPLE.cpp FTCC_RUN
# Installs the build into a scratch DESTDIR, compiles EXAMPLE.cpp with only
# `pkg-config --cflags --libs ftcc` (prefix redirected to the scratch tree) and runs it on 2 ranks.
set -euo pipefail
build=$1 src=$2 run=$3
tmp=$(mktemp -d /tmp/ftcc-embed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
DESTDIR=$tmp meson install -C "$build" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name ftcc.pc | head -n 1)
[ -n "$pc" ] || { echo "embed_test: ftcc.pc was not installed" >&2; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --define-variable=prefix="$tmp$prefix" --cflags --libs ftcc)
libdir=$(pkg-config --define-variable=prefix="$tmp$prefix" --variable=libdir ftcc)
echo "embed_test: c++ example.cpp $flags"
c++ -O1 "$src" $flags -Wl,-rpath,"$libdir" -o "$tmp/embed_example"
"$run" -n 2 "$tmp/embed_example" | tee "$tmp/out"
grep -q 'embed_example: ok' "$tmp/out"
