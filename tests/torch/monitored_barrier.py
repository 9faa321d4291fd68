"""dist.monitored_barrier on ftcc, 3 ranks (tests/torch/run.sh 3 tests/torch/monitored_barrier.py):

1. every rank arrives: it passes on every rank (wait_all_ranks False and True);
2. rank 2 arrives 2.5 s late with a 1 s timeout: rank 0 raises naming rank 2 (torch's words for
   gloo's: "Rank 2 failed to pass monitoredBarrier in 1000 ms"), rank 1 (on time) is let go, rank 2
   raises because rank 0 did not let it go. Rank 0 itself arrives 0.4 s after rank 1, so rank 1's
   clock starts first: it is still let go (it waits for rank 0's verdict, not its own 1 s);
3. the group is usable after it: all_reduce gives 1 + 2 + 3 on every rank.
Exits 1 with a line per failed check.
"""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ftcc_torch  # noqa: F401

dist.init_process_group("ftcc")
me, n = dist.get_rank(), dist.get_world_size()
bad = []


def check(cond, what):
    if not cond:
        bad.append(what)
        print(f"FAIL rank {me}: {what}", flush=True)


for wait_all in (False, True):
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=10), wait_all_ranks=wait_all)
    except RuntimeError as e:
        check(False, f"all arrive (wait_all_ranks={wait_all}): raised {e}")

if me == 2:
    time.sleep(2.5)
elif me == 0:
    time.sleep(0.4)
err = None
try:
    dist.monitored_barrier(timeout=timedelta(seconds=1))
except RuntimeError as e:
    err = str(e)
if me == 0:
    check(err is not None and "Rank 2 failed to pass monitoredBarrier in 1000 ms" in err, f"rank 0 names rank 2 ({err!r})")
elif me == 1:
    check(err is None, f"rank 1 arrived on time and is let go ({err!r})")
else:
    check(err is not None and "rank 0 did not let this rank go" in err, f"rank 2 is told ({err!r})")

t = torch.full((4,), me + 1.0)
dist.all_reduce(t)
check(torch.equal(t, torch.full((4,), n * (n + 1) / 2)), f"the group is usable after it ({t.tolist()})")
print(f"rank {me}: {'ok' if not bad else 'FAILED'} ({err!r})", flush=True)
sys.exit(1 if bad else 0)
