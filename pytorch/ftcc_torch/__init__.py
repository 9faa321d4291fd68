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
from .sampler import ExactlyOnceSampler

__all__ = ["RankFailure", "ExactlyOnceSampler", "ElasticTrainer", "begin_step", "finish"]


def _create_backend(store, rank, world_size, timeout):
    del store  # ftcc's group is the MPI job's; the store serves torch's own bookkeeping
    return _C.create_backend(rank, world_size, timeout.total_seconds())


def begin_step(step):
    """Marks the start of training step `step` (fault injection with FTCC_FAULTS, the progress watchdog)."""
    if _C.started():
        _C.begin_step(int(step))


finish = _lifecycle.finish

dist.Backend.register_backend("ftcc", _create_backend, devices=["cpu", "cuda"])
_rendezvous.install()
_shrink.install()
_lifecycle.install()

from .elastic import ElasticTrainer  # noqa: E402
