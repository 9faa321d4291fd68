#!/usr/bin/env bash
# Usage: embed_test.sh BUILD_DIR EXAMPLE.cpp FTCC_RUN
# Installs the build into a scratch folder as a user without root would (DESTDIR; ftcc.pc is
# relocatable, so pkg-config finds the prefix from where the .pc file lies), compiles EXAMPLE.cpp
# with the MPI's wrapper and `pkg-config --cflags --libs ftcc` alone, and runs it on 3 ranks.
# It also checks that CUDA stays out of libftcc (NEEDED, ftcc.pc, libftcc.a), that libftcc_cuda.so
# is installed beside libftcc when the build has CUDA, and that a CPU-only program built against
# libftcc.so or libftcc.a finds it there, or says clearly why not (tests/embed/embed_cuda_probe.cpp).
# Then the same for every code block of docs/*.md that claims to be a whole program: a ```cpp
# block whose first line is `// docs example (run: N ranks, expect: TEXT)` is built the same
# way, run under tools/ftcc-run on N ranks (the program injects its own faults), and must exit 0
# and print TEXT.
set -euo pipefail
# (Under pipefail `A | grep -q X` fails when grep's early exit makes A die of SIGPIPE, and `! A |
# grep -q X` then passes: output to be searched is captured first, `grep -q X <<<"$(A)"`.)
build=$1 src=$2 run=$3
example=$src  # (src is reused by the docs examples' loop)
# meson test puts the build folder's libraries on LD_LIBRARY_PATH; a user's program must run on the
# installed ones alone, so those entries go.
build_abs=$(cd "$build" && pwd -P)
keep=
IFS=: read -ra entries <<<"${LD_LIBRARY_PATH:-}"
for e in "${entries[@]}"; do
  [ -n "$e" ] || continue
  case $(cd "$e" 2>/dev/null && pwd -P) in "$build_abs" | "$build_abs"/*) continue ;; esac
  keep=${keep:+$keep:}$e
done
if [ -n "$keep" ]; then export LD_LIBRARY_PATH=$keep; else unset LD_LIBRARY_PATH; fi
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
! grep -q 'include/ftcc' <<<"$(pkg-config --cflags ftcc)" || { echo "embed_test: ftcc.pc puts include/ftcc on the path: $(pkg-config --cflags ftcc)" >&2; exit 1; }
inc=$(dirname "$(find "$tmp" -path '*/include/ftcc/ftcc.hpp' | head -n 1)")
[ -d "$inc" ] || { echo "embed_test: ftcc/ftcc.hpp was not installed" >&2; exit 1; }
bad=$(grep -rhoE '#include "[a-z_]+/[a-z_]+\.hpp"' "$inc" | grep -v '"ftcc/' || true)
[ -z "$bad" ] || { echo "embed_test: installed headers include names outside ftcc/: $bad" >&2; exit 1; }
libdir=$(pkg-config --variable=libdir ftcc)
fail() { echo "embed_test: $*" >&2; exit 1; }

# CUDA lives in libftcc_cuda.so alone: libftcc.so needs no CUDA library, ftcc.pc names none (with or
# without --static), and libftcc.a calls no CUDA function, so a CPU-only program links none.
so=$libdir/libftcc.so
[ -f "$so" ] && [ -f "$libdir/libftcc.a" ] || fail "libftcc.so and libftcc.a are not both in $libdir"
cuda_needed=$(readelf -d "$so" | grep NEEDED | grep -E 'libcuda|libcublas|libnv' || true)
[ -z "$cuda_needed" ] || fail "libftcc.so needs CUDA libraries: $cuda_needed"
! grep -qi cuda "$pc" || fail "ftcc.pc mentions CUDA: $(grep -i cuda "$pc")"
! grep -qi cuda <<<"$(pkg-config --libs --static ftcc)" || fail "pkg-config --libs --static ftcc names CUDA: $(pkg-config --libs --static ftcc)"
cuda_calls=$(nm -u "$libdir/libftcc.a" 2>/dev/null | grep -E ' (cuda[A-Z]|cublas|__cuda)' | sort -u || true)
[ -z "$cuda_calls" ] || fail "libftcc.a calls CUDA itself: $cuda_calls"
have_cuda=0
grep -q '^#define FTCC_HAVE_CUDA 1' "$build/ftcc_config.hpp" && have_cuda=1
if [ "$have_cuda" = 1 ]; then
  [ -f "$libdir/libftcc_cuda.so" ] || fail "the build has CUDA but libftcc_cuda.so is not installed next to libftcc.so ($libdir)"
  ! grep -q 'NEEDED.*libftcc\.so' <<<"$(readelf -d "$libdir/libftcc_cuda.so")" ||
    fail "libftcc_cuda.so needs libftcc.so (a program with libftcc.a linked in would get a second libftcc)"
