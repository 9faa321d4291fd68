#!/usr/bin/env python3
"""bench/training/ddp_baseline.py: bench/training/run's data-parallel workload under PyTorch DDP.

A baseline for ftcc-train, never a part of ftcc: run it with the venv of bench/training/torch_env
(it re-runs itself with bench/training/.venv-torch/bin/python when the interpreter has no torch).

  bench/training/ddp_baseline.py -n 4 [--steps 30] [--batch 256]
  tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python bench/training/ddp_baseline.py --backend ftcc
                                       (the same workload through torch.distributed on ftcc;
                                       bench/torch/ddp_vs_gloo runs both backends side by side)

The workload is ftcc-train's as bench/training/run launches it (--dataset synthetic:2048:784:10
--layers 784,1024,1024,10 --batch 256 --lr 0.01 --held-out 0.1; ftcc's defaults for the rest):
  data     2048 samples: x ~ N(0, 1) [2048, 784], y = tanh(x W^T) with W ~ N(0, 1/784) [10, 784];
           10% (205) held out, the features standardized with the training set's mean and stddev
  model    Linear 784-1024-1024-10 with ReLU between, PyTorch's default initialization
  loss     MSE, the mean over the global batch (every rank's partial sum divided by B * 10)
  optim    SGD, lr 0.01, momentum 0.9
  batches  global batch 256 a step, a fresh permutation of the 1843 training samples each epoch,
           the last batch of an epoch partial (51); each step's batch split over the ranks in
           whole micro-batches of 8, as ftcc's sampler splits it
  per step forward, backward (DDP allreduces the gradients in 25 MB buckets, as ftcc's
           --bucket-mb default), one small allreduce of the loss (ftcc's trainer allreduces the
           loss, its finite check and the sample tally every step), SGD step
  at end   MSE over the whole training set and over the held-out set, on every rank (as ftcc's
           data-parallel trainer does)
torch.distributed with the gloo backend on CPU, DistributedDataParallel, N local processes
(torch.multiprocessing.spawn), one thread per rank: torch.set_num_threads(1),
torch.set_num_interop_threads(1), OMP_NUM_THREADS=MKL_NUM_THREADS=1 (ftcc-train computes on one
thread per rank: Eigen, without OpenMP or a threaded BLAS).

Rank 0 prints one JSON line on stdout, with the two figures of ftcc's FTCC_SUMMARY:
  samples_per_s       samples trained / wall_s, wall_s from just after init_process_group (ftcc:
                      from the trainer's start, after MPI_Init) to the end of the final evaluation:
                      data, model, DDP set-up and the evaluation included; Python imports are
                      before the clock (ftcc's code is loaded before its clock too), among them
                      torch._dynamo, which the first DDP() would otherwise import inside it
  step_samples_per_s  steady state: the samples of the steps after the first, over the time from
                      the end of the first step to the end of the last (ftcc's ProgressReporter)
"""
import argparse, json, os, resource, socket, sys, time

here = os.path.dirname(os.path.abspath(__file__))
venv = os.path.join(here, ".venv-torch")
venv_python = os.path.join(venv, "bin", "python")

# One compute thread per rank, set before torch loads its OpenMP/MKL runtimes (the spawned ranks
# inherit the environment).
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank on this host: loopback

try:
    import torch
except ImportError:
    if os.path.exists(venv_python) and os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(venv_python, [venv_python, os.path.abspath(__file__), *sys.argv[1:]])
    sys.exit("ddp_baseline.py: torch not installed: run bench/training/torch_env")
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
if __name__ != "__main__":  # in the spawned ranks (__mp_main__), not in the launcher
    try:  # the first DDP() imports torch._dynamo (1.3-1.6 s here): an import, so before the clock
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass


def make_data(a):
    """The synthetic data set and its split, standardized (same shapes and law as ftcc's synthetic)."""
    g = torch.Generator().manual_seed(a.seed)
    x = torch.randn(a.samples, a.inputs, generator=g, dtype=torch.float32)
    w = torch.randn(a.outputs, a.inputs, generator=g, dtype=torch.float32) / a.inputs ** 0.5
    y = torch.tanh(x.double() @ w.double().t()).float()
    order = torch.randperm(a.samples, generator=g)
    held = round(a.held_out * a.samples)
    test, train = order[:held], order[held:]
    xtr, ytr, xte, yte = x[train], y[train], x[test], y[test]
    mean = xtr.double().mean(0)
    std = xtr.double().std(0, unbiased=False).clamp_min(1e-12)
    xtr = ((xtr.double() - mean) / std).float()
    xte = ((xte.double() - mean) / std).float()
    return xtr, ytr, xte, yte


