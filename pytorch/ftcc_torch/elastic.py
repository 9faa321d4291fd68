"""Training that continues on the survivors, for people who do not want to write the loop.

    trainer = ElasticTrainer(model, optimizer, (features, targets), global_batch=40, epochs=20)
    trainer.run(lambda model, batch: loss_fn(model(batch[0]), batch[1]))   # returns the loss

    loader = DataLoader(dataset, batch_size=10, sampler=ElasticDistributedSampler(dataset), num_workers=2)
    trainer = ElasticTrainer(model, optimizer, loader, epochs=20)          # global batch 10 x world size

data is two tensors, a map-style Dataset or a DataLoader (_trainer_data.py): the trainer chooses the
samples, the loader's dataset, collate_fn and workers fetch them.

run() owns the loop over epochs and steps. Each step takes the next global batch of the epoch's
permutation (ExactlyOnceSampler), this rank's share of it, calls step_fn for the loss, runs
backward (through DistributedDataParallel, or the exact-sum reduction with deterministic=True),
applies the optimizer, and counts the samples it applied (an int64 allreduce of their count, sum
and sum of squares of their indices, checked exactly at each epoch's end). On RankFailure it:
  1. continues on dist.shrink_group(e.failed_ranks) (the survivors' group, now the default one);
  2. takes the training state from the most advanced survivor (a survivor may have applied the
     step in flight when another did not): model, optimizer, epoch, cursor and counts, with one
     broadcast_object_list;
  3. rebuilds DDP on the new group and redoes the step in flight, split among the survivors.
A failure during those steps starts them again. The global batch stays the same size, so the
loss is the same mean whatever the number of ranks.

deterministic=True: every global batch is cut into micro-batches of `micro_batch` samples (the
same ones whatever the rank count); each micro-batch's gradient is turned into 64-bit fixed point
at one scale agreed with an allreduce-MAX, the integers are summed (an exact, order-independent
allreduce) and turned back into float once. The final weights are then bitwise identical for any
number of ranks and any failures (with torch.set_num_threads(1), so each micro-batch's gradient
is computed the same way on every rank).

scheduler=: the program's LR scheduler (any torch.optim.lr_scheduler), stepped after every
applied step (scheduler_interval="step") or epoch ("epoch"); after a recovery it goes on from the
most advanced survivor's state, so the learning rate at each step is the fault-free run's.

Left out: hot spares and respawned processes (a group only shrinks here), state streaming for
models that do not fit one pickled broadcast, and IterableDatasets (no indices to re-split).
"""
import hashlib
import io
import json
import math
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ._errors import RankFailure
from ._trainer_data import TrainerData
from .sampler import ExactlyOnceSampler


