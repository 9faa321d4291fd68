"""init_process_group("ftcc") without MASTER_ADDR/MASTER_PORT: the MPI job is the rendezvous.

torch needs a Store for every process group. Under tools/ftcc-run the ranks share a job folder
(FTCC_JOB_DIR), so when the env:// variables are missing the store is a torch FileStore in that
folder, and rank and world size come from the MPI launch. A FileStore needs no server process, so
it outlives any rank (rank 0 included), which dist.shrink_group relies on: it clones the store.
Under tools/ftcc-run this holds even when the program sets MASTER_ADDR itself (torch's tutorials
do): a TCPStore lives in one rank and dies with it. Outside ftcc-run, with MASTER_ADDR set, env://
behaves as torch's own. Launched neither way, one line says how.
"""
import os

import torch.distributed as dist
import importlib

_rdzv = importlib.import_module("torch.distributed.rendezvous")


def _mpi_rank_size():
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return None


def _handler(original):
    def env_or_mpi(url, timeout=None, **kwargs):
        mpi = _mpi_rank_size()
        job_dir = os.environ.get("FTCC_JOB_DIR")
        if "MASTER_ADDR" in os.environ and not (mpi is not None and job_dir):
            yield from original(url, timeout=timeout, **kwargs) if timeout is not None else original(url, **kwargs)
            return
        if mpi is None:
            raise ValueError(
                "init_process_group: no MASTER_ADDR and no MPI launch: for backend 'ftcc' start the program with "
                "tools/ftcc-run -n N python prog.py; for another backend set MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE")
        if not job_dir:
            raise ValueError(
                "init_process_group: an MPI launch without a job folder: start the program with tools/ftcc-run "
                "(it starts mpirun with fault tolerance on and a job folder, FTCC_JOB_DIR)")
        rank, size = mpi
        os.environ.setdefault("RANK", str(rank))
        os.environ.setdefault("WORLD_SIZE", str(size))
        os.environ.setdefault("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
        store = dist.FileStore(os.path.join(job_dir, "torch-store"), size)
        if timeout is not None:
            store.set_timeout(timeout)
        yield (store, rank, size)
        raise RuntimeError("Unable to perform re-rendezvous using env:// (ftcc)")

    return env_or_mpi


def install():
    handlers = _rdzv._rendezvous_handlers
    if getattr(handlers.get("env"), "_ftcc", False):
        return
    wrapped = _handler(handlers["env"])
    wrapped._ftcc = True
    handlers["env"] = wrapped
