"""The other program torch users start from: one nn.Linear(10, 1) (wrapped in nn.DataParallel, as
the single-machine version of the script had it), MSELoss and SGD on random batches, gradients
averaged by hand with dist.all_reduce and dist.get_world_size(). Changed in one word: the backend
is "ftcc". Run under tools/ftcc-run, it keeps training when a rank dies (tests/torch/transparent.py):
after a recovery, all_reduce sums over the survivors and get_world_size() says how many they are.
STEPS (environment) sets the number of steps; 2000 by default.
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim


def main():
    dist.init_process_group(backend="ftcc")
    model = nn.DataParallel(nn.Linear(10, 1))
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    for _ in range(int(os.environ.get("STEPS", "2000"))):
        optimizer.zero_grad()
        loss = loss_fn(model(torch.randn(32, 10)), torch.randn(32, 1))
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= dist.get_world_size()
        optimizer.step()
        time.sleep(0.005)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: done, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
