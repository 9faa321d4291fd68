"""How a program on the ftcc backend ends: the exit-status contract of tools/ftcc-run.

- The program returns normally: the survivors agree that all of them are done (recovering if a
  rank is lost at the very end), the final group's rank 0 prints "ftcc: the job finished on 3 of 4
  ranks (1 recovery)", MPI is finalized, and the survivors' own exit status is the job's (0, or
  what sys.exit() asked for): ftcc-run reports it.
- An exception leaves the program on a rank (an uncaught RankFailure included: a rank was lost
  where the program does not recover): it is a job-level error, raised once: every survivor stops
  with it, one line names the rank, the outcome records it; ftcc-run exits 4.
- A rank that cannot go on alone (quorum lost, superseded, a deadline) leaves without MPI_Finalize,
  which the others see as a failure of that rank.
Installed when ftcc_torch is imported; nothing happens unless the ftcc backend was started.
"""
import atexit
import sys

from . import _C

_ended = False
_status = 0  # what the process leaves with, once the job has ended here


def finish():
    """End this rank's part of the job now (what a normal exit does). Returns 0, or the status
    the process must leave with (it leaves with it at exit)."""
    global _ended, _status
    if not _ended and _C.started():
        _ended = True
        _status = _C.finish()
    return _status


def _at_exit():
    finish()
    if _status != 0:
        _C.exit(_status)  # C's exit: past MPI_Finalize, or the exit guard's failure when it never ran


def _excepthook(original):
    # Stops the job here and returns: the process leaves with the status at exit (_at_exit),
    # after hooks installed later (torch's own, which prints the traceback with a rank prefix).
    def hook(kind, value, tb):
        global _ended, _status
        original(kind, value, tb)
        if _ended or not _C.started() or issubclass(kind, KeyboardInterrupt):
            return
        _ended = True
        _status = _C.fail(f"{kind.__name__}: {value}".splitlines()[0], False) or 4

    return hook


def install():
    if getattr(sys.excepthook, "_ftcc", False):
        return
    hook = _excepthook(sys.excepthook)
    hook._ftcc = True
    sys.excepthook = hook
    atexit.register(_at_exit)
