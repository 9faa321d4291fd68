"""The ftcc torch backend under real failures: real processes under tools/ftcc-run, killed for real.

Each case runs a job and checks its exit status, the lines it printed and, for the examples, the
summary rank 0 wrote (ranks, recoveries, exactly-once counts per epoch, the weights' SHA-256):

  ddp_kill_in_allreduce   examples/torch_ddp.py; rank 2 SIGKILLs itself inside DDP's gradient
                          allreduce (FTCC_FAULTS phase=allreduce): RankFailure reaches the trainer
                          from backward(), it finishes on 3 ranks, every epoch's samples once
  ddp_rank0_lost          the same with rank 0 killed at the start of a step
  ddp_hang                rank 1 SIGSTOPs itself: the heartbeat fences it (FTCC_HANG_TIMEOUT_S=2)
  ddp_kill_in_shrink      rank 1 dies, then rank 3 dies inside the recovery's shrink: 2 ranks go on
  ddp_kill_in_sync        rank 1 dies at step 20, then rank 3 inside the recovery's state sync (its
                          broadcast): 2 ranks go on, the summary lists both (was: only rank 1)
  ddp_kill_at_last_step   rank 1 dies inside the last step's allreduce: the ranks that completed
                          it and the ones that did not meet in the trainer's final barrier
  linear_sigkill          examples/torch_linear.py (the plain-torch loop): rank 2 SIGKILLed from
                          outside mid-run; every survivor saw the same failed_ranks [2]
  deterministic           torch_ddp.py --deterministic: 2 ranks, 3 ranks, and 4 ranks with a kill
                          end with bitwise-identical weights (SHA-256)
  loader                  torch_ddp.py --loader 2: ElasticTrainer over a DataLoader (2 workers, built
                          on ElasticDistributedSampler): deterministic weights equal the tensors'
                          on 2 ranks and on 4 with a kill; DDP with rank 0 killed; 7 bad inputs
                          (IterableDataset, own batch_sampler, ...) refused with one line each
  lr_schedule             torch_ddp.py --deterministic --lr-halve-every 7 (ElasticTrainer with a
                          StepLR): 2 ranks, and 4 with a kill inside an allreduce: the same
                          weights (SHA-256) and the schedule's last lr
  same_failure_everywhere failure_prog.py (DDP, plain loop): every survivor's RankFailure names
                          the same ranks and is a DistBackendError; a shrink by the wrong ranks is
                          refused with one line
  program_error           rank 1 raises: exit 4, one job-error line naming rank 1, the traceback
  no_recovery             a program that does not catch RankFailure: exit 4, one line
  collective_mismatch     failure_prog.py --mismatch-at: the ranks call all_reduce and broadcast in
                          different orders, or all_reduce with different shapes and dtypes: exit 4,
                          one job-error line naming each rank's call; no rank returns (was: rank
                          0's all_reduce returned garbage, exit 0)
  hang_without_heartbeat  failure_prog.py, rank 1 SIGSTOPs itself at step 10 with the heartbeat off
                          (FTCC_HANG_TIMEOUT_S=0): the others leave at their deadline and fence it
                          first: exit 5 within a minute (was: ftcc-run waited for ever)
  stuck_after_end         failure_prog.py --stop-at-exit 2: rank 2 SIGSTOPs itself after the job
                          ended: the `finished` record starts the finish grace (5 s), rank 2 is
                          stopped, exit 0 with one line naming it (was: ftcc-run waited for ever)
  not_under_mpi           python examples/torch_ddp.py without a launcher: one line saying how
  mpirun_without_ulfm     plain mpirun (no fault tolerance, no job folder): one line saying how

    bench/training/.venv-torch/bin/python tests/torch/failures.py [case ...]
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import Job, check, failures, lines_with, pid_of, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
DDP = os.path.join(root, "examples", "torch_ddp.py")
LINEAR = os.path.join(root, "examples", "torch_linear.py")
PROG = os.path.join(root, "tests", "torch", "failure_prog.py")


def ddp(n, faults, extra=(), env=None):
    """examples/torch_ddp.py with a summary; returns (exit status, job, summary)."""
    out = tempfile.mkdtemp(prefix="ftcc-torch-")
    path = os.path.join(out, "summary.json")
    job = Job(n, [PY, DDP, "--epochs", "6", "--summary", path, *extra], env=dict(env or {}, FTCC_FAULTS=faults))
    rc = job.wait()
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    return rc, job, s


def exactly_once(s, epochs=6):
    e = s.get("exactly_once", [])
    return len(e) == epochs and all(x["each_once"] and x["samples"] == 442 for x in e)


def failed_sets(s):
    return sorted(r for rec in s.get("recoveries", []) for r in rec["failed"])


def case_ddp_kill_in_allreduce():
    rc, job, s = ddp(4, "kill:rank=2:step=30:phase=allreduce")
    check(rc == 0, f"ddp_kill_in_allreduce: exit 0 (got {rc})")
    check(s.get("ranks") == 3 and failed_sets(s) == [2], f"ddp_kill_in_allreduce: finished on 3 ranks after rank 2's loss ({s.get('ranks')}, {failed_sets(s)})")
    check(exactly_once(s), "ddp_kill_in_allreduce: every epoch applied each of the 442 samples once (counted by allreduce)")
    check(lines_with(job.out, "fault injection on rank 2 at step 30 (allreduce)") == 1,
          "ddp_kill_in_allreduce: the kill fired inside the allreduce")
    rec = (s.get("recoveries") or [{}])[0]
    print(f"  recovery: {rec.get('recover_ms', -1):.1f} ms in ElasticTrainer, next step done "
          f"{rec.get('next_step_ms', -1):.1f} ms after the failure reached it", flush=True)


def case_ddp_rank0_lost():
    rc, job, s = ddp(4, "kill:rank=0:step=20")
    check(rc == 0, f"ddp_rank0_lost: exit 0 (got {rc})")
    check(s.get("ranks") == 3 and failed_sets(s) == [0], f"ddp_rank0_lost: the new rank 0 wrote the summary: 3 ranks, rank 0 lost ({s.get('ranks')}, {failed_sets(s)})")
    check(exactly_once(s), "ddp_rank0_lost: every sample once per epoch")


def case_ddp_hang():
    rc, job, s = ddp(4, "hang:rank=1:step=20", env={"FTCC_HANG_TIMEOUT_S": "2"})
    check(rc == 0, f"ddp_hang: exit 0 (got {rc})")
    check(lines_with(job.out, "fenced (SIGKILL)") >= 1, "ddp_hang: the stopped rank was fenced by the heartbeat")
    check(s.get("ranks") == 3 and failed_sets(s) == [1], f"ddp_hang: finished on 3 ranks without rank 1 ({s.get('ranks')}, {failed_sets(s)})")
    check(exactly_once(s), "ddp_hang: every sample once per epoch")


def case_ddp_kill_in_shrink():
    rc, job, s = ddp(4, "kill:rank=1:step=20,kill:rank=3:step=20:phase=shrink")
    check(rc == 0, f"ddp_kill_in_shrink: exit 0 (got {rc})")
    check(s.get("ranks") == 2 and failed_sets(s) == [1, 3], f"ddp_kill_in_shrink: finished on 2 ranks, 1 and 3 lost ({s.get('ranks')}, {failed_sets(s)})")
    check(exactly_once(s), "ddp_kill_in_shrink: every sample once per epoch")


def case_ddp_kill_in_sync():
    rc, job, s = ddp(4, "kill:rank=1:step=20,kill:rank=3:step=20:phase=broadcast")
    check(rc == 0, f"ddp_kill_in_sync: exit 0 (got {rc})")
    check(lines_with(job.out, "fault injection on rank 3 at step 20 (broadcast)") == 1,
          "ddp_kill_in_sync: rank 3's kill fired inside a broadcast (the state sync)")
    check(s.get("ranks") == 2 and failed_sets(s) == [1, 3],
          f"ddp_kill_in_sync: finished on 2 ranks, the summary lists ranks 1 and 3 ({s.get('ranks')}, {failed_sets(s)})")
    check(exactly_once(s), "ddp_kill_in_sync: every sample once per epoch")


def case_ddp_kill_at_last_step():
    # 6 epochs of ceil(442 / 40) = 12 steps: step 71 is the last. Some survivors may complete it
    # before the others see the failure: they meet in the trainer's final barrier and recover there.
    rc, job, s = ddp(4, "kill:rank=1:step=71:phase=allreduce")
    check(rc == 0, f"ddp_kill_at_last_step: exit 0 (got {rc})")
    check(s.get("steps") == 72 and s.get("ranks") == 3 and failed_sets(s) == [1] and exactly_once(s),
          f"ddp_kill_at_last_step: 72 steps, 3 ranks, each sample once ({s.get('steps')}, {s.get('ranks')}, {failed_sets(s)})")


def case_linear_sigkill():
    job = Job(4, [PY, LINEAR, "--epochs", "200"])
    pid = pid_of(job.dir, 2)
    end = time.time() + 120
    while time.time() < end and "epoch 5:" not in open(job.log.name).read():
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    rc = job.wait()
    check(rc == 0, f"linear_sigkill: exit 0 (got {rc})")
    check(lines_with(job.out, "ranks [2] failed") == 3, "linear_sigkill: each of the 3 survivors caught RankFailure with failed_ranks [2]")
    check(lines_with(job.out, "epoch 200: loss") == 1 and "on 3 ranks" in job.out.split("epoch 200: loss")[-1].splitlines()[0],
          "linear_sigkill: trained to epoch 200 on 3 ranks")


def case_deterministic():
    sums = {}
    for n, faults in ((2, ""), (3, ""), (4, "kill:rank=3:step=15")):
        rc, job, s = ddp(n, faults, extra=("--deterministic",))
        check(rc == 0 and exactly_once(s), f"deterministic: {n} ranks{' with a kill' if faults else ''}: exit 0, each sample once")
        sums[(n, faults)] = s.get("state_sha256")
    check(len(set(sums.values())) == 1 and None not in sums.values(),
          f"deterministic: the final weights are bitwise identical on 2, 3 and 4-with-a-kill ranks: {set(sums.values())}")


def case_loader():
    # ElasticTrainer fed by the DataLoader a DDP script already has (ElasticDistributedSampler, 2
    # workers, batch_size = global batch / world size): the trainer's exactly-once split, fetched by
    # the loader's workers. Deterministic: 2 ranks on the tensors, 2 ranks on the loader and 4 ranks
    # on the loader with a kill inside an allreduce end with the same weights, so the loader fed the
    # same samples to the same steps, and after the kill re-split the rest as the tensors would.
    sums = {}
    for label, n, faults, extra in (("tensors, 2 ranks", 2, "", ()), ("loader, 2 ranks", 2, "", ("--loader", "2")),
                                    ("loader, 4 ranks, rank 2 killed", 4, "kill:rank=2:step=30:phase=allreduce",
                                     ("--loader", "2"))):
        rc, job, s = ddp(n, faults, extra=("--deterministic", *extra))
        check(rc == 0 and exactly_once(s), f"loader: {label}: exit 0, each sample once per epoch (got {rc})")
        sums[label] = s.get("state_sha256")
    check(len(set(sums.values())) == 1 and None not in sums.values(),
          f"loader: bitwise-identical weights on the tensors and through the loader, with and without a kill: {sums}")
    # The DDP (non-exact) path with rank 0 lost: the loader's workers of the new split on the survivors.
    rc, job, s = ddp(4, "kill:rank=0:step=20", extra=("--loader", "2"))
    check(rc == 0 and s.get("ranks") == 3 and failed_sets(s) == [0] and exactly_once(s),
          f"loader: DDP with rank 0 killed: exit 0 on 3 ranks, each sample once (got {rc}, {s.get('ranks')}, {failed_sets(s)})")
    # Bad data: refused at construction with one line each, nothing trained.
    job = Job(1, [PY, os.path.join(root, "tests", "torch", "trainer_data_prog.py")])
    rc = job.wait()
    refused = [ln for ln in job.out.splitlines() if ln.startswith("refused ")]
    check(rc == 0 and len(refused) == 7 and "ACCEPTED" not in job.out,
          f"loader: 7 bad inputs refused, none accepted (got {rc}, {len(refused)} refused)")


def case_lr_schedule():
    # ElasticTrainer with the program's LR scheduler (StepLR, halved every 7 steps) through a kill
    # inside a step's allreduce: the schedule goes on from the most advanced survivor, so the
    # weights are bitwise those of the fault-free run (deterministic) and the last lr is the
    # schedule's for the number of steps applied.
    runs = {}
    for n, faults in ((2, ""), (4, "kill:rank=3:step=15:phase=allreduce")):
        rc, job, s = ddp(n, faults, extra=("--deterministic", "--lr-halve-every", "7"))
        check(rc == 0 and exactly_once(s), f"lr_schedule: {n} ranks{' with a kill' if faults else ''}: exit 0, each sample once")
        runs[n] = s
    steps = runs[2].get("steps")
    want = 0.05 * 0.5 ** (steps // 7) if steps else None
    check(all(r.get("lr") and abs(r["lr"][0] - want) <= 1e-12 * want for r in runs.values()),
          f"lr_schedule: the last lr is 0.05 * 0.5^({steps} // 7) = {want} on both runs ({[r.get('lr') for r in runs.values()]})")
    check(len(runs[4].get("recoveries", [])) == 1, "lr_schedule: the 4-rank run recovered once")
    check(runs[2].get("state_sha256") and runs[2].get("state_sha256") == runs[4].get("state_sha256"),
          "lr_schedule: the weights are bitwise those of the fault-free run")


def case_same_failure_everywhere():
    job = Job(4, [PY, PROG, "--steps", "60", "--wrong-shrink"], env={"FTCC_FAULTS": "kill:rank=2:step=25:phase=allreduce"})
    rc = job.wait()
    caught = [l for l in job.out.splitlines() if "caught RankFailure" in l]
    check(rc == 0, f"same_failure_everywhere: exit 0 (got {rc})")
    check(len(caught) == 3 and all("failed_ranks [2]" in l and "DistBackendError: True" in l for l in caught),
          "same_failure_everywhere: the 3 survivors each caught RankFailure([2]), a DistBackendError, from DDP's backward")
    check(lines_with(job.out, "refused: ftcc: shrink_group(") == 3 and lines_with(job.out, "pass exactly those") == 3,
          "same_failure_everywhere: shrink_group by the wrong ranks is refused with one line naming the agreed ones")
    check(lines_with(job.out, "done 60 steps on 3 ranks") == 3, "same_failure_everywhere: the survivors finished 60 steps")


def case_program_error():
    job = Job(4, [PY, PROG, "--steps", "40", "--raise-at", "1:10"])
    rc = job.wait()
    check(rc == 4, f"program_error: exit 4 (a job-level error), got {rc}")
    line = "ftcc: job error on rank 1 at step 10: RuntimeError: the program failed on rank 1 at step 10"
    check(sum(1 for l in job.out.splitlines() if l.startswith(line)) == 1,
          "program_error: one line names rank 1, the step and the error")
    check("[rank1]: Traceback" in job.out, "program_error: rank 1's traceback is printed")


def case_no_recovery():
    job = Job(3, [PY, PROG, "--steps", "40", "--no-recover"], env={"FTCC_FAULTS": "kill:rank=2:step=10"})
    rc = job.wait()
    check(rc == 4, f"no_recovery: exit 4, got {rc}")
    check(sum(1 for l in job.out.splitlines() if l.startswith("ftcc: job error on rank")) == 1 and
          lines_with(job.out, "RankFailure") >= 1,
          "no_recovery: one job-error line, naming the RankFailure the program did not catch")


def case_collective_mismatch():
    for kind, calls in (("order", "rank 0 called allreduce(sum, f32, 4 elements); ranks 1, 2 called broadcast(16 bytes, root 0)"),
                        ("shape", "rank 0 called allreduce(sum, f32, 4 elements); ranks 1, 2 called allreduce(sum, f64, 8 elements)")):
        job = Job(3, [PY, PROG, "--steps", "10", "--mismatch-at", f"5:{kind}"])
        rc = job.wait()
        check(rc == 4, f"collective_mismatch {kind}: exit 4 (got {rc})")
        errors = [l for l in job.out.splitlines() if l.startswith("ftcc: job error on rank")]
        check(len(errors) == 1 and f"collective mismatch: {calls}" in errors[0],
              f"collective_mismatch {kind}: one job-error line naming each rank's call ({errors})")
        check(lines_with(job.out, "the mismatched calls returned") == 0, f"collective_mismatch {kind}: no rank returned")


def case_hang_without_heartbeat():
    t0 = time.monotonic()
    job = Job(3, [PY, PROG, "--steps", "40"], env={"FTCC_FAULTS": "hang:rank=1:step=10", "FTCC_HANG_TIMEOUT_S": "0",
                                                   "FTCC_COMM_TIMEOUT_S": "4", "FTCC_ULFM_TIMEOUT_S": "5"})
    rc = job.wait(timeout=120)
    took = time.monotonic() - t0
    check(rc == 5, f"hang_without_heartbeat: exit 5, every rank lost (got {rc}, after {took:.0f} s)")
    check(lines_with(job.out, "rank 1: fenced (SIGKILL) by rank") == 1,
          "hang_without_heartbeat: ftcc-run's line says rank 1 was fenced by a rank leaving at its deadline")
    check(lines_with(job.out, "was stopped while a ULFM call passed its deadline") >= 1,
          "hang_without_heartbeat: the fencing rank said so")


def case_stuck_after_end():
    job = Job(3, [PY, PROG, "--steps", "20", "--stop-at-exit", "2"], env={"FTCC_FINISH_GRACE": "5"})
    rc = job.wait(timeout=120)
    check(rc == 0, f"stuck_after_end: exit 0, the job finished (got {rc})")
    check(lines_with(job.out, "ftcc: the job finished on 3 of 3 ranks") == 1, "stuck_after_end: the job finished on 3 ranks")
    check(lines_with(job.out, "ftcc-run: the job finished on 3 of 3 ranks (0 recoveries); processes still running 5 s "
                              "later were stopped: rank 2 (pid") == 1,
          "stuck_after_end: one line names rank 2, stopped after the grace")


def case_not_under_mpi():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "FTCC_JOB", "MASTER_"))}
    p = subprocess.run([PY, DDP, "--epochs", "1"], capture_output=True, text=True, env=env, timeout=120)
    last = (p.stderr.strip().splitlines() or [""])[-1]
    check(p.returncode != 0 and "tools/ftcc-run -n N python prog.py" in last,
          f"not_under_mpi: refused, the last line says how to launch: {last[:160]}")


def case_mpirun_without_ulfm():
    prefix = os.environ.get("FTCC_MPI_PREFIX", os.path.join(root, ".venv"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FTCC_JOB", "MASTER_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    p = subprocess.run([os.path.join(prefix, "bin", "mpirun"), "--oversubscribe", "-n", "2", PY, DDP, "--epochs", "1"],
                       capture_output=True, text=True, env=env, timeout=120)
    check(p.returncode != 0 and lines_with(p.stdout + p.stderr, "start the program with tools/ftcc-run") >= 1,
          f"mpirun_without_ulfm: refused with the line saying to use tools/ftcc-run (exit {p.returncode})")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}
for name in sys.argv[1:] or CASES:
    print(f"== {name}", flush=True)
    CASES[name]()
print(f"torch failures: {'all passed' if not failures else f'{len(failures)} FAILED: ' + '; '.join(failures)}")
sys.exit(1 if failures else 0)