def rank_slice(size, world, rank, micro):
    """ftcc's DistributedSampler::rank_range: whole micro-batches, split as evenly as can be."""
    m = (size + micro - 1) // micro
    b, e = rank * m // world, (rank + 1) * m // world
    return min(size, b * micro), min(size, e * micro)


def worker(rank, world, port, a, out):
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(a.threads)
    if port is None:  # under tools/ftcc-run: the MPI job is the rendezvous (ftcc_torch's env://)
        dist.init_process_group(a.backend)
    else:
        dist.init_process_group(a.backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t_start = time.perf_counter()

    xtr, ytr, xte, yte = make_data(a)
    torch.manual_seed(a.seed)
    widths = [a.inputs, 1024, 1024, a.outputs]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = DDP(torch.nn.Sequential(*layers), bucket_cap_mb=25)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)

    n = xtr.shape[0]
    steps_per_epoch = (n + a.batch - 1) // a.batch
    perm_gen = torch.Generator().manual_seed(a.seed + 1)
    perm = None
    seen = steady_samples = 0
    first_done = last_done = None
    last_loss = 0.0
    for step in range(a.steps):
        epoch_step = step % steps_per_epoch
        if epoch_step == 0:
            perm = torch.randperm(n, generator=perm_gen)
        begin = epoch_step * a.batch
        size = min(a.batch, n - begin)
        lo, hi = rank_slice(size, world, rank, a.micro_batch)
        ids = perm[begin + lo:begin + hi]
        opt.zero_grad(set_to_none=False)
        # DDP averages the gradients over the ranks: scale by the world size so the result is the
        # gradient of the global batch's mean loss (a rank with no samples still joins the allreduce).
        out_ = model(xtr[ids])
        loss = ((out_ - ytr[ids]) ** 2).sum() * (world / (size * a.outputs))
        loss.backward()
        stats = torch.tensor([loss.item() / world], dtype=torch.float64)
        dist.all_reduce(stats)
        opt.step()
        last_loss = stats.item()
        now = time.perf_counter()
        if step == 0:
            first_done = now
        else:
            steady_samples += size
        last_done = now
        seen += size

    with torch.no_grad():
        net = model.module
        final_loss = torch.nn.functional.mse_loss(net(xtr), ytr).item()
        eval_mse = torch.nn.functional.mse_loss(net(xte), yte).item()
    wall = time.perf_counter() - t_start
    # Peak resident memory of each rank's process (KB on Linux), the largest over the ranks.
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        steady = steady_samples / (last_done - first_done) if a.steps > 1 and last_done > first_done else 0.0
        result = {"samples_per_s": seen / wall, "step_samples_per_s": steady, "wall_s": wall,
                  "steps": a.steps, "samples_seen": seen, "world_size": world, "final_loss": final_loss,
                  "eval_name": "mse", "eval_metric": eval_mse, "last_step_loss": last_loss,
                  "torch": torch.__version__, "backend": a.backend, "threads_per_rank": torch.get_num_threads(),
                  "peak_rss_kb_max": int(rss.item())}
        if out is None:
            print(json.dumps(result, sort_keys=True), flush=True)
        else:
            out.put(result)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--ranks", type=int, default=1, help="local processes (ranks)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=256, help="global batch")
    p.add_argument("--samples", type=int, help="data set size (default batch * 8, as bench/training/run)")
    p.add_argument("--inputs", type=int, default=784)
    p.add_argument("--outputs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--held-out", type=float, default=0.1)
    p.add_argument("--micro-batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    p.add_argument("--backend", default="gloo", help="gloo (default), or ftcc: then run it under tools/ftcc-run -n N "
                   "(every rank is a process of the MPI job; -n is ignored), as gloo may be too")
    a = p.parse_args()
    if a.samples is None:
        a.samples = a.batch * 8
    if a.ranks < 1 or a.steps < 1:
        sys.exit("ddp_baseline.py: --ranks and --steps must be at least 1")
    if "OMPI_COMM_WORLD_SIZE" in os.environ:  # launched by tools/ftcc-run: this process is one rank
        import ftcc_torch  # noqa: F401  (the "ftcc" backend and the MPI rendezvous)
        worker(int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"]), None, a, None)
        return
    if a.backend != "gloo":
        sys.exit(f"ddp_baseline.py: backend {a.backend}: launch under tools/ftcc-run -n N")
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(worker, args=(a.ranks, port, a, out), nprocs=a.ranks, join=True)
    print(json.dumps(out.get(), sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
