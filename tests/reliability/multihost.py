#!/usr/bin/env python3
"""Multi-host reliability test: ftcc-train on simulated hosts with a real network between them.

    multihost.py BUILD_DIR [--hosts 3] [--ranks-per-host 2] [--repeats N] [--netem-seconds S]
                           [--cases netem,partition,...] [--epochs E] [--chaos N [--seed S]]

Three network namespaces h1..h3 joined by veth pairs on a bridge (tools/netns-hosts), two ranks
each, mpirun starting its daemons there through tools/netns-hosts-agent instead of ssh. ftcc's
heartbeat (--hang-timeout 1: timeout 1 s, period 125 ms) is the only detector of a silent host;
ULFM's own detector is off (tools/ftcc-run). "Back" is the time from the fault to the survivors'
recovery line (they train again), measured here; the bound checked for each run is twice the
documented figure (timeout + period + 200 ms), and with --repeats N the median must meet the figure.
Cases:

  netem      20 ms delay and 2% loss on every host's link: the --deterministic run ends with the
             same parameters (SHA-256) and sample count as without; then a run of --netem-seconds
             (default 30) in which no rank is suspected and none excluded;
  partition  h3's link cut mid-run: h1+h2 exclude h3's ranks and finish with the fault-free
             parameters; h3's ranks stop with "quorum lost" while still cut off (they are the
             minority); after the link heals mpirun exits 0;
  crash      h3 crashes (link cut, every process in it killed): the same, without the minority;
  hang host  every rank of h3 SIGSTOPped (nobody on h3 can fence them): the others exclude them and
             finish; SIGCONT: h3's ranks read that they were excluded and stop themselves;
  hang rank  one rank of h3 SIGSTOPped: its host-mate fences it (SIGKILL), the others learn it from
             the heartbeat's news, 6 -> 5;
  spare host h1 and h2 train (2 x 2 ranks) while h3 holds 2 hot spares (ftcc-train --spares 2);
             h2 crashes mid-run: the spares on h3 take the places of h2's ranks, the world is back
             to 4 with the fault-free parameters (docs/recovery.md, "Hot spares");
  quorum     a job on h1+h2 only (2 x 2 ranks; h3 idles), h2's link cut mid-run: two halves, neither
             a strict majority of the 4 ranks, so every rank stops with "quorum lost" while cut
             off, tools/ftcc-run exits 3 ("the job stopped: no group of survivors held a majority
             (quorum lost)") and nothing is written to the checkpoint folder after the cut;
  slow rank  one rank of h3 spends 3 heartbeat timeouts in one step without MPI: nobody is suspected;
  --chaos N  instead of the cases: N jobs, each with one fault drawn at random (partition, crash,
             hang host, hang rank) on a random host, rank 0's included, at a random moment; each
             is checked as its case is (tools/test --full runs 8);
  launcher   the host running mpirun is lost silently (its traffic to the hosts dropped, then mpirun
             SIGKILLed): no rank is lost, so training goes on to its last step on every host and
             writes its last checkpoint and a `finished` outcome record; nobody is left to report
             an exit status (the launcher's host is gone).

Needs root (namespaces) and a ULFM MPI; exits 77 (skipped) without them. The namespaces are
removed at the end whatever happens (also on SIGTERM from meson's timeout), and at the start in
case an earlier run was killed before it could clean up. The namespaces and the bridge have
fixed names, so two runs on one machine (two checkouts' suites at once) would tear down each
other's hosts: a run waits for the machine-wide lock /run/lock/ftcc-multihost.lock first.
"""
import fcntl, hashlib, json, os, random, re, shutil, signal, statistics, subprocess, sys, tempfile, threading, time

build = os.path.abspath(sys.argv[1])
args = sys.argv[2:]
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
hosts_tool = os.path.join(root, "tools", "netns-hosts")
run_tool = os.path.join(root, "tools", "ftcc-run")
train = os.path.join(build, "tools", "ftcc-train")


def arg(name, default):
    return type(default)(args[args.index(name) + 1]) if name in args else default


