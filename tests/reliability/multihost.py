#!/usr/bin/env python3
"""Multi-host reliability test: ftcc-train on simulated hosts with a real network between them.

    multihost.py BUILD_DIR [--hosts 3] [--ranks-per-host 2] [--keep-going]

Three network namespaces h1..h3 joined by veth pairs on a bridge (tools/netns-hosts), two ranks
each, mpirun starting its daemons there through tools/netns-hosts-agent instead of ssh. Cases:

  netem      20 ms delay and 2% loss on every host's link: the --deterministic run ends with the
             same parameters (SHA-256) and sample count as without;
  partition  h3's link cut mid-run: h1+h2 exclude h3's ranks (ULFM's heartbeat detector,
             FTCC_DETECTOR_TIMEOUT=2 s) and finish with the fault-free parameters; h3's ranks stop
             with "quorum lost" (they are the minority); after the link heals mpirun exits 0;
  crash      h3 crashes (link cut, every process in it killed): the same, without the minority;
  spare host h1 and h2 train (2 x 2 ranks) while h3 holds 2 hot spares (ftcc-train --spares 2);
             h2 crashes mid-run: the spares on h3 take the places of h2's ranks, the world is back
             to 4 with the fault-free parameters (docs/recovery.md, "Hot spares");
  quorum     a job on h1+h2 only (2 x 2 ranks; h3 idles), h2's link cut mid-run: two halves, neither
             a strict majority of the 4 ranks, so every rank stops with "quorum lost" while cut
             off, tools/ftcc-run exits 3 ("the job stopped: no group of survivors held a majority
             (quorum lost)") and nothing is written to the checkpoint folder after the cut.

Needs root (namespaces) and a ULFM MPI; exits 77 (skipped) without them. The namespaces are
removed at the end whatever happens (also on SIGTERM from meson's timeout), and at the start in
case an earlier run was killed before it could clean up. The namespaces and the bridge have
fixed names, so two runs on one machine (two checkouts' suites at once) would tear down each
other's hosts: a run waits for the machine-wide lock /run/lock/ftcc-multihost.lock first.
"""
import fcntl, hashlib, json, os, re, shutil, signal, subprocess, sys, tempfile, threading, time

build = os.path.abspath(sys.argv[1])
args = sys.argv[2:]
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
hosts_tool = os.path.join(root, "tools", "netns-hosts")
run_tool = os.path.join(root, "tools", "ftcc-run")
train = os.path.join(build, "tools", "ftcc-train")
n_hosts = int(args[args.index("--hosts") + 1]) if "--hosts" in args else 3
per_host = int(args[args.index("--ranks-per-host") + 1]) if "--ranks-per-host" in args else 2
ranks = n_hosts * per_host
DETECTOR_S = float(os.environ.get("FTCC_MULTIHOST_DETECTOR_S", "2"))  # ULFM detector timeout
EPOCHS = 40        # partition and crash: 920 steps, a few seconds undisturbed
NETEM_EPOCHS = 3   # netem: 69 steps (each step waits for several 40 ms round trips)
DIGITS_TRAIN = 1438
MODEL = ["--dataset", "digits", "--layers", "64,64,10", "--batch", "64", "--lr", "0.05", "--deterministic",
         "--hang-timeout", "3"]
failures = []


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
os.environ["FTCC_DETECTOR_TIMEOUT"] = str(DETECTOR_S)  # read by `tools/netns-hosts mpirun-args`
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


def ns_pids(host, name=None):
    out = subprocess.run(["ip", "netns", "pids", f"ftcc-{host}"], capture_output=True, text=True).stdout.split()
    if name is None:
        return out
    keep = []
    for pid in out:
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == name:
                    keep.append(pid)
        except OSError:
            pass
    return keep


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

    def __init__(self, extra, on=None):
        mpi_args = hosts("mpirun-args", str(per_host)).split()
        n = ranks
        if on is not None:
            mpi_args[mpi_args.index("--host") + 1] = ",".join(f"{h}:{per_host}" for h in on)
            n = len(on) * per_host
        self.cmd = [run_tool, *mpi_args, "-n", str(n), train, *MODEL, *extra]
        self.p = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
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


def fault_free(epochs):
    j = Job(["--epochs", str(epochs)])
    rc = j.finish(300)
    s = j.summary()
    if rc != 0 or s is None:
        sys.exit(f"FAIL: the fault-free run on {n_hosts} hosts failed (exit {rc})\n{' '.join(j.cmd)}\n{j.tail()}")
    return s


