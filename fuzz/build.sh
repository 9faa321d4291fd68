#!/usr/bin/env bash
# fuzz/build.sh [BUILD_DIR]: build the libFuzzer targets into BUILD_DIR/fuzz (default build-fuzz).
#
# BUILD_DIR is a clang build of ftcc with ASan+UBSan and -fsanitize=fuzzer-no-link (configured
# here when missing, CUDA off); only the objects the readers need are built (the data, nn, optim
# and tensor layers and five files of recovery/ and train/), then each fuzz/<target>_fuzz.cpp is
# linked with libFuzzer's main. Exits 77 (meson's SKIP) when clang++ is not installed.
#   FTCC_JOBS=N   ninja -jN (default 1)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(realpath -m "${1:-$root/build-fuzz}")
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang); fuzzers not built" >&2; exit 77; }
cd "$root"
# shellcheck disable=SC1091
source tools/env
if [ ! -f "$build/build.ninja" ]; then
  CXX=clang++ CC=clang meson setup "$build" -Dcuda=disabled -Dtests=false -Dbenchmarks=false \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Doptimization=1 \
    -Dcpp_args=-fsanitize=fuzzer-no-link >/dev/null
fi
fs=recovery/libftcc_recovery.a.p/fault_spec.cpp.o
tc=train/libftcc_train.a.p/train_config.cpp.o
cs=train/libftcc_train.a.p/checkpoint_store.cpp.o
sh=train/libftcc_train.a.p/state_hash.cpp.o
td=train/libftcc_train.a.p/training_data.cpp.o
ninja -C "$build" -j"${FTCC_JOBS:-1}" $fs $tc $cs $sh $td tensor/libftcc_tensor.a nn/libftcc_nn.a optim/libftcc_optim.a \
  data/libftcc_data.a >/dev/null
declare -A link=(
  [fault_spec]="$fs"
  [train_config]="$tc $fs"
  [table]="data/libftcc_data.a tensor/libftcc_tensor.a -lz"
  [safetensors]="nn/libftcc_nn.a tensor/libftcc_tensor.a"
  [checkpoint]="$cs $sh $tc $fs optim/libftcc_optim.a nn/libftcc_nn.a data/libftcc_data.a tensor/libftcc_tensor.a -lcrypto -lz"
  [dataset_spec]="$td data/libftcc_data.a tensor/libftcc_tensor.a -lz"
)
mkdir -p "$build/fuzz"
for t in "${!link[@]}"; do
  out=$build/fuzz/${t}_fuzz
  deps=()
  for d in ${link[$t]}; do [[ $d == -* ]] && deps+=("$d") || deps+=("$build/$d"); done
  if [ -x "$out" ] && [ -z "$(find "$root/fuzz/${t}_fuzz.cpp" "$root/fuzz/fuzz_util.hpp" "${deps[@]/#-*/}" -newer "$out" 2>/dev/null)" ]; then
    continue
  fi
  clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I "$build/include" -I "$build" -isystem /usr/include/eigen3 "$root/fuzz/${t}_fuzz.cpp" "${deps[@]}" -o "$out"
done
echo "fuzz: targets in $build/fuzz: ${!link[*]}"
