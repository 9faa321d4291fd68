"""torch.distributed.all_reduce through backend ftcc and through gloo, in the same job, side by side.

    tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python bench/torch/allreduce_vs_gloo.py [--json out.json]

The default process group is ftcc; a gloo group of the same ranks (dist.new_group, on the job's
FileStore, TCP on loopback) sits beside it. For each size (float32 sum, 8 B to 64 MiB, x4) the two
backends are measured in alternation, rep by rep, so both see the same machine: each iteration is
a barrier on the backend under test, then the all_reduce, timed on every rank; the iteration's
time is the slowest rank's (an allreduce over gloo of the per-rank times, outside the clock). The
table gives medians over the iterations, algbw = bytes / time, busbw = algbw x 2(n-1)/n (nccl-tests'
convention), and ftcc's speed-up (gloo time / ftcc time). Results are checked: every element must
be n(n+1)/2. One compute thread per rank.
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import ftcc_torch  # noqa: F401  (registers "ftcc" and the MPI rendezvous)

p = argparse.ArgumentParser()
p.add_argument("--min-bytes", type=int, default=8)
p.add_argument("--max-bytes", type=int, default=64 << 20)
p.add_argument("--factor", type=int, default=4)
p.add_argument("--iters", type=int, default=0, help="iterations per size and backend (0: by size, 40 down to 8)")
p.add_argument("--json", help="rank 0 writes the rows here")
a = p.parse_args()

torch.set_num_threads(1)
dist.init_process_group("ftcc")
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
groups = {"ftcc": None, "gloo": gloo}


def one(group, buf):
    dist.barrier(group=group)
    t0 = time.perf_counter()
    dist.all_reduce(buf, group=group)
    return time.perf_counter() - t0


rows = []
size = a.min_bytes
while size <= a.max_bytes:
    count = max(1, size // 4)
    iters = a.iters or (40 if size <= (1 << 20) else 16 if size <= (16 << 20) else 8)
    times = {b: [] for b in groups}
    wrong = {b: 0 for b in groups}
    bufs = {b: torch.empty(count) for b in groups}
    for b, g in groups.items():  # warm-up and the check
        bufs[b].fill_(rank + 1)
        dist.all_reduce(bufs[b], group=g)
        wrong[b] = int((bufs[b] != n * (n + 1) / 2).sum())
        one(g, bufs[b])
    for _ in range(iters):
        for b, g in groups.items():
            t = torch.tensor([one(g, bufs[b])], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
            times[b].append(float(t))
    row = {"bytes": count * 4, "ranks": n, "iters": iters}
    for b in groups:
        med = statistics.median(times[b])
        algbw = count * 4 / med / 1e9
        row[b] = {"time_us": med * 1e6, "algbw_GBs": algbw, "busbw_GBs": algbw * 2 * (n - 1) / n, "wrong": wrong[b]}
    row["speedup"] = row["gloo"]["time_us"] / row["ftcc"]["time_us"]
    rows.append(row)
    size *= a.factor

if rank == 0:
    print(f"# torch.distributed.all_reduce, float32 sum, {n} ranks, torch {torch.__version__}: ftcc vs gloo "
          f"(median of the slowest rank's time)")
    print(f"{'bytes':>10} {'ftcc us':>10} {'gloo us':>10} {'ftcc busbw':>11} {'gloo busbw':>11} {'speedup':>8} {'wrong':>6}")
    for r in rows:
        f, g = r["ftcc"], r["gloo"]
        print(f"{r['bytes']:>10} {f['time_us']:>10.1f} {g['time_us']:>10.1f} {f['busbw_GBs']:>10.3f}G {g['busbw_GBs']:>10.3f}G "
              f"{r['speedup']:>7.2f}x {f['wrong'] + g['wrong']:>6}", flush=True)
    if a.json:
        with open(a.json, "w") as fp:
            json.dump(rows, fp, indent=1)
bad = sum(r["ftcc"]["wrong"] + r["gloo"]["wrong"] for r in rows)
dist.destroy_process_group()
raise SystemExit(1 if bad else 0)
