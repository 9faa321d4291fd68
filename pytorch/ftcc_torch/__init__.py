"""ftcc_torch: torch.distributed on ftcc, a backend that survives the loss of ranks.

    import ftcc_torch                      # registers the backend "ftcc"
    dist.init_process_group("ftcc")        # under tools/ftcc-run -n N python prog.py

Collectives run on ftcc's own algorithms (comm/), failures are detected and agreed by ULFM and
ftcc's heartbeat (recovery/): an operation in which a member died raises RankFailure, with the
same failed_ranks on every survivor, and dist.shrink_group(e.failed_ranks) continues on the
survivors. ElasticTrainer (ftcc_torch.elastic) writes that loop for you. docs/pytorch.md.

Settings (environment): FTCC_HANG_TIMEOUT_S (heartbeat silence before a hung rank is fenced;
default 30, 0 = off), FTCC_COMM_TIMEOUT_S (deadline of every wait; default: the torch timeout),
FTCC_FAULTS (faults to inject, recovery/fault_spec.hpp's grammar, comma-separated).
"""
import torch.distributed as dist

from ._errors import RankFailure
from . import _C
from . import _lifecycle
from . import _rendezvous
from . import _shrink
from . import _ddp
from .sampler import ExactlyOnceSampler
from .elastic_sampler import ElasticDistributedSampler

__all__ = ["RankFailure", "ExactlyOnceSampler", "ElasticDistributedSampler", "ElasticTrainer", "begin_step", "finish", "recoveries",
           "set_transparent", "survivor_handles"]


def _create_backend(dist_opts, backend_opts):
    # ftcc's groups are the MPI job's; the store serves torch's own bookkeeping.
    del backend_opts
    if not _C.started():
        _refuse_bad_settings()
    return _C.create_backend(dist_opts.group_rank, dist_opts.group_size, dist_opts.timeout.total_seconds(),
                             dist_opts.group_id, list(dist_opts.global_ranks_in_group))


def _refuse_bad_settings():
    # A bad FTCC_* setting is a configuration error, as ftcc-train's bad flags are: exit 2 with
    # one line, before MPI starts (every rank reads the same environment under ftcc-run; rank 0
    # says why, the others leave quietly with the same status).
    import os
    import sys
    why = _C.settings_error()
    if why:
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
        if rank == "0":
            print(f"ftcc: configuration error on rank {rank}: {why}", file=sys.stderr, flush=True)
        raise SystemExit(2)


def begin_step(step):
    """Marks the start of training step `step` (fault injection with FTCC_FAULTS, the progress watchdog)."""
    if _C.started():
        _C.begin_step(int(step))


def recoveries():
    """Every recovery of every ftcc group of this process, oldest first: a list of dicts (group,
    failed_ranks in the group's numbering before it, failed_original, old_size, new_size, old_rank,
    new_rank, transparent, why_not, adopted, redone, ms, line, ...). The same on every member of a
    group. Nothing to catch: the program can look here after the fact."""
    return list(_C.recoveries()) if _C.started() else []


def set_transparent(on, group=None):
    """Whether `group` (default: the default group) recovers transparently or raises RankFailure
    on every call in flight when a member is lost (the explicit path, for programs that do their
    own recovery). The default group is transparent unless told otherwise; a sub-group (new_group,
    split_group, a DeviceMesh dimension) is explicit unless told otherwise, since it may hold
    state of its own (a shard) that no redo brings back: set_transparent(True, group) for a group
    whose members hold the same state (a replica group). Call it on every member, before failures."""
    from ._ddp import ftcc_backend
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    b = ftcc_backend(pg)
    if b is None:
        raise ValueError("ftcc_torch.set_transparent: the group's backend is not ftcc")
    b.transparent = bool(on)


def survivor_handles(group=None):
    """The reconfigure handles (dist._get_reconfigure_handle) of `group`'s members that are alive
    in the job, in rank order: after a failure every survivor gets the same list, from ftcc's
    agreement on who failed, so dist._reconfigure(uuid, ftcc_torch.survivor_handles()) needs no
    exchange through a store. Every member must still pass the same fresh uuid."""
    from ._ddp import ftcc_backend
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    b = ftcc_backend(pg)
    if b is None:
        raise ValueError("ftcc_torch.survivor_handles: the group's backend is not ftcc")
    return list(b.survivor_handles())


finish = _lifecycle.finish

dist.Backend.register_backend("ftcc", _create_backend, extended_api=True, devices=["cpu", "cuda"])
_rendezvous.install()
_shrink.install()
_lifecycle.install()
_ddp.install()

from .elastic import ElasticTrainer  # noqa: E402