fi
# The installed ftcc-train maps no CUDA library either: --device cuda loads libftcc_cuda.so when
# asked (a CPU run would otherwise carry cudart and cuBLAS, about 200 MB per rank).
train=$(find "$tmp" -path '*/bin/ftcc-train' | head -n 1)
[ -x "$train" ] || fail "ftcc-train was not installed"
train_cuda=$(readelf -d "$train" | grep NEEDED | grep -E 'libcuda|libcublas|libnv|libftcc_cuda' || true)
[ -z "$train_cuda" ] || fail "ftcc-train needs CUDA libraries: $train_cuda"
if [ "$have_cuda" = 1 ]; then
  # ... and its run path leads to libftcc_cuda.so ($ORIGIN: the installed tree may be moved).
  runpath=$(readelf -d "$train" | sed -n 's/.*R[UN]*PATH.*\[\(.*\)\]/\1/p' | head -n 1)
  found=0
  IFS=: read -ra dirs <<< "$runpath"
  for dir in "${dirs[@]}"; do
    dir=${dir//\$ORIGIN/$(dirname "$train")}
    [ -f "$dir/libftcc_cuda.so" ] && found=1
  done
  [ "$found" = 1 ] || fail "the installed ftcc-train's run path ($runpath) does not lead to libftcc_cuda.so"
fi
echo "embed_test: no CUDA library in libftcc.so, ftcc.pc, libftcc.a or ftcc-train (build with CUDA: $have_cuda)"

# probe NAME [env...]: runs the CUDA probe, prints its lines; sets origin, devices, tensor.
probe() {
  local name=$1
  shift
  env "$@" "$tmp/$name" >"$tmp/$name.out" || fail "$name exited $?: $(cat "$tmp/$name.out")"
  sed "s/^/embed_test: $name: /" "$tmp/$name.out"
  origin=$(sed -n 's/^origin: //p' "$tmp/$name.out")
  devices=$(sed -n 's/^devices: //p' "$tmp/$name.out")
  tensor=$(sed -n 's/^cuda tensor: //p' "$tmp/$name.out")
}
# expect_found: the backend is the installed libftcc_cuda.so; without a device a CUDA tensor gives
# CUDA's own error, with one it works.
expect_found() {
  [ "$(realpath -m "$origin")" = "$(realpath "$libdir/libftcc_cuda.so")" ] ||
    fail "$1: expected the backend from $libdir/libftcc_cuda.so, got: $origin"
  if [ "$devices" = 0 ]; then
    case $tensor in "error: "*"CUDA call failed"*) ;; *) fail "$1: no device, yet the CUDA tensor gave: $tensor" ;; esac
    # The error's file:line names the file from the source root (tensor/cuda/...), not by the path
    # nvcc was given from the build folder (../tensor/cuda/...).
    case $tensor in "error: tensor/cuda/"*) ;; *) fail "$1: the CUDA error's location is not relative to the source root: $tensor" ;; esac
  else
    [ "$tensor" = "ok 1.5" ] || fail "$1: $devices device(s), yet the CUDA tensor gave: $tensor"
  fi
}
# expect_missing TEXT: no backend; the device count is 0 and the CUDA tensor error is the text that
# backend_origin() gives, which contains TEXT.
expect_missing() {
  [ "$devices" = 0 ] || fail "$2: no backend, yet $devices device(s)"
  case $origin in *"$1"*) ;; *) fail "$2: expected '$1' in: $origin" ;; esac
  [ "$tensor" = "error: $origin" ] || fail "$2: the CUDA tensor error is not the backend's reason: $tensor"
}
probe_src=$(dirname "$0")/embed_cuda_probe.cpp
mpicxx -std=c++20 -O1 "$probe_src" $flags -Wl,-rpath,"$libdir" -o "$tmp/cuda_probe_shared"
static_flags=$(pkg-config --cflags --libs --static ftcc | sed 's/-lftcc\b/-l:libftcc.a/')
mpicxx -std=c++20 -O1 "$probe_src" $static_flags -o "$tmp/cuda_probe_static"
! grep -qE 'NEEDED.*(libftcc|libcuda|libcublas)' <<<"$(readelf -d "$tmp/cuda_probe_static")" ||
  fail "the libftcc.a probe needs $(readelf -d "$tmp/cuda_probe_static" | grep NEEDED | grep -E 'libftcc|libcuda|libcublas')"
