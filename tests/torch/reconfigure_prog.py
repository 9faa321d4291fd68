"""reconfigure beyond torch's contract, on 4 ranks (run by tests/torch/reconfigure.py):

1. the group reconfigured to every rank from ftcc's own handle set (ftcc_torch.survivor_handles);
   bad handles refused with one line each, before anything is formed; two members that pass
   different uuids both told so within the timeout;
2. training steps of all_reduce until rank 2 is SIGKILLed from outside: every survivor's call
   raises RankFailure([2]); reconfigure with the old handles (rank 2's among them) is refused on
   every survivor with the same line; reconfigure with survivor_handles() goes on with 3 ranks;
3. rank 3 (original) kills itself just before a reconfigure that names it: the others' reconfigure
   fails with the same line (never a hang), and a reconfigure of the two left works.
Each survivor prints RESULT {json}.
"""
import json
import os
import signal
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import ftcc_torch

dist.init_process_group("ftcc")
me = dist.get_rank()
res = {"orig": me, "bad_input": {}}


def reconfigure(uuid, handles):
    dist._reconfigure(uuid, handles).wait()


def refused(uuid, handles):
    try:
        reconfigure(uuid, handles)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


def total(value=1.0):
    t = torch.full((4,), value)
    dist.all_reduce(t)
    return t[0].item() if torch.equal(t, t[0].expand(4)) else None


if os.environ.get("UNCAUGHT"):  # a program that lets a refused reconfigure leave it: exit 4
    reconfigure(40, ["gloo:tcp://10.0.0.1:29500"])

# 1. every rank, from ftcc's handle set; then bad input.
all_handles = ftcc_torch.survivor_handles()
reconfigure(10, all_handles)
res["phase1"] = {"size": dist.get_world_size(), "rank": dist.get_rank(), "sum": total()}
mine = dist._get_reconfigure_handle()
res["own_handle_names_rank"] = mine.startswith(f"ftcc:{me}:")
res["bad_input"]["reused_uuid"] = refused(10, all_handles)
res["bad_input"]["foreign"] = refused(20, ["gloo:tcp://10.0.0.1:29500"] + all_handles[1:])
res["bad_input"]["duplicate"] = refused(21, all_handles + [all_handles[0]])
res["bad_input"]["not_member"] = refused(22, [h for h in all_handles if h != f"ftcc:{me}"])
res["bad_input"]["out_of_job"] = refused(23, all_handles + ["ftcc:99"])
# Members that disagree (rank 1 passes another uuid): both told within the timeout, who and what.
if me in (0, 1):
    try:
        dist._reconfigure(30 + me, all_handles[:2], timeout=timedelta(seconds=2)).wait()
        res["bad_input"]["disagree"] = None
    except RuntimeError as e:
        res["bad_input"]["disagree"] = str(e).splitlines()[0]
res["after_bad_input"] = {"size": dist.get_world_size(), "sum": total()}

# 2. steps until the driver kills rank 2.
steps = int(os.environ.get("STEPS", "3000"))
failure = None
for step in range(steps):
    try:
        total()
    except ftcc_torch.RankFailure as e:
        failure = {"step": step, "failed_ranks": e.failed_ranks, "line": str(e).splitlines()[0]}
        break
    if me == 0 and step == 300:  # the driver kills rank 2 once this exists
        open(os.path.join(os.environ["FTCC_JOB_DIR"], "step-300"), "w").close()
    time.sleep(0.002)
res["failure"] = failure
res["dead_handle"] = refused(11, all_handles)
survivors = ftcc_torch.survivor_handles()
res["survivors"] = survivors
reconfigure(12, survivors)
res["phase2"] = {"size": dist.get_world_size(), "rank": dist.get_rank(), "sum": total()}

# 3. a member dies as the group forms.
if me == 3:
    os.kill(os.getpid(), signal.SIGKILL)
res["dies_while_forming"] = refused(13, survivors)
reconfigure(14, ftcc_torch.survivor_handles())
res["phase3"] = {"size": dist.get_world_size(), "rank": dist.get_rank(), "sum": total()}
print("RESULT " + json.dumps(res), flush=True)
