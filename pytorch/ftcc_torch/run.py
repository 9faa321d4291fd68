"""python -m ftcc_torch.run: torchrun's command line, started by tools/ftcc-run.

    python -m ftcc_torch.run --nproc-per-node 4 train.py --epochs 3

Everything is handed to tools/ftcc-run (which takes torchrun's --nproc-per-node/--nproc_per_node,
--standalone and --nnodes 1); a script ending in .py runs under this Python (sys.executable), the
one that has torch and ftcc-torch. ftcc-run is found through FTCC_RUN, else in the checkout this
package was installed from (pip install -e / tools/torch-setup). Its exit status is returned as is.
"""
import os
import sys


def ftcc_run_path():
    try:
        from ._checkout import ROOT
    except ImportError:  # a source tree never built: the checkout around it
        ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("FTCC_RUN") or os.path.join(ROOT, "tools", "ftcc-run")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"python -m ftcc_torch.run: no launcher at {path}: set FTCC_RUN to ftcc's tools/ftcc-run "
                         "(or an installed bin/ftcc-run)")
    return path


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    run = ftcc_run_path()
    env = dict(os.environ, FTCC_PYTHON=sys.executable)
    os.execve(run, [run, *argv], env)


if __name__ == "__main__":
    sys.exit(main())
