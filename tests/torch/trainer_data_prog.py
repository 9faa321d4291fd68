"""ElasticTrainer's refusals of data it cannot train on exactly once, for tests/torch/failures.py
(case loader). Each bad input must raise at construction with one line saying what to give instead;
prints "refused <what>: <message>" per input, or "ACCEPTED <what>" where none was raised."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, SequentialSampler, TensorDataset

import ftcc_torch


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(10))


dist.init_process_group("ftcc")
model = nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.zeros(10, 2), torch.zeros(10, 1)
ds = TensorDataset(x, y)
bad = {
    "iterable_dataset": (Stream(), {"global_batch": 4}),
    "iterable_loader": (DataLoader(Stream(), batch_size=2), {}),
    "own_batch_sampler": (DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 2, False)), {}),
    "uneven_tensors": ((x, y[:9]), {"global_batch": 4}),
    "no_global_batch": ((x, y), {}),
    "not_data": (42, {"global_batch": 4}),
    "empty": (TensorDataset(x[:0], y[:0]), {"global_batch": 4}),
}
for what, (data, kw) in bad.items():
    try:
        ftcc_torch.ElasticTrainer(model, opt, data, epochs=1, **kw)
        print(f"ACCEPTED {what}", flush=True)
    except (ValueError, TypeError) as e:
        print(f"refused {what}: {e}", flush=True)
dist.destroy_process_group()
