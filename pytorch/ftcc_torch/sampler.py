"""Exactly-once data: an epoch's permutation consumed by a cursor that only advances with applied steps."""
import torch


class ExactlyOnceSampler:
    """The order of an epoch, the same on every rank, and how a global batch is split among ranks.

    ``order(epoch)`` is a permutation of ``range(n)`` drawn from ``seed`` and the epoch. A step
    consumes the global batch ``order[cursor:cursor + global_batch]``; rank r of n ranks takes
    the r-th of n near-equal contiguous parts. The cursor is part of the training state: it
    advances only when a step is applied, and after a failure the survivors take it from the
    most advanced survivor, so the rest of the epoch continues on them: no sample is lost or
    repeated, whatever the number of ranks or failures.
    """

    def __init__(self, n, seed=0):
        if n <= 0:
            raise ValueError(f"ExactlyOnceSampler: a data set of {n} samples")
        self.n = int(n)
        self.seed = int(seed)
        self._cache = (None, None)

    def order(self, epoch):
        if self._cache[0] != epoch:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + int(epoch))
            self._cache = (epoch, torch.randperm(self.n, generator=g))
        return self._cache[1]

    def global_batch(self, epoch, cursor, size):
        return self.order(epoch)[cursor:min(cursor + size, self.n)]

    @staticmethod
    def share(batch, rank, ranks):
        """Rank's contiguous part of a global batch (the first len % ranks parts get one more)."""
        q, r = divmod(len(batch), ranks)
        start = rank * q + min(rank, r)
        return batch[start:start + q + (1 if rank < r else 0)]
