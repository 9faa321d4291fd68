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


def descendants(pid):
    """Every process below `pid` (children first seen first)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(0), []):
            out.append(c)
            todo.append(c)
    return out


def stacks(pid, lines=40):
    """Where process `pid` is: its command, then gdb's C stacks (the top frames of each thread)
    and, for Python, its Python stack; '(no gdb)' where gdb is missing."""
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            cmd = f.read().replace("\0", " ").strip()
    except OSError:
        return f"  pid {pid}: gone"
    if "python" not in cmd and "ftcc" not in cmd and "_test" not in cmd:
        return f"  pid {pid}: {cmd[:160]}"
    try:
        r = subprocess.run(["gdb", "-p", str(pid), "-batch", "-iex", "add-auto-load-safe-path /",
                            "-ex", "thread apply all bt 8", "-ex", "py-bt"],
                           capture_output=True, text=True, timeout=40)
        # The threads with an ftcc or MPI frame (torch's idle pools left out), then the Python stack.
        blocks, py = [], []
        for l in r.stdout.splitlines():
            if l.startswith("Thread "):
                blocks.append([l])
            elif l.startswith("#") and blocks:
                blocks[-1].append(l)
            elif l.startswith(("Traceback", "  File", "    ")):
                py.append(l)
        got = [l for b in blocks if any(k in x for x in b[1:] for k in ("ftcc", "MPI", "mpi_", "PMPI")) for l in b] + py
    except (OSError, subprocess.TimeoutExpired) as e:
        got = [f"(no gdb: {e})"]
    return f"  pid {pid}: {cmd[:160]}\n" + "\n".join("    " + l[:200] for l in got[-lines * 4:])


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
            # A hang: say where every process of the job is (a test that hung once must leave
            # enough behind to find why), then stop all of them, not only ftcc-run (ranks left
            # running would slow or disturb the next case).
            print(f"  no exit within {timeout} s: the job's processes' stacks, then every one stopped", flush=True)
            procs = descendants(self.p.pid)
            for pid in procs:
                print(stacks(pid), flush=True)
            for pid in [self.p.pid] + procs:
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
            self.p.wait()
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
