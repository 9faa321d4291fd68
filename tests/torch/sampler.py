"""ftcc_torch.ElasticDistributedSampler under real kills: tests/torch/sampler_prog.py (DDP on the
diabetes data set, DataLoader with 2 workers, 4 ranks, 2 epochs), every use of every sample counted
through DDP's own gradient mean (a float64 entry per epoch and sample: 1/W per use in a step of W
contributing ranks).

  mid_epoch        rank 2 killed at the start of step 5 (lookahead 8): in epoch 0 the 32 x 5
                   samples of steps 0-4 count 1/4, the other 282 exactly 1/3 (the lost rank's
                   share re-split over the survivors), none missing or twice; epoch 1: all 1/3
  end_of_epoch     rank 1 killed at step 12 of epoch 0's 14, after the loader read to the end:
                   its 15 samples it could not train are carried to the start of epoch 1 and
                   counted there (carried == missing in epoch 0 == twice-used in epoch 1)
  outside_sigkill  rank 3 SIGKILLed from outside mid-run (slowed steps): the same accounting holds
                   whatever step it lands on
  lookahead_short  lookahead=2 with a 2-worker loader: the survivors refuse with one line naming
                   lookahead (exit 4), rather than split the epoch differently

    bench/training/.venv-torch/bin/python tests/torch/sampler.py [case ...]
"""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import Job, check, failures, lines_with, pid_of, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
PROG = os.path.join(root, "tests", "torch", "sampler_prog.py")
N = 442


def run(name, env, kill=None):
    job = Job(4, [PY, PROG], env=env)
    if kill:
        rank, delay = kill
        pid = pid_of(job.dir, rank)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
    rc = job.wait(timeout=240)
    res = [json.loads(l.split("RESULT ", 1)[1]) for l in job.out.splitlines() if l.startswith("RESULT ")]
    return rc, job, (res[0] if res else None)


def accounting(name, r):
    """Each sample used once per epoch, or carried into the next one and used there."""
    e0, e1 = r["epochs"]
    carried = r["carried"][1]
    check(e0["zero"] == carried and e0["other"] == 0,
          f"{name}: epoch 0: the samples not used in it ({e0['zero']}) are the ones carried to epoch 1 ({carried}); "
          f"none used twice ({e0['other']})")
    check(e1["zero"] == 0 and e1["other"] == carried and e1["third"] == N - carried,
          f"{name}: epoch 1: every sample used once on 3 ranks ({e1['third']}), the {carried} carried ones once more "
          f"({e1['other']})")
    cut = r["cuts"][0] if r["cuts"] else -1
    if 0 <= cut < r["steps_per_epoch"][0]:
        check(e0["quarter"] == 32 * cut and e0["third"] == N - 32 * cut - carried,
              f"{name}: epoch 0: the {32 * cut} samples of the {cut} steps on 4 ranks count 1/4, the other "
              f"{N - 32 * cut - carried} 1/3 (got {e0['quarter']} and {e0['third']})")


def case_mid_epoch():
    rc, job, r = run("mid_epoch", {"FTCC_FAULTS": "kill:rank=2:step=5", "LOOKAHEAD": "8"})
    check(rc == 0 and r is not None, f"mid_epoch: exit 0 and a result (got {rc})")
    if r:
        check(r["size"] == 3 and r["cuts"] == [5] and r["carried"] == [0, 0],
              f"mid_epoch: 3 ranks, the first step without rank 2 is 5, nothing carried ({r['cuts']}, {r['carried']})")
        check(r["epochs"][0]["zero"] == 0 and r["epochs"][0]["quarter"] == 160 and r["epochs"][0]["third"] == 282,
              f"mid_epoch: epoch 0: 160 samples at 1/4, 282 at 1/3, none missing ({r['epochs'][0]})")
        accounting("mid_epoch", r)


def case_end_of_epoch():
    rc, job, r = run("end_of_epoch", {"FTCC_FAULTS": "kill:rank=1:step=12"})
    check(rc == 0 and r is not None, f"end_of_epoch: exit 0 and a result (got {rc})")
    if r:
        check(r["cuts"] == [12] and r["carried"][1] > 0, f"end_of_epoch: rank 1's late samples carried ({r['carried']})")
        accounting("end_of_epoch", r)


def case_outside_sigkill():
    rc, job, r = run("outside_sigkill", {"SLEEP_MS": "150"}, kill=(3, 2.5))
    check(rc == 0 and r is not None, f"outside_sigkill: exit 0 and a result (got {rc})")
    if r:
        check(r["lost"] == [[3]], f"outside_sigkill: rank 3 lost ({r['lost']}, first step without it {r['cuts']})")
        accounting("outside_sigkill", r)


def case_lookahead_short():
    rc, job, r = run("lookahead_short", {"FTCC_FAULTS": "kill:rank=2:step=5", "LOOKAHEAD": "2"})
    check(rc == 4, f"lookahead_short: exit 4 (got {rc})")
    check(lines_with(job.out, "RuntimeError: ElasticDistributedSampler: the data loader had read") >= 1
          and lines_with(job.out, "raise lookahead") >= 1, "lookahead_short: the error names lookahead")


if __name__ == "__main__":
    names = sys.argv[1:] or [n[5:] for n in list(globals()) if n.startswith("case_")]
    for n in names:
        print(f"== {n}", flush=True)
        globals()["case_" + n]()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
