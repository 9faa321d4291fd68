"""A DDP training loop written the plain-torch way, for tests/torch/failures.py.

Each step: ftcc_torch.begin_step(step) (so FTCC_FAULTS can fire), forward and backward through
DistributedDataParallel (the gradient allreduce happens inside backward()), optimizer step. Every
survivor prints "rank R: caught RankFailure failed_ranks [...] at step S (DistBackendError: True)"
for each failure it sees, so the test can compare what the survivors saw.

  --steps N            steps to run (default 60)
  --raise-at R:S       rank R raises RuntimeError at step S (an error in the program)
  --no-recover         RankFailure is not caught (a program that does not recover)
  --wrong-shrink       on RankFailure, first call dist.shrink_group with the wrong ranks (printed,
                       then the right ones)
  --stop-at-exit R     rank R SIGSTOPs itself in an exit handler that runs after the job ended
  --mismatch-at S:K    at step S the ranks call different collectives (K = order: rank 0 all_reduce
                       then broadcast, the others broadcast then all_reduce; K = shape: rank 0
                       all_reduce of 4 float32, the others of 8 float64)
"""
import argparse
import atexit
import os
import signal

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--raise-at")
p.add_argument("--no-recover", action="store_true")
p.add_argument("--wrong-shrink", action="store_true")
p.add_argument("--mismatch-at")
p.add_argument("--stop-at-exit", type=int, default=-1)
args = p.parse_args()
if int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1")) == args.stop_at_exit:
    # Registered before ftcc_torch is imported, so it runs after ftcc_torch's own exit handler
    # (the job has ended): a process stuck for good after the end.
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGSTOP))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import ftcc_torch  # noqa: E402

torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("ftcc")
ftcc_torch.set_transparent(False)  # the explicit path: RankFailure reaches the program
me = dist.get_rank()  # the original rank: for the messages
model = nn.Sequential(nn.Linear(10, 5), nn.Linear(5, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ddp = DDP(model)
raise_rank, raise_step = (int(v) for v in args.raise_at.split(":")) if args.raise_at else (-1, -1)
step = 0
while step < args.steps:
    ftcc_torch.begin_step(step)
    if me == raise_rank and step == raise_step:
        raise RuntimeError(f"the program failed on rank {me} at step {step}")
    if args.mismatch_at and step == int(args.mismatch_at.split(":")[0]):
        kind = args.mismatch_at.split(":")[1]
        if kind == "order":
            t = torch.ones(4)
            calls = [lambda: dist.all_reduce(t), lambda: dist.broadcast(t, 0)]
            for call in calls if me == 0 else calls[::-1]:
                call()
        else:
            t = torch.ones(4) if me == 0 else torch.ones(8, dtype=torch.float64)
            dist.all_reduce(t)
        print(f"rank {me}: the mismatched calls returned {t.tolist()}", flush=True)
    try:
        opt.zero_grad()
        x = torch.randn(8, 10, generator=torch.Generator().manual_seed(step * 100 + dist.get_rank()))
        ddp(x).pow(2).mean().backward()
        opt.step()
        step += 1
    except ftcc_torch.RankFailure as e:
        print(f"rank {me}: caught RankFailure failed_ranks {e.failed_ranks} at step {step} "
              f"(DistBackendError: {isinstance(e, dist.DistBackendError)})", flush=True)
        if args.no_recover:
            raise
        if args.wrong_shrink:
            wrong = [r for r in range(dist.get_world_size()) if r not in e.failed_ranks and r != dist.get_rank()][:1]
            try:
                dist.shrink_group(wrong)
            except (ValueError, RuntimeError) as bad:
                print(f"rank {me}: shrink_group({wrong}) refused: {bad}", flush=True)
        dist.shrink_group(e.failed_ranks)
        # A survivor may have applied the step in flight when another did not: go on from the
        # furthest step, with rank 0's weights (DDP broadcasts them when it is built).
        s = torch.tensor([step])
        dist.all_reduce(s, op=dist.ReduceOp.MAX)
        step = int(s)
        ddp = DDP(model)
print(f"rank {me}: done {step} steps on {dist.get_world_size()} ranks", flush=True)
