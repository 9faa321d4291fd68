"""ElasticDistributedSampler: torch's DistributedSampler that re-splits the rest of the epoch over the
survivors after a transparent recovery, so no sample of the epoch is lost or repeated.

    sampler = ftcc_torch.ElasticDistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=2)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:            # one DDP step (forward, backward, optimizer.step) per batch
            ...

The epoch is a permutation of the data set (the same on every rank: seed + epoch, as torch's). It
is consumed in global steps: step k takes the next `members * batch_size` samples of the queue and
member j (in the group's order) takes the j-th run of `batch_size` of them. A DDP step's gradient
is the mean over the ranks that took part (ftcc's DDP hook), so a sample counts when the step that
holds it is applied with its rank's gradient in it.

After a recovery whose first DDP step without the lost ranks is c (ftcc_torch.recoveries():
first_ddp_step_without), the survivors keep their own runs up to step c + lookahead (a DataLoader
has already fetched some of them), and the lost ranks' runs of steps c .. c + lookahead - 1 go back
to the front of the queue, which from step c + lookahead on is split over the survivors. Every
survivor computes the same plan from the same record, however far ahead its loader had read, as
long as that is less than `lookahead` batches (checked: a loader further ahead raises, naming
lookahead). Steps before c were applied with the lost rank's gradient: its samples there count.

A loss whose step c + lookahead lies past the end of the epoch leaves no step of that epoch that
every survivor can take the lost ranks' runs in (a loader may have read to the epoch's end before
the recovery): they come first in the next epoch (`sampler.carried` counts them), so each sample is
still used once per pass, the last pass excepted. So a smaller lookahead (still more than the
loader reads ahead: 2 x workers batches by default) re-splits more losses within their epoch.

Limits: one optimizer step per batch (no gradient accumulation with no_sync); the step count of
the DDP hook is the group's, so one DDP model per group; the last step of an epoch splits what is
left near-evenly, and only where fewer samples are left than ranks are some repeated (as torch's
DistributedSampler pads) unless drop_last, which drops them.
"""
import gc
import math

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, Sampler

DEFAULT_LOOKAHEAD = 64  # batches: well beyond a DataLoader's prefetch (2 x workers by default)


class ElasticDistributedSampler(Sampler):
    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False, *,
                 batch_size=None, group=None, lookahead=DEFAULT_LOOKAHEAD):
        if not dist.is_initialized():
            raise RuntimeError("ElasticDistributedSampler: call dist.init_process_group('ftcc') first")
        self.group = group
        size, me = dist.get_world_size(group), dist.get_rank(group)
        if num_replicas is not None and num_replicas != size:
            raise ValueError(f"ElasticDistributedSampler: num_replicas={num_replicas}, but the group has {size} ranks "
                             "(leave num_replicas and rank unset: the sampler follows the group as it shrinks)")
        if rank is not None and rank != me:
            raise ValueError(f"ElasticDistributedSampler: rank={rank}, but this process is rank {me} of the group")
        if batch_size is not None and int(batch_size) <= 0:
            raise ValueError(f"ElasticDistributedSampler: batch_size={batch_size} must be positive")
        if int(lookahead) <= 0:
            raise ValueError(f"ElasticDistributedSampler: lookahead={lookahead} must be positive")
        from ._ddp import ftcc_backend
        pg = group if group is not None else dist.distributed_c10d._get_default_group()
        self.backend = ftcc_backend(pg)
        if self.backend is None:
            raise ValueError("ElasticDistributedSampler: the group's backend is not ftcc (init_process_group('ftcc'))")
        self.dataset = dataset
        self.n = len(dataset)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.batch_size = None if batch_size is None else int(batch_size)
        self.lookahead = int(lookahead)
        self.epoch = 0
        self._plan = None
        # What the last epoch did, for tests and logs: [(step, members, my indices)], and how many
        # samples of the epoch before it were carried into it.
        self.log = []
        self.carried = 0

    # torch's DistributedSampler interface
    @property
    def num_replicas(self):
        return len(self.backend.members)

    @property
    def rank(self):
        return self.backend.members.index(self._me())

    def set_epoch(self, epoch):
        self.epoch = int(epoch)

    def __len__(self):
        w, b = self.num_replicas, self._batch()
        per_step = w * b
        full, rest = divmod(self.n, per_step)
        mine = full * b
        if rest and not (self.drop_last and rest < w):
            q, r = divmod(max(rest, w), w)
            mine += q + (1 if self.rank < r else 0)
        return mine

    # ---------------------------------------------------------------------------------------------
    def _me(self):
        from . import _C
        return _C.original_rank()

    def _batch(self):
        if self.batch_size is None:
            # The DataLoader's BatchSampler holds this sampler: its batch_size is the step's.
            for ref in gc.get_referrers(self):
                if isinstance(ref, BatchSampler) and ref.sampler is self:
                    self.batch_size = int(ref.batch_size)
                    break
                if isinstance(ref, dict):
                    for owner in gc.get_referrers(ref):
                        if isinstance(owner, BatchSampler) and owner.sampler is self:
                            self.batch_size = int(owner.batch_size)
                            break
                if self.batch_size is not None:
                    break
        if self.batch_size is None:
            raise ValueError("ElasticDistributedSampler: no batch size: use it as DataLoader(..., batch_size=B, "
                             "sampler=sampler), or pass batch_size=B")
        return self.batch_size

    def _order(self):
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + self.epoch)
            return torch.randperm(self.n, generator=g).tolist()
        return list(range(self.n))

    def __iter__(self):
        b = self._batch()
        # A loss in the last steps of the previous epoch, after its plan had ended: the lost ranks'
        # runs it could not re-split there come first in this one (carried, counted in .carried).
        carried = self._plan.finish() if self._plan is not None else []
        self.carried = len(carried)
        self._plan = _Plan(self, carried + self._order(), b)
        self.log = self._plan.log
        return self._plan.run()


