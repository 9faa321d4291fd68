"""dist.shrink_group on the ftcc backend: the shrunk group keeps the backend type of the group it came from.

torch's shrink_group registers the new backend under the built-in type of its device (GLOO for
CPU, NCCL for CUDA), which is right for those two backends only: DDP's logger then takes an ftcc
backend for a ProcessGroupGloo and crashes. For an ftcc backend, the shrunk group gets the CUSTOM
type, as init_process_group("ftcc") gave the group it came from; any other backend is untouched.
"""
import importlib

import torch

from . import _C

_c10d = importlib.import_module("torch.distributed.distributed_c10d")


def install():
    original = _c10d._create_shrunk_process_group
    if getattr(original, "_ftcc", False):
        return

    def create_shrunk_process_group(new_backend, remaining_ranks, metadata, is_default_group):
        pg = original(new_backend, remaining_ranks, metadata, is_default_group)
        if isinstance(new_backend, _C.ProcessGroupFtcc):
            custom = _c10d.ProcessGroup.BackendType.CUSTOM
            for device in ("cpu", "cuda"):
                pg._register_backend(torch.device(device), custom, new_backend)
            pg._set_default_backend(custom)
        return pg

    create_shrunk_process_group._ftcc = True
    _c10d._create_shrunk_process_group = create_shrunk_process_group
