"""Transparent recovery for torch programs as users write them: real processes under tools/ftcc-run,
killed or stopped for real, programs with nothing changed but backend="ftcc".

  seed_ddp_sigkill        tests/torch/seed_ddp.py (torch's DDP tutorial); rank 2 SIGKILLed from
                          outside 4 s after its group formed: exit 0, every survivor finishes "of 3"
  seed_ddp_kill_at_start  the same, rank 2 SIGKILLed the moment its group formed (inside
                          init_process_group or DDP's construction, which broadcasts the weights)
  seed_ddp_kill_in_construction  the same, rank 2 dies inside DDP's shape check (an all_gather
                          that cannot run again): the constructor runs again on the survivors
  seed_ddp_hang           rank 1 SIGSTOPped: the heartbeat fences it (FTCC_HANG_TIMEOUT_S=2)
  seed_linear_rank0       tests/torch/seed_linear.py (gradients averaged by hand with all_reduce
                          and get_world_size()); rank 0 SIGKILLed from outside
  reference_step          tests/torch/transparent_prog.py: rank 2 killed at the start of step 5:
                          every survivor's weights equal a float64 replay in which steps 0-4 average
                          4 ranks' gradients and steps 5- the 3 survivors' (relative error < 1e-5,
                          while the replay with DDP's old divisor is off by more than 1e-3); the
                          same weights, sizes and recovery records on every survivor
  reference_in_allreduce  rank 2 killed just before its last send of a ring allreduce (step 5):
                          some survivors may have completed it; either they all take that result
                          (the line says "taken from", step 5 holds rank 2's gradient) or all
                          run it again (step 5 without it): checked against the replay either way
  reference_rank0_lost    rank 0 killed inside the allreduce: the new rank 0 reports it

    bench/training/.venv-torch/bin/python tests/torch/transparent.py [case ...]
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import Job, check, failures, lines_with, pid_of, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
HERE = os.path.join(root, "tests", "torch")
SEED_DDP = os.path.join(HERE, "seed_ddp.py")
SEED_LINEAR = os.path.join(HERE, "seed_linear.py")
PROG = os.path.join(HERE, "transparent_prog.py")


def survivors_done(job, name, n):
    done = [l for l in job.out.splitlines() if f"of {n}: done" in l]
    check(len(done) == n, f"{name}: each of the {n} survivors finished its loop on {n} ranks ({len(done)} did)")
    check(sorted(int(l.split()[1]) for l in done) == list(range(n)),
          f"{name}: get_rank() numbers the survivors 0..{n - 1}")


def seed_case(name, prog, rank, sig=signal.SIGKILL, delay=4.0, env=None, steps=1500):
    """The program under tools/ftcc-run -n 4, `sig` sent to `rank` `delay` s after its pid is
    known. With a delay, the fault must land inside the training loop (the program itself cannot
    say when its loop starts: it is the seed program, unchanged). On a loaded machine (tests run
    two at a time) starting torch and building DDP took longer than 4 s once, and the fault landed
    in DDP's constructor (a recovery "at step -1", the constructor run again): then the case runs
    again with twice the delay, saying so, up to 16 s."""
    while True:
        job = Job(4, [PY, prog], env=dict(env or {}, STEPS=str(steps)))
        pid = pid_of(job.dir, rank)
        time.sleep(delay)
        os.kill(pid, sig)
        rc = job.wait(timeout=240)
        early = (delay > 0 and lines_with(job.out, "transparent:") == 0
                 and lines_with(job.out, f"failure of rank {rank} on host") >= 1 and lines_with(job.out, " at step -1") >= 1)
        if not early or delay >= 16:
            break
        print(f"note: {name}: the fault landed before the training loop ({delay:g} s after start): again with {2 * delay:g} s",
              flush=True)
        delay *= 2
    check(rc == 0, f"{name}: exit 0 (got {rc})")
    survivors_done(job, name, 3)
    check(lines_with(job.out, f"rank(s) [{rank}] lost, 4 -> 3 ranks; transparent:") == 1,
          f"{name}: one recovery line, transparent, naming rank {rank}")
    check(lines_with(job.out, "RankFailure") == 0 and lines_with(job.out, "Traceback") == 0,
          f"{name}: no RankFailure, no traceback")
    check(lines_with(job.out, "the job finished on 3 of 4 ranks (1 recovery)") == 1,
          f"{name}: ftcc-run reports the job finished on 3 of 4 ranks")
    return job


def case_seed_ddp_sigkill():
    seed_case("seed_ddp_sigkill", SEED_DDP, 2)


def case_seed_ddp_kill_at_start():
    seed_case("seed_ddp_kill_at_start", SEED_DDP, 2, delay=0, steps=300)


def case_seed_ddp_kill_in_construction():
    # Rank 2 dies as DDP's constructor all_gathers the parameters' shapes: a call that cannot run
    # again on the survivors; the constructor runs again on them instead.
    job = Job(4, [PY, os.path.join(HERE, "ddp_build_kill.py")], env={"STEPS": "200"})
    rc = job.wait(timeout=240)
    name = "seed_ddp_kill_in_construction"
    check(rc == 0, f"{name}: exit 0 (got {rc})")
    survivors_done(job, name, 3)
    check(lines_with(job.out, "Traceback") == 0, f"{name}: no traceback")
    check(lines_with(job.out, "the job finished on 3 of 4 ranks (1 recovery)") == 1,
          f"{name}: ftcc-run reports the job finished on 3 of 4 ranks")


def case_seed_ddp_hang():
    job = seed_case("seed_ddp_hang", SEED_DDP, 1, sig=signal.SIGSTOP, env={"FTCC_HANG_TIMEOUT_S": "2"})
    check(lines_with(job.out, "fenced (SIGKILL)") >= 1, "seed_ddp_hang: the stopped rank was fenced")


def case_seed_linear_rank0():
    seed_case("seed_linear_rank0", SEED_LINEAR, 0)


def reference(name, faults, lost, env=None, tol=1e-5):
    job = Job(4, [PY, PROG], env=dict(env or {}, FTCC_FAULTS=faults))
    rc = job.wait(timeout=240)
    check(rc == 0, f"{name}: exit 0 (got {rc})")
    res = [json.loads(l.split("RESULT ", 1)[1]) for l in job.out.splitlines() if l.startswith("RESULT ")]
    check(len(res) == 3 and sorted(r["orig"] for r in res) == sorted({0, 1, 2, 3} - {lost}),
          f"{name}: the 3 survivors reported ({sorted(r['orig'] for r in res)})")
    if len(res) != 3:
        return None
    check(all(r["size"] == 3 for r in res) and sorted(r["rank"] for r in res) == [0, 1, 2],
          f"{name}: get_world_size() is 3 and get_rank() 0..2 after the recovery")
    check(all(r["lost"] == [lost] for r in res), f"{name}: every survivor's recoveries() names rank {lost}")
    check(len({json.dumps(r["weights"]) for r in res}) == 1, f"{name}: the survivors hold the same weights")
    worst = max(r["max_rel_err"] for r in res)
    bug = min(r["rel_err_if_divided_by_old_size"] for r in res)
    check(worst < tol, f"{name}: the weights match the float64 replay (relative error {worst:.2e} < {tol:g})")
    check(bug > 100 * tol, f"{name}: the replay with DDP's old divisor is off by {bug:.2e} (the tolerance catches it)")
    cuts = {tuple(r["cut"]) for r in res}
    check(len(cuts) == 1, f"{name}: every survivor agrees on the first DDP step without rank {lost} ({cuts})")
    lines = {r["recoveries"][0]["line"].rsplit(" (", 1)[0] for r in res if r["recoveries"]}
    check(len(lines) == 1, f"{name}: the same recovery record on every survivor")
    return res[0]["cut"][0], lines.pop() if lines else "", job


def case_reference_step():
    r = reference("reference_step", "kill:rank=2:step=5", 2)
    if r:
        check(r[0] == 5, f"reference_step: step 5 is the first without rank 2's gradient (got {r[0]})")
        check("no collective completed on only some survivors, the rest run again" in r[1],
              "reference_step: the line says the allreduce ran again on the survivors")


def in_allreduce(name, lost):
    r = reference(name, f"kill:rank={lost}:step=5:phase=allreduce:send=6", lost,
                  env={"FTCC_ALLREDUCE_ALGO": "ring", "DIM": "4096"})
    if r:
        taken = "were taken from it" in r[1]
        check(r[0] == (6 if taken else 5),
              f"{name}: {'adopted' if taken else 'run again'}: the first step without rank {lost}'s gradient is "
              f"{6 if taken else 5} (got {r[0]}); line: {r[1]}")
        check(lines_with(r[2].out, f"fault injection on rank {lost} at step 5 (allreduce)") == 1,
              f"{name}: the kill fired inside step 5's allreduce")


def case_reference_in_allreduce():
    in_allreduce("reference_in_allreduce", 2)


def case_reference_rank0_lost():
    in_allreduce("reference_rank0_lost", 0)


if __name__ == "__main__":
    names = sys.argv[1:] or [n[5:] for n in list(globals()) if n.startswith("case_")]
    for n in names:
        print(f"== {n}", flush=True)
        globals()["case_" + n]()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
