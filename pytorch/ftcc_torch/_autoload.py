"""Entry points torch loads by itself, so a program needs no `import ftcc_torch`.

`torch.backends` (torch's device-backend autoload, at `import torch`): under a tools/ftcc-run launch
(a job folder, FTCC_JOB_DIR, and an MPI rank) the package is imported, which registers the backend
"ftcc", the rendezvous from the MPI job and the DDP hook. Anywhere else it does nothing, so an
installed ftcc-torch costs other programs nothing. torch's switch TORCH_DEVICE_BACKEND_AUTOLOAD=0
turns it off; `torch.distributed.backends` below still registers the backend on first use.

`torch.distributed.backends` (looked up by init_process_group for a backend name it does not know):
registers "ftcc".
"""
import os


def under_ftcc_run():
    return bool(os.environ.get("FTCC_JOB_DIR")) and (
        "OMPI_COMM_WORLD_RANK" in os.environ or "PMI_RANK" in os.environ)


def autoload():
    if under_ftcc_run():
        import ftcc_torch  # noqa: F401


def register_backend():
    import ftcc_torch  # noqa: F401  (importing registers "ftcc")
