"""Example 2: nn.Linear(10, 5) -> nn.Linear(5, 1) in DistributedDataParallel, MSELoss and SGD, a loop
over epochs: the program a torch user writes with init_process_group("gloo"), changed only to run
on ftcc and keep training when ranks die:
  - the backend is "ftcc" and the program starts under tools/ftcc-run (no MASTER_ADDR/PORT);
  - the loop is ftcc_torch.ElasticTrainer's (it wraps the model in DDP itself, and again on the
    survivors after a failure, with the data re-sharded exactly once);
  - the data is a real data set (diabetes, examples/diabetes.py) instead of random numbers.

    tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python examples/torch_ddp.py --epochs 20
    FTCC_FAULTS=kill:rank=2:step=30 tools/ftcc-run -n 4 ... examples/torch_ddp.py   # rank 2 dies at step 30
    ... examples/torch_ddp.py --loader 2   # the data through a DataLoader with 2 workers, as most scripts have it
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import ftcc_torch
from diabetes import load

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--epochs", type=int, default=20)
p.add_argument("--batch", type=int, default=40, help="global batch (split among the ranks)")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--deterministic", action="store_true", help="exact-sum gradients: bitwise identical for any rank count")
p.add_argument("--lr-halve-every", type=int, default=0, metavar="STEPS",
               help="an LR schedule: halve the learning rate every STEPS applied steps (StepLR; 0: none)")
p.add_argument("--loader", type=int, default=-1, metavar="WORKERS",
               help="feed the trainer a DataLoader(batch_size=batch / world size, sampler=ElasticDistributedSampler, "
                    "num_workers=WORKERS) instead of the tensors (-1: the tensors)")
p.add_argument("--summary", help="rank 0 writes the run's summary (JSON) here")
args = p.parse_args()

torch.manual_seed(0)  # the same initial weights on every rank
torch.set_num_threads(1)
dist.init_process_group("ftcc")

model = nn.Sequential(nn.Linear(10, 5), nn.Linear(5, 1))
loss_fn = nn.MSELoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)

scheduler = torch.optim.lr_scheduler.StepLR(optimizer, args.lr_halve_every, 0.5) if args.lr_halve_every > 0 else None

data, global_batch = load(), args.batch
if args.loader >= 0:
    # The loader a DDP script already has: its batch_size is per rank, so the global batch is
    # batch_size x world size; the trainer takes its dataset, collate_fn and workers.
    dataset = TensorDataset(*data)
    data = DataLoader(dataset, batch_size=args.batch // dist.get_world_size(),
                      sampler=ftcc_torch.ElasticDistributedSampler(dataset), num_workers=args.loader)
    global_batch = None
trainer = ftcc_torch.ElasticTrainer(model, optimizer, data, global_batch=global_batch, epochs=args.epochs,
                                    deterministic=args.deterministic, micro_batch=10, summary_path=args.summary,
                                    scheduler=scheduler)


def step(model, batch):
    features, targets = batch
    return loss_fn(model(features), targets)


summary = trainer.run(step)
if dist.get_rank() == 0:
    print(f"torch_ddp: {summary['epochs']} epochs, {summary['steps']} steps on {summary['ranks']} ranks, "
          f"final loss {summary['final_loss']:.4f}, {len(summary['recoveries'])} recoveries, "
          f"weights sha256 {summary['state_sha256'][:16]}", flush=True)
dist.destroy_process_group()
