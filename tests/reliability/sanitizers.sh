#!/usr/bin/env bash
# tests/reliability/sanitizers.sh asan|tsan [meson test args...]: configure, build and run the test
# suites under a sanitizer, each in its own build folder (CUDA off, -O1, benchmarks off):
#
#   asan   build-asan: AddressSanitizer + UndefinedBehaviorSanitizer (-fno-sanitize-recover: any
#          UB report fails the test). Runs the unit and multi-rank suites (foundation, engine,
#          comm, recovery, train). Single-process suites run with leak detection on; the
#          multi-rank ones (suite mpi) with ASAN_OPTIONS=detect_leaks=0, because Open MPI and
#          PMIx keep allocations until exit that LeakSanitizer reports as leaks (libmpi, not
#          ftcc), and a killed rank leaks by definition. Then the multi-host test (multihost.py:
#          partition, hang host and quorum, shorter runs).
#   tsan   build-tsan: ThreadSanitizer on the unit suites of the threaded parts (the heartbeat, the
#          call deadline and the progress watchdog: recovery_unit; the metrics server: train_unit;
#          the collectives and checked sums with ranks as threads: comm_schedule, comm_reduction_audit),
#          the simulation (simulation_unit, simulation_campaign) and the multi-rank recovery suite
#          (real processes: the heartbeat, deadline and watchdog threads beside MPI's), then the
#          multi-rank reliability cases that fence, stall and kill (suite reliability, mpi).
#          Reports inside the MPI runtime's own libraries only are suppressed
#          (tests/reliability/tsan.supp); a report with an ftcc frame fails the test.
#
# Environment: FTCC_JOBS=N (ninja -jN, default 1), FTCC_SAN_BUILD=DIR (build folder),
# FTCC_SAN_PROCS=N (asan: multi-rank tests run at once, default 2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=${1:?usage: sanitizers.sh asan|tsan [meson test args]}
shift
cd "$root"
# shellcheck disable=SC1091
source tools/env
jobs=${FTCC_JOBS:-1}
# The Open MPI wheel loads UCX's libucm, whose madvise/mmap hooks run inside thread exit; under
# TSan that crashes in the runtime (SIGSEGV in __tsan::MutexPreReadLock from ucm_event_enter).
# ftcc uses the ob1 PML, not UCX: switch the hooks off for every sanitizer run.
export UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
# PMIx's shared-memory datastore (gds/shmem2) maps its segment at a fixed address; in a process
# the job spawns (ftcc-train --respawn) that address can lie in the sanitizer's shadow memory, and
# MPI_Init fails there ("attempted to attach ... at a particular base address"). The hash
# datastore has no fixed address.
export PMIX_MCA_gds=hash
common=(-Dcuda=disabled -Dbenchmarks=false -Dbuildtype=debugoptimized -Doptimization=1 -Db_lundef=false)
case "$mode" in
  asan)
    build=${FTCC_SAN_BUILD:-build-asan}
    [ -f "$build/build.ninja" ] || meson setup "$build" "${common[@]}" -Db_sanitize=address,undefined \
      "-Dcpp_args=['-fno-sanitize-recover=all','-g1']" >/dev/null
    ninja -C "$build" -j"$jobs"
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    # The unit and multi-rank suites (not the embedding example, not the chaos campaign).
    suites=(--suite foundation --suite engine --suite comm --suite recovery --suite train)
    # embed_pkgconfig (suite foundation) links an uninstrumented program against the installed,
    # instrumented library: not a sanitizer test.
    mapfile -t single < <(meson test -C "$build" --no-rebuild --list "${suites[@]}" --no-suite mpi 2>/dev/null |
                          grep ' / ' | sed 's/.* \/ //' | grep -vx embed_pkgconfig)
    status=0
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 --logbase asan-single \
      --timeout-multiplier 3 "${single[@]}" "$@" || status=$?
    # Two at a time, as the normal suite runs (tests/meson.build): 9.5 min on 2 cores, 17 one at a time.
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
      meson test -C "$build" --no-rebuild --print-errorlogs --num-processes "${FTCC_SAN_PROCS:-2}" --logbase asan-mpi \
      --suite mpi --no-suite reliability --no-suite torch \
      --timeout-multiplier 3 "$@" || status=$?
    # The simulated hosts (root; skipped without): the partitioned minority, a stopped host woken
    # up (self-fencing), the quorum path; 100 epochs (2300 steps) a run, since every rank is about
    # 4x slower here (the other cases, and 400 epochs, run in the normal suite).
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
      meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 --logbase asan-multihost \
      --timeout-multiplier 3 multihost --test-args '--cases partition,hang-host,quorum --epochs 100' \
      || status=$?
    exit $status
    ;;
  tsan)
    build=${FTCC_SAN_BUILD:-build-tsan}
    [ -f "$build/build.ninja" ] || meson setup "$build" "${common[@]}" -Db_sanitize=thread -Dcpp_args=-g1 >/dev/null
    ninja -C "$build" -j"$jobs"
    # handle_segv=0: the injected segfaults (exit_segv_*) must reach ftcc's crash handler and end
    # the process as SIGSEGV does, not as TSan's own report of a deadly signal.
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:handle_segv=0:suppressions=$root/tests/reliability/tsan.supp
    status=0
    meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 5 \
      --suite recovery "$@" || status=$?
    meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 5 \
      train_unit comm_schedule comm_reduction_audit "$@" || status=$?  # the comm ones: ranks as threads
    mapfile -t tsan_mpi < <(meson test -C "$build" --no-rebuild --list --suite reliability 2>/dev/null |
                            grep ' / ' | sed 's/.* \/ //' | grep -E '^(exit|fencing)_' |
                            grep -vx fencing_trainer)  # a 60,000-step run: past its deadline at TSan's speed
    meson test -C "$build" --no-rebuild --print-errorlogs --num-processes 1 --timeout-multiplier 5 \
      "${tsan_mpi[@]}" "$@" || status=$?
    exit $status
    ;;
  *) echo "sanitizers.sh: unknown mode '$mode' (asan or tsan)" >&2; exit 2 ;;
esac
