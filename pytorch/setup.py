"""ftcc-torch: ftcc's fault-tolerant c10d backend for torch.distributed (the Python module ftcc_torch).

Builds against the torch that is installed (its headers, libraries and C++ ABI, through
torch.utils.cpp_extension) and against ftcc's comm/ and recovery/ static libraries, which it takes
from ftcc's meson build folder (FTCC_BUILD_DIR, default <checkout>/build) and builds there first
if they are missing. The MPI is ftcc's (tools/setup records it in <checkout>/.venv/ftcc-mpi.env).

    tools/setup && tools/build                      # ftcc itself, once
    pip install --no-build-isolation ./pytorch      # into any venv that has torch

--no-build-isolation: the extension must be built against the torch of the venv it goes into
(pip's isolated build would download another torch just to compile against it).
"""
import os
import shlex
import subprocess
import sys

from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)


def fail(msg):
    sys.exit(f"ftcc-torch: {msg}")


try:
    import torch  # noqa: F401
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:
    fail("torch is not installed in this Python ({}); install torch first, then "
         "`pip install --no-build-isolation ./pytorch` (bench/training/torch_env makes such a venv)".format(sys.executable))


def mpi_prefix():
    prefix = os.environ.get("FTCC_MPI_PREFIX")
    state = os.path.join(root, ".venv", "ftcc-mpi.env")
    if not prefix and os.path.exists(state):
        for line in open(state):
            if line.startswith("FTCC_MPI_PREFIX="):
                prefix = shlex.split(line.split("=", 1)[1])[0]
    if not prefix or not os.path.exists(os.path.join(prefix, "bin", "mpicxx")):
        fail("no ULFM-capable MPI recorded: run tools/setup in the checkout first")
    return prefix


prefix = mpi_prefix()
build = os.path.join(root, os.environ.get("FTCC_BUILD_DIR", "build"))  # relative: to the checkout
libs = [os.path.join(build, "recovery", "libftcc_recovery.a"), os.path.join(build, "comm", "libftcc_comm.a")]
env = dict(os.environ, PATH=os.path.join(prefix, "bin") + os.pathsep + os.environ.get("PATH", ""))
if not os.path.exists(os.path.join(build, "build.ninja")):
    subprocess.run(["meson", "setup", build], cwd=root, env=env, check=True)
if True:  # ninja: nothing to do when they are up to date
    subprocess.run(["ninja", "-C", build, "recovery/libftcc_recovery.a", "comm/libftcc_comm.a"], env=env, check=True)


def showme(what):
    out = subprocess.run([os.path.join(prefix, "bin", "mpicxx"), f"--showme:{what}"], capture_output=True, text=True,
                         env=env, check=True).stdout
    return shlex.split(out)


mpi_incdirs = [f[2:] for f in showme("compile") if f.startswith("-I")]
mpi_link = showme("link")
mpi_libdirs = [f[2:] for f in mpi_link if f.startswith("-L")]
rpaths = [f"-Wl,-rpath,{d}" for d in mpi_libdirs]

ext = CppExtension(
    "ftcc_torch._C",
    sources=[os.path.join("csrc", f) for f in
             ("module.cpp", "process_group_ftcc.cpp", "ftcc_work.cpp", "runtime.cpp", "group_runner.cpp",
              "failure_verdict.cpp", "ddp_mean_hook.cpp", "rank_failure.cpp", "tensor_buffers.cpp")],
    include_dirs=[os.path.join(build, "include"), build] + mpi_incdirs,
    extra_objects=libs,
    extra_compile_args=["-std=c++20", "-O2", "-Wno-unused-parameter"],
    extra_link_args=mpi_link + rpaths + ["-lcrypto"],
)

setup(
    name="ftcc-torch",
    version="0.1.0",
    description="ftcc's fault-tolerant torch.distributed backend",
    packages=["ftcc_torch"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.9",
    # torch imports ftcc_torch by itself under tools/ftcc-run, and on init_process_group("ftcc"):
    # a program needs no `import ftcc_torch` (ftcc_torch/_autoload.py).
    entry_points={
        "torch.backends": ["ftcc = ftcc_torch._autoload:autoload"],
        "torch.distributed.backends": ["ftcc = ftcc_torch._autoload:register_backend"],
    },
)
