"""The per-call cost of torch.distributed.all_reduce when calls follow each other with nothing in
between: ftcc, then gloo, then ftcc again (the same job; the repeat shows the run-to-run spread).

    tools/ftcc-run -n N bench/training/.venv-torch/bin/python bench/torch/back_to_back.py [--bytes 8] [--calls 2000]

Each backend: 200 calls to warm up, a barrier, then --calls calls timed as a whole on every rank;
rank 0 prints the mean time per call. float32 sum of --bytes bytes; one compute thread per rank.
The result is checked (every element n(n+1)/2 after the last call of a fresh buffer).
"""
import argparse
import time

import torch
import torch.distributed as dist

import ftcc_torch  # noqa: F401  (registers "ftcc" and the MPI rendezvous)

p = argparse.ArgumentParser()
p.add_argument("--bytes", type=int, default=8)
p.add_argument("--calls", type=int, default=2000)
a = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("ftcc")
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
count = max(1, a.bytes // 4)
wrong = 0
for name, group in (("ftcc", None), ("gloo", gloo), ("ftcc", None)):
    x = torch.full((count,), float(rank + 1))
    dist.all_reduce(x, group=group)
    wrong += int((x != n * (n + 1) / 2).sum())
    for _ in range(200):
        dist.all_reduce(x, group=group)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(a.calls):
        dist.all_reduce(x, group=group)
    us = (time.perf_counter() - t0) / a.calls * 1e6
    if rank == 0:
        print(f"{name}: {us:.1f} us per back-to-back all_reduce of {count * 4} B ({n} ranks, {a.calls} calls)", flush=True)
if rank == 0:
    print(f"wrong elements: {wrong}", flush=True)
dist.destroy_process_group()
