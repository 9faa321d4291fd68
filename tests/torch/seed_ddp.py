"""The DDP program torch users start from (torch's DDP tutorial, on CPU), changed in one word: the
backend is "ftcc". No import of ftcc_torch, no try/except, no change to the loop. Run under
tools/ftcc-run, it keeps training when a rank is killed or hangs (tests/torch/transparent.py).
STEPS (environment) sets the number of steps; 2000 by default.
"""
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 5)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(5, 1)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def main():
    dist.init_process_group(backend="ftcc")
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    for _ in range(int(os.environ.get("STEPS", "2000"))):
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(20, 10))
        labels = torch.randn(20, 1)
        loss = loss_fn(outputs, labels)
        loss.backward()
        optimizer.step()
        time.sleep(0.005)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: done, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
