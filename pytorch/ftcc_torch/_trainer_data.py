"""Where ElasticTrainer's batches come from: two tensors, a map-style Dataset, or a DataLoader.

The trainer decides which samples each step takes (ExactlyOnceSampler: its own permutation, the
cursor, this rank's share); this module only fetches them. For a step it is given a list of index
lists (one for a DDP step, one per micro-batch in deterministic mode) and yields one collated batch
per list, in order.

  - (features, targets): the rows, indexed directly (the trainer's original input);
  - a map-style Dataset: dataset[i] for each index, collated with torch's default_collate;
  - a DataLoader: its dataset, collate_fn and worker settings (num_workers, pin_memory,
    worker_init_fn, multiprocessing_context, prefetch_factor, timeout). Its own sampler and
    batch_sampler are not used: the trainer's order replaces them, so a loader built on
    ElasticDistributedSampler, DistributedSampler or shuffle=True works as it is. Its batch_size
    is the per-rank batch the program was written for: global_batch defaults to it times the
    world size at the start.

The index lists of the rest of an epoch are fixed for the ranks of the moment: after a recovery the
trainer drops the iterator (batches the workers fetched ahead for the old split are discarded) and
asks for a new one. An IterableDataset has no indices to re-split and is refused.
"""
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torch.utils.data._utils.collate import default_collate

# The DataLoader settings carried over to the trainer's own loaders (the rest are the sampler's).
_LOADER_SETTINGS = ("collate_fn", "pin_memory", "timeout", "worker_init_fn", "multiprocessing_context", "generator",
                    "pin_memory_device", "in_order")


class TrainerData:
    def __init__(self, data):
        self.loader_settings = {}
        self.num_workers = 0
        self.batch_size = None
        self.tensors = None
        if isinstance(data, DataLoader):
            self._from_loader(data)
        elif isinstance(data, IterableDataset):
            raise ValueError("ElasticTrainer: an IterableDataset has no indices the trainer can re-split after a "
                             "failure; give a map-style Dataset (with __len__ and __getitem__) or two tensors")
        elif isinstance(data, (tuple, list)) and len(data) == 2 and all(torch.is_tensor(t) for t in data):
            features, targets = data
            if len(features) != len(targets):
                raise ValueError(f"ElasticTrainer: {len(features)} feature rows but {len(targets)} targets")
            self.tensors = (features, targets)
            self.n = len(features)
        elif isinstance(data, Dataset) or (hasattr(data, "__getitem__") and hasattr(data, "__len__")):
            self.dataset = data
            self.collate = default_collate
            self.n = len(data)
        else:
            raise TypeError(f"ElasticTrainer: data is a {type(data).__name__}; give (features, targets) tensors, a "
                            "map-style Dataset or a DataLoader over one")

    def _from_loader(self, loader):
        if isinstance(loader.dataset, IterableDataset):
            raise ValueError("ElasticTrainer: the DataLoader's dataset is an IterableDataset, which has no indices "
                             "the trainer can re-split after a failure; use a map-style Dataset")
        if loader.batch_size is None:
            raise ValueError("ElasticTrainer: the DataLoader has a batch_sampler of its own (batch_size None); build "
                             "it as DataLoader(dataset, batch_size=B, ...): the trainer makes the batches")
        self.dataset = loader.dataset
        self.collate = loader.collate_fn or default_collate
        self.n = len(loader.dataset)
        self.batch_size = int(loader.batch_size)
        self.num_workers = int(loader.num_workers)
        for k in _LOADER_SETTINGS:
            if hasattr(loader, k):
                self.loader_settings[k] = getattr(loader, k)
        if self.num_workers > 0:
            self.loader_settings["prefetch_factor"] = loader.prefetch_factor

    def fetch(self, indices):
        """One collated batch of these samples, in this process."""
        if self.tensors is not None:
            x, y = self.tensors
            return x[indices], y[indices]
        return self.collate([self.dataset[int(i)] for i in indices])

    def batches(self, plan):
        """An iterator over the collated batches of `plan`, a list of index lists, in its order."""
        lists = [[int(i) for i in idx] for idx in plan]
        if self.num_workers == 0:
            return (self.fetch(idx) for idx in lists)
        # The workers fetch ahead; the batch sampler is the plan itself. persistent_workers stays
        # off: the trainer makes a new iterator per epoch and after a recovery.
        return iter(DataLoader(self.dataset, batch_sampler=lists, num_workers=self.num_workers,
                               **self.loader_settings))
