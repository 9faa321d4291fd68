"""How torch users launch and install, checked as they would type it:

  nproc_per_node    tools/ftcc-run --nproc-per-node 2 seed_ddp.py (a .py runs under FTCC_PYTHON)
  python_m_run      python -m ftcc_torch.run --nproc_per_node=2 --standalone seed_ddp.py
  bad_flags         --nproc-per-node x, --nnodes 2, a flag where the program goes: exit 2, one line
  bad_settings      FTCC_HANG_TIMEOUT_S=abc, FTCC_FAULTS=bogus, FTCC_COMM_TIMEOUT_S=0,
                    FTCC_ULFM_TIMEOUT_S=-1, FTCC_SHM_BACKING=shm on 2 ranks: exit 2, one line naming the setting, no
                    traceback (were: exit 1 or 7, a 15-line traceback per rank)
  pip_without_wheel pytorch/setup.py, as pip runs it (bdist_wheel), in a plain Debian venv without
                    the `wheel` package: one line saying what to install

    bench/training/.venv-torch/bin/python tests/torch/launch.py [case ...]
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "reliability"))
from job_harness import RUN, check, failures, root  # noqa: E402

PY = os.path.join(root, "bench", "training", ".venv-torch", "bin", "python")
SEED = os.path.join(root, "tests", "torch", "seed_ddp.py")


def run(cmd, env=None):
    e = dict(os.environ, STEPS="20", **(env or {}))
    e.pop("FTCC_JOB_DIR", None)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
    print("$ " + " ".join(cmd) + f"\n  exit {p.returncode}\n" +
          "\n".join("  | " + l for l in (p.stdout + p.stderr).splitlines()[-6:]), flush=True)
    return p.returncode, p.stdout + p.stderr


def case_nproc_per_node():
    rc, out = run([RUN, "--nproc-per-node", "2", SEED], env={"FTCC_PYTHON": PY})
    check(rc == 0 and out.count("of 2: done") == 2, "nproc_per_node: 2 ranks ran the script under FTCC_PYTHON, exit 0")


def case_python_m_run():
    rc, out = run([PY, "-m", "ftcc_torch.run", "--nproc_per_node=2", "--standalone", SEED])
    check(rc == 0 and out.count("of 2: done") == 2, "python_m_run: 2 ranks, exit 0")


def case_bad_flags():
    for args, says in ((["--nproc-per-node", "x", SEED], "is not a positive number of processes"),
                       (["--nnodes", "2", "--nproc-per-node", "2", SEED], "--nnodes 2"),
                       (["--nproc-per-node", "2", "-x", "A=1", SEED], "the program comes next")):
        rc, out = run([RUN, *args])
        check(rc == 2 and says in out and len(out.strip().splitlines()) == 1,
              f"bad_flags: {' '.join(args[:2])}: exit 2 and one line saying '{says}' (got {rc})")


def case_bad_settings():
    for env, says in (({"FTCC_HANG_TIMEOUT_S": "abc"}, "FTCC_HANG_TIMEOUT_S='abc'"),
                      ({"FTCC_FAULTS": "bogus"}, "bad fault spec 'bogus'"),
                      ({"FTCC_COMM_TIMEOUT_S": "0"}, "FTCC_COMM_TIMEOUT_S='0'"),
                      ({"FTCC_ULFM_TIMEOUT_S": "-1"}, "FTCC_ULFM_TIMEOUT_S='-1'"),
                      ({"FTCC_SHM_BACKING": "shm"}, "FTCC_SHM_BACKING='shm'")):
        rc, out = run([RUN, "-n", "2", PY, SEED], env=env)
        lines = [l for l in out.splitlines() if l.strip()]
        check(rc == 2 and len(lines) == 1 and lines[0].startswith("ftcc: configuration error on rank 0: ")
              and says in lines[0] and "Traceback" not in out,
              f"bad_settings {env}: exit 2, one line naming it (got {rc}, {lines[:4]})")


def case_pip_without_wheel():
    venv = os.path.join(tempfile.mkdtemp(prefix="ftcc-venv-"), "v")
    subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    has_wheel = subprocess.run([py, "-c", "import wheel"], capture_output=True).returncode == 0
    builtin = subprocess.run([py, "-c", "import setuptools.command.bdist_wheel"], capture_output=True).returncode == 0
    if has_wheel or builtin:
        print("  (this venv can build wheels: nothing to refuse)")
        return
    rc, out = run([py, os.path.join(root, "pytorch", "setup.py"), "bdist_wheel"])
    check(rc != 0 and "pip install wheel" in out and "invalid command" not in out,
          "pip_without_wheel: refused with one line naming the `wheel` package")


if __name__ == "__main__":
    names = sys.argv[1:] or [n[5:] for n in list(globals()) if n.startswith("case_")]
    for n in names:
        print(f"== {n}", flush=True)
        globals()["case_" + n]()
    if failures:
        print(f"{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("all checks passed", flush=True)
