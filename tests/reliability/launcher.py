#!/usr/bin/env python3
"""tools/ftcc-run's promises (docs/reliability.md, "Exit statuses"): every wait has a deadline,
a job that failed never exits 0, the job folder is the job's own.

    launcher.py BUILD_DIR CASE

  startup_stuck      a rank never reaches MPI_Init (it sleeps): the others wait in MPI_Init;
                     --startup-timeout 8 stops the job: exit 7, one line naming rank 2
  startup_killed     a rank killed before MPI_Init: the same, exit 7
  group_not_formed   a rank killed after MPI_Init, before its group forms: the others cannot form
                     theirs and leave; exit 7 (mpirun's own status is 0), one line naming rank 2
  job_dir            FTCC_JOB_DIR: a folder that does not exist is created and the job's status
                     counts (every rank killed: 5, not 0); a reused one is refused (2) before
                     mpirun starts, its records untouched; one that cannot be written: 2; one
                     writable by others, or owned by another user: 2, one line, nothing written
  sigterm            SIGTERM to ftcc-run mid-run: exit 143, one line, no rank left running
  stopped_no_heartbeat  --hang-timeout 0 (no heartbeat) and a stopped rank: the others' collective
                     times out (FTCC_COMM_TIMEOUT_S=3), they fence the stopped host-mate and leave:
                     exit 5 in bounded time, the stopped rank gone, its record says why
  bad_flags          --startup-timeout abc, FTCC_FINISH_GRACE=-1, FTCC_STARTUP_TIMEOUT=nan (ftcc-run) and
                     FTCC_ULFM_TIMEOUT_S=5abc or 0 (every rank, before any communication): exit 2,
                     one line each, no rank record but the refusals (rank-R.joining, .exited)
  pmix_listener      Open MPI's launcher cannot start its PMIx server (exit 213, nothing started)
                     once: ftcc-run starts the job again (exit 0, one line); three times: exit 7
  mpirun_crash       the same refusal when mpirun itself crashes afterwards (SIGSEGV, as Open MPI's
                     was seen to when every rank left at once with status 2): exit 2 from the
                     ranks' records, and a line saying mpirun's status
  mpirun_hang        the same refusal when mpirun then hangs, deaf to SIGTERM (Open MPI's was seen
                     to deadlock in its teardown): stopped 10 s after the job's last process
                     exited (then SIGKILL), exit 2 from the records, one line; nothing left running
"""
import glob, os, signal, subprocess, sys, tempfile, time

from job_harness import RUN, Job, alive, check, failures, lines_with, pid_of, sha

build, case = os.path.abspath(sys.argv[1]), sys.argv[2]
PROG = os.path.join(build, "tests", "reliability", "stale_copy_prog")


def progress_file():
    return tempfile.mktemp(prefix="ftcc-progress-")


def case_startup_stuck():
    marker = f"1000.{os.getpid()}"  # a sleep of this job only, to find it afterwards
    script = f'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then exec sleep {marker}; fi; exec "$0" "$@"'
    job = Job(3, ["sh", "-c", script, PROG, "20", "10", progress_file()], run_flags=["--startup-timeout", "8"])
    rc = job.wait(timeout=120)
    check(rc == 7, f"startup stuck: exit 7, the group never formed (got {rc})")
    check(job.seconds < 40, f"startup stuck: ftcc-run returned after {job.seconds:.1f} s (deadline 8 s, stop within 10 s more)")
    check(lines_with(job.out, "did not form its group within 8 s (--startup-timeout): rank(s) 0, 1, 2: running, never "
                              "reached the group's start") == 1, "startup stuck: one line says no rank reached the group")
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
    check(not left, f"startup stuck: no process of the job is left running ({left})")


def case_startup_killed():
    script = 'if [ "$OMPI_COMM_WORLD_RANK" = 2 ]; then kill -9 $$; fi; exec "$0" "$@"'
    job = Job(3, ["sh", "-c", script, PROG, "20", "10", progress_file()], run_flags=["--startup-timeout", "8"])
    rc = job.wait(timeout=120)
    check(rc not in (0, None), f"startup killed: the job does not exit 0 nor hang (got {rc})")
    check(rc == 7, f"startup killed: exit 7 (got {rc})")
    check(lines_with(job.out, "within 8 s (--startup-timeout): rank(s) 2: no process left on this host (died before or "
                              "during MPI_Init") == 1, "startup killed: one line names rank 2 as gone")


