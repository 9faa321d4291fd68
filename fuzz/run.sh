#!/usr/bin/env bash
# fuzz/run.sh [SECONDS | runs=N] [TARGET...]: replay every kept crash reproducer
# (fuzz/crashes/<target>-*) and the seed corpus (fuzz/corpus/<target>/), then fuzz each target for
# SECONDS (default 60) or for exactly N executions (runs=N: the same amount of work on any machine;
# tools/test --full uses it).
# New corpus entries go to a scratch folder (the checked-in corpus is read, not grown); a crash is
# written to fuzz/crashes/<target>-crash-<sha1> for you to keep with the fix. Prints one line per
# target with libFuzzer's exec count and ends with `fuzz: N targets, N execs, N crashes`;
# exits 1 on any crash. Builds first (fuzz/build.sh; exit 77 = skipped without clang).
#   FTCC_FUZZ_BUILD=DIR   the fuzz build folder (default build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs=${1:-60}
shift || true
build=$(realpath -m "${FTCC_FUZZ_BUILD:-$root/build-fuzz}")
rc=0; "$root/fuzz/build.sh" "$build" || rc=$?
[ $rc -eq 0 ] || exit $rc
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fault_spec train_config table safetensors checkpoint dataset_spec)
if [[ $secs == runs=* ]]; then budget=(-runs="${secs#runs=}"); what="${secs#runs=} runs"; else budget=(-max_total_time="$secs"); what="${secs}s"; fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
scratch=$(mktemp -d /tmp/ftcc-fuzz-corpus.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
total=0; crashes=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/${t}_fuzz
  log=$scratch/$t.log
  mkdir -p "$scratch/$t"
  status=ok
  repro=("$root"/fuzz/crashes/"$t"-*)
  if [ -e "${repro[0]}" ] && ! "$bin" "${repro[@]}" >"$log" 2>&1; then
    status="REPRODUCER FAILS"; crashes=$((crashes + 1)); tail -n 30 "$log" >&2
  fi
  if [ "$status" = ok ]; then
    if ! "$bin" "${budget[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
         -artifact_prefix="$root/fuzz/crashes/$t-" "$scratch/$t" "$root/fuzz/corpus/$t" >"$log" 2>&1; then
      status=CRASH; crashes=$((crashes + 1)); tail -n 40 "$log" >&2
    fi
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 | tr -d 'cov: ')
  total=$((total + ${execs:-0}))
  printf 'fuzz: %-13s %-8s %10s execs (%s), coverage %s, corpus %s\n' "$t" "$status" "${execs:-?}" "$what" "${cov:-?}" \
    "$(ls "$scratch/$t" "$root/fuzz/corpus/$t" | grep -vc ':$')"
done
echo "fuzz: ${#targets[@]} targets, $total execs, $crashes crashes"
[ $crashes -eq 0 ]