def host_fault_case(name, action):
    """Cut or crash the last host once training runs; the other hosts must finish alone."""
    victim = f"h{n_hosts}"
    lost = list(range(ranks - per_host, ranks))
    j = Job(["--epochs", str(EPOCHS)])
    started = j.wait_for(r"^step \d+/", 120)
    if started is None:
        check(False, f"{name}: training started ({j.tail()})")
        j.finish(5)
        return
    t_fault = time.monotonic()
    hosts(action, victim)
    rec = j.wait_for(r"^recovery: recovered", 60)
    summary_line = j.wait_for(r"^FTCC_SUMMARY ", 180)
    check(rec is not None, f"{name}: the survivors recovered ({(rec or ('', ''))[1][:160]})")
    if rec:
        detect_s = rec[0] - t_fault
        # ULFM's detector walks its ring: one timeout per silent rank, plus propagation.
        bound = (per_host + 1) * DETECTOR_S + 6
        check(detect_s <= bound,
              f"{name}: {victim}'s {per_host} ranks excluded {detect_s:.1f} s after the {action} (bound {bound:.0f} s)")
        check(all(f"rank {r} on host {victim}" in rec[1] for r in lost), f"{name}: the lost ranks are {lost} on {victim}")
    s = j.summary() if summary_line else None
    check(s is not None, f"{name}: the survivors finished training")
    if action == "partition":
        # The minority must stop while it is still cut off (not because the link came back).
        end = time.monotonic() + 30 + 4 * ranks * DETECTOR_S
        while ns_pids(victim, "ftcc-train") and time.monotonic() < end:
            time.sleep(0.5)
        check(not ns_pids(victim, "ftcc-train"), f"{name}: {victim}'s ranks stopped while cut off")
    hosts("heal", victim)
    rc = j.finish(120)
    check(rc == 0, f"{name}: mpirun exit status {rc} after the link came back")
    kill_leftovers()
    if s:
        check(s["world_size_final"] == ranks - per_host,
              f"{name}: world {s['world_size_initial']} -> {s['world_size_final']}")
        check(s["samples_seen"] == EPOCHS * DIGITS_TRAIN, f"{name}: samples_seen {s['samples_seen']}")
        check(s["param_sha256"] == base["param_sha256"],
              f"{name}: --deterministic parameters equal to the fault-free run ({s['param_sha256'][:12]})")
    quorum = [line for _, line in j.lines if "quorum lost" in line]
    if action == "partition":
        check(len(quorum) == per_host, f"{name}: {victim}'s ranks stopped with 'quorum lost' ({len(quorum)} lines)")
    else:
        check(not quorum, f"{name}: no 'quorum lost' on the survivors")
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
        check(False, f"{name}: training started ({j.tail()})")
        j.finish(5)
        return
    t_fault = time.monotonic()
    hosts("crash", victim)
    rec = j.wait_for(r"^recovery: recovered", 60)
    summary_line = j.wait_for(r"^FTCC_SUMMARY ", 180)
    check(rec is not None and all(f"rank {r} on host {victim}" in rec[1] for r in lost)
          and f"hot spares {', '.join(map(str, spares))} joined" in rec[1],
          f"{name}: h2's ranks {lost} replaced by h3's spares {spares} ({(rec or ('', ''))[1][:220]})")
    if rec:
        bound = (per_host + 1) * DETECTOR_S + 6
        check(rec[0] - t_fault <= bound, f"{name}: back to {training} ranks {rec[0] - t_fault:.1f} s after the crash "
                                         f"(bound {bound:.0f} s: ULFM's detector, as in the crash case)")
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
            check(False, f"{name}: training started on {'+'.join(on)} ({j.tail()})")
            j.finish(5)
            return
        hosts("partition", victim)
        t_cut = time.monotonic()
        # A step needs every rank, so none completes once the link is down; nobody can be declared
        # failed before the detector's timeout. What the folder holds now is what it must hold at the end.
        time.sleep(DETECTOR_S / 2)
        before = snapshot(ck)
        # Every rank, on both sides, must stop by itself while the link is still cut.
        end = time.monotonic() + 30 + 4 * n * DETECTOR_S
        while any(ns_pids(h, "ftcc-train") for h in on) and time.monotonic() < end:
            time.sleep(0.5)
        stopped = time.monotonic() - t_cut
        check(not any(ns_pids(h, "ftcc-train") for h in on),
              f"{name}: every rank on {'+'.join(on)} stopped while {victim} was cut off ({stopped:.1f} s after the cut)")
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
    for b in (base_short, base):
        print(f"fault-free on {n_hosts} hosts x {per_host} ranks: {b['steps']} steps, loss {b['final_loss']:.6f}, "
              f"sha {b['param_sha256'][:12]}", flush=True)

    # netem: delay and loss on every link (egress of each host).
    print(hosts("netem", "all", "20", "2"), flush=True)
    t0 = time.monotonic()
    j = Job(["--epochs", str(NETEM_EPOCHS)])
    rc = j.finish(600)
    t_netem = time.monotonic() - t0
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
    s = j.summary()
    check(rc == 0 and s is not None, f"netem 20 ms / 2%: the run finished (exit {rc}) in {t_netem:.1f} s "
                                     f"(fault-free {t_base:.1f} s)")
    if s:
        check(s["param_sha256"] == base_short["param_sha256"], "netem 20 ms / 2%: same parameters (SHA-256) as without")
        check(s["samples_seen"] == base_short["samples_seen"], f"netem 20 ms / 2%: samples_seen {s['samples_seen']}")
        check(s["world_size_final"] == ranks, f"netem 20 ms / 2%: no rank excluded (world {s['world_size_final']})")
    else:
        print(j.tail(40))

    host_fault_case("partition", "partition")
    host_fault_case("crash", "crash")
    if n_hosts >= 3:
        spare_host_case()
    if n_hosts >= 2:
        quorum_lost_case()
finally:
    hosts("down", check_rc=False)
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    check("ftcc-h" not in left, "namespaces removed")

print(f"multihost: {len(failures)} failed")
sys.exit(1 if failures else 0)
