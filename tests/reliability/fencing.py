#!/usr/bin/env python3
"""Never two copies: hung ranks on one host are all fenced, and a copy the job went on without
never writes the job's files (docs/recovery.md, "Fencing and the generation fence").

    fencing.py BUILD_DIR CASE

Real processes under tools/ftcc-run, hung for real with SIGSTOP (and continued with SIGCONT):
  pairs        4 ranks, two stopped half a second apart, in the orders that matter (the fencer
               of the first is the second, or the other way round, or neither): both fenced, the
               job finishes on 2 of 4, exit 0, one outcome
  triples      5 ranks, three stopped in turn (each the fencer of the one before): all fenced,
               the job finishes on 2 of 5
  dead_mate    rank 2 killed and rank 0 (its fencer by rank order) stopped: rank 1 fences 0
  stale_copy   fencing off (--no-fence): rank 0, then rank 2, stopped until the others finished,
               then continued: the woken copy writes nothing (progress file and outcome
               byte-identical), leaves with a 'superseded' record, and the job's status is 0
  finish_grace fencing off, a rank stopped for good: ftcc-run stops it FTCC_FINISH_GRACE seconds
               after the outcome and exits 0 instead of waiting forever
  job_error_after_loss  a job-level error raised in the step where a rank is lost: the recovery
               that shrank the group throws it, and the survivors report it (exit 4): the fence
               never takes a live member for a stale one
  trainer      the reported case: ftcc-train with checkpoints, rank 2 then rank 0 stopped: both
               fenced, one FTCC_SUMMARY, the final checkpoint written once, exit 0; each recovery
               reports a detection time of about the hang timeout (from the silence's start)
"""
import json, os, signal, sys, tempfile, time

from job_harness import Job, alive, check, failures, pid_of, sha

build, case = os.path.abspath(sys.argv[1]), sys.argv[2]
PROG = os.path.join(build, "tests", "reliability", "stale_copy_prog")
TRAIN = os.path.join(build, "tools", "ftcc-train")


# A 2 s hang timeout: a second stop half a second after the first lands before the first is
# suspected (the case under test), and 4-5 ranks on 2 loaded cores are never silent that long.
HANG = ["--hang-timeout-ms", "2000"]


def stopped_in_turn(n, order, steps=120, step_ms=40, extra=()):
    """Stops the ranks of `order` in turn, half a second apart; returns the job and the pids."""
    out = tempfile.mktemp(prefix="ftcc-progress-")
    job = Job(n, [PROG, str(steps), str(step_ms), out, *HANG, *extra])
    pids = {r: pid_of(job.dir, r) for r in range(n)}
    time.sleep(1.0)  # a few steps in
    for r in order:
        os.kill(pids[r], signal.SIGSTOP)
        time.sleep(0.5)
    return job, pids, out


def expect_all_fenced(n, order, label):
    job, pids, out = stopped_in_turn(n, order)
    rc = job.wait()
    check(rc == 0, f"{label}: ftcc-run exits 0 (got {rc})")
    survivors = n - len(order)
    check(f"stale_copy_prog: 120 steps on {survivors} of {n} ranks" in job.out, f"{label}: the job finished on {survivors} of {n}")
    for r in order:
        check(not alive(pids[r]), f"{label}: stopped rank {r} (pid {pids[r]}) was fenced (no longer alive)")
        check(f"fenced (SIGKILL) by rank" in job.out and any(
            l.startswith(f"ftcc: rank {r} ") and "fenced (SIGKILL)" in l for l in job.out.splitlines()),
            f"{label}: a line says rank {r} was fenced")
    check(job.out.count("stale_copy_prog: 120 steps") == 1, f"{label}: one final report, not two copies")
    for p in pids.values():
        if alive(p):
            os.kill(p, signal.SIGKILL)


def case_pairs():
    # 2 then 0: 0 fences 2 first by rank order, but 0 is stopped: 1 must fence both.
    # 0 then 2: 1 fences 0, then is the fencer of 2. 1 then 0: 0 fences... 0 is stopped next: 2.
    # 3 then 2: 0 fences both (the first fencer stays alive).
    for order in ([2, 0], [0, 2], [1, 0], [0, 1], [3, 2]):
        expect_all_fenced(4, order, f"pair {order[0]} then {order[1]}")


