"""Shared by the job-level tests (fencing.py, launcher.py): a job under tools/ftcc-run with its
own job folder, and the checks they print."""
import hashlib, os, subprocess, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(root, "tools", "ftcc-run")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def pid_of(job_dir, rank, timeout=60):
    """The pid rank `rank` recorded when its group formed (rank-R.started)."""
    path = os.path.join(job_dir, f"rank-{rank}.started")
    end = time.time() + timeout
    while time.time() < end:
        try:
            with open(path) as f:
                words = f.read().split()
            return int(words[words.index("pid") + 1])
        except (OSError, ValueError, IndexError):
            time.sleep(0.05)
    raise SystemExit(f"FAIL: no {path} within {timeout} s")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


class Job:
    """A job under tools/ftcc-run with its own job folder; output to a file."""

    def __init__(self, n, args, env=None, run_flags=(), job_dir=None):
        self.tmp = tempfile.mkdtemp(prefix="ftcc-job-")
        self.dir = job_dir or os.path.join(self.tmp, "job")
        self.log = open(os.path.join(self.tmp, "out.txt"), "w+")
        e = dict(os.environ, FTCC_JOB_DIR=self.dir, **(env or {}))
        self.cmd = [RUN, *run_flags, "-n", str(n), *args]
        print("$ " + " ".join(self.cmd), flush=True)
        self.started = time.time()
        self.p = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=e, text=True)

    def wait(self, timeout=180):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = None
        self.seconds = time.time() - self.started
        self.log.seek(0)
        self.out = self.log.read()
        print(f"  exit {rc}\n" + "\n".join("  | " + l for l in self.out.splitlines()[-25:]), flush=True)
        return rc

    def wait_for(self, name, timeout=120):
        path = os.path.join(self.dir, name)
        end = time.time() + timeout
        while time.time() < end and not os.path.exists(path):
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        return os.path.exists(path)

    def outcome(self):
        with open(os.path.join(self.dir, "outcome")) as f:
            return dict(l.split(" ", 1) for l in f.read().splitlines())


def lines_with(out, text):
    return sum(1 for line in out.splitlines() if text in line)
