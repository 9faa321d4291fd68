#!/usr/bin/env bash
# Usage: embed_test.sh BUILD_DIR EXAMPLE.cpp FTCC_RUN
# Installs the build into a scratch folder as a user without root would (DESTDIR; ftcc.pc is
# relocatable, so pkg-config finds the prefix from where the .pc file lies), compiles EXAMPLE.cpp
# with the MPI's wrapper and `pkg-config --cflags --libs ftcc` alone, and runs it on 3 ranks.
# Then the same for every code block of docs/*.md that claims to be a whole program: a ```cpp
# block whose first line is `// docs example (run: N ranks, expect: TEXT)` is built the same
# way, run under tools/ftcc-run on N ranks (the program injects its own faults), and must exit 0
# and print TEXT.
set -euo pipefail
build=$1 src=$2 run=$3
tmp=$(mktemp -d /tmp/ftcc-embed.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
DESTDIR=$tmp meson install -C "$build" --no-rebuild --quiet >/dev/null
pc=$(find "$tmp" -name ftcc.pc | head -n 1)
[ -n "$pc" ] || { echo "embed_test: ftcc.pc was not installed" >&2; exit 1; }
grep -q '^prefix=${pcfiledir}' "$pc" || { echo "embed_test: ftcc.pc is not relocatable: $(grep '^prefix=' "$pc")" >&2; exit 1; }
! grep -q -- '-std=' "$pc" || { echo "embed_test: ftcc.pc forces a C++ standard: $(grep -- '-std=' "$pc")" >&2; exit 1; }
export PKG_CONFIG_PATH=$(dirname "$pc")
flags=$(pkg-config --cflags --libs ftcc)
# Headers are included as <ftcc/LAYER/NAME.hpp>: the include path is the folder above ftcc/, never
# ftcc/ itself (that would put generic names such as <comm/...> on the user's path).
! pkg-config --cflags ftcc | grep -q 'include/ftcc' || { echo "embed_test: ftcc.pc puts include/ftcc on the path: $(pkg-config --cflags ftcc)" >&2; exit 1; }
inc=$(dirname "$(find "$tmp" -path '*/include/ftcc/ftcc.hpp' | head -n 1)")
[ -d "$inc" ] || { echo "embed_test: ftcc/ftcc.hpp was not installed" >&2; exit 1; }
bad=$(grep -rhoE '#include "[a-z_]+/[a-z_]+\.hpp"' "$inc" | grep -v '"ftcc/' || true)
[ -z "$bad" ] || { echo "embed_test: installed headers include names outside ftcc/: $bad" >&2; exit 1; }
libdir=$(pkg-config --variable=libdir ftcc)
# The user's own -std (newer than ftcc's minimum) must stay in force.
echo "embed_test: mpicxx -std=c++23 example.cpp $flags"
mpicxx -std=c++23 -O1 "$src" $flags -Wl,-rpath,"$libdir" -o "$tmp/embed_example"
"$run" -n 3 "$tmp/embed_example" | tee "$tmp/out"
grep -q 'embed_example: ok' "$tmp/out"

docs=$(cd "$(dirname "$0")/../../docs" && pwd)
python3 - "$docs" "$tmp/docs" <<'PY'
import os, re, sys
docs, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
n = 0
for name in sorted(os.listdir(docs)):
    if not name.endswith(".md"):
        continue
    text = open(os.path.join(docs, name)).read()
    for block in re.findall(r"```cpp\n(.*?)```", text, re.S):
        m = re.match(r"// docs example \(run: (\d+) ranks, expect: (.*)\)\n", block)
        if not m:
            continue
        n += 1
        base = os.path.join(out, f"{name[:-3]}-{n}")
        open(base + ".cpp", "w").write(block)
        open(base + ".run", "w").write(f"{m.group(1)}\n{m.group(2)}\n")
if n == 0:
    sys.exit("embed_test: no runnable example found in docs/*.md (a block starting with '// docs example (run: ...)')")
PY
for src in "$tmp"/docs/*.cpp; do
  base=${src%.cpp}
  ranks=$(sed -n 1p "$base.run") expect=$(sed -n 2p "$base.run")
  echo "embed_test: docs example $(basename "$base"): mpicxx -std=c++20 ... pkg-config, $ranks ranks"
  mpicxx -std=c++20 -O1 "$src" $flags -Wl,-rpath,"$libdir" -o "$base" || { echo "embed_test: $(basename "$src") does not build" >&2; exit 1; }
  rc=0
  "$run" -n "$ranks" "$base" >"$base.out" 2>&1 || rc=$?
  cat "$base.out"
  [ "$rc" -eq 0 ] || { echo "embed_test: $(basename "$base") exited $rc" >&2; exit 1; }
  grep -qF "$expect" "$base.out" || { echo "embed_test: $(basename "$base") did not print '$expect'" >&2; exit 1; }
done
