"""DistributedDataParallel on an ftcc group: the gradient mean over the ranks that take part.

DDP divides each gradient by the size the group had when the backward pass began, then sums. When
a rank is lost mid-step and the group recovers transparently, a bucket that runs again on the
survivors would then be (sum over survivors) / (old size): wrong. So every DDP built over an ftcc
group that recovers transparently gets ftcc's hook (pytorch/csrc/ddp_mean_hook.hpp): each bucket is
one call that sums and divides by the number of ranks that took part in that very reduction.
register_comm_hook and _register_builtin_comm_hook keep working: the program's hook then runs in
place of ftcc's (delegated), and decides the arithmetic itself.

DDP's construction checks the parameters' shapes with an all_gather whose output has one slot per
rank of the old group: a rank lost during it leaves a call that cannot run again on the survivors.
On the default group, recovering transparently, the construction is then done again on the
survivors (dist.shrink_group first), so a program needs no change for a loss at that moment either.
"""
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as _DDP

from . import _C


def ftcc_backend(pg):
    """The ftcc backend of a ProcessGroup, or None."""
    try:
        b = pg._get_backend(torch.device("cpu"))
    except Exception:  # noqa: BLE001 - a group without a CPU backend is not ours
        return None
    return b if isinstance(b, _C.ProcessGroupFtcc) else None


def install():
    if getattr(_DDP._ddp_init_helper, "_ftcc", False):
        return
    init_helper = _DDP._ddp_init_helper
    ddp_init = _DDP.__init__

    def init(self, module, *args, **kwargs):
        from ._errors import RankFailure
        explicit_group = kwargs.get("process_group", args[5] if len(args) > 5 else None)
        while True:
            try:
                return ddp_init(self, module, *args, **kwargs)
            except RankFailure as e:
                default = dist.distributed_c10d._get_default_group()
                backend = ftcc_backend(default)
                if explicit_group not in (None, default) or backend is None or not backend.transparent:
                    raise
                dist.shrink_group(e.failed_ranks)
    register = _DDP.register_comm_hook
    register_builtin = _DDP._register_builtin_comm_hook

    def ddp_init_helper(self, *args, **kwargs):
        init_helper(self, *args, **kwargs)
        backend = ftcc_backend(self.process_group)
        if backend is not None and backend.transparent:
            _C.install_ddp_hook(self.reducer, backend)
            self._ftcc_hook = True
            weakref.finalize(self, _C.forget_ddp_hook, self.reducer)

    def register_comm_hook(self, state, hook):
        if not getattr(self, "_ftcc_hook", False):
            return register(self, state, hook)
        self._check_comm_hook(hook)
        if _C.ddp_hook_delegated(self.reducer):
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        self.logger._set_comm_hook_name(hook.__qualname__)
        self._comm_hooks.append((hook, state))
        _C.delegate_ddp_hook(self.reducer, state, hook)

    def _register_builtin_comm_hook(self, comm_hook_type):
        if not getattr(self, "_ftcc_hook", False):
            return register_builtin(self, comm_hook_type)
        if _C.ddp_hook_delegated(self.reducer):
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        # torch's C++ built-ins are not exported to extensions: their Python twins, same arithmetic.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = {dist.BuiltinCommHookType.ALLREDUCE: default_hooks.allreduce_hook,
                dist.BuiltinCommHookType.FP16_COMPRESS: default_hooks.fp16_compress_hook}[comm_hook_type]
        self.logger._set_comm_hook_name(str(comm_hook_type))
        self._comm_hooks.append((hook, self.process_group))
        _C.delegate_ddp_hook(self.reducer, self.process_group, hook)

    for f, original in ((init, ddp_init), (ddp_init_helper, init_helper), (register_comm_hook, register),
                        (_register_builtin_comm_hook, register_builtin)):
        f._ftcc = True
        f.__doc__ = original.__doc__
    _DDP.__init__ = init
    _DDP._ddp_init_helper = ddp_init_helper
    _DDP.register_comm_hook = register_comm_hook
    _DDP._register_builtin_comm_hook = _register_builtin_comm_hook