class ElasticTrainer:
    def __init__(self, model, optimizer, data, *, global_batch=None, epochs, seed=0, ddp=True, deterministic=False,
                 micro_batch=None, log=None, summary_path=None, scheduler=None, scheduler_interval="step"):
        if not dist.is_initialized():
            raise RuntimeError("ElasticTrainer: call dist.init_process_group('ftcc') first")
        # The trainer recovers by itself (state from the most advanced survivor, the step redone):
        # the explicit path, RankFailure on every call in flight, not the transparent one.
        from . import set_transparent
        set_transparent(False)
        self.data = TrainerData(data)
        if global_batch is None:
            if self.data.batch_size is None:
                raise ValueError("ElasticTrainer: give global_batch= (the samples of one step over all ranks), or a "
                                 "DataLoader whose batch_size is the per-rank batch")
            global_batch = self.data.batch_size * dist.get_world_size()
        if self.data.n <= 0:
            raise ValueError("ElasticTrainer: the data set is empty")
        if global_batch <= 0 or epochs <= 0:
            raise ValueError(f"ElasticTrainer: global_batch {global_batch} and epochs {epochs} must be positive")
        if scheduler_interval not in ("step", "epoch"):
            raise ValueError(f"ElasticTrainer: scheduler_interval {scheduler_interval!r}: use 'step' (after every "
                             f"applied step) or 'epoch' (after every epoch)")
        if scheduler is not None and getattr(scheduler, "optimizer", optimizer) is not optimizer:
            raise ValueError("ElasticTrainer: the scheduler steps another optimizer than the trainer's")
        if deterministic:
            micro_batch = micro_batch or 1
            if micro_batch <= 0:
                raise ValueError(f"ElasticTrainer: micro_batch {micro_batch} must be positive")
        self.module = model
        self.optimizer = optimizer
        # The program's LR scheduler: stepped after every applied step or epoch, its state taken
        # from the most advanced survivor with the rest, so the schedule goes on where it was.
        self.scheduler = scheduler
        self.scheduler_interval = scheduler_interval
        self.global_batch = int(global_batch)
        self.epochs = int(epochs)
        self.sampler = ExactlyOnceSampler(self.data.n, seed)
        self._batches = None  # the rest of the epoch's batches for this rank, for the ranks of the moment
        self.use_ddp = ddp and not deterministic
        self.deterministic = deterministic
        self.micro_batch = micro_batch
        self.summary_path = summary_path or os.environ.get("FTCC_TORCH_SUMMARY")
        # FTCC_TORCH_STEP_LOG: rank 0 appends "step wall-clock-time ranks" after each applied step
        # (bench/torch/kill_to_next_step reads it).
        self.step_log = os.environ.get("FTCC_TORCH_STEP_LOG")
        self.log = log or (lambda msg: print(msg, flush=True))
        # The training state (taken from the most advanced survivor after a failure).
        self.epoch = 0
        self.cursor = 0          # samples of this epoch applied
        self.step = 0            # steps applied, over all epochs
        # This epoch's applied samples: count, sum of indices, sum of squared indices (exact int64
        # up to about 2 million samples), and the loss sum.
        if self.data.n > 2_000_000:
            raise ValueError(f"ElasticTrainer: {self.data.n} samples; the exactly-once counts are exact up to 2,000,000")
        self.counts = torch.zeros(3, dtype=torch.int64)
        self.loss_sum = 0.0
        self.epochs_checked = []
        self.recoveries = []
        self.losses = []
        self.model = None
        self._wrap()

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, step_fn):
        """Trains to the end; returns the summary (also written to summary_path on rank 0)."""
        from . import begin_step
        while True:
            try:
                while self.epoch < self.epochs:
                    while self.cursor < self.sampler.n:
                        begin_step(self.step)
                        self._train_step(step_fn)
                    self._end_epoch()
                # A rank whose last step completed must not leave while another's failed: they
                # meet here, and a failure seen here is recovered like any other.
                dist.barrier()
                break
            except RankFailure as e:
                self._recover(e)
        return self._summary()

    def _train_step(self, step_fn):
        rank, ranks = dist.get_rank(), dist.get_world_size()
        batch = self.sampler.global_batch(self.epoch, self.cursor, self.global_batch)
        mine = ExactlyOnceSampler.share(batch, rank, ranks)
        if self._batches is None:
            self._batches = self.data.batches(self._rest_of_epoch(rank, ranks))
        self.optimizer.zero_grad(set_to_none=False)
        if self.deterministic:
            loss_sum = self._exact_step(step_fn, batch, rank, ranks)
        else:
            loss_sum = self._ddp_step(step_fn, mine, len(batch), ranks)
        idx = mine.to(torch.int64)
        counts = torch.stack([torch.tensor(len(mine), dtype=torch.int64), idx.sum(), (idx * idx).sum()])
        loss = torch.tensor([loss_sum], dtype=torch.float64)
        dist.all_reduce(counts)
        dist.all_reduce(loss)
        self.optimizer.step()
        if self.scheduler is not None and self.scheduler_interval == "step":
            self.scheduler.step()
        # Applied: the step's samples are consumed.
        self.counts += counts
        self.cursor += len(batch)
        self.step += 1
        self.losses.append(float(loss) / len(batch))
        if self.step_log and dist.get_rank() == 0:
            with open(self.step_log, "a") as f:
                f.write(f"{self.step} {time.time():.6f} {ranks}\n")
        if self._recovered_at is not None:
            self.recoveries[-1]["next_step_ms"] = (time.perf_counter() - self._recovered_at) * 1e3
            self._recovered_at = None

    def _fetches(self, batch, rank, ranks):
        """The index lists this rank fetches for a step: its share (DDP), or its micro-batches."""
        if self.deterministic:
            m = self.micro_batch
            return ExactlyOnceSampler.share([batch[i:i + m] for i in range(0, len(batch), m)], rank, ranks)
        mine = ExactlyOnceSampler.share(batch, rank, ranks)
        # More ranks than samples left: a forward through DDP all the same (its collectives must
        # line up on every rank) on the batch's first sample, weighed 0.
        return [mine if len(mine) else batch[:1]]

    def _rest_of_epoch(self, rank, ranks):
        plan, cursor = [], self.cursor
        while cursor < self.sampler.n:
            batch = self.sampler.global_batch(self.epoch, cursor, self.global_batch)
            plan.extend(self._fetches(batch, rank, ranks))
            cursor += len(batch)
        return plan

    def _ddp_step(self, step_fn, mine, batch_len, ranks):
        data = next(self._batches)
        if len(mine) == 0:
            loss = step_fn(self.model, data)
            (loss * 0).backward()
            return 0.0
        loss = step_fn(self.model, data)
        # DDP averages over ranks; weigh each rank's mean by its share so the result is the batch mean.
        (loss * (len(mine) * ranks / batch_len)).backward()
        return float(loss.detach()) * len(mine)

    def _exact_step(self, step_fn, batch, rank, ranks):
        m = self.micro_batch
        micro = [batch[i:i + m] for i in range(0, len(batch), m)]
        mine = ExactlyOnceSampler.share(micro, rank, ranks)
        params = [p for p in self.module.parameters() if p.requires_grad]
        grads, loss_sum = [], 0.0
        for mb in mine:
            for p in params:
                p.grad = None
            loss = step_fn(self.module, next(self._batches))
            (loss * (len(mb) / len(batch))).backward()
            grads.append(torch.cat([p.grad.reshape(-1) for p in params]).to(torch.float64))
            loss_sum += float(loss.detach()) * len(mb)
        numel = sum(p.numel() for p in params)
        top = torch.tensor([max((float(g.abs().max()) for g in grads), default=0.0)], dtype=torch.float64)
        if any(not math.isfinite(float(g.abs().max())) for g in grads):
            top[0] = math.inf
        dist.all_reduce(top, op=dist.ReduceOp.MAX)
        if not math.isfinite(float(top[0])):
            raise FloatingPointError(f"non-finite gradient at step {self.step}")
        e = _exponent(float(top[0]), len(micro))
        acc = torch.zeros(numel, dtype=torch.int64)
        for g in grads:
            acc += torch.round(torch.ldexp(g, torch.tensor(e, dtype=torch.float64))).to(torch.int64)
        dist.all_reduce(acc)
        flat = torch.ldexp(acc.to(torch.float64), torch.tensor(-e, dtype=torch.float64)).to(torch.float32)
        at = 0
        for p in params:
            p.grad = flat[at:at + p.numel()].view_as(p).clone()
            at += p.numel()
        return loss_sum

    def _end_epoch(self):
        n = self.sampler.n
        count, s1, s2 = (int(v) for v in self.counts)
        want = (n, n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6)
        ok = (count, s1, s2) == want
        self.epochs_checked.append({"epoch": self.epoch, "samples": int(count), "each_once": ok})
        if not ok:
            raise RuntimeError(f"exactly-once check failed in epoch {self.epoch}: {int(count)} samples applied of {n}, "
                               f"index sum {s1} (want {want[1]}), sum of squares {s2} (want {want[2]})")
        self.epoch += 1
        self.cursor = 0
        self.counts.zero_()
        self._batches = None
        if self.scheduler is not None and self.scheduler_interval == "epoch":
            self.scheduler.step()

    # ---- recovery ----------------------------------------------------------------------------
    _recovered_at = None

    _recoveries_seen = 0  # ftcc_torch.recoveries() records already counted in self.recoveries

    def _recover(self, e):
        t0 = time.perf_counter()
        self._batches = None  # fetched for the old split: the survivors' plan starts at the new cursor
        before = dist.get_world_size()
        failed = list(e.failed_ranks)
        while True:
            try:
                dist.shrink_group(failed)
                self._sync_state()
                self._wrap()
                break
            except RankFailure as again:
                failed = list(again.failed_ranks)  # a failure inside the recovery: the shrink, the sync, DDP
        ms = (time.perf_counter() - t0) * 1e3
        # Every rank lost in this recovery, as original (launch) ranks: the backend's records of
        # the default group since the last recovery (a failure inside the recovery is numbered
        # in the group it happened in; the records say which processes those were).
        from . import recoveries
        recs = recoveries()
        lost = sorted({r for x in recs[self._recoveries_seen:] if x.get("group") == "default"
                       for r in x.get("failed_original", [])})
        self._recoveries_seen = len(recs)
        rec = {"failed": lost or list(e.failed_ranks), "from": before, "to": dist.get_world_size(), "step": self.step,
               "epoch": self.epoch, "recover_ms": ms}
        self.recoveries.append(rec)
        self._recovered_at = t0
        if dist.get_rank() == 0:
            self.log(f"ftcc_torch: recovered from the failure of rank(s) {rec['failed']}: {before} -> "
                     f"{rec['to']} ranks, continuing at epoch {self.epoch} step {self.step} ({ms:.1f} ms)")

    def _sync_state(self):
        """Every survivor takes the state of the lowest survivor among those that applied the most steps."""
        n, me = dist.get_world_size(), dist.get_rank()
        most = torch.tensor([self.step], dtype=torch.int64)
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        src = torch.tensor([me if self.step == int(most) else n], dtype=torch.int64)
        dist.all_reduce(src, op=dist.ReduceOp.MIN)
        state = [None]
        if me == int(src):
            state[0] = {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                        "epoch": self.epoch, "cursor": self.cursor, "step": self.step, "counts": self.counts,
                        "losses": self.losses, "checked": self.epochs_checked,
                        "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None}
        dist.broadcast_object_list(state, src=int(src))
        s = state[0]
        if me != int(src):
            self.module.load_state_dict(s["model"])
            self.optimizer.load_state_dict(s["optimizer"])
            if self.scheduler is not None:
                self.scheduler.load_state_dict(s["scheduler"])
            self.epoch, self.cursor, self.step = s["epoch"], s["cursor"], s["step"]
            self.counts = s["counts"].clone()
            self.losses, self.epochs_checked = list(s["losses"]), list(s["checked"])

    def _wrap(self):
        self.model = None
        if self.use_ddp:
            self.model = DDP(self.module)
        else:
            self.model = self.module

    # ---- the end -----------------------------------------------------------------------------
    def state_sha256(self):
        """SHA-256 of the parameters' bytes, in state_dict order: equal iff bitwise equal."""
        h = hashlib.sha256()
        for k, v in self.module.state_dict().items():
            h.update(k.encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def _summary(self):
        s = {"ranks": dist.get_world_size(), "epochs": self.epoch, "steps": self.step,
             "final_loss": self.losses[-1] if self.losses else None, "exactly_once": self.epochs_checked,
             "recoveries": self.recoveries, "state_sha256": self.state_sha256(), "deterministic": self.deterministic,
             "lr": [g["lr"] for g in self.optimizer.param_groups]}
        if dist.get_rank() == 0 and self.summary_path:
            tmp = self.summary_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(s, f, indent=1)
            os.replace(tmp, self.summary_path)
        return s


def _exponent(max_abs, n_total):
    """Largest e with n_total * max_abs * 2^e < 2^62 (train/exact_sum.hpp's rule); 0 for all-zero."""
    if max_abs == 0:
        return 0
    _, ex = math.frexp(n_total * max_abs)  # n_total * max_abs = m * 2^ex with 0.5 <= m < 1
    return 62 - ex
