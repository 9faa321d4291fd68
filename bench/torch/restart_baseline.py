"""What users live with today: examples/torch_ddp.py's training on gloo, restarted by torchrun
from its last checkpoint when a worker dies. A baseline for bench/torch/kill_to_next_step only.

    torchrun --standalone --nproc-per-node 4 --max-restarts 1 bench/torch/restart_baseline.py --dir D

The same model, data, global batch and SGD as examples/torch_ddp.py (DDP, the batch split over the
ranks). Rank 0 checkpoints model, optimizer, epoch and cursor every --every steps (torch.save to a
temporary file, then rename); every worker starts from the checkpoint when there is one. Each
worker writes its pid to D/pid-RANK; rank 0 appends "step wall-clock-time ranks" to D/steps after
each step, as ElasticTrainer does with FTCC_TORCH_STEP_LOG, and "-1 time ranks" when it starts.
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples"))
from diabetes import load  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--epochs", type=int, default=40)
p.add_argument("--batch", type=int, default=40)
p.add_argument("--every", type=int, default=10, help="checkpoint every this many steps")
a = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
with open(os.path.join(a.dir, f"pid-{rank}"), "w") as f:
    f.write(str(os.getpid()))
if rank == 0:  # a (re)start: step -1
    with open(os.path.join(a.dir, "steps"), "a") as f:
        f.write(f"-1 {time.time():.6f} {n}\n")
x, y = load()
model = nn.Sequential(nn.Linear(10, 5), nn.Linear(5, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
epoch = cursor = step = 0
ckpt = os.path.join(a.dir, "checkpoint.pt")
if os.path.exists(ckpt):
    s = torch.load(ckpt)
    model.load_state_dict(s["model"])
    opt.load_state_dict(s["optimizer"])
    epoch, cursor, step = s["epoch"], s["cursor"], s["step"]
ddp = DDP(model)
loss_fn = nn.MSELoss()
while epoch < a.epochs:
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
    while cursor < len(x):
        batch = order[cursor:cursor + a.batch]
        mine = batch.tensor_split(n)[rank]
        if len(mine) == 0:
            mine = batch[:1]
        opt.zero_grad()
        loss = loss_fn(ddp(x[mine]), y[mine]) * (len(batch.tensor_split(n)[rank]) * n / len(batch))
        loss.backward()
        opt.step()
        cursor, step = cursor + len(batch), step + 1
        if rank == 0:
            with open(os.path.join(a.dir, "steps"), "a") as f:
                f.write(f"{step} {time.time():.6f} {n}\n")
            if step % a.every == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch,
                            "cursor": cursor, "step": step}, ckpt + ".tmp")
                os.replace(ckpt + ".tmp", ckpt)
    epoch, cursor = epoch + 1, 0
dist.destroy_process_group()