n_hosts = arg("--hosts", 3)
per_host = arg("--ranks-per-host", 2)
repeats = arg("--repeats", 1)
netem_seconds = arg("--netem-seconds", 30.0)  # the no-false-suspicion run lasts at least this
chaos = arg("--chaos", 0)
seed = arg("--seed", 1)
ALL_CASES = ["netem", "partition", "crash", "hang host", "hang rank", "spare host", "quorum", "slow rank", "launcher"]
cases = [c.replace("-", " ") for c in arg("--cases", ",".join(ALL_CASES) if not chaos else "none").split(",")]
ranks = n_hosts * per_host
TIMEOUT_S = 1.0                  # ftcc's heartbeat timeout (--hang-timeout); the period is an eighth
PERIOD_S = TIMEOUT_S / 8
FIGURE_S = TIMEOUT_S + PERIOD_S + 0.2   # the documented bound: fault -> survivors training again
EPOCHS = arg("--epochs", 400)  # host faults: 9200 steps, several seconds undisturbed after the fault
NETEM_EPOCHS = 3   # netem: 69 steps (each step waits for several 40 ms round trips)
DIGITS_TRAIN = 1438
MODEL = ["--dataset", "digits", "--layers", "64,64,10", "--batch", "64", "--lr", "0.05", "--deterministic",
         "--hang-timeout", str(TIMEOUT_S)]
