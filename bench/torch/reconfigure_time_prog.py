"""One side of bench/torch/reconfigure_time: a group of 4 reconfigured again and again on the
backend named, shrinking to 3 (the last rank left out) and growing back to 4, each step timed on
rank 0 (dist._reconfigure(...).wait(), after a store barrier that starts every member together),
an all_reduce checking each new group. Prints `RECONF {"shrink_ms": [...], "grow_ms": [...]}`.

  prog.py BACKEND STORE_FILE REPS   (RANK and WORLD_SIZE from the environment, or the MPI job's)
"""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

backend, store_file, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if backend == "ftcc":
    import ftcc_torch  # noqa: F401
    rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
else:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.FileStore(store_file, world)
store.set_timeout(timedelta(seconds=120))
dist.init_process_group(backend, rank=rank, world_size=world, store=store, timeout=timedelta(seconds=60),
                        enable_reconfigure=True)
n_barrier = 0


def barrier():
    global n_barrier
    n_barrier += 1
    store.set(f"b{n_barrier}/{rank}", "1")
    for r in range(world):
        store.get(f"b{n_barrier}/{r}")


def handles(key):
    store.set(f"{key}/{rank}", dist._get_reconfigure_handle())
    return [store.get(f"{key}/{r}").decode() for r in range(world)]


def check(n):
    t = torch.ones(4)
    dist.all_reduce(t)
    assert dist.get_world_size() == n and torch.equal(t, torch.full((4,), float(n))), (dist.get_world_size(), t)


uuid = 1
dist._reconfigure(uuid, handles("h0")).wait()
check(world)
shrink, grow = [], []
for rep in range(reps):
    hs = handles(f"h{rep + 1}")
    barrier()
    if rank < world - 1:
        t0 = time.perf_counter()
        dist._reconfigure(uuid + 1, hs[:world - 1]).wait()
        shrink.append((time.perf_counter() - t0) * 1e3)
        check(world - 1)
    hs = handles(f"g{rep + 1}")
    barrier()
    t0 = time.perf_counter()
    dist._reconfigure(uuid + 2, hs).wait()
    grow.append((time.perf_counter() - t0) * 1e3)
    check(world)
    uuid += 2
if rank == 0:
    print("RECONF " + json.dumps({"shrink_ms": shrink, "grow_ms": grow}), flush=True)
barrier()
dist.destroy_process_group()
