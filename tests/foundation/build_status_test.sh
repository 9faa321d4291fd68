#!/usr/bin/env bash
# tools/build must fail when compiling fails (it used to print the errors and exit 0, so
# tools/demo went on with stale binaries). A build folder whose build.ninja has one failing
# compile step stands in for a broken source; tools/build must exit non-zero and say so, and
# exit 0 once the step succeeds.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d /tmp/ftcc-build-status.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/build.ninja" <<'NINJA'
rule cc
  command = sh -c 'echo "broken.cpp:1:1: error: expected unqualified-id" >&2; exit 1'
build out.o: cc
NINJA
out=$(FTCC_BUILD_DIR=$tmp "$root/tools/build" 2>&1); rc=$?
if [ $rc -eq 0 ]; then echo "FAIL: tools/build exited 0 although compiling failed:"; echo "$out"; exit 1; fi
grep -q "tools/build: compiling failed" <<<"$out" || { echo "FAIL: no failure line:"; echo "$out"; exit 1; }
cat >"$tmp/build.ninja" <<'NINJA'
rule cc
  command = touch $out
build out.o: cc
NINJA
out=$(FTCC_BUILD_DIR=$tmp "$root/tools/build" 2>&1) || { echo "FAIL: tools/build failed on a good build:"; echo "$out"; exit 1; }
echo "tools/build: exit $rc on a failing compile, 0 on a good one: ok"