def case_group_not_formed():
    job = Job(3, [PROG, "20", "10", progress_file(), "--die-before-group", "2"])
    rc = job.wait(timeout=180)
    check(rc == 7, f"group not formed: exit 7, not mpirun's 0 (got {rc})")
    check(lines_with(job.out, "never formed its group: rank(s) 2 did not come up") == 1,
          "group not formed: one line names rank 2 as the rank that did not come up")
    check(lines_with(job.out, "could not start the fault-tolerant group") >= 1, "group not formed: the ranks that came up say why they left")


def case_job_dir():
    base = tempfile.mkdtemp(prefix="ftcc-jobdir-")
    # A folder that does not exist yet, and a job whose every rank is killed: 5, not 0.
    fresh = os.path.join(base, "a", "b")
    job = Job(2, [PROG, "400", "20", progress_file()], job_dir=fresh)
    pids = [pid_of(fresh, r) for r in range(2)]
    time.sleep(0.5)
    for p in pids:
        os.kill(p, signal.SIGKILL)
    rc = job.wait(timeout=120)
    check(rc == 5, f"job dir missing: created, and a job whose every rank was killed exits 5 (got {rc})")
    check(lines_with(job.out, "every rank was lost before the job finished") == 1, "job dir missing: one line says every rank was lost")
    # The same folder again: refused before mpirun starts, the old records untouched.
    before = {f: sha(f) for f in glob.glob(os.path.join(fresh, "*")) if os.path.isfile(f)}
    job = Job(2, [PROG, "5", "10", progress_file()], job_dir=fresh)
    rc = job.wait(timeout=60)
    check(rc == 2, f"job dir reused: refused with status 2 (got {rc})")
    check(lines_with(job.out, "holds another job's records") == 1, "job dir reused: one line says why")
    check("stale_copy_prog" not in job.out.replace(PROG, ""), "job dir reused: the program never ran")
    after = {f: sha(f) for f in glob.glob(os.path.join(fresh, "*")) if os.path.isfile(f)}
    check(before == after, "job dir reused: the old job's records are byte-identical")
    # A folder that cannot be made (under a file).
    afile = os.path.join(base, "file")
    open(afile, "w").close()
    job = Job(2, [PROG, "5", "10", progress_file()], job_dir=os.path.join(afile, "job"))
    rc = job.wait(timeout=60)
    check(rc == 2, f"job dir unwritable: refused with status 2 (got {rc})")
    check(lines_with(job.out, "cannot create the job folder") == 1, "job dir unwritable: one line says why")
    # Folders another user can write: one writable by all, one owned by another user (nobody),
    # both empty. Refused before mpirun starts (an outcome planted there was taken as the job's).
    for what, mode, owner, says in (("writable by others", 0o777, None, "writable by its group or by others (mode 777)"),
                                    ("owned by another user", 0o755, 65534, "owned by uid 65534")):
        folder = tempfile.mkdtemp(prefix="ftcc-jobdir-foreign-")
        os.chmod(folder, mode)
        if owner is not None:
            if os.geteuid() != 0:
                continue  # only root can give a folder away
            os.chown(folder, owner, -1)
        job = Job(2, [PROG, "5", "10", progress_file()], job_dir=folder)
        rc = job.wait(timeout=60)
        check(rc == 2 and lines_with(job.out, says) == 1 and not os.listdir(folder),
              f"job dir {what}: refused with status 2 and one line, nothing written (got {rc})")


def case_sigterm():
    job = Job(3, [PROG, "2000", "20", progress_file()])
    pids = [pid_of(job.dir, r) for r in range(3)]
    time.sleep(1.0)
    job.p.send_signal(signal.SIGTERM)
    rc = job.wait(timeout=60)
    check(rc == 143, f"sigterm: exit 143 = 128 + SIGTERM (got {rc})")
    check(lines_with(job.out, "ftcc-run: stopped by signal 15 (TERM) before the job ended") == 1, "sigterm: one line says so")
    time.sleep(1)
    check(not any(alive(p) for p in pids), "sigterm: no rank is left running")


