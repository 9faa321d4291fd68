"""Example 3: DDP as torch users write it, with a DataLoader: nothing ftcc-specific but the
backend name and the sampler. A lost or hung rank is recovered inside the collective that saw it
(transparent recovery): the loop goes on, get_world_size() says the new size, DDP's gradient is
the mean over the ranks that took part, and ElasticDistributedSampler re-splits the rest of the
epoch over the survivors, so every sample is used once per epoch.

Model, data and batch are examples/torch_ddp.py's (diabetes, Sequential(Linear(10, 5),
Linear(5, 1)), MSELoss, SGD, a global batch of 40 as --batch per rank at 4 ranks).

    tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python examples/torch_ddp_plain.py

--explicit turns transparent recovery off (a loss raises RankFailure: the program would have to
recover itself; for comparing speed). FTCC_TORCH_STEP_LOG: rank 0 appends "step time ranks" after
each step (bench/torch/kill_to_next_step reads it).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from diabetes import load

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--epochs", type=int, default=20)
p.add_argument("--batch", type=int, default=10, help="samples per rank and step")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
p.add_argument("--explicit", action="store_true", help="no transparent recovery (for comparing speed)")
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("ftcc")
import ftcc_torch  # noqa: E402  (after init: the sampler and set_transparent need the group)

if args.explicit:
    ftcc_torch.set_transparent(False)
features, targets = load()
data = TensorDataset(features, targets)
sampler = ftcc_torch.ElasticDistributedSampler(data, shuffle=True, seed=0)
loader = DataLoader(data, batch_size=args.batch, sampler=sampler, num_workers=args.workers)
model = DDP(nn.Sequential(nn.Linear(10, 5), nn.Linear(5, 1)))
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
step_log = os.environ.get("FTCC_TORCH_STEP_LOG") if dist.get_rank() == 0 else None

step, t0 = 0, time.perf_counter()
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
        if step_log:
            with open(step_log, "a") as f:
                f.write(f"{step} {time.time():.6f} {dist.get_world_size()}\n")
seconds = time.perf_counter() - t0
if dist.get_rank() == 0:
    print(f"torch_ddp_plain: {args.epochs} epochs, {step} steps on {dist.get_world_size()} ranks in {seconds:.2f} s "
          f"({args.epochs * len(data) / seconds:.0f} samples/s), final loss {loss.item():.4f}, "
          f"{len(ftcc_torch.recoveries())} recoveries", flush=True)
dist.destroy_process_group()