def case_triples():
    for order in ([2, 1, 0], [0, 1, 2], [1, 2, 0]):
        expect_all_fenced(5, order, "triple " + " then ".join(map(str, order)))


def case_dead_mate():
    out = tempfile.mktemp(prefix="ftcc-progress-")
    job = Job(4, [PROG, "120", "40", out, *HANG])
    pids = {r: pid_of(job.dir, r) for r in range(4)}
    time.sleep(1.0)
    os.kill(pids[2], signal.SIGKILL)
    os.kill(pids[0], signal.SIGSTOP)
    rc = job.wait()
    check(rc == 0, f"dead mate: ftcc-run exits 0 (got {rc})")
    check("stale_copy_prog: 120 steps on 2 of 4 ranks" in job.out, "dead mate: the job finished on 2 of 4")
    check(not alive(pids[0]), "dead mate: the stopped rank 0 was fenced")
    check(any(l.startswith("ftcc: rank 0 ") and "fenced (SIGKILL) by rank 1" in l for l in job.out.splitlines()),
          "dead mate: rank 1 fenced rank 0")


def stale_copy(victim, self_stop):
    """Fencing off; `victim` stopped until the others finished, then continued. self_stop: it
    stops itself between its allreduce and its write (the writer, rank 0), so the first thing it
    does when continued is the write, which the generation fence must refuse. Otherwise it is
    stopped from outside wherever it is, and Open MPI may end it first (it was declared failed):
    either way it must write nothing."""
    label = f"stale copy of rank {victim}" + (" (stopped before its write)" if self_stop else "")
    out = tempfile.mktemp(prefix="ftcc-progress-")
    extra = ["--stop-before-write", "25"] if self_stop else []
    job = Job(4, [PROG, "60", "40", out, "--no-fence", *extra], env={"FTCC_FINISH_GRACE": "120"})
    pids = {r: pid_of(job.dir, r) for r in range(4)}
    if not self_stop:
        time.sleep(1.0)
        os.kill(pids[victim], signal.SIGSTOP)
    check(job.wait_for("outcome"), f"{label}: the others finished (outcome written) while it was stopped")
    time.sleep(0.5)
    before = {"progress": sha(out), "outcome": sha(os.path.join(job.dir, "outcome"))}
    outcome = job.outcome()
    os.kill(pids[victim], signal.SIGCONT)
    rc = job.wait()
    check(rc == 0, f"{label}: ftcc-run exits 0, the job's status (got {rc})")
    check(outcome.get("line", "").startswith("finished on 3 of 4"), f"{label}: the outcome says finished on 3 of 4: {outcome}")
    check(sha(out) == before["progress"], f"{label}: the progress file is byte-identical after the copy woke up")
    check(sha(os.path.join(job.dir, "outcome")) == before["outcome"], f"{label}: the outcome is byte-identical")
    check(job.out.count("stale_copy_prog: 60 steps") == 1, f"{label}: one final report, not two copies")
    record = {k: open(os.path.join(job.dir, f"rank-{victim}.{k}")).read().strip()
              for k in ("left", "crashed") if os.path.exists(os.path.join(job.dir, f"rank-{victim}.{k}"))}
    if self_stop:
        check("superseded" in record.get("left", ""), f"{label}: its record says it was superseded: {record}")
        check(any("was excluded: the job went on without it" in l and "not writing" in l for l in job.out.splitlines()),
              f"{label}: one line says it was excluded and did not write")
    else:
        check("superseded" in record.get("left", "") or record.get("crashed", "").startswith("SIGABRT"),
              f"{label}: its record says it was superseded, or that Open MPI ended it: {record}")
    check(not alive(pids[victim]), f"{label}: the woken copy is gone")


def case_stale_copy():
    stale_copy(0, self_stop=True)
    stale_copy(2, self_stop=False)


