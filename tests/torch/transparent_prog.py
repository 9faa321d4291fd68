"""DDP with known numbers, for tests/torch/transparent.py: proves that after a transparent recovery
the gradient average is the mean over the ranks whose gradients went into it, and that every
survivor holds the same weights.

One nn.Linear(6, 1, bias=False) (one DDP bucket), MSELoss, SGD(lr=0.05). The batch of original rank
r at step s is drawn from a generator seeded 1000 * s + r, so any process can recompute any rank's
gradient. At the end every survivor replays the training in plain torch, without any collective: at
step s the update is the mean of the gradients of all N ranks where s < the recovery's
first_ddp_step_without, else of the survivors' only (a survivor that completed the step's allreduce
before the loss gave its result to the others: that step still holds the lost rank's gradient).
Each survivor prints one line "RESULT {json}" (its ranks, the recoveries, its weights and the
largest difference from the replay); the test compares them across ranks.

STEPS (environment): number of steps (default 12). The program calls ftcc_torch.begin_step(s) so
that FTCC_FAULTS can place a kill at a step.
"""
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import ftcc_torch

D, B, LR = int(os.environ.get("DIM", "6")), 8, 0.05


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(B, D, generator=g, dtype=torch.float64), torch.randn(B, 1, generator=g, dtype=torch.float64)


def grad_of(w, rank, step):
    x, y = batch(rank, step)
    w = w.clone().requires_grad_(True)
    nn.functional.mse_loss(x @ w.t(), y).backward()
    return w.grad


def main():
    torch.set_num_threads(1)
    dist.init_process_group("ftcc")
    n0, me = dist.get_world_size(), dist.get_rank()
    steps = int(os.environ.get("STEPS", "12"))
    torch.manual_seed(0)
    model = nn.Linear(D, 1, bias=False)
    w0 = model.weight.detach().clone().double()
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for s in range(steps):
        ftcc_torch.begin_step(s)
        x, y = batch(me, s)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x.float()), y.float()).backward()
        opt.step()
    recs = ftcc_torch.recoveries()
    lost = sorted(r for rec in recs for r in rec["failed_original"])
    cut = [rec["first_ddp_step_without"] for rec in recs]
    # The replay, in float64: which ranks' gradients each step averaged.
    # The same with the bug this guards against (the sum over the survivors divided by the old size,
    # as DDP would without ftcc's hook): its distance shows the tolerance is far tighter than it.
    def replay(divide_by_old_size):
        w = w0
        for s in range(steps):
            gone = {r for rec in recs if 0 <= rec["first_ddp_step_without"] <= s for r in rec["failed_original"]}
            ranks = [r for r in range(n0) if r not in gone]
            w = w - LR * sum(grad_of(w, r, s) for r in ranks) / (n0 if divide_by_old_size else len(ranks))
        return w

    def rel(w):
        return (model.weight.detach().double() - w).abs().max().item() / w.abs().max().item()
    print("RESULT " + json.dumps({
        "orig": me, "rank": dist.get_rank(), "size": dist.get_world_size(), "lost": lost, "cut": cut,
        "recoveries": [{k: rec[k] for k in ("group", "failed_original", "old_size", "new_size", "transparent",
                                            "adopted", "redone", "first_ddp_step_without", "completed_up_to", "completed_everywhere_up_to", "line")}
                       for rec in recs],
        "weights": model.weight.detach().flatten().tolist(), "max_rel_err": rel(replay(False)), "rel_err_if_divided_by_old_size": rel(replay(True))}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