def case_stopped_no_heartbeat():
    job = Job(3, [PROG, "2000", "20", progress_file(), "--hang-timeout-ms", "0"], env={"FTCC_COMM_TIMEOUT_S": "3"})
    pids = [pid_of(job.dir, r) for r in range(3)]
    time.sleep(1.0)
    os.kill(pids[2], signal.SIGSTOP)
    rc = job.wait(timeout=120)
    # Both others time out and leave (5), unless one of them sees the other's exit first and,
    # with both losses confirmed on this host, finishes alone (0): either way, in bounded time.
    check(rc in (0, 5), f"stopped, no heartbeat: exit 5, every rank lost, or 0, finished alone (got {rc})")
    check(job.seconds < 60, f"stopped, no heartbeat: ftcc-run returned after {job.seconds:.1f} s (collective timeout 3 s)")
    check(not alive(pids[2]), "stopped, no heartbeat: the stopped rank was fenced")
    rec = os.path.join(job.dir, "rank-2.left")
    why = open(rec).read() if os.path.exists(rec) else ""
    check("stopped while a collective timed out" in why, f"stopped, no heartbeat: its record says why: {why.strip()!r}")
    if rc == 5:
        check(lines_with(job.out, "rank 2: fenced (SIGKILL) by rank") == 1, "stopped, no heartbeat: ftcc-run's line names how rank 2 left")
    else:
        check(lines_with(job.out, "stale_copy_prog: 2000 steps on 1 of 3 ranks") == 1, "stopped, no heartbeat: finished on 1 of 3")


def case_bad_flags():
    for flags, env, text in ((["--startup-timeout", "abc"], {}, "--startup-timeout (FTCC_STARTUP_TIMEOUT) 'abc' is not a number"),
                             ([], {"FTCC_FINISH_GRACE": "-1"}, "FTCC_FINISH_GRACE '-1' is not a number"),
                             ([], {"FTCC_STARTUP_TIMEOUT": "nan"}, "'nan' is not a number"),
                             ([], {"FTCC_ULFM_TIMEOUT_S": "5abc"}, "FTCC_ULFM_TIMEOUT_S='5abc': not a number of seconds; use a value from 0.001"),
                             ([], {"FTCC_ULFM_TIMEOUT_S": "0"}, "FTCC_ULFM_TIMEOUT_S='0': out of range")):
        job = Job(2, [PROG, "5", "10", progress_file()], env=env, run_flags=flags)
        rc = job.wait(timeout=60)
        check(rc == 2, f"bad flags {flags or env}: exit 2 (got {rc})")
        check(lines_with(job.out, text) == 1, f"bad flags {flags or env}: one line says what is wrong")
        records = sorted(os.listdir(job.dir)) if os.path.exists(job.dir) else []
        # ftcc-run's own flags: no folder content at all; a rank's refusal: its rank-R.joining and
        # rank-R.exited (status 2, after MPI_Finalize), nothing started.
        refusals = [f for f in records if not f.endswith((".joining", ".exited"))]
        exited = [open(os.path.join(job.dir, f)).read().strip() for f in records if f.endswith(".exited")]
        check(not refusals and all(e == "status 2" for e in exited),
              f"bad flags {flags or env}: nothing started, each record a refusal with status 2: {records} {exited}")


def mpi_with_mpirun(script):
    """An Open MPI prefix whose bin/mpirun is `script` (sh; REAL is Open MPI's own prefix), the rest
    links to the real one: Open MPI's launcher misbehaving for real, around its real run."""
    real = os.environ["FTCC_MPI_PREFIX"]
    fake = tempfile.mkdtemp(prefix="ftcc-wrapped-mpi-")
    for entry in os.listdir(real):
        if entry != "bin":
            os.symlink(os.path.join(real, entry), os.path.join(fake, entry))
    os.mkdir(os.path.join(fake, "bin"))
    for entry in os.listdir(os.path.join(real, "bin")):
        if entry != "mpirun":
            os.symlink(os.path.join(real, "bin", entry), os.path.join(fake, "bin", entry))
    with open(os.path.join(fake, "bin", "mpirun"), "w") as f:
        f.write(f'#!/bin/sh\nREAL="{real}"\n{script}\n')
    os.chmod(os.path.join(fake, "bin", "mpirun"), 0o755)
    return fake


PMIX_BOX = ("--------------------------------------------------------------------------\n"
            "The PMIx server's listener thread failed to start. We cannot\ncontinue.\n"
            "--------------------------------------------------------------------------")