def case_finish_grace():
    out = tempfile.mktemp(prefix="ftcc-progress-")
    job = Job(4, [PROG, "60", "40", out, "--no-fence"], env={"FTCC_FINISH_GRACE": "3"})
    pids = {r: pid_of(job.dir, r) for r in range(4)}
    time.sleep(1.0)
    os.kill(pids[2], signal.SIGSTOP)
    check(job.wait_for("outcome"), "finish grace: the others finished")
    t0 = time.time()
    rc = job.wait(timeout=60)
    took = time.time() - t0
    check(rc == 0, f"finish grace: ftcc-run exits 0 (got {rc})")
    check(took < 30, f"finish grace: ftcc-run returned {took:.1f} s after the outcome (grace 3 s, stop within 10 s more)")
    check("were stopped (the job had gone on without them)" in job.out, "finish grace: one line says the leftover was stopped")
    check(not alive(pids[2]), "finish grace: the stopped rank is gone")


def case_trainer():
    ck = tempfile.mkdtemp(prefix="ftcc-fencing-ck-")
    # About 8 s of training on 4 ranks here (1500 steps take 0.2 s): the stops land mid-run.
    job = Job(4, [TRAIN, "--dataset", "digits", "--layers", "64,128,10", "--steps", "60000", "--quiet", "--hang-timeout", "2",
                  "--checkpoint-dir", ck, "--checkpoint-every", "10000"])
    pids = {r: pid_of(job.dir, r) for r in range(4)}
    time.sleep(0.5)
    os.kill(pids[2], signal.SIGSTOP)
    time.sleep(0.5)
    os.kill(pids[0], signal.SIGSTOP)
    rc = job.wait(timeout=300)
    check(rc == 0, f"trainer: ftcc-run exits 0 (got {rc})")
    check(job.out.count("FTCC_SUMMARY ") == 1, "trainer: one FTCC_SUMMARY (one copy of training)")
    for r in (0, 2):
        check(not alive(pids[r]), f"trainer: stopped rank {r} was fenced")
    final = os.path.join(ck, "ckpt-0000060000.json")
    check(os.path.exists(final), "trainer: the final checkpoint (step 60000) exists")
    summary = next((json.loads(l[len("FTCC_SUMMARY "):]) for l in job.out.splitlines() if l.startswith("FTCC_SUMMARY ")), {})
    check(summary.get("world_size_final") == 2, f"trainer: finished on the 2 survivors ({summary.get('world_size_final')})")
    check(summary.get("samples_digest_ok") is True, "trainer: every sample seen exactly once")
    # No injector here: the fault's time is when the heartbeat last heard the stopped rank, so the
    # detection takes about the hang timeout (2 s), and the recovery's total includes it.
    evs = summary.get("recoveries", [])
    check(bool(evs) and all((e.get("detect_ms") or 0) >= 1500 and e["total_ms"] >= e["detect_ms"] for e in evs),
          f"trainer: each recovery reports the hang's detection time, >= 1.5 s of the 2 s timeout "
          f"({[(e.get('detect_ms'), e.get('total_ms')) for e in evs]})")


def case_job_error_after_loss():
    prog = os.path.join(build, "tests", "reliability", "exit_status_prog")
    job = Job(4, [prog, "throw-on-rank1", "kill:rank=2:step=5"])
    rc = job.wait()
    check(rc == 4, f"job error after a loss: exit 4 (got {rc})")
    check(job.out.count("job error on rank 1 at step 5: rank 1 cannot open its input shard") == 1, "job error after a loss: its line once")
    check("was excluded" not in job.out, "job error after a loss: no live rank taken for a stale one")
    check(job.outcome().get("status") == "4", "job error after a loss: the outcome record says 4")


cases = {"job_error_after_loss": case_job_error_after_loss, "pairs": case_pairs, "triples": case_triples, "dead_mate": case_dead_mate, "stale_copy": case_stale_copy,
         "finish_grace": case_finish_grace, "trainer": case_trainer}
if case not in cases:
    sys.exit(f"unknown case {case!r}; one of {', '.join(cases)}")
cases[case]()
print(f"fencing {case}: {'FAILED: ' + '; '.join(failures) if failures else 'all checks passed'}")
sys.exit(1 if failures else 0)