class _Plan:
    """One epoch's split of the queue over the members, step by step, as recoveries arrive."""

    def __init__(self, sampler, queue, b):
        self.s = sampler
        self.b = b
        self.me = sampler._me()
        self.start = sampler.backend.ddp_progress()[0]  # DDP steps started before this epoch
        # The members this epoch starts with are agreed, not read off the clock: a recovery whose
        # first DDP step without the lost ranks is this epoch's or later (or not known yet) may
        # have reached this rank before its plan began and another rank's after (the loader's
        # workers start the plan early): every rank rewinds it and takes it as a change of the
        # plan (notice()). One that cut an earlier step is every rank's before this plan began.
        recs = sampler.backend.recoveries()
        members = list(sampler.backend.members)
        self.seen = len(recs)
        for i, rec in enumerate(recs):
            if rec["transparent"] and (rec["first_ddp_step_without"] < 0 or rec["first_ddp_step_without"] >= self.start):
                self.seen = i
                break
        for rec in recs[self.seen:]:
            if rec["transparent"]:
                members = sorted(set(members) | set(rec["failed_original"]))  # the default group's order
        self.members = members
        self.queue = queue
        self.head = 0       # queue[head:] is not yet taken
        self.blocks = []    # step -> (members, block) as planned
        self.pending = []   # [effective step, lost ranks, their runs to give back]
        self.log = []

    def notice(self, final=False):
        """Recoveries since the last look: each becomes a pending change. One whose first step
        without the lost ranks is not known yet (no DDP step was submitted since) waits, with those
        after it: every rank takes the same step, never its own progress, which differs between
        ranks by the step in flight. After the epoch's last step (final) every step has run here
        and on every survivor, so the progress is the same everywhere."""
        recs = self.s.backend.recoveries()
        k = len(self.blocks)
        for i, rec in enumerate(recs[self.seen:], start=self.seen):
            if not rec["transparent"]:
                self.seen = i + 1
                continue
            cut = rec["first_ddp_step_without"]
            if cut < 0 and not final:
                return
            self.seen = i + 1
            c = min(max((cut if cut >= 0 else self.s.backend.ddp_progress()[0]) - self.start, 0), k)
            lost = set(rec["failed_original"])
            eff = c + self.s.lookahead
            if k > eff:
                raise RuntimeError(
                    f"ElasticDistributedSampler: the data loader had read {k - c} batches past the step "
                    f"{self.start + c} at which ranks {sorted(lost)} were lost, more than lookahead="
                    f"{self.s.lookahead}: the survivors cannot agree on the rest of the epoch; raise lookahead")
            back = []
            for step in range(c, k):  # steps planned with the lost ranks from c on: their runs return
                old_members, block = self.blocks[step]
                back.extend(_runs_of(block, old_members, lost, self.b))
            self.pending.append([eff, lost, back])

    def apply_due(self, k):
        # A change takes effect at its step. One whose step lies past the end of the queue is
        # carried into the next epoch (finish): a rank whose loader had read to the epoch's end
        # before the recovery cannot take it in this epoch, so no rank does.
        while self.pending and self.pending[0][0] <= k:
            _, lost, back = self.pending.pop(0)
            self.members = [m for m in self.members if m not in lost]
            self.queue = back + self.queue[self.head:]
            self.head = 0

    def finish(self):
        """After the epoch's last step: the runs of ranks lost too late to be re-split in it."""
        self.notice(final=True)
        out = [i for p in self.pending for i in p[2]] + self.queue[self.head:]
        self.pending = []
        return out

    def run(self):
        b = self.b
        k = 0
        while True:
            self.notice()
            self.apply_due(k)
            w = len(self.members)
            left = len(self.queue) - self.head
            if left <= 0:
                break
            if left < w * b:
                if self.s.drop_last and left < w:
                    break
                block = self.queue[self.head:]
                if left < w:  # fewer samples than ranks: pad from the queue's start, as torch does
                    block = block + self.queue[:w - left]
                self.head = len(self.queue)
            else:
                block = self.queue[self.head:self.head + w * b]
                self.head += w * b
            self.blocks.append((list(self.members), block))
            for p in self.pending:  # a rank lost but still in the plan: its run returns with its change
                p[2].extend(_runs_of(block, self.members, p[1], b))
            mine = _share(block, self.members, self.me, b) if self.me in self.members else []
            self.log.append((k, list(self.members), mine))
            k += 1
            yield from mine


def _bounds(block, members, j, b):
    """Member j's run of a block: runs of b when the block is full, near-even parts of the last one."""
    w = len(members)
    if len(block) == w * b:
        return j * b, (j + 1) * b
    q, r = divmod(len(block), w)
    s = j * q + min(j, r)
    return s, s + q + (1 if j < r else 0)


def _share(block, members, me, b):
    s, e = _bounds(block, members, members.index(me), b)
    return block[s:e]


def _runs_of(block, members, lost, b):
    out = []
    for j, m in enumerate(members):
        if m in lost:
            s, e = _bounds(block, members, j, b)
            out.extend(block[s:e])
    return out