def case_pmix_listener():
    """Open MPI's launcher now and then cannot start its own PMIx server (exit 213, before any
    process starts). ftcc-run starts the job again, at most twice, saying so; if it never starts:
    exit 7. This job's mpirun prints Open MPI's message and exits 213 the first K times."""
    for fails, want in ((1, 0), (3, 7)):
        count = tempfile.mktemp(prefix="ftcc-launches-")
        fake = mpi_with_mpirun(f'echo x >> "{count}"\n'
                               f'if [ "$(wc -l < "{count}")" -le {fails} ]; then printf \'%s\\n\' "{PMIX_BOX}" >&2; exit 213; fi\n'
                               '"$REAL/bin/mpirun" "$@"')
        job = Job(3, [PROG, "5", "10", progress_file()], env={"FTCC_MPI_PREFIX": fake})
        rc = job.wait(timeout=60)
        launches = len(open(count).read().split())
        check(rc == want, f"the launcher failed to start {fails} time(s): exit {want} (got {rc})")
        check(lines_with(job.out, "could not start its PMIx server (mpirun's status 213; no process had started): "
                                  "starting the job again") == min(fails, 2), f"{fails} failure(s): one line per new start")
        check(launches == min(fails + 1, 3), f"{fails} failure(s): mpirun started {launches} time(s)")
        if want == 0:
            check(lines_with(job.out, "stale_copy_prog: 5 steps on 3 of 3 ranks") == 1, "the job ran once, to the end")
        else:
            check(lines_with(job.out, "ftcc-run: the job never started: Open MPI's launcher could not start its PMIx "
                                      "server, 3 times") == 1, "never started: one line, status 7")


def case_mpirun_crash():
    """Open MPI's mpirun was seen to crash (SIGSEGV, exit 139) when every rank left at once with
    status 2. The ranks' refusal records decide: ftcc-run reports 2 and says what mpirun did. The
    crash is real: this job's mpirun is a wrapper that runs Open MPI's and then raises SIGSEGV."""
    fake = mpi_with_mpirun('"$REAL/bin/mpirun" "$@"\nkill -SEGV $$')
    job = Job(3, [PROG, "5", "10", progress_file()], env={"FTCC_MPI_PREFIX": fake, "FTCC_ULFM_TIMEOUT_S": "5abc"})
    rc = job.wait(timeout=60)
    check(rc == 2, f"mpirun crashed after every rank refused with status 2: exit 2 (got {rc})")
    check(lines_with(job.out, "FTCC_ULFM_TIMEOUT_S='5abc': not a number of seconds") == 1, "the ranks' line, once")
    check(lines_with(job.out, "ftcc-run: mpirun exited with status 139, but every rank (3) had exited after "
                              "MPI_Finalize with status 2: reporting 2") == 1, "ftcc-run's line says what mpirun did")


def case_mpirun_hang():
    """Open MPI's mpirun was seen to hang after every rank had left at once with status 2 (its main
    thread deadlocked on a mutex in its teardown; SIGTERM did nothing). This job's mpirun runs Open
    MPI's, then waits ignoring SIGTERM: ftcc-run stops it (10 s after the ranks were gone, then 10 s
    for SIGTERM, then SIGKILL) and reports the ranks' status."""
    fake = mpi_with_mpirun('"$REAL/bin/mpirun" "$@"\ntrap "" TERM\nexec sleep 300')
    t0 = time.monotonic()
    job = Job(3, [PROG, "5", "10", progress_file()], env={"FTCC_MPI_PREFIX": fake, "FTCC_ULFM_TIMEOUT_S": "5abc"})
    rc = job.wait(timeout=90)
    took = time.monotonic() - t0
    check(rc == 2, f"mpirun hung after every rank refused with status 2: exit 2 (got {rc})")
    check(lines_with(job.out, "FTCC_ULFM_TIMEOUT_S='5abc': not a number of seconds") == 1, "the ranks' line, once")
    check(lines_with(job.out, "ftcc-run: mpirun was still running 10 s after every rank (3) had exited after "
                              "MPI_Finalize with status 2, and was stopped: reporting 2") == 1, "ftcc-run's line says what mpirun did")
    check(15 < took < 60, f"stopped after the 10 s wait and the 10 s SIGTERM grace: {took:.0f} s")
    left = subprocess.run(["pgrep", "-f", fake], capture_output=True, text=True).stdout.split()
    check(not left, f"no process of the wrapped launcher left: {left}")


cases = {k[len("case_"):]: v for k, v in globals().items() if k.startswith("case_")}
if case not in cases:
    sys.exit(f"unknown case {case!r}; one of {', '.join(cases)}")
cases[case]()
print(f"launcher {case}: {'FAILED: ' + '; '.join(failures) if failures else 'all checks passed'}")
sys.exit(1 if failures else 0)
