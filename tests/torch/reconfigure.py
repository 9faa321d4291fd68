"""torch's reconfigure contract on ftcc, and past it, with real processes.

  contract     tests/torch/reconfigure_contract.py (the scenarios of torch 2.15's
               test_c10d_fault_tolerance.py) on 3 ranks: 12 passed on every rank, the nccl2-only
               one skipped, exit 0
  kill         tests/torch/reconfigure_prog.py on 4 ranks: bad handles refused with one line,
               members that disagree on the uuid told so within the timeout;
               rank 2 SIGKILLed from outside mid-run: RankFailure([2]) on every survivor, a
               reconfigure naming rank 2 refused alike on every survivor, survivor_handles() goes
               on with 3; rank 3 dies as a group forms: refused alike, never a hang; exit 0
  uncaught     a refused reconfigure the program does not catch: exit 4, one job-error line

    bench/training/.venv-torch/bin/python tests/torch/reconfigure.py [case ...]
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import Job, check, failures, pid_of, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
HERE = os.path.join(root, "tests", "torch")


def tagged(job, tag):
    return [json.loads(l.split(tag + " ", 1)[1]) for l in job.out.splitlines() if l.startswith(tag + " ")]


def case_contract():
    job = Job(3, [PY, os.path.join(HERE, "reconfigure_contract.py")])
    rc = job.wait(timeout=150)  # about 8 s
    res = {r["rank"]: r for r in tagged(job, "CONTRACT")}
    check(rc == 0 and sorted(res) == [0, 1, 2], f"contract: exit 0, every rank reported (got {rc}, {sorted(res)})")
    for r, x in sorted(res.items()):
        check(len(x["passed"]) == 12 and not x["failed"] and x["skipped"] == ["test_reconfigure_after_timeout"],
              f"contract: rank {r}: 12 of 12 passed, the nccl2-only one skipped "
              f"({len(x['passed'])} passed, failed {x['failed']}, skipped {x['skipped']})")


def case_kill():
    job = Job(4, [PY, os.path.join(HERE, "reconfigure_prog.py")], env={"STEPS": "5000"})
    pid = pid_of(job.dir, 2)
    check(job.wait_for("step-300", timeout=120), "kill: 300 steps on the reconfigured group before the kill")
    os.kill(pid, signal.SIGKILL)
    rc = job.wait(timeout=240)
    res = {r["orig"]: r for r in tagged(job, "RESULT")}
    check(rc == 0 and sorted(res) == [0, 1], f"kill: exit 0, the 2 last survivors reported (got {rc}, {sorted(res)})")
    if sorted(res) != [0, 1]:
        print(job.out[-3000:])
        return
    a, b = res[0], res[1]
    check(all(r["phase1"] == {"size": 4, "rank": r["orig"], "sum": 4.0} for r in (a, b)),
          f"kill: reconfigured from survivor_handles() to 4 ranks, all_reduce 4 ({a['phase1']}, {b['phase1']})")
    check(a["own_handle_names_rank"] and b["own_handle_names_rank"], "kill: a process's own handle names its job rank")
    want = {"reused_uuid": "uuid 10 was already used", "foreign": "is not an ftcc handle",
            "duplicate": "two handles name rank 0", "not_member": "is not among the",
            "out_of_job": "names rank 99 but the job has 4"}
    for k, text in want.items():
        got = a["bad_input"][k]
        other = b["bad_input"][k]
        check(all(x is not None and text in x and x.startswith("ftcc: reconfigure:") for x in (got, other)),
              f"kill: bad input {k}: refused on every rank with one line saying '{text}' ({got!r})")
    d0, d1 = a["bad_input"]["disagree"], b["bad_input"]["disagree"]
    check(d0 is not None and "ranks [1] of the job did not call it" in d0 and "rank 1 called it with uuid 31" in d0
          and d1 is not None and "ranks [0] of the job did not call it" in d1 and "rank 0 called it with uuid 30" in d1,
          f"kill: members that pass different uuids are both told who and what within the timeout ({d0!r}, {d1!r})")
    check(a["after_bad_input"] == {"size": 4, "sum": 4.0}, "kill: the group is untouched by the refused calls")
    check(all(r["failure"] and r["failure"]["failed_ranks"] == [2] for r in (a, b)),
          f"kill: the reconfigured group's call raised RankFailure([2]) ({a['failure']}, {b['failure']})")
    check(a["dead_handle"] is not None and a["dead_handle"] == b["dead_handle"] and "ranks [2] of the job" in a["dead_handle"],
          f"kill: reconfigure naming the dead rank is refused alike on every survivor ({a['dead_handle']!r})")
    check(a["survivors"] == b["survivors"] == ["ftcc:0", "ftcc:1", "ftcc:3"],
          f"kill: survivor_handles() is the agreed survivors ({a['survivors']})")
    check(a["phase2"] == {"size": 3, "rank": 0, "sum": 3.0} and b["phase2"] == {"size": 3, "rank": 1, "sum": 3.0},
          f"kill: reconfigured to the 3 survivors, all_reduce 3 ({a['phase2']}, {b['phase2']})")
    check(a["dies_while_forming"] is not None and a["dies_while_forming"] == b["dies_while_forming"]
          and "ranks [3] of the job" in a["dies_while_forming"],
          f"kill: a member dead as the group forms: refused alike ({a['dies_while_forming']!r}, {b['dies_while_forming']!r})")
    check(a["phase3"] == {"size": 2, "rank": 0, "sum": 2.0} and b["phase3"] == {"size": 2, "rank": 1, "sum": 2.0},
          f"kill: the last two go on ({a['phase3']}, {b['phase3']})")


def case_uncaught():
    job = Job(2, [PY, os.path.join(HERE, "reconfigure_prog.py")], env={"UNCAUGHT": "1"})
    rc = job.wait(timeout=120)
    check(rc == 4, f"uncaught: a refused reconfigure the program does not catch ends the job with exit 4 (got {rc})")
    lines = [l for l in job.out.splitlines() if l.startswith("ftcc: job error on rank")]
    check(len(lines) == 1 and "is not an ftcc handle" in lines[0],
          f"uncaught: one job-error line naming the refusal ({lines})")


if __name__ == "__main__":
    cases = sys.argv[1:] or ["contract", "kill", "uncaught"]
    for c in cases:
        t0 = time.time()
        globals()["case_" + c]()
        print(f"     ({c}: {time.time() - t0:.1f} s)", flush=True)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
