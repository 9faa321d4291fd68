#!/usr/bin/env python3
"""bench/comm/gloo_allreduce.py: PyTorch's gloo allreduce, the peer DDP uses on CPU, in ftcc-bench's columns.

A companion to build/bench/comm/ftcc-bench (ftcc's allreduces against MPI's): the same size sweep
and the same columns (bytes, count, type, algo, time_us = median over iterations of the slowest
rank, algbw, busbw = algbw x 2(n-1)/n, #wrong), float32 sum, so the two tables can be read side by
side. Ranks are N local processes (torch.multiprocessing) over gloo's TCP transport on loopback,
one thread each. Runs in the torch venv of bench/training/torch_env (a benchmark baseline only;
ftcc never depends on torch): started with another Python, it re-runs itself with the venv's.

  bench/comm/gloo_allreduce.py -n 4 -b 8 -e 64M -f 64 --iters 20
"""
import argparse, os, statistics, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PYTHON = os.path.join(ROOT, "bench", "training", ".venv-torch", "bin", "python")
try:
    import torch  # noqa: F401
except ImportError:
    if os.path.exists(VENV_PYTHON) and os.path.abspath(sys.executable) != VENV_PYTHON:
        os.execv(VENV_PYTHON, [VENV_PYTHON, os.path.abspath(__file__), *sys.argv[1:]])
    sys.exit("gloo_allreduce: torch not installed: run bench/training/torch_env")


def parse_size(t):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(t[:-1]) * m[t[-1].upper()]) if t[-1].upper() in m else int(t)


def worker(rank, n, init, a, out):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    rows = []
    size = max(4, a.min_bytes)
    while size <= a.max_bytes:
        count = size // 4
        buf = torch.empty(count, dtype=torch.float32)
        wrong = 0
        # Check: rank r contributes r + 1 everywhere; the sum is n(n+1)/2.
        buf.fill_(rank + 1)
        dist.all_reduce(buf)
        wrong += int((buf != n * (n + 1) / 2).sum())
        for _ in range(a.warmup):
            dist.all_reduce(buf)
        times = []
        for _ in range(a.iters):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            times.append(time.perf_counter() - t0)
        t = torch.tensor(times, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank of each iteration
        w = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(w)
        rows.append((size, count, statistics.median(t.tolist()) * 1e6, int(w.item())))
        size = int(size * a.step_factor)
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=4)
    p.add_argument("-b", "--min-bytes", type=parse_size, default=8)
    p.add_argument("-e", "--max-bytes", type=parse_size, default=64 << 20)
    p.add_argument("-f", "--step-factor", type=float, default=64)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    if a.ranks < 1 or a.iters < 1 or a.step_factor <= 1:
        sys.exit("gloo_allreduce: -n and --iters must be >= 1, -f > 1")
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "store")
        procs = [ctx.Process(target=worker, args=(r, a.ranks, init, a, out)) for r in range(a.ranks)]
        for pr in procs:
            pr.start()
        rows = out.get(timeout=1800)
        for pr in procs:
            pr.join()
        if any(pr.exitcode != 0 for pr in procs):
            sys.exit("gloo_allreduce: a rank failed")
    n = a.ranks
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    print(f"# gloo_allreduce: op allreduce, dtype f32, redop sum, {n} ranks, iters {a.iters} (warmup {a.warmup}), "
          "check on; torch " + __import__("torch").__version__)
    print(f"# time_us: median over iterations of the slowest rank; busbw factor {factor:.3f}")
    print(f"{'bytes':>12} {'count':>12} {'type':>5} {'algo':<12} {'time_us':>11} {'algbw_GB/s':>11} "
          f"{'busbw_GB/s':>11} {'#wrong':>7}")
    total_wrong = 0
    for size, count, us, wrong in rows:
        algbw = size / (us * 1e-6) / 1e9
        total_wrong += wrong
        print(f"{size:12d} {count:12d} {'f32':>5} {'gloo':<12} {us:11.1f} {algbw:11.3f} {algbw * factor:11.3f} {wrong:7d}")
    print(f"# total #wrong: {total_wrong}")
    sys.exit(1 if total_wrong else 0)


if __name__ == "__main__":
    main()