probe cuda_probe_shared
if [ "$have_cuda" = 1 ]; then
  expect_found cuda_probe_shared  # next to libftcc.so, found through dladdr
  # libftcc.a inside the program: nothing beside the executable, so by the dlopen search.
  probe cuda_probe_static
  case $origin in
    "CUDA tensors need libftcc_cuda.so"*) expect_missing "dlopen(\"libftcc_cuda.so\") said: " cuda_probe_static ;;
    *) echo "embed_test: note: this machine's search path has a libftcc_cuda.so ($origin); engine_cuda_backend_none checks the case without" ;;
  esac
  probe cuda_probe_static LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  expect_found "cuda_probe_static with LD_LIBRARY_PATH"
else
  expect_missing "built without" cuda_probe_shared
  probe cuda_probe_static
  expect_missing "built without" cuda_probe_static
fi

# The user's own -std (newer than ftcc's minimum) must stay in force.
echo "embed_test: mpicxx -std=c++23 example.cpp $flags"
mpicxx -std=c++23 -O1 "$src" $flags -Wl,-rpath,"$libdir" -o "$tmp/embed_example"
"$run" -n 3 "$tmp/embed_example" | tee "$tmp/out"
grep -q 'embed_example: ok' "$tmp/out"

# ftcc.pc's flags for a static link: each library once, nothing of the build tree (no rpath into it,
# no absolute path), no PMIx of its own (the MPI's is the one at run time); the same example built
# against libftcc.a with them runs as well.
static_libs=$(pkg-config --libs --static ftcc)
dups=$(tr ' ' '\n' <<<"$static_libs" | grep -v '^$' | sort | uniq -d)
[ -z "$dups" ] || fail "pkg-config --libs --static ftcc repeats $(echo $dups): $static_libs"
! grep -qE 'pmix|rpath|(^| )/' <<<"$static_libs" || fail "pkg-config --libs --static ftcc names PMIx, an rpath or a path: $static_libs"
echo "embed_test: mpicxx example.cpp $(pkg-config --cflags ftcc) ${static_libs/-lftcc/-l:libftcc.a}"
mpicxx -std=c++20 -O1 "$src" $(pkg-config --cflags ftcc) ${static_libs/-lftcc/-l:libftcc.a} -o "$tmp/embed_example_static"
! grep -q 'NEEDED.*libftcc' <<<"$(readelf -d "$tmp/embed_example_static")" || fail "the static example still needs libftcc.so"
"$run" -n 3 "$tmp/embed_example_static" | tee "$tmp/out_static"
grep -q 'embed_example: ok' "$tmp/out_static"

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

# The installation moved elsewhere, used without the checkout's environment: its bin/ftcc-run finds
# the MPI from share/ftcc/ftcc-mpi.env and keeps the exit-status contract (0, 2 for a bad flag, 4 for
# a job-level error), and its ftcc-train reads the data sets installed with it: a corrupted copy
# there is the file the error names.
prefix=$(cd "$libdir" && cd "$(pkg-config --variable=prefix ftcc)" && pwd)
moved=$tmp/moved
cp -a "$prefix" "$moved"
[ -x "$moved/bin/ftcc-run" ] && [ -f "$moved/share/ftcc/ftcc-mpi.env" ] || fail "bin/ftcc-run or share/ftcc/ftcc-mpi.env not installed"
installed_run() {
  env -u FTCC_MPI_PREFIX -u FTCC_MPI_KIND -u FTCC_DATA_DIR PATH=/usr/bin:/bin "$moved/bin/ftcc-run" -n 2 \
    "$moved/bin/ftcc-train" --dataset digits --steps 20 --quiet "$@" >"$tmp/moved.out" 2>&1
}
rc=0; installed_run || rc=$?
[ "$rc" = 0 ] && grep -q '^FTCC_SUMMARY ' "$tmp/moved.out" || fail "the moved installation's ftcc-run + ftcc-train exited $rc: $(tail -3 "$tmp/moved.out")"
rc=0; installed_run --lr -1 || rc=$?
[ "$rc" = 2 ] || fail "the moved ftcc-run with a bad flag exited $rc, not 2: $(tail -3 "$tmp/moved.out")"

