"""Sub-groups on ftcc under a real kill: tests/torch/groups_prog.py on 4 ranks.

  fault_free   new_group, split_group and a 2 x 2 DeviceMesh give the values they must, with
               the ranks they must
  kill_rank2   rank 2 SIGKILLed from outside mid-run: the default group and the mesh's replica
               group (set_transparent(True, group)) go on with the survivors, counted by their
               all_reduce; rank 3, whose shard group lost rank 2, gets RankFailure([0]) there
               (a sub-group is explicit by default) and goes on without it; exit 0

    bench/training/.venv-torch/bin/python tests/torch/groups.py [case ...]
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import Job, check, failures, lines_with, pid_of, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
PROG = os.path.join(root, "tests", "torch", "groups_prog.py")


def results(job):
    return {r["orig"]: r for r in (json.loads(l.split("RESULT ", 1)[1]) for l in job.out.splitlines()
                                    if l.startswith("RESULT "))}


def case_fault_free():
    job = Job(4, [PY, PROG])
    rc = job.wait(timeout=120)
    res = results(job)
    check(rc == 0 and sorted(res) == [0, 1, 2, 3], f"fault_free: exit 0, 4 results (got {rc}, {sorted(res)})")
    for name in ("new_group", "split_group", "mesh", "mesh_replicate_members"):
        check(all(r["checks"].get(name) for r in res.values()), f"fault_free: {name} on every rank")


def case_kill_rank2():
    job = Job(4, [PY, PROG], env={"STEPS": "1500"})
    pid = pid_of(job.dir, 2)
    # Inside the loop, once every group is built (a fixed delay from start missed it on a loaded
    # machine): 1 s of the loop's 15 s after rank 2 says it started it.
    end = time.time() + 120
    while time.time() < end and "rank 2: loop started" not in open(job.log.name).read():
        time.sleep(0.05)
    time.sleep(1)
    os.kill(pid, signal.SIGKILL)
    rc = job.wait(timeout=240)
    res = results(job)
    check(rc == 0 and sorted(res) == [0, 1, 3], f"kill_rank2: exit 0, the 3 survivors reported (got {rc}, {sorted(res)})")
    if sorted(res) != [0, 1, 3]:
        return
    check(all(r["size"] == 3 for r in res.values()), "kill_rank2: the default group has 3 ranks")
    check(res[0]["rep_size"] == 1 and res[1]["rep_size"] == 2 and res[3]["rep_size"] == 2,
          "kill_rank2: rank 0's replica group [0, 2] shrank to 1, the others kept 2")
    check(all(r["checks"].get("default_group_counts_survivors") and r["checks"].get("replica_group_counts_survivors")
              for r in res.values()), "kill_rank2: all_reduce on the default and replica groups counts the survivors")
    check(res[3]["shard_failure"] == [0] and res[0]["shard_failure"] is None and res[1]["shard_failure"] is None,
          f"kill_rank2: only rank 3's shard group raised, RankFailure([0]) "
          f"({[res[k]['shard_failure'] for k in (0, 1, 3)]})")
    check(lines_with(job.out, "the group recovers explicitly") >= 1, "kill_rank2: the explicit group's line says why")


if __name__ == "__main__":
    names = sys.argv[1:] or [n[5:] for n in list(globals()) if n.startswith("case_")]
    for n in names:
        print(f"== {n}", flush=True)
        globals()["case_" + n]()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
