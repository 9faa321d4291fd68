"""Example 1: one nn.Linear(10, 1), MSELoss and SGD, a loop over epochs, gradients averaged with
dist.all_reduce: the program a torch user writes with init_process_group("gloo"), changed only to
run on ftcc and keep training when ranks die, the explicit way: the program does its own recovery
(examples/torch_ddp_plain.py is the other way: nothing changed, ftcc recovers inside the collective).
  - the backend is "ftcc" and the program starts under tools/ftcc-run (no MASTER_ADDR/PORT);
  - ftcc_torch.set_transparent(False): a lost rank raises RankFailure instead of being recovered
    inside the collective;
  - a step that raises ftcc_torch.RankFailure continues on dist.shrink_group(e.failed_ranks): the
    survivors take the model and the data cursor from the lowest-numbered survivor that applied
    the most steps, and the step in flight is done again, split among them;
  - the data is a real data set (diabetes, examples/diabetes.py): each step takes the next
    `--batch` samples of the epoch's order, split among the ranks, so every sample is used once.

    tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python examples/torch_linear.py
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn

import ftcc_torch
from diabetes import load

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--epochs", type=int, default=20)
p.add_argument("--batch", type=int, default=40, help="samples per step, all ranks together")
p.add_argument("--lr", type=float, default=0.05)
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
dist.init_process_group("ftcc")
ftcc_torch.set_transparent(False)
features, targets = load()
model = nn.Linear(10, 1)
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
epoch, cursor, step = 0, 0, 0  # the training state, besides the model


def average_gradients():
    # Each rank's mean loss is weighed by its share of the batch: the sum is the batch mean's gradient.
    for param in model.parameters():
        dist.all_reduce(param.grad)


def take_state_from_most_advanced():
    global epoch, cursor, step
    mine = torch.tensor([step])
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    src = torch.tensor([dist.get_rank() if step == int(mine) else dist.get_world_size()])
    dist.all_reduce(src, op=dist.ReduceOp.MIN)
    state = [{"model": model.state_dict(), "epoch": epoch, "cursor": cursor, "step": step}]
    dist.broadcast_object_list(state, src=int(src))
    model.load_state_dict(state[0]["model"])
    epoch, cursor, step = state[0]["epoch"], state[0]["cursor"], state[0]["step"]


while epoch < args.epochs:
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(epoch))
    while cursor < len(order):
        batch = order[cursor:cursor + args.batch]
        mine = batch.tensor_split(dist.get_world_size())[dist.get_rank()]
        try:
            optimizer.zero_grad()
            loss = loss_fn(model(features[mine]), targets[mine]) if len(mine) else sum(p.sum() for p in model.parameters()) * 0
            (loss * len(mine) / len(batch)).backward()
            average_gradients()
            optimizer.step()
            cursor, step = cursor + len(batch), step + 1
        except ftcc_torch.RankFailure as e:
            print(f"rank {dist.get_rank()}: ranks {e.failed_ranks} failed at step {step}; continuing on the others",
                  flush=True)
            dist.shrink_group(e.failed_ranks)
            take_state_from_most_advanced()
    epoch, cursor = epoch + 1, 0
    if dist.get_rank() == 0 and epoch % 5 == 0:
        with torch.no_grad():
            print(f"epoch {epoch}: loss {loss_fn(model(features), targets).item():.4f} on {dist.get_world_size()} ranks",
                  flush=True)
dist.destroy_process_group()