# The moved installation with the checkout gone: the source tree (with its .venv and the build) is
# hidden under an empty tmpfs in a mount namespace of our own (root only, else skipped, said so), so
# neither the loader nor any search path can reach it. With the installed MPI (LIBDIR/ftcc/mpi,
# tools/install-mpi) and pkg-config alone, three programs are built (the embedding example against
# libftcc.so and against libftcc.a, and the data-parallel docs example with GradientReducer and
# sync_state) and run by the installed ftcc-run under real kills, exit statuses and output checked;
# so is the installed ftcc-train.
root=$(cd "$(dirname "$0")/../.." && pwd -P)
dp_example=$(grep -l 'GradientReducer' "$tmp"/docs/*.cpp | head -n 1)
[ -n "$dp_example" ] || fail "no docs example uses GradientReducer"
if [ "$(id -u)" = 0 ] && unshare -m --propagation private true 2>/dev/null; then
  mkdir "$tmp/work"
  cp "$example" "$tmp/work/embed_example.cpp"
  cp "$dp_example" "$tmp/work/dp_example.cpp"
  cp "${dp_example%.cpp}.run" "$tmp/work/dp_example.run"
  cat >"$tmp/hidden.sh" <<'HIDDEN'
set -euo pipefail
root=$1 build=$2 m=$3 work=$4
fail() { echo "embed_test: without the checkout: $*" >&2; exit 1; }
mount -t tmpfs none "$root"
case $build in "$root" | "$root"/*) ;; *) mount -t tmpfs none "$build" ;; esac
[ -z "$(ls -A "$root")" ] || fail "$root is still visible"
export PATH=/usr/bin:/bin
unset LD_LIBRARY_PATH FTCC_MPI_PREFIX FTCC_MPI_KIND FTCC_MPI_SOURCE FTCC_DATA_DIR
export PKG_CONFIG_PATH=$(dirname "$(find "$m" -name ftcc.pc | head -n 1)")
libdir=$(pkg-config --variable=libdir ftcc)
. "$m/share/ftcc/ftcc-mpi.env"
case $FTCC_MPI_PREFIX in "$m"/*) ;; *) fail "the installed MPI record names $FTCC_MPI_PREFIX, outside the installation" ;; esac
cxx=$FTCC_MPI_PREFIX/bin/mpicxx
cd "$work"
"$cxx" -std=c++20 -O1 embed_example.cpp $(pkg-config --cflags --libs ftcc) -Wl,-rpath,"$libdir" -o shared
"$cxx" -std=c++20 -O1 embed_example.cpp $(pkg-config --cflags ftcc) \
  $(pkg-config --libs --static ftcc | sed 's/-lftcc\b/-l:libftcc.a/') -o static
"$cxx" -std=c++20 -O1 dp_example.cpp $(pkg-config --cflags --libs ftcc) -Wl,-rpath,"$libdir" -o dp
for p in shared static dp "$m/bin/ftcc-train" "$libdir/libftcc.so"; do
  deps=$(ldd "$p")  # (captured: grep -q would end a pipe early, and pipefail would see ldd's SIGPIPE)
  ! grep -q 'not found' <<<"$deps" || fail "$p: $(grep 'not found' <<<"$deps" | head -n 1)"
  grep -q "libmpi.so.40 => $m/" <<<"$deps" || fail "$p takes libmpi from elsewhere: $(grep libmpi <<<"$deps")"
done
for p in shared static; do
  rc=0; "$m/bin/ftcc-run" -n 3 "./$p" >"$p.out" 2>&1 || rc=$?
  [ "$rc" = 0 ] && grep -q 'embed_example: ok' "$p.out" || fail "$p exited $rc: $(tail -3 "$p.out")"
done
ranks=$(sed -n 1p dp_example.run) expect=$(sed -n 2p dp_example.run)
rc=0; "$m/bin/ftcc-run" -n "$ranks" ./dp >dp.out 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -qF "$expect" dp.out || fail "the data-parallel docs example exited $rc: $(tail -3 dp.out)"
rc=0; "$m/bin/ftcc-run" -n 3 "$m/bin/ftcc-train" --dataset digits --steps 30 --quiet --inject kill:rank=1:step=10 \
  >train.out 2>&1 || rc=$?
[ "$rc" = 0 ] && grep -q '"world_size_final":2' train.out || fail "ftcc-train with a kill exited $rc: $(tail -3 train.out)"
rc=0; "$m/bin/ftcc-run" -n 2 "$m/bin/ftcc-train" --loss nope >bad.out 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "ftcc-train with a bad flag exited $rc, not 2: $(tail -3 bad.out)"
echo "embed_test: without the checkout ($root hidden): libftcc.so, libftcc.a and the data-parallel docs example built with the installed MPI's mpicxx and pkg-config, each run under a kill: exit 0; ftcc-train: 0 with a kill, 2 for a bad flag; libmpi from $m"
HIDDEN
  unshare -m --propagation private bash "$tmp/hidden.sh" "$root" "$build_abs" "$moved" "$tmp/work" || exit 1
else
  echo "embed_test: note: not root or no unshare: the run without the checkout (hidden by a tmpfs) was skipped"
fi

echo "not,numbers" | gzip >"$moved/share/ftcc/datasets/digits.csv.gz"
rc=0; installed_run || rc=$?
[ "$rc" = 4 ] && grep -qF "$moved/share/ftcc/datasets/digits.csv.gz" "$tmp/moved.out" ||
  fail "with its digits.csv.gz corrupted the moved installation exited $rc without naming it: $(tail -3 "$tmp/moved.out")"
echo "embed_test: a moved installation runs bin/ftcc-run (exit 0, 2, 4) on its own MPI record and data sets"