failures = []
timings = {}  # case -> [seconds from the fault to the survivors' recovery line]


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def hosts(*a, check_rc=True):
    p = subprocess.run([hosts_tool, *a], capture_output=True, text=True)
    if check_rc and p.returncode != 0:
        raise RuntimeError(f"tools/netns-hosts {' '.join(a)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout.strip()


if os.geteuid() != 0:
    skip("needs root for network namespaces (run as root)")
os.makedirs("/run/lock", exist_ok=True)
machine_lock = open("/run/lock/ftcc-multihost.lock", "w")  # held until this process exits
try:
    fcntl.flock(machine_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print("another multihost run holds /run/lock/ftcc-multihost.lock: waiting for it", flush=True)
    fcntl.flock(machine_lock, fcntl.LOCK_EX)
if not os.path.exists(train):
    sys.exit(f"FAIL: {train} not built")
os.environ.pop("FTCC_DETECTOR_TIMEOUT", None)  # ftcc's heartbeat alone detects silent hosts
env = dict(os.environ)
# ULFM at run time: the same question ftcc-train asks; a build without it cannot do any of this.
probe = subprocess.run([run_tool, "-n", "1", train, "--steps", "1", "--quiet", "--dataset", "digits",
                        "--layers", "64,10", "--inject", "delay:rank=0:step=0:ms=1"], capture_output=True, text=True,
                       env=env, timeout=120)
if probe.returncode != 0 and "ULFM" in probe.stderr:
    skip("this ftcc has no ULFM fault tolerance")


jobs = []


def on_sigterm(*_):
    # meson's timeout: SIGTERM to the process group, SIGKILL 0.5 s later. Stop the jobs and start
    # the clean-up in a session of its own, so that the SIGKILL does not cut it short.
    for j in jobs:
        if j.p.poll() is None:
            j.p.kill()
    subprocess.Popen([hosts_tool, "down"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os._exit(1)


signal.signal(signal.SIGTERM, on_sigterm)


def comm_of(pid):
    """The process's name (/proc/PID/comm), None once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def ns_pids(host, name=None):
    out = subprocess.run(["ip", "netns", "pids", f"ftcc-{host}"], capture_output=True, text=True).stdout.split()
    return out if name is None else [pid for pid in out if comm_of(pid) == name]


def kill_leftovers():
    """Nothing of a finished case may keep running (and spinning) into the next one."""
    for i in range(1, n_hosts + 1):
        for pid in ns_pids(f"h{i}"):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass


class Job:
    """An mpirun of ftcc-train over the simulated hosts; stdout+stderr read line by line with times.
    on: the hosts to run on (default every host), per_host ranks on each."""

    def __init__(self, extra, on=None, job_dir=None):
        mpi_args = hosts("mpirun-args", str(per_host)).split()
        n = ranks
        if on is not None:
            mpi_args[mpi_args.index("--host") + 1] = ",".join(f"{h}:{per_host}" for h in on)
            n = len(on) * per_host
        self.cmd = [run_tool, *mpi_args, "-n", str(n), train, *MODEL, *extra]
        job_env = dict(env, FTCC_JOB_DIR=job_dir) if job_dir else env
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=job_env,
                                  errors="replace")
        self.lines = []  # (monotonic time, line)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()
        jobs.append(self)

    def _read(self):
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern, timeout):
        rx = re.compile(pattern)
        end = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < end:
            while seen < len(self.lines):
                t, line = self.lines[seen]
                seen += 1
                if rx.search(line):
                    return t, line
            if self.p.poll() is not None and seen >= len(self.lines):
                self.t.join(timeout=10)  # the reader may still hold the last lines
                if seen >= len(self.lines):
                    return None
                continue
            time.sleep(0.05)
        return None

    def finish(self, timeout):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = None
        self.t.join(timeout=5)
        return rc

    def summary(self):
        for _, line in self.lines:
            if line.startswith("FTCC_SUMMARY "):
                return json.loads(line[len("FTCC_SUMMARY "):])
        return None

    def tail(self, n=25):
        return "\n".join(line for _, line in self.lines[-n:])

    def not_started(self, what):
        """A job that printed no step within the wait: fails `what` with what ran on each host at
        that moment, the links, and what tools/ftcc-run then said (its start-up deadline, 120 s
        like the wait, names the ranks that did not come up)."""
        ran = {f"h{i}": sorted(filter(None, map(comm_of, ns_pids(f"h{i}")))) for i in range(1, n_hosts + 1)}
        links = hosts("status", check_rc=False).replace("\n", "; ")
        rc = self.finish(30)
        check(False, f"{what}: training started (ftcc-run exit {rc}; processes by host {ran}; {links}; "
                     f"output:\n{self.tail()})")


def fault_free(epochs):
    j = Job(["--epochs", str(epochs)])
    rc = j.finish(300)
    s = j.summary()
    if rc != 0 or s is None:
        sys.exit(f"FAIL: the fault-free run on {n_hosts} hosts failed (exit {rc})\n{' '.join(j.cmd)}\n{j.tail()}")
    return s


def timed(name, seconds):
    """One measurement of fault -> survivors training again: checked against twice the figure."""
    timings.setdefault(name, []).append(seconds)
    check(seconds <= 2 * FIGURE_S, f"{name}: back {seconds:.2f} s after the fault (bound {2 * FIGURE_S:.2f} s = "
                                   f"2 x (timeout {TIMEOUT_S:g} + period {PERIOD_S:g} + 0.2))")


def stop_processes(host, sig, count=None):
    pids = sorted(ns_pids(host, "ftcc-train"), key=int)
    for pid in pids[:count]:
        os.kill(int(pid), sig)
    return pids[:count]


def host_fault_case(name, host=None, delay=0.0):
    """A fault on one host (default the last) once training runs (plus `delay` seconds); the survivors
    must finish with the fault-free result. partition: link cut; crash: link cut + every process
    killed; hang host: every rank SIGSTOPped (SIGCONT once the others went on); hang rank: one rank
    SIGSTOPped (its host-mate fences it)."""
    host = host or n_hosts
    victim = f"h{host}"
    lost_all = list(range((host - 1) * per_host, host * per_host))
    # The job folder is kept (ftcc-run removes one it made): the woken ranks' records say how they stopped.
    job_dir = tempfile.mkdtemp(prefix="ftcc-multihost-job-")
    try:
        _host_fault_case(name, host, delay, victim, lost_all, job_dir)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def stop_record(job_dir, r):
    """How rank r left, from its job records: excluded, fenced, quorum, or what else it wrote."""
    def read(ext):
        try:
            with open(os.path.join(job_dir, f"rank-{r}.{ext}")) as f:
                return f.read().strip()
        except OSError:
            return None
    left, quorum = read("left") or "", read("quorum")
    if left.startswith("excluded by the survivors"):
        return "excluded"
    if left.startswith("fenced (SIGKILL) by rank"):
        return "fenced"
    if quorum is not None:
        return "quorum"
    for ext in ("exited", "crashed"):
        if read(ext) is not None:
            return f"{ext}: {read(ext)}"
    return f"left: {left}" if left else "no record (killed from outside, or SIGPIPE)"


def _host_fault_case(name, host, delay, victim, lost_all, job_dir):
    j = Job(["--epochs", str(EPOCHS)], job_dir=job_dir)
    started = j.wait_for(r"^step \d+/", 120)
    if started is None:
        j.not_started(name)
        return
    time.sleep(delay)
    stopped = []
    t_fault = time.monotonic()
    if name in ("partition", "crash"):
        hosts(name, victim)
    elif name == "hang host":
        stopped = stop_processes(victim, signal.SIGSTOP)
    elif name == "hang rank":
        stopped = stop_processes(victim, signal.SIGSTOP, 1)
    rec = j.wait_for(r"^recovery: recovered", 60)
    check(rec is not None, f"{name}: the survivors recovered ({(rec or ('', ''))[1][:200]})")
    n_lost = 1 if name == "hang rank" else per_host
    if rec:
        timed(name, rec[0] - t_fault)
        lost = re.findall(r"rank (\d+) on host (\S+) pid", rec[1])
        if name == "hang rank":
            check(len(lost) == 1 and lost[0][1] == victim, f"{name}: the lost rank is one of {victim}'s ({lost})")
            fence = [line for _, line in j.lines if "fenced (SIGKILL) by rank" in line]
            check(len(fence) == 1 and f"host {victim}" in fence[0], f"{name}: its host-mate fenced it ({fence})")
        else:
            check(sorted(int(r) for r, h in lost if h == victim) == lost_all and len(lost) == per_host,
                  f"{name}: the lost ranks are {lost_all} on {victim} ({lost})")
    if name == "hang host":
        # The others went on without h3's ranks; woken up, they must read that and stop themselves.
        time.sleep(0.5)
        for pid in stopped:
            os.kill(int(pid), signal.SIGCONT)
        t_cont = time.monotonic()
        while ns_pids(victim, "ftcc-train") and time.monotonic() < t_cont + 10:
            time.sleep(0.05)
        gone = time.monotonic() - t_cont
        check(not ns_pids(victim, "ftcc-train"), f"{name}: {victim}'s ranks stopped themselves {gone:.2f} s after SIGCONT")
    summary_line = j.wait_for(r"^FTCC_SUMMARY ", finish_s)
    s = j.summary() if summary_line else None
    check(s is not None, f"{name}: the survivors finished training")
    if name == "partition":
        # The minority must stop while it is still cut off (not because the link came back).
        end = time.monotonic() + 30
        while ns_pids(victim, "ftcc-train") and time.monotonic() < end:
            time.sleep(0.2)
        check(not ns_pids(victim, "ftcc-train"), f"{name}: {victim}'s ranks stopped while cut off")
    if name in ("partition", "crash"):
        hosts("heal", victim)
    rc = j.finish(120)
    check(rc == 0, f"{name}: tools/ftcc-run exit status {rc}")
    kill_leftovers()
    if s:
        check(s["world_size_final"] == ranks - n_lost, f"{name}: world {s['world_size_initial']} -> {s['world_size_final']}")
        check(s["samples_seen"] == EPOCHS * DIGITS_TRAIN, f"{name}: samples_seen {s['samples_seen']}")
        check(s["param_sha256"] == base["param_sha256"],
              f"{name}: --deterministic parameters equal to the fault-free run ({s['param_sha256'][:12]})")
    out = [line for _, line in j.lines]
    quorum = [line for line in out if "quorum lost" in line and "ftcc-run:" not in line]
    excluded = [line for line in out if "self-fenced" in line]
    if name == "hang host":
        # A woken rank of h3 may also stop on "quorum lost" (its heartbeat heard no survivor's reply
        # within the timeout, as when cut off): a safe stop, checked below with the others.
        quorum = [line for line in quorum if not re.search(rf"rank ({'|'.join(map(str, lost_all))}):", line)]
    if name == "partition":
        # Its ranks stop on quorum lost, or (the news crossed before the cut) as excluded.
        cut_off = quorum + [line for line in out if "self-fenced" in line]
        check(len(cut_off) == per_host, f"{name}: {victim}'s ranks stopped with 'quorum lost' ({len(cut_off)} lines)")
    else:
        check(not quorum, f"{name}: no 'quorum lost'")
    if name == "hang host":
        # The invariant: no woken rank trains on. Each stopped itself by a path that writes why: it
        # read that it was excluded (self-fenced), a host-mate fenced it, or it found itself in a
        # minority (quorum lost) when no survivor's reply reached it within the heartbeat timeout.
        # Which one wins is a race with the survivors' reply (load); a rank gone without a record
        # (killed from outside, SIGPIPE) or that exited normally fails.
        how = {r: stop_record(job_dir, r) for r in lost_all}
        for line in out:  # the heartbeat's fencing of a host-mate leaves the fenced rank no record: its fencer says it
            m = re.match(r"ftcc: rank (\d+) \(host \S+, pid \d+\) .*fenced \(SIGKILL\) by rank", line)
            if m and int(m.group(1)) in how and how[int(m.group(1))].startswith("no record"):
                how[int(m.group(1))] = "fenced"
        safe = all(h in ("excluded", "fenced", "quorum") for h in how.values())
        check(safe and any(h != "fenced" for h in how.values()),
              f"{name}: {victim}'s ranks stopped themselves, each with a record of why ({how}; "
              f"{len(excluded)} self-fenced line(s))")
    if failures:
        print(f"--- {name}: output tail\n{j.tail(40)}")


def spare_host_case():
    """h1 and h2 train, h3 holds hot spares; h2 crashes: h3's spares take its ranks' places."""
    name, victim = "spare host", "h2"
    lost = list(range(per_host, 2 * per_host))           # h2's ranks
    spares = list(range(ranks - per_host, ranks))         # h3's processes: the last ones are the spares
    training = ranks - per_host
    j = Job(["--epochs", str(EPOCHS), "--spares", str(per_host)])
    if j.wait_for(r"^step \d+/", 120) is None:
        j.not_started(name)
        return
    t_fault = time.monotonic()
    hosts("crash", victim)
    rec = j.wait_for(r"^recovery: recovered", 60)
    summary_line = j.wait_for(r"^FTCC_SUMMARY ", finish_s)
    check(rec is not None and all(f"rank {r} on host {victim}" in rec[1] for r in lost)
          and f"hot spares {', '.join(map(str, spares))} joined" in rec[1],
          f"{name}: h2's ranks {lost} replaced by h3's spares {spares} ({(rec or ('', ''))[1][:220]})")
    if rec:
        timed(name, rec[0] - t_fault)
    hosts("heal", victim)
    rc = j.finish(120)
    kill_leftovers()
    check(rc == 0, f"{name}: tools/ftcc-run exit status {rc}")
    s = j.summary() if summary_line else None
    check(s is not None, f"{name}: training finished")
    if s:
        joined = [r for e in s["recoveries"] for r in e.get("joined", [])]
        check(s["world_size_initial"] == training and s["world_size_final"] == training and joined == spares,
              f"{name}: world {s['world_size_initial']} -> {s['world_size_final']}, spares joined {joined}")
        check(s["samples_seen"] == EPOCHS * DIGITS_TRAIN, f"{name}: samples_seen {s['samples_seen']}")
        check(s["param_sha256"] == base["param_sha256"],
              f"{name}: --deterministic parameters equal to the fault-free run ({s['param_sha256'][:12]})")
    if failures:
        print(f"--- {name}: output tail\n{j.tail(40)}")


def snapshot(folder):
    """Every file under folder -> SHA-256 of its content."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(dirpath, f)
            try:
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
            except OSError:
                pass
    return out


def quorum_lost_case():
    """Two hosts, h2 cut off: neither half holds a strict majority, so the whole job stops (exit 3)."""
    name, on, victim = "quorum", ["h1", "h2"], "h2"
    n = len(on) * per_host
    ck = tempfile.mkdtemp(prefix="ftcc-multihost-ck-")
    try:
        j = Job(["--epochs", str(EPOCHS), "--checkpoint-dir", ck, "--checkpoint-every", "20"], on=on)
        started = j.wait_for(r"^step \d+/", 120)
        if started is None:
            j.not_started(f"{name} on {'+'.join(on)}")
            return
        hosts("partition", victim)
        t_cut = time.monotonic()
        # A step needs every rank, so none completes once the link is down; nobody can be declared
        # failed before the heartbeat's timeout. What the folder holds now is what it must hold at the end.
        time.sleep(TIMEOUT_S / 2)
        before = snapshot(ck)
        # Every rank, on both sides, must stop by itself while the link is still cut.
        end = time.monotonic() + 30
        while any(ns_pids(h, "ftcc-train") for h in on) and time.monotonic() < end:
            time.sleep(0.5)
        stopped = time.monotonic() - t_cut
        timings.setdefault("quorum: all stopped", []).append(stopped)
        check(not any(ns_pids(h, "ftcc-train") for h in on) and stopped <= 2 * FIGURE_S + 2,
              f"{name}: every rank on {'+'.join(on)} stopped while {victim} was cut off ({stopped:.2f} s after the cut; "
              f"bound {2 * FIGURE_S + 2:.2f} s)")
        hosts("heal", victim)  # h2's daemon reports its ranks' end once it can reach mpirun again
        rc = j.finish(120)
        kill_leftovers()
        out = [line for _, line in j.lines]
        quorum = [line for line in out if "quorum lost" in line and "ftcc-run:" not in line]
        check(len(quorum) == n, f"{name}: all {n} ranks printed 'quorum lost' ({len(quorum)} lines)")
        for line in quorum[:n]:
            print(f"     {line}")
        verdict = [line for line in out if line.startswith(
            "ftcc-run: the job stopped: no group of survivors held a majority (quorum lost)")]
        check(len(verdict) == 1, f"{name}: ftcc-run says the job stopped on quorum lost ({(verdict or [''])[0]})")
        check(rc == 3, f"{name}: tools/ftcc-run exit status {rc} == 3 (quorum lost)")
        check(not any(line.startswith(("FTCC_SUMMARY ", "recovery: recovered")) for line in out),
              f"{name}: no side recovered or finished")
        after = snapshot(ck)
        check(bool(before) and after == before,
              f"{name}: the checkpoint folder is unchanged since the cut ({len(before)} files; "
              f"added {sorted(set(after) - set(before))}, changed "
              f"{sorted(k for k in before if k in after and after[k] != before[k])})")
        if failures:
            print(f"--- {name}: output tail\n{j.tail(40)}")
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def netem_case():
    """Delay and loss on every link: the same result, and no suspicion in a long run."""
    print(hosts("netem", "all", "20", "2"), flush=True)
    try:
        t0 = time.monotonic()
        j = Job(["--epochs", str(NETEM_EPOCHS)])
        rc = j.finish(600)
        t_netem = time.monotonic() - t0
        s = j.summary()
        check(rc == 0 and s is not None, f"netem 20 ms / 2%: the run finished (exit {rc}) in {t_netem:.1f} s")
        if s:
            check(s["param_sha256"] == base_short["param_sha256"], "netem 20 ms / 2%: same parameters (SHA-256) as without")
            check(s["samples_seen"] == base_short["samples_seen"], f"netem 20 ms / 2%: samples_seen {s['samples_seen']}")
            check(s["world_size_final"] == ranks, f"netem 20 ms / 2%: no rank excluded (world {s['world_size_final']})")
        else:
            print(j.tail(40))
            return
        # No suspicion in a run of at least netem_seconds: this one, or a longer one at the rate just seen.
        t_soak, steps, rc_soak, s_soak, j_soak = t_netem, s["steps"], rc, s, j
        if t_netem < netem_seconds:
            steps = int(1.25 * s["steps"] * netem_seconds / max(t_netem, 1e-3)) + 1  # set-up time included
            t0 = time.monotonic()
            j_soak = Job(["--steps", str(steps)])
            rc_soak = j_soak.finish(2 * netem_seconds + 300)
            t_soak = time.monotonic() - t0
            s_soak = j_soak.summary()
        suspicions = [line for _, line in j_soak.lines if re.search(r"silent for|suspected|excluded|fenced", line)]
        check(rc_soak == 0 and s_soak is not None and s_soak["world_size_final"] == ranks and not suspicions
              and t_soak >= netem_seconds,
              f"netem 20 ms / 2% for {t_soak:.0f} s ({steps} steps, heartbeat timeout {TIMEOUT_S:g} s): "
              f"exit {rc_soak}, world {s_soak and s_soak['world_size_final']}, {len(suspicions)} suspicion line(s) {suspicions[:2]}")
    finally:
        print(hosts("netem-off", "all"), flush=True)
        kill_leftovers()
    # Where ftcc-netem did the work (no tc netem), its counts show the loss was really applied.
    logs = [f"/run/ftcc-netns-hosts/netem-h{i}.log" for i in range(1, n_hosts + 1)]
    counts = [re.search(r"(\d+) packets, (\d+) dropped", open(f).read()) for f in logs if os.path.exists(f)]
    if counts:
        seen = sum(int(m.group(1)) for m in counts if m)
        dropped = sum(int(m.group(2)) for m in counts if m)
        check(len([m for m in counts if m]) == n_hosts and seen > 1000 and 0.01 <= dropped / seen <= 0.035,
              f"netem 20 ms / 2%: ftcc-netem saw {seen} packets and dropped {dropped} ({100 * dropped / max(seen, 1):.2f}%)")


def slow_rank_case():
    """A rank of h3 computes for 3 heartbeat timeouts without touching MPI: nobody is suspected
    (the heartbeat has its own thread; ULFM's detector, which runs in MPI progress, is off)."""
    name = "slow rank"
    j = Job(["--epochs", str(NETEM_EPOCHS * 10), "--inject", f"delay:rank={ranks - 1}:step=100:ms={int(3000 * TIMEOUT_S)}"])
    rc = j.finish(300)
    s = j.summary()
    suspicions = [line for _, line in j.lines if re.search(r"silent for|suspected|excluded|fenced", line)]
    check(rc == 0 and s is not None and s["world_size_final"] == ranks and not s["recoveries"] and not suspicions,
          f"{name}: a {3 * TIMEOUT_S:g} s step on rank {ranks - 1}: exit {rc}, world {s and s['world_size_final']}, "
          f"{len(suspicions)} suspicion line(s) {suspicions[:2]}")
    if s:
        check(s["wall_s"] >= 3 * TIMEOUT_S, f"{name}: the delay happened (run {s['wall_s']:.1f} s)")
    kill_leftovers()


def launcher_lost_case():
    """The host running mpirun goes silent: no rank is lost, so the job trains to its end."""
    name = "launcher"
    ck = tempfile.mkdtemp(prefix="ftcc-multihost-ck-")
    jobdir = tempfile.mkdtemp(prefix="ftcc-multihost-job-")
    steps = 3000
    env["FTCC_JOB_DIR"] = jobdir  # the simulated hosts share this machine's /tmp, as a cluster shares a filesystem
    rules = [["INPUT", "-i", "ftcc-br0", "-j", "DROP"], ["OUTPUT", "-o", "ftcc-br0", "-j", "DROP"]]
    try:
        j = Job(["--steps", str(steps), "--checkpoint-dir", ck, "--checkpoint-every", "500"])
        if j.wait_for(r"^step \d+/", 120) is None:
            j.not_started(name)
            return
        # The launcher's host goes silent (no FIN or RST reaches the hosts), then its mpirun dies.
        for r in rules:
            subprocess.run(["iptables", "-I", *r], check=True)
        mpirun = subprocess.run(["pgrep", "-x", "-P", str(j.p.pid), "prterun|mpirun"], capture_output=True, text=True)
        for pid in mpirun.stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        t_lost = time.monotonic()
        end = t_lost + 120
        while any(ns_pids(f"h{i}", "ftcc-train") for i in range(1, n_hosts + 1)) and time.monotonic() < end:
            time.sleep(0.2)
        ran = time.monotonic() - t_lost
        check(not any(ns_pids(f"h{i}", "ftcc-train") for i in range(1, n_hosts + 1)),
              f"{name}: every rank ended by itself {ran:.1f} s after the launcher's host was lost")
        last = os.path.join(ck, f"ckpt-{steps:010d}.safetensors")
        check(os.path.exists(last), f"{name}: the last checkpoint (step {steps}) was written after the loss")
        outcome = os.path.join(jobdir, "outcome")
        text = open(outcome).read() if os.path.exists(outcome) else ""
        check(text.startswith("status 0\n"), f"{name}: the final group recorded `finished` ({text.strip()[:80]!r})")
        left = [f for f in os.listdir(jobdir) if f.endswith((".left", ".crashed", ".quorum"))]
        check(not left, f"{name}: no rank left early ({left})")
        j.finish(5)
    finally:
        for r in rules:
            subprocess.run(["iptables", "-D", *r], capture_output=True)
        env.pop("FTCC_JOB_DIR", None)
        kill_leftovers()  # the runtime's daemons wait for a launcher that is gone
        shutil.rmtree(ck, ignore_errors=True)
        shutil.rmtree(jobdir, ignore_errors=True)


# Can this machine make network namespaces at all (root in a container may not)?
probe_ns = f"ftcc-probe-{os.getpid()}"
if subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True).returncode != 0:
    skip("cannot create network namespaces here (ip netns add failed)")
subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)

try:
    hosts("up", str(n_hosts))
    t0 = time.monotonic()
    base_short = fault_free(NETEM_EPOCHS)
    t_base = time.monotonic() - t0
    base = fault_free(EPOCHS)
    # How long the survivors of a fault may take to finish: three times the fault-free run (a
    # build under a sanitizer runs several times slower; 255 s for 400 epochs under ASan here).
    finish_s = max(180.0, 3 * base["wall_s"])
    for b in (base_short, base):
        print(f"fault-free on {n_hosts} hosts x {per_host} ranks: {b['steps']} steps, loss {b['final_loss']:.6f}, "
              f"sha {b['param_sha256'][:12]}", flush=True)

    if "netem" in cases:
        netem_case()
    for _ in range(repeats):
        for name in ("partition", "crash", "hang host", "hang rank"):
            if name in cases:
                host_fault_case(name)
        if n_hosts >= 3 and "spare host" in cases:
            spare_host_case()
        if n_hosts >= 2 and "quorum" in cases:
            quorum_lost_case()
    if "slow rank" in cases:
        slow_rank_case()
    if "launcher" in cases:
        launcher_lost_case()
    if chaos:
        # The multi-host chaos campaign: faults of every kind on any host (rank 0's included), at a
        # random moment of the run; each job must finish with the fault-free parameters.
        rng = random.Random(seed)
        print(f"chaos: {chaos} job(s), seed {seed}", flush=True)
        for i in range(chaos):
            kind = rng.choice(["partition", "crash", "hang host", "hang rank"])
            host, delay = rng.randint(1, n_hosts), round(rng.uniform(0, 1.5), 2)
            print(f"chaos job {i + 1}/{chaos}: {kind} of h{host} {delay} s into the run", flush=True)
            host_fault_case(kind, host, delay)
    for name, ts in timings.items():
        med = statistics.median(ts)
        print(f"timing {name}: median {med:.2f} s over {len(ts)} run(s) [{min(ts):.2f}, {max(ts):.2f}]", flush=True)
        if repeats >= 3 and not name.startswith("quorum"):
            check(med <= FIGURE_S, f"{name}: median {med:.2f} s <= {FIGURE_S:.3f} s (timeout + period + 0.2)")
finally:
    hosts("down", check_rc=False)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check("ftcc-h" not in left, "namespaces removed")

print(f"multihost: {len(failures)} failed")
sys.exit(1 if failures else 0)
