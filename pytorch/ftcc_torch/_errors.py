"""The exception a failed member turns into (made by the backend, pytorch/csrc/rank_failure.cpp)."""
import torch.distributed as dist


class RankFailure(dist.DistBackendError):
    """A member of the process group died (or hung and was fenced) during an operation.

    ``failed_ranks`` (a sorted list of ranks of the group the operation ran on) is the same on
    every survivor: the survivors agreed on it through ULFM before any of them raised this.
    Continue on ``dist.shrink_group(e.failed_ranks)``. Every later operation on the old group
    raises the same error, so a survivor whose own operation completed sees it at its next one.
    """

    def __init__(self, message, failed_ranks):
        super().__init__(message)
        self.failed_ranks = [int(r) for r in failed_ranks]

    def __reduce__(self):
        return (RankFailure, (str(self), self.failed_ranks))
