"""ElasticDistributedSampler under a DataLoader with workers, for tests/torch/sampler.py.

A DDP model on the diabetes data set (442 samples, examples/diabetes.py), DataLoader(batch_size=8,
num_workers=2) over ElasticDistributedSampler, EPOCHS epochs (default 2), one DDP step per batch.
Exactly once is counted through DDP itself: the model has a float64 parameter `seen` of one entry
per (epoch, sample), the loss adds seen[epoch, index] for each sample of the batch, and a second
optimizer adds its gradient to it. DDP's mean makes that 1/W for a sample trained on in a step to
which W ranks contributed: at the end an entry is 1/4 or 1/3 for a sample used once (0 if never
used, 1/2 or more if used twice). Rank 0 prints "RESULT {json}" with the counts.

LOOKAHEAD (environment) sets the sampler's lookahead; ftcc_torch.begin_step(global step) lets
FTCC_FAULTS place a kill; SLEEP_MS slows each step (for kills from outside).
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "examples"))
from diabetes import load  # noqa: E402

import ftcc_torch  # noqa: E402

EPOCHS = int(os.environ.get("EPOCHS", "2"))


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(10, 1)
        self.seen = nn.Parameter(torch.zeros(EPOCHS, n, dtype=torch.float64))

    def forward(self, x, idx, epoch):
        return self.lin(x), self.seen[epoch, idx].sum()


def main():
    torch.set_num_threads(1)
    dist.init_process_group("ftcc")
    x, y = load()
    n = len(x)
    data = TensorDataset(torch.arange(n), x, y)
    sampler = ftcc_torch.ElasticDistributedSampler(data, shuffle=True, seed=7,
                                                   lookahead=int(os.environ.get("LOOKAHEAD", "64")))
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=2)
    torch.manual_seed(0)
    model = DDP(Model(n))
    opt = torch.optim.SGD(model.module.lin.parameters(), lr=0.01)
    count = torch.optim.SGD([model.module.seen], lr=1.0, maximize=True)
    sleep = float(os.environ.get("SLEEP_MS", "0")) / 1000
    step, steps_per_epoch, carried = 0, [], []
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        start = step
        for idx, xb, yb in loader:
            ftcc_torch.begin_step(step)
            opt.zero_grad()
            count.zero_grad()
            out, s = model(xb, idx, epoch)
            (nn.functional.mse_loss(out, yb) + s).backward()
            opt.step()
            count.step()
            step += 1
            time.sleep(sleep)
        steps_per_epoch.append(step - start)
        carried.append(sampler.carried)
    seen = model.module.seen.detach()
    recs = ftcc_torch.recoveries()
    if dist.get_rank() == 0:
        per_epoch = []
        for e in range(EPOCHS):
            v = seen[e]
            per_epoch.append({
                "quarter": int(((v - 0.25).abs() < 1e-12).sum()), "third": int(((v - 1 / 3).abs() < 1e-12).sum()),
                "zero": int((v == 0).sum()), "other": int(n - ((v - 0.25).abs() < 1e-12).sum()
                                                          - ((v - 1 / 3).abs() < 1e-12).sum() - (v == 0).sum()),
                "total": float(v.sum())})
        print("RESULT " + json.dumps({
            "n": n, "size": dist.get_world_size(), "steps": step, "steps_per_epoch": steps_per_epoch, "carried": carried,
            "cuts": [r["first_ddp_step_without"] for r in recs], "lost": [r["failed_original"] for r in recs],
            "epochs": per_epoch}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
