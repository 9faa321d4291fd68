"""tests/torch/seed_ddp.py with the job's rank 2 SIGKILLing itself at the moment DDP's constructor
checks the parameters' shapes: the other ranks are inside that all_gather (one output slot per
rank of the old group) when it dies. The program itself is unchanged (tests/torch/transparent.py).
"""
import os
import signal
import sys

import torch.nn.parallel.distributed as ddp_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed_ddp  # noqa: E402

shape_check = ddp_module._verify_param_shape_across_processes


def dying_shape_check(process_group, parameters, *args, **kwargs):
    if os.environ.get("OMPI_COMM_WORLD_RANK") == "2":
        os.kill(os.getpid(), signal.SIGKILL)
    return shape_check(process_group, parameters, *args, **kwargs)


ddp_module._verify_param_shape_across_processes = dying_shape_check
seed_ddp.main()
