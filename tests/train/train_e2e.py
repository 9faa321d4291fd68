#!/usr/bin/env python3
"""End-to-end tests of ftcc-train as a user runs it: tools/ftcc-run -n N build/tools/ftcc-train ...

Each case is one meson test: train_e2e.py BUILD_DIR CASE runs CASES[CASE] (the table at the end:
a function per case; the kill runs of the model-parallel and hybrid modes are rows of the tables
MP_FAULT_RUNS and HYBRID_FAULT_RUNS, one meson test per group of rows). Runs are real MPI jobs;
kills are real (the fault injector SIGKILLs the rank); results are read from the FTCC_SUMMARY line.
Tolerances:
  * fault-free DP on n ranks vs 1 rank: same data, same batches, only the summation order of the
    gradient allreduce differs, so float rounding (~1e-7 relative per step) accumulates over the
    steps: final losses agree to 1e-3 relative;
  * with kills: the lost step is redone on the survivors with the same global batch, so the
    trajectory is the fault-free one up to rounding: within 2%;
  * --deterministic: bitwise, compared by SHA-256 of the parameters.
"""
import hashlib, json, os, re, shlex, shutil, subprocess, sys, tempfile

build, case = sys.argv[1], sys.argv[2]
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
run_cmd = os.path.join(root, "tools", "ftcc-run")
train = os.path.join(build, "tools", "ftcc-train")
failures = []
# A build without ULFM (-Dulfm=disabled) trains only with --no-fault-tolerance (ftcc-train refuses
# to start without fault tolerance otherwise); its kill cases are not registered.
HAVE_ULFM = os.environ.get("FTCC_TEST_HAVE_ULFM", "1") == "1"
FT_OPT = [] if HAVE_ULFM else ["--no-fault-tolerance"]


def run(n, *args, expect_rc=0, timeout=120, env=None):
    """(summary, process) of one job; expect_rc=None leaves the exit status to the caller's check."""
    cmd = [run_cmd, "-n", str(n), train, "--quiet", *FT_OPT, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace", timeout=timeout,
                       env=None if env is None else {**os.environ, **env})
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}\n  exit {p.returncode}, expected {expect_rc}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    summary = None
    for line in p.stdout.splitlines():
        if line.startswith("FTCC_SUMMARY "):
            if summary is not None:
                sys.exit("FAIL: more than one FTCC_SUMMARY line")
            summary = json.loads(line[len("FTCC_SUMMARY "):])
    if expect_rc == 0 and summary is None:
        sys.exit(f"FAIL: no FTCC_SUMMARY line from {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return summary, p


def finished(p, s, samples, what):
    """Whether the job exited 0 with a summary (checked), and then its samples counted exactly once."""
    check(p.returncode == 0 and s is not None, f"{what}: exit {p.returncode}" + ("" if p.returncode == 0 else p.stderr[-2000:]))
    if s is None:
        return False
    samples_exact(s, samples, what)
    return True


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def samples_exact(s, count, what):
    """Exactly-once as the run counted it: the rows its committed steps fed to the model (count and
    order-independent digest, summed over the ranks) equal what the epochs' permutations hold
    before the final data cursor (computed apart, data/sampler.hpp), and that is `count`."""
    check(s["samples_seen"] == count == s["samples_expected"] and s["samples_digest_ok"] is True
          and s["samples_digest"] == s["samples_digest_expected"],
          f"{what}: samples_seen {s['samples_seen']} == {count}, digest {s['samples_digest']} "
          f"(expected {s['samples_digest_expected']}, ok {s['samples_digest_ok']})")


def snapshot(folder):
    """{path: SHA-256} of every file under folder: what a failing run must leave byte-identical."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def changed(before, after):
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


DIGITS_MODEL = ["--dataset", "digits", "--layers", "64,64,10", "--lr", "0.05", "--batch", "64"]
DIGITS = DIGITS_MODEL + ["--epochs", "6"]
DIGITS_TRAIN = 1438  # 1797 minus the 20% held out
DIABETES = ["--dataset", "diabetes", "--layers", "10,1", "--epochs", "30", "--lr", "0.05", "--batch", "32",
            "--momentum", "0.5"]
DIABETES_TRAIN = 354
TP_MODEL = ["--dataset", "digits", "--layers", "64,96,64,48,10", "--lr", "0.05", "--batch", "64", "--epochs", "6"]
PP_MODEL = ["--dataset", "digits", "--layers", "64,64,64,64,10", "--lr", "0.05", "--batch", "64", "--epochs", "6"]


def stderr_lines(err):
    """The non-empty lines of a job's stderr, without the boxed messages Open MPI's runtime adds now
    and then of its own (e.g. a PMIx shared-memory file it could not remove when several jobs share
    /tmp), nor the launcher's one-line PMIx complaint when every rank leaves at once
    ("[host:pid] PMIX ERROR: PMIX_ERR_UNREACH in file ... at line N"; docs/reliability.md), nor,
    when mpirun itself crashed or hung as every rank left at once with status 2 (seen once in a few
    hundred runs on a loaded machine; in the ASan suite, with 6 ranks refused at once, mpirun
    segfaulted after every rank had recorded the outcome), ftcc-run's line reporting the ranks' own
    status instead,
    nor ftcc-run's line starting the job again when the launcher could not start its PMIx server,
    nor libevent's warning that comes with that box when two jobs' launchers share /tmp ("[warn]
    Epoll MOD(1) on fd 20 failed. ...": the launcher's; it made two rows of bad_input fail in a
    fresh-clone suite run beside the ASan suite, which also starts jobs):
    those are not ftcc-train's output. The exit status is still checked."""
    lines, in_box = [], False
    for l in err.splitlines():
        launcher_crash = re.match(r"ftcc-run: mpirun (exited with status \d+, but|was still running \d+ s after) "
                                  r"every rank \(\d+\) had exited after MPI_Finalize", l) or \
            l.startswith("ftcc-run: Open MPI's launcher could not start its PMIx server") or \
            re.match(r"ftcc-run: the job ended with its outcome; mpirun's status \d+ ", l)
        if l.startswith("-" * 20):
            in_box = not in_box
        elif (not in_box and l.strip("\x00 ") and "PMIX ERROR: PMIX_ERR_UNREACH" not in l and not launcher_crash
              and not re.match(r"\[warn\] Epoll [A-Z]+\(\d+\) on fd \d+ failed", l)):
            lines.append(l)
    return lines


def kill(rank, step, phase=None):
    return f"kill:rank={rank}:step={step}" + (f":phase={phase}" if phase else "")


def hang(rank, step):
    return f"hang:rank={rank}:step={step}"


def describe(fault):
    kind, rank, step, *phase = (x.split("=")[-1] for x in fault.split(":"))
    if kind == "hang":
        return f"rank {rank} hangs (SIGSTOP) at step {step}"
    return f"kill rank {rank} " + (f"inside the {phase[0]} of step {step}" if phase else f"at step {step}")


# Model-parallel runs with faults (the pp_* and tp_* kill cases): one row per run, all run by one
# loop (case `elif case in MP_FAULT_CASES`), each compared with the fault-free run of the same
# mode and rank count. Expected outcomes:
#   recovers()        world = ranks - faults, final loss within 2% of the fault-free run, samples
#                     exactly once, one recovery whose line says the model was re-partitioned (pp)
#                     or re-split (tp) over the survivors;
#   recovers(True)    and the fault-free run's SHA-256 (pp rolls back to a complete copy and redoes
#                     the same batches);
#   falls_back_to(S)  a rank and its buddy lost, so some layer (pp) or shard (tp) has no copy left:
#                     the run says FALLING BACK TO CHECKPOINT, resumes from the step-S checkpoint
#                     (in a fresh --checkpoint-dir the loop adds) and finishes as recovers() does
#                     (world, loss, samples);
#   state_lost(rc)    the same loss without checkpoints: exit rc, "training state lost", naming
#                     the lost layer or shard.
def recovers(bitwise=False):
    return ("recovers", bitwise)


def falls_back_to(step):
    return ("falls back", step)


def state_lost(rc):
    return ("lost", rc)


MP = {
    "pp": {"args": [*PP_MODEL, "--parallel", "pp", "--micro-batches", "4"], "resplit": "re-partitioned over {} ranks",
           "lost": "layers 1", "part": "layer"},
    "tp": {"args": [*TP_MODEL, "--parallel", "tp"], "resplit": "re-split over {} ranks",
           "lost": "shard(s) 1", "part": "shard"},
    # Hidden width 64: even over 4 ranks, so it starts; uneven over 3 survivors (21/21/22 features).
    "tp-uneven": {"args": [*TP_MODEL[:2], "--layers", "64,64,10", *TP_MODEL[4:], "--parallel", "tp"],
                  "resplit": "re-split over {} ranks", "lost": "shard(s) 1", "part": "shard"},
}
# Rank 1 dies at step 25 and its buddy (rank 2) inside that recovery: layer 1 (pp) or shard 1 (tp)
# has no copy left.
RANK_AND_BUDDY = [kill(1, 25), kill(2, 25, "recovery")]
MP_FAULT_RUNS = [
    # (meson case, parallel, ranks, faults, flags, expected outcome, note)
    ("pp_kills", "pp", 4, [kill(0, 20)], [], recovers(True), "first stage"),
    ("pp_kills", "pp", 4, [kill(3, 41)], [], recovers(True), "last stage"),
    ("pp_kills", "pp", 4, [kill(2, 33, "allreduce")], ["--replicate-every", "5"], recovers(True), "replicas every 5 steps"),
    ("pp_kills", "pp", 4, [kill(1, 57)], ["--replicas", "2"], recovers(True), "2 replicas"),
    ("pp_kills", "pp", 4, [kill(0, 20), kill(2, 20, "recovery")], [], recovers(True), "not buddies"),
    ("pp_kills", "pp", 4, [hang(2, 30)], ["--hang-timeout", "2"], recovers(True), "fenced by the heartbeat"),
    ("pp_double_failure", "pp", 4, RANK_AND_BUDDY, ["--checkpoint-every", "10"], falls_back_to(20), "with checkpoints"),
    ("pp_double_failure", "pp", 4, RANK_AND_BUDDY, [], state_lost(4), "no checkpoint"),
    ("tp_kills", "tp", 4, [kill(0, 20)], [], recovers(), "first rank"),
    ("tp_kills", "tp", 4, [kill(3, 41)], [], recovers(), "last rank"),
    ("tp_kills", "tp", 4, [kill(1, 33, "allreduce")], ["--replicate-every", "5"], recovers(), "replicas every 5 steps"),
    ("tp_kills", "tp", 4, [kill(0, 20), kill(2, 20, "recovery")], [], recovers(), "not buddies"),
    ("tp_kills", "tp", 4, [hang(2, 30)], ["--hang-timeout", "2"], recovers(), "fenced by the heartbeat"),
    ("tp_kills", "tp-uneven", 4, [kill(1, 20)], [], recovers(), "hidden width 64 re-split unevenly over 3"),
    ("tp_double_failure", "tp", 4, RANK_AND_BUDDY, ["--checkpoint-every", "10"], falls_back_to(20), "with checkpoints"),
    ("tp_double_failure", "tp", 4, RANK_AND_BUDDY, [], state_lost(4), "no checkpoint"),
]
MP_FAULT_CASES = sorted({row[0] for row in MP_FAULT_RUNS})

# Hybrid runs (train/parallel_grid.hpp): replicas of a 2-stage pipeline or a 2-rank tp group.
HYBRID = {
    "dp,pp": [*PP_MODEL, "--parallel", "dp,pp", "--pp-size", "2", "--micro-batches", "4"],
    "dp,tp": [*TP_MODEL, "--parallel", "dp,tp", "--tp-size", "2"],
}
# (meson case, mode, ranks, faults, flags, expected, note); expected: ("grid", the grid the
# survivors end on: in the summary and in the recovery's log line), ("falls back", checkpoint
# step), ("lost", what the exit-4 line names). Each "grid" run also checks the world, the final
# loss within 2% of the fault-free run of the same grid, and samples exactly once. On 4 ranks
# (2 replicas x 2) ranks 0, 1 are replica 0 and ranks 2, 3 replica 1; ranks 1 and 3 hold the
# same stage or shard. Copies: the other replicas' and the ring buddies within a replica
# (--replicas, default 1); --replicas 0 leaves only the other replicas.
HYBRID_FAULT_RUNS = [
    ("dp_pp_kills", "dp,pp", 4, [kill(1, 20)], [], ("grid", "1 replica x 3 ranks"), "a stage: 3 ranks re-cut one pipeline"),
    ("dp_pp_kills", "dp,pp", 4, [kill(0, 20)], [], ("grid", "1 replica x 3 ranks"), "rank 0"),
    ("dp_pp_kills", "dp,pp", 4, [kill(2, 33, "allreduce")], [], ("grid", "1 replica x 3 ranks"),
     "inside the replicas' gradient allreduce"),
    ("dp_pp_kills", "dp,pp", 4, [kill(1, 20), kill(2, 20)], [], ("grid", "1 replica x 2 ranks"), "two at once, one per replica"),
    ("dp_pp_kills", "dp,pp", 4, [kill(2, 20), kill(3, 20)], [], ("grid", "1 replica x 2 ranks"), "a whole replica"),
    ("dp_pp_kills", "dp,pp", 4, [hang(3, 30)], ["--hang-timeout", "2"], ("grid", "1 replica x 3 ranks"), "fenced by the heartbeat"),
    ("dp_pp_kills", "dp,pp", 6, [kill(1, 20)], [], ("grid", "2 replicas x 2 ranks, 1 idle"), "fewer replicas, one rank idle"),
    ("dp_pp_kills", "dp,pp", 6, [kill(1, 20), kill(4, 60)], [], ("grid", "2 replicas x 2 ranks"), "then the idle rank back in"),
    ("dp_pp_kills", "dp,pp", 4, [kill(1, 25), kill(3, 25)], [], ("grid", "1 replica x 2 ranks"),
     "the same stage in both replicas: from the buddy copies"),
    ("dp_pp_double_failure", "dp,pp", 4, [kill(1, 25), kill(3, 25)], ["--replicas", "0", "--checkpoint-every", "10"],
     ("falls back", 20), "the same stage in both replicas, no buddy copies, with checkpoints"),
    ("dp_pp_double_failure", "dp,pp", 4, [kill(1, 25), kill(3, 25)], ["--replicas", "0"], ("lost", "layers 2, 3"),
     "the same stage, no buddy copies, no checkpoint"),
    ("dp_tp_kills", "dp,tp", 4, [kill(1, 20)], [], ("grid", "1 replica x 3 ranks"), "a shard: 3 ranks re-split one group"),
    ("dp_tp_kills", "dp,tp", 4, [kill(0, 20)], [], ("grid", "1 replica x 3 ranks"), "rank 0"),
    ("dp_tp_kills", "dp,tp", 4, [kill(2, 33, "allreduce")], [], ("grid", "1 replica x 3 ranks"), "inside an allreduce"),
    ("dp_tp_kills", "dp,tp", 4, [kill(0, 20), kill(3, 20)], [], ("grid", "1 replica x 2 ranks"), "two at once, one per replica"),
    ("dp_tp_kills", "dp,tp", 4, [kill(2, 20), kill(3, 20)], [], ("grid", "1 replica x 2 ranks"), "a whole replica"),
    ("dp_tp_kills", "dp,tp", 6, [kill(4, 20)], [], ("grid", "1 replica x 5 ranks"), "3 replicas: one group re-split over 5"),
    ("dp_tp_double_failure", "dp,tp", 4, [kill(1, 25), kill(3, 25)], ["--replicas", "0", "--checkpoint-every", "10"],
     ("falls back", 20), "the same shard in both replicas, no buddy copies, with checkpoints"),
    ("dp_tp_double_failure", "dp,tp", 4, [kill(1, 25), kill(3, 25)], ["--replicas", "0"], ("lost", "shard(s) 1"),
     "the same shard, no buddy copies, no checkpoint"),
]
HYBRID_FAULT_CASES = sorted({row[0] for row in HYBRID_FAULT_RUNS})

def fault_free_matches_single_process():
    base, _ = run(1, *DIGITS)
    multi = {}
    for n in (2, 4):
        s = multi[n] = run(n, *DIGITS)[0]
        check(rel(s["final_loss"], base["final_loss"]) < 1e-3,
              f"{n} ranks: final loss {s['final_loss']:.6f} vs 1 rank {base['final_loss']:.6f}")
        samples_exact(s, 6 * DIGITS_TRAIN, f"{n} ranks")
    dets = [run(n, *DIGITS, "--deterministic")[0] for n in (1, 2, 4)]
    for n, s in zip((1, 2, 4), dets):
        samples_exact(s, 6 * DIGITS_TRAIN, f"--deterministic on {n} ranks")
    det = [s["param_sha256"] for s in dets]
    check(len(set(det)) == 1, f"--deterministic on 1, 2, 4 ranks: one SHA-256 ({set(det)})")
    check(base["eval_name"] == "accuracy" and base["eval_metric"] > 0.9, f"digits held-out accuracy {base['eval_metric']:.3f}")
    # digits trains with cross-entropy unless told otherwise; --loss mse keeps the squared error
    # against one-hot rows. Cross-entropy must do at least as well on the held-out set.
    mse, _ = run(1, *DIGITS, "--loss", "mse")
    check(base["loss"] == "cross-entropy" and mse["loss"] == "mse", f"losses in use: {base['loss']}, {mse['loss']}")
    check(base["eval_metric"] >= mse["eval_metric"],
          f"held-out accuracy with cross-entropy {base['eval_metric']:.4f} >= with mse {mse['eval_metric']:.4f}")
    # The summary's final_loss is the training loss in use: a mean cross-entropy of 10 classes
    # starts near log 10 = 2.3 and an MSE against one-hot rows below 0.1.
    check(0 < base["final_loss"] < 2.3 and 0 < mse["final_loss"] < 0.1,
          f"final losses {base['final_loss']:.4f} (cross-entropy), {mse['final_loss']:.4f} (mse)")
    # Synthetic data is made by the ranks together (1/n of the rows each, then an allgather): on 3
    # ranks (an uneven split of 1000 rows) it must be the data one rank makes alone, bit for bit.
    syn = [run(n, "--dataset", "synthetic:1000:20:3", "--batch", "64", "--steps", "5", "--deterministic")[0]
           for n in (1, 3)]
    check(syn[0]["param_sha256"] == syn[1]["param_sha256"],
          f"synthetic data made on 3 ranks differs from 1 rank's: {syn[0]['param_sha256']} vs {syn[1]['param_sha256']}")
    # --no-overlap reduces the same buckets in the same order after backward: the same bits.
    no_overlap, _ = run(2, *DIGITS, "--no-overlap")
    check(no_overlap["param_sha256"] == multi[2]["param_sha256"],
          f"2 ranks: --no-overlap {no_overlap['param_sha256']} vs overlapped {multi[2]['param_sha256']}")
    # Where the time went: the phases of a step and the split of the whole run, in the summary.
    ms = base["step_ms"]
    phases = ("data", "forward", "backward", "exposed_comm", "optimizer")
    # (no at_rest: --verify-at-rest auto leaves dp to the replicas' vote)
    check(set(ms) == {"steps", "total", *phases} and ms["steps"] == base["steps"] - 1,
          f"step_ms: {ms} (expected every phase and the steps after the first)")
    check(ms["forward"] > 0 and ms["backward"] > 0 and ms["optimizer"] > 0, f"step_ms: {ms}")
    # The total is the median of whole steps, the phases medians of their own: of the same order.
    check(0.5 * ms["total"] <= sum(ms[p] for p in phases) <= 2 * ms["total"], f"step_ms: {ms}")
    split = base["wall_split_s"]
    check(0 < split["data"] <= split["setup"] < base["wall_s"] and split["steps"] > 0 and split["evaluation"] > 0,
          f"wall_split_s {split}, wall_s {base['wall_s']}")

def kill_cases():
    args, size, epochs = (DIGITS, DIGITS_TRAIN, 6) if case == "kills_digits" else (DIABETES, DIABETES_TRAIN, 30)
    base, _ = run(4, *args)
    plans = [
        ("kill rank 2 at step 20", ["--inject", "kill:rank=2:step=20"], 3),
        ("kill rank 1 inside the allreduce of step 33", ["--inject", "kill:rank=1:step=33:phase=allreduce"], 3),
        ("kill rank 0, then rank 3", ["--inject", "kill:rank=0:step=10", "--inject", "kill:rank=3:step=70"], 2),
    ]
    for what, inject, final in plans:
        s, _ = run(4, *args, *inject)
        check(s["world_size_final"] == final, f"{what}: world {s['world_size_initial']} -> {s['world_size_final']}")
        check(rel(s["final_loss"], base["final_loss"]) < 0.02,
              f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
        samples_exact(s, epochs * size, f"{what}: {epochs} x {size}")
        check(len(s["recoveries"]) == 4 - final, f"{what}: {len(s['recoveries'])} recoveries")

    if case == "kills_digits":
        # keep-local-batch: the global batch shrinks with the world from the next epoch on.
        s, _ = run(4, *args, "--on-failure", "keep-local-batch", "--inject", "kill:rank=3:step=30")
        check(s["world_size_final"] == 3, f"keep-local-batch: world 4 -> {s['world_size_final']}")
        samples_exact(s, epochs * size, "keep-local-batch")
        per_epoch_64, per_epoch_48 = -(-size // 64), -(-size // 48)
        check(s["steps"] > per_epoch_64 * epochs and s["steps"] <= per_epoch_64 + per_epoch_48 * (epochs - 1),
              f"keep-local-batch: {s['steps']} steps (batch 64 -> 48 after the first epoch)")
        # More steps of a smaller batch after the kill: the same epochs end at a loss no higher than
        # the fault-free run's (measured with cross-entropy: 0.030 vs 0.038; a run that stalled or
        # diverged on the smaller batch ends higher), and the same accuracy.
        check(s["final_loss"] <= base["final_loss"] * 1.10,
              f"keep-local-batch: final loss {s['final_loss']:.5f} no higher than fault-free {base['final_loss']:.5f} (+10%)")
        check(abs(s["eval_metric"] - base["eval_metric"]) <= 0.02,
              f"keep-local-batch: accuracy {s['eval_metric']:.4f} vs fault-free {base['eval_metric']:.4f}")

def deterministic_with_kills():
    a, _ = run(1, *DIGITS, "--deterministic")
    b, _ = run(4, *DIGITS, "--deterministic")
    c, _ = run(4, *DIGITS, "--deterministic", "--inject", "kill:rank=1:step=15",
               "--inject", "kill:rank=3:step=60:phase=allreduce")
    check(c["world_size_final"] == 2, f"two kills: world 4 -> {c['world_size_final']}")
    for what, s in (("1 rank", a), ("4 ranks", b), ("4 ranks with 2 kills", c)):
        samples_exact(s, 6 * DIGITS_TRAIN, what)
    check(a["param_sha256"] == b["param_sha256"] == c["param_sha256"],
          f"SHA-256 1 rank {a['param_sha256'][:12]}, 4 ranks {b['param_sha256'][:12]}, 4 ranks with 2 kills {c['param_sha256'][:12]}")

def pp_deterministic():
    # --deterministic in the pipeline modes. pp: one SHA-256 on 1 and 4 stages, with either
    # schedule, with two kills (a stage, then the last stage inside the stats allreduce:
    # re-partitioned from the buddy copies), with a hot spare taking a lost stage's place.
    # dp,pp: one SHA-256 (its own: the replicas' sum is exact) on 1 rank (--pp-size 1), 2 replicas
    # x 2 stages with either schedule, the same losing two ranks (one replica left, its
    # micro-batches now all on it), a spare taking rank 0's place, and 4 replicas x 1 stage losing
    # one (3 replicas share the 4 micro-batches unevenly).
    det = [*PP_MODEL, "--micro-batches", "4", "--deterministic"]
    pp, dppp = [*det, "--parallel", "pp"], [*det, "--parallel", "dp,pp", "--pp-size", "2"]
    pp_runs = [("1 stage", run(1, *pp)[0]), ("4 stages", run(4, *pp)[0]),
               ("4 stages, 1f1b", run(4, *pp, "--schedule", "1f1b")[0]),
               ("4 stages with 2 kills", run(4, *pp, "--inject", "kill:rank=1:step=15",
                                             "--inject", "kill:rank=3:step=60:phase=allreduce")[0]),
               ("3 stages + a spare, a kill", run(4, *pp, "--spares", "1", "--inject", "kill:rank=0:step=25")[0])]
    hybrid_runs = [("1 rank", run(1, *det, "--parallel", "dp,pp", "--pp-size", "1")[0]),
                   ("2x2", run(4, *dppp)[0]), ("2x2, 1f1b", run(4, *dppp, "--schedule", "1f1b")[0]),
                   ("2x2 with 2 kills", run(4, *dppp, "--inject", "kill:rank=1:step=15",
                                            "--inject", "kill:rank=3:step=60:phase=allreduce")[0]),
                   ("2x2 + a spare, rank 0 killed", run(5, *dppp, "--spares", "1", "--inject", "kill:rank=0:step=25")[0]),
                   # the spare's stage from the other replica's live layers (no copy at step 13)
                   ("2x2 + a spare, copies every 5 steps, rank 1 killed at 13",
                    run(5, *dppp, "--spares", "1", "--replicate-every", "5", "--inject", "kill:rank=1:step=13")[0]),
                   ("4x1, a kill", run(4, *det, "--parallel", "dp,pp", "--pp-size", "1",
                                       "--inject", "kill:rank=2:step=30")[0])]
    want = {"4 stages with 2 kills": (2, "1 replica x 2 ranks"), "3 stages + a spare, a kill": (3, "1 replica x 3 ranks"),
            "2x2": (4, "2 replicas x 2 ranks"), "2x2 with 2 kills": (2, "1 replica x 2 ranks"),
            "2x2 + a spare, rank 0 killed": (4, "2 replicas x 2 ranks"), "4x1, a kill": (3, "3 replicas x 1 rank"),
            "2x2 + a spare, copies every 5 steps, rank 1 killed at 13": (4, "2 replicas x 2 ranks")}
    for mode, runs in (("pp", pp_runs), ("dp,pp", hybrid_runs)):
        for what, s in runs:
            samples_exact(s, 6 * DIGITS_TRAIN, f"{mode} {what}")
            if what in want:
                check((s["world_size_final"], s["grid"]) == want[what],
                      f"{mode} {what}: {s['world_size_final']} ranks, grid {s['grid']}")
        shas = {what: s["param_sha256"] for what, s in runs}
        check(len(set(shas.values())) == 1, f"{mode} --deterministic: one SHA-256 for " +
              ", ".join(f"{w} {h[:12]}" for w, h in shas.items()))
    # pp's fault-free bits do not depend on the flag (the same micro-batches, the same float sum in
    # the same order): it costs nothing there. dp,pp's exact sum must give other bits than its float
    # sum, or the exact sum did not run.
    plain = run(2, *PP_MODEL, "--parallel", "pp", "--micro-batches", "4")[0]
    check(plain["param_sha256"] == pp_runs[0][1]["param_sha256"], "pp without --deterministic: the same bits fault-free")
    plain = run(4, *PP_MODEL, "--parallel", "dp,pp", "--pp-size", "2", "--micro-batches", "4")[0]
    check(plain["param_sha256"] != hybrid_runs[0][1]["param_sha256"], "dp,pp without --deterministic: a float sum's bits")

def tp_deterministic():
    # --parallel tp and dp,tp --deterministic (train/tp_exact_pair.hpp). tp: one SHA-256 on 1, 2 and 4 ranks, 4
    # losing 2 (one inside an allreduce; the survivors re-split the hidden width 100 over 3 unevenly,
    # then 2), a hot spare taking rank 0's place, and with tanh on 1 and 4 ranks; the model it
    # trains is tp's (final loss within 1e-5 of the flagless run), with other bits (the exact path ran).
    model = [("64,100,64,48,10" if a == "64,96,64,48,10" else a) for a in TP_MODEL]  # 100: uneven over 3
    det = [*model, "--parallel", "tp", "--deterministic"]
    runs = [("1 rank", run(1, *det)[0]), ("2 ranks", run(2, *det)[0]), ("4 ranks", run(4, *det)[0]),
            ("4 ranks losing 2", run(4, *det, "--inject", "kill:rank=1:step=15",
                                     "--inject", "kill:rank=3:step=60:phase=allreduce")[0]),
            ("4 + a spare, rank 0 killed", run(5, *det, "--spares", "1", "--inject", "kill:rank=0:step=25")[0])]
    check(runs[3][1]["world_size_final"] == 2 and runs[4][1]["world_size_final"] == 4,
          f"worlds after the kills: {runs[3][1]['world_size_final']} and {runs[4][1]['world_size_final']} (want 2, 4)")
    for what, s in runs:
        samples_exact(s, 6 * DIGITS_TRAIN, what)
    shas = {what: s["param_sha256"] for what, s in runs}
    check(len(set(shas.values())) == 1, "tp --deterministic: one SHA-256 for " +
          ", ".join(f"{w} {h[:12]}" for w, h in shas.items()))
    tanh = [run(n, *det, "--activation", "tanh")[0]["param_sha256"] for n in (1, 4)]
    check(tanh[0] == tanh[1] and tanh[0] != runs[0][1]["param_sha256"],
          f"tanh: 1 and 4 ranks agree ({tanh[0][:12]}, {tanh[1][:12]})")
    # dp,tp: one SHA-256 (its own: the replicas' sum is exact, per micro-batch) on 1 rank, 2 x 2,
    # 2 x 2 losing two ranks (re-split over 1 x 3, then 1 x 2), a spare taking rank 0's place, and
    # 4 x 1 losing one.
    hdet = [*model, "--micro-batches", "4", "--deterministic", "--parallel", "dp,tp"]
    hybrid = [("1 rank", run(1, *hdet, "--tp-size", "1")[0]), ("2x2", run(4, *hdet, "--tp-size", "2")[0]),
              ("2x2 losing 2", run(4, *hdet, "--tp-size", "2", "--inject", "kill:rank=1:step=15",
                                   "--inject", "kill:rank=3:step=60:phase=allreduce")[0]),
              ("2x2 + a spare, rank 0 killed", run(5, *hdet, "--tp-size", "2", "--spares", "1",
                                                   "--inject", "kill:rank=0:step=25")[0]),
              ("4x1 losing one", run(4, *hdet, "--tp-size", "1", "--inject", "kill:rank=2:step=30")[0]),
              # the spare's shard from the other replica's live shard (no copy at step 13)
              ("2x2 + a spare, copies every 5 steps, rank 1 killed at 13",
               run(5, *hdet, "--tp-size", "2", "--spares", "1", "--replicate-every", "5",
                   "--inject", "kill:rank=1:step=13")[0])]
    grids = [s["grid"] for _, s in hybrid]
    check(grids == ["1 replica x 1 rank", "2 replicas x 2 ranks", "1 replica x 2 ranks", "2 replicas x 2 ranks",
                    "3 replicas x 1 rank", "2 replicas x 2 ranks"], f"dp,tp grids at the end: {grids}")
    for what, s in hybrid:
        samples_exact(s, 6 * DIGITS_TRAIN, "dp,tp " + what)
    hshas = {what: s["param_sha256"] for what, s in hybrid}
    check(len(set(hshas.values())) == 1, "dp,tp --deterministic: one SHA-256 for " +
          ", ".join(f"{w} {h[:12]}" for w, h in hshas.items()))
    plain = run(2, *model, "--parallel", "tp")[0]
    drift = abs(plain["final_loss"] - runs[0][1]["final_loss"]) / plain["final_loss"]
    check(drift < 1e-5 and plain["param_sha256"] != runs[0][1]["param_sha256"] and runs[0][1]["eval_metric"] > 0.9,
          f"the same training as without the flag (final loss {plain['final_loss']:.8g} vs {runs[0][1]['final_loss']:.8g}, "
          f"accuracy {runs[0][1]['eval_metric']:.4f}), other bits")

def checkpoint_resume():
    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ck")
        full, _ = run(2, *DIGITS_MODEL, "--deterministic", "--steps", "60")
        run(2, *DIGITS_MODEL, "--deterministic", "--steps", "40", "--checkpoint-dir", ck, "--checkpoint-every", "10")
        names = sorted(os.listdir(ck))
        check("ckpt-0000000040.json" in names and "ckpt-0000000030.safetensors" in names, f"checkpoints written: {names}")
        resumed, p = run(2, *DIGITS_MODEL, "--deterministic", "--steps", "60", "--resume", ck)
        check(resumed["param_sha256"] == full["param_sha256"], "resume at 40 -> 60 equals uninterrupted 60 (bitwise)")
        # The digest of the samples before step 40 comes from the checkpoint.
        samples_exact(resumed, full["samples_seen"], "after resume")
        # Corrupt the newest: resume must say so and use the previous one (step 30).
        with open(os.path.join(ck, "ckpt-0000000040.safetensors"), "r+b") as f:
            f.truncate(100)
        resumed2, p = run(2, *DIGITS_MODEL, "--deterministic", "--steps", "60", "--resume", ck)
        check("checksum mismatch" in p.stderr and "ckpt-0000000030" in p.stderr,
              "corrupt newest checkpoint refused with a message, previous one used")
        check(resumed2["param_sha256"] == full["param_sha256"], "resume from 30 -> 60 equals uninterrupted 60")
        samples_exact(resumed2, full["samples_seen"], "after resume from 30")
        # A checkpoint of another model is refused with the tensor named, nothing overwritten.
        before = snapshot(ck)
        _, p = run(2, "--dataset", "digits", "--layers", "64,32,10", "--steps", "5", "--resume", ck,
                   "--checkpoint-dir", ck, "--checkpoint-every", "1", expect_rc=2)
        check("layers 64,64,10 (checkpoint) vs 64,32,10 (now)" in p.stderr,
              "checkpoint of another model refused naming the layers: " + p.stderr.strip()[-200:])
        check(not changed(before, snapshot(ck)), f"every file in the checkpoint folder byte-identical: {changed(before, snapshot(ck))}")

def resume_config():
    # --resume compares the configuration recorded in the checkpoint with the run's: a field that
    # changes the model, the data order or what the data cursor counts is refused (exit 2, one line
    # naming each such field with both values, nothing written); the others may change.
    def refused(what, n, args, needles):
        cmd = [run_cmd, "-n", str(n), train, "--quiet", *FT_OPT, *args]
        p = subprocess.run(cmd, capture_output=True, timeout=120)
        err, out = p.stderr.decode(errors="backslashreplace"), p.stdout.decode(errors="backslashreplace")
        lines = stderr_lines(err)
        ours = [l for l in lines if l.startswith("ftcc-train:") and "records no configuration" not in l
                and "is of the older format" not in l]
        ok = p.returncode == 2 and len(ours) == 1 and all(x in ours[0] for x in needles) and \
            all(l.startswith("ftcc-train:") for l in lines) and "FTCC_SUMMARY" not in out
        check(ok, f"{what}: exit {p.returncode}, one line: {ours[0] if ok else err[-1500:]}")
        diff = changed(before, snapshot(d))
        check(not diff, f"{what}: checkpoint folder and --log-json byte-identical {diff}")
        return ours[0] if ours else ""

    model = ["--dataset", "digits", "--layers", "64,64,10"]
    with tempfile.TemporaryDirectory() as d:
        ck, ck_old, log = os.path.join(d, "ck"), os.path.join(d, "ck-old"), os.path.join(d, "run.jsonl")
        full, _ = run(2, *model, "--lr", "0.05", "--batch", "64", "--steps", "40")
        run(2, *model, "--lr", "0.05", "--batch", "64", "--steps", "20", "--checkpoint-dir", ck, "--checkpoint-every", "10",
            "--log-json", log)
        meta = json.load(open(os.path.join(ck, "ckpt-0000000020.json")))
        cfg = meta.get("config", {})
        check(cfg.get("batch") == 64 and cfg.get("layers") == [64, 64, 10] and cfg.get("seed") == 42 and
              cfg.get("lr") == 0.05 and "config_hash" in meta, f"the checkpoint records the configuration: {cfg}")
        # A checkpoint written before configurations were recorded: the same files without "config",
        # in the record format of then (ftcc-train-checkpoint-1: no record digest).
        shutil.copytree(ck, ck_old)
        for f in os.listdir(ck_old):
            if f.endswith(".json"):
                path = os.path.join(ck_old, f)
                m = json.load(open(path))
                del m["config"], m["record_sha256"]
                m["format"] = "ftcc-train-checkpoint-1"
                with open(path, "w") as fh:
                    json.dump(m, fh, indent=1)
        before = snapshot(d)
        # Every refused run also points --checkpoint-dir and --log-json at what exists.
        written = ["--checkpoint-dir", ck, "--checkpoint-every", "1", "--log-json", log]
        prefix = f"--resume '{ck}': the newest checkpoint (ckpt-0000000020.json) was written with a different configuration: "
        safe_list = "these must match to resume (fields safe to change: lr, epochs, steps, the rank count, parallel, ... " \
                    "see docs/training.md)"
        # dp on 4 ranks: the first rank to raise the agreed refusal revokes while others may still
        # be in the verdict's broadcast; they must join as survivors and report the refusal (this
        # was "job error ... communicator revoked", exit 4, in about half the runs).
        for mode, n in (("dp", 4), ("pp", 2), ("tp", 2)):
            par = ["--parallel", mode]
            line = refused(f"{mode} on {n} ranks, --batch 16", n, [*model, *par, "--batch", "16", "--steps", "40", "--resume", ck, *written],
                           [prefix + "batch 64 (checkpoint) vs 16 (now); " + safe_list])
            if mode == "dp":
                print("     refused resume prints: " + line)
            line = refused(f"{mode} on {n} ranks, --batch 16 --seed 7", n,
                           [*model, *par, "--batch", "16", "--seed", "7", "--steps", "40", "--resume", ck, *written],
                           [prefix + "batch 64 (checkpoint) vs 16 (now), seed 42 vs 7; " + safe_list])
            if mode == "dp":
                print("     refused resume prints: " + line)
        refused("dp, --activation tanh --held-out 0.3 --micro-batch 4", 2,
                [*model, "--activation", "tanh", "--held-out", "0.3", "--micro-batch", "4", "--steps", "40", "--resume", ck, *written],
                [prefix + "activation relu (checkpoint) vs tanh (now), micro-batch 8 vs 4, held-out 0.2 vs 0.3; " + safe_list])
        refused("dp, --optimizer adam", 2, [*model, "--optimizer", "adam", "--steps", "40", "--resume", ck, *written],
                ["optimizer sgd (checkpoint) vs adam (now); "])
        # Old checkpoint: the seed is compared, the tensor shapes by the loader, the rest cannot be.
        refused("old checkpoint, --seed 7", 2, [*model, "--seed", "7", "--steps", "40", "--resume", ck_old, *written],
                [f"--resume '{ck_old}': the newest checkpoint (ckpt-0000000020.json) was written with a different "
                 "configuration: seed 42 (checkpoint) vs 7 (now); "])
        refused("old checkpoint, another model", 2,
                ["--dataset", "digits", "--layers", "64,32,10", "--steps", "40", "--resume", ck_old, *written],
                ["tensor '0.weight': shape [64, 64] in the file, [32, 64] expected"])

        # Safe changes: the learning rate, the rank count, the parallel mode, the step budget and
        # where checkpoints go; training goes on from step 20.
        ck2 = os.path.join(d, "ck2")
        s, p = run(3, *model, "--lr", "0.02", "--steps", "40", "--resume", ck, "--checkpoint-dir", ck2, "--checkpoint-every", "40")
        check("resumed from" in p.stderr and "ckpt-0000000020" in p.stderr and s["steps"] == 40 and
              s["samples_seen"] == full["samples_seen"] and s["world_size_initial"] == 3,
              f"dp, 2 -> 3 ranks, --lr 0.05 -> 0.02: resumed at 20, trained to {s['steps']}, samples_seen {s['samples_seen']}")
        cfg2 = json.load(open(os.path.join(ck2, "ckpt-0000000040.json")))["config"]
        check(cfg2["lr"] == 0.02 and cfg2["resume"] == ck and cfg2["batch"] == 64, "the resumed run's checkpoint records its own configuration")
        s, p = run(3, *model, "--steps", "40", "--resume", ck)
        check(s["samples_seen"] == full["samples_seen"] and rel(s["final_loss"], full["final_loss"]) < 1e-3,
              f"dp, 2 -> 3 ranks: final loss {s['final_loss']:.6f} vs uninterrupted {full['final_loss']:.6f}")
        for mode, n in (("pp", 2), ("tp", 4)):
            s, p = run(n, *model, "--parallel", mode, "--lr", "0.02", "--epochs", "2", "--resume", ck)
            check("resumed from" in p.stderr and s["epochs"] == 2 and s["samples_seen"] == 2 * DIGITS_TRAIN,
                  f"{mode} on {n} ranks, --lr 0.02 --epochs 2: resumed the dp checkpoint, samples_seen {s['samples_seen']}")
        s, p = run(2, *model, "--steps", "40", "--resume", ck_old)
        check("records no configuration" in p.stderr and "is of the older format ftcc-train-checkpoint-1" in p.stderr
              and s["steps"] == 40 and s["samples_seen"] == full["samples_seen"],
              "old checkpoint without a configuration: resumed, with notes that it could not be checked")
        # A record downgraded to the older format (no digest) whose step was edited: the data file
        # holds its own step, so the record is skipped and the run resumes from the one before
        # (it resumed from the edited step, training 15 steps fewer, exit 0).
        ck_edit = os.path.join(d, "ck-edited")
        shutil.copytree(ck_old, ck_edit)
        path = os.path.join(ck_edit, "ckpt-0000000020.json")
        m = json.load(open(path))
        m["step"] = 35
        with open(path, "w") as fh:
            json.dump(m, fh, indent=1)
        s, p = run(2, *model, "--steps", "40", "--resume", ck_edit)
        check("its record says step 35 but its data file holds step 20" in p.stderr and "ckpt-0000000010" in p.stderr
              and s["steps"] == 40 and s["samples_seen"] == full["samples_seen"],
              f"old-format record with an edited step: skipped, resumed from step 10 and trained to 40 "
              f"({s['steps']} steps, samples_seen {s['samples_seen']})")

def optimizer_defaults():
    # --optimizer adamw without --weight-decay is PyTorch's AdamW (weight decay 0.01), not Adam.
    common = [*DIGITS_MODEL, "--steps", "20", "--optimizer", "adamw", "--deterministic"]
    default, _ = run(1, *common)
    explicit, _ = run(1, *common, "--weight-decay", "0.01")
    none, _ = run(1, *common, "--weight-decay", "0")
    check(default["param_sha256"] == explicit["param_sha256"], "adamw's default weight decay is 0.01 (bitwise)")
    check(default["param_sha256"] != none["param_sha256"], "and it is not 0 (plain Adam)")
    help_text = subprocess.run([train, "--help"], capture_output=True, text=True).stdout
    check("--momentum FLOAT=0.9" in help_text and "0.01 with --optimizer adamw" in help_text,
          "--help shows the momentum and weight-decay defaults")

def json_log():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "log.jsonl")
        s, _ = run(3, *DIGITS, "--log-json", path, "--inject", "kill:rank=0:step=30")
        events = [json.loads(l) for l in open(path)]
        steps = [e for e in events if e["event"] == "step"]
        rec = [e for e in events if e["event"] == "recovery"]
        check(len(steps) == s["steps"], f"{len(steps)} step lines for {s['steps']} steps (rank 0 died: its successor appended)")
        check(len(rec) == 1 and rec[0]["failed"] == [0], f"one recovery event naming rank 0: {rec}")
        check(events[-1]["event"] == "summary", "the log ends with the summary")
        check(all(k in steps[0] for k in ("step", "epoch", "loss", "world_size", "samples_per_s", "time")), "step fields")

def bad_input():
    # Every bad input: exit 2, one "ftcc-train:" line naming the problem, and nothing already written
    # damaged: each failing run is pointed at an existing checkpoint folder and run log (and a folder
    # whose only checkpoint is corrupt), and every file there is hashed before and after.
    mpi_env = {}
    for line in open(os.path.join(root, ".venv", "ftcc-mpi.env")):
        k, _, v = line.strip().partition("=")
        mpi_env[k] = v
    kind = os.environ.get("FTCC_MPI_KIND") or mpi_env.get("FTCC_MPI_KIND")
    prefix = os.environ.get("FTCC_MPI_PREFIX") or mpi_env.get("FTCC_MPI_PREFIX")
    plain_mpirun = [os.path.join(prefix, "bin", "mpirun"), "--oversubscribe", "--mca", "pml", "ob1",
                    "--mca", "btl_tcp_disable_family", "6"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    with tempfile.TemporaryDirectory() as d:
        ck, ck_bad, log = os.path.join(d, "ck"), os.path.join(d, "ck-corrupt"), os.path.join(d, "run.jsonl")
        run(2, *DIGITS_MODEL, "--steps", "4", "--checkpoint-dir", ck, "--checkpoint-every", "2", "--log-json", log)
        shutil.copytree(ck, ck_bad)
        for f in os.listdir(ck_bad):
            if f.startswith("ckpt-0000000002"):
                os.remove(os.path.join(ck_bad, f))
        with open(os.path.join(ck_bad, "ckpt-0000000004.safetensors"), "r+b") as f:
            f.truncate(100)
        before = snapshot(d)
        check(len(before) == 7 and os.path.getsize(log) > 0, f"written before the bad runs: {sorted(before)}")
        written = ["--checkpoint-dir", ck, "--checkpoint-every", "1", "--log-json", log]

        def run_plain(cmd):
            """A job under a plain mpirun: no ftcc-run to stand in for Open MPI's launcher when it
            crashes or hangs after every rank refused at once (docs/reliability.md). The ranks'
            own records (FTCC_JOB_DIR) then say what they did: status 2 from both is a refusal,
            whatever mpirun returned (said on one line); anything else is mpirun's status."""
            with tempfile.TemporaryDirectory() as job_dir:
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        env=dict(os.environ, FTCC_JOB_DIR=job_dir), start_new_session=True)
                try:
                    out, err = proc.communicate(timeout=40)
                    rc = proc.returncode
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    out, err = proc.communicate()
                    rc = "hung"
                exited = [open(os.path.join(job_dir, f)).read().strip() for f in os.listdir(job_dir) if f.endswith(".exited")]
            if rc != 2 and exited == ["status 2"] * 2:
                print(f"note: mpirun's status {rc} after both ranks recorded exit status 2 (Open MPI's launcher): taken as 2")
                rc = 2
            return subprocess.CompletedProcess(cmd, rc, out, err)

        def refused(what, cmd, needle, plain=False, help_lines=0):
            p = run_plain(cmd) if plain else subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            lines = stderr_lines(p.stderr)
            # Not the error: notes on skipped checkpoints, and the warning of a run without ULFM.
            ours = [l for l in lines if l.startswith("ftcc-train:") and "skipping checkpoint" not in l
                    and not l.startswith("ftcc-train: warning: ULFM fault tolerance is off")]
            # Under a plain mpirun, Open MPI adds its own box about the non-zero exit status; a bad
            # fault spec is followed by the spec grammar (help_lines).
            clean = plain or sum(not l.startswith("ftcc-train:") for l in lines) <= help_lines
            ok = p.returncode == 2 and len(ours) == 1 and needle in ours[0] and clean
            check(ok, f"{what}: exit {p.returncode}, one line: {ours[0] if ok else p.stderr[-600:]}")
            diff = changed(before, snapshot(d))
            check(not diff, f"{what}: checkpoints and log byte-identical after the failed run {diff}")

        def ftcc(n, *args):
            return [run_cmd, "-n", str(n), train, "--quiet", *FT_OPT, *args]

        bad = [
            (2, ["--dataset", "nope"], "unknown dataset"),
            (2, ["--dataset", "digits", "--layers", "10,64,10"], "--layers starts with 10"),
            (2, ["--dataset", "digits", "--layers", "64,64,3"], "--layers ends with 3"),
            (2, ["--epochs", "2", "--steps", "3"], "not both"),
            (2, ["--inject", "kill:rank=1"], "bad fault spec 'kill:rank=1': step=S is required", 10),  # + the grammar's 10 lines
            (2, ["--batch", "0"], "--batch must be in [1, 2147483647], got 0"),
            (2, ["--optimizer", "rmsprop"], "--optimizer"),
            (2, ["--loss", "hinge"], "--loss"),
            (2, ["--dataset", "diabetes", "--layers", "10,1", "--loss", "cross-entropy"],
             "--loss cross-entropy needs a classification data set"),
            (2, ["--no-such-flag"], "no-such-flag"),
            (2, ["--dataset", "/nonexistent/data.csv"], "no such file"),
            (2, ["--parallel", "pp", "--layers", "64,10"], "--parallel pp on 2 ranks needs at least 2 layers"),
            (2, ["--parallel", "tp", "--layers", "64,10"], "--parallel tp needs at least one column/row-parallel Linear pair"),
            (3, ["--dataset", "digits", "--layers", "64,64,10", "--parallel", "tp"],
             "--parallel tp on 3 ranks: the hidden width 64 of layers 0-1"),
            (2, ["--dataset", "digits", "--layers", "64,96,64,47,10", "--parallel", "tp"],
             "--parallel tp on 2 ranks: the hidden width 47 of layers 2-3"),
            (2, ["--steps", "2", "--resume", "/nonexistent-ckpt"], "--resume '/nonexistent-ckpt': no such folder"),
            (2, ["--parallel", "dp,pp"], "--parallel dp,pp needs --pp-size N"),
            # Refused before any rank forms its group: inside the driver a rank still finishing the
            # group's start-up printed a second line (1 run in 6), and with a hot spare ranks
            # crashed in Open MPI's MPI_Comm_split before the line (every run).
            (4, ["--dataset", "digits", "--layers", "64,64,10", "--parallel", "tp", "--on-failure", "keep-local-batch"],
             "--parallel tp: only --on-failure keep-global-batch"),
            (5, ["--dataset", "digits", "--layers", "64,64,10", "--parallel", "dp,tp", "--tp-size", "2", "--spares", "1",
                 "--on-failure", "keep-local-batch"], "--parallel dp,tp: only --on-failure keep-global-batch"),
            (2, ["--parallel", "dp,tp"], "--parallel dp,tp needs --tp-size N"),
            (2, ["--parallel", "pp", "--pp-size", "2"], "--pp-size is for --parallel dp,pp"),
            (2, ["--schedule", "1f1b"], "--schedule 1f1b is a pipeline schedule: for --parallel pp or dp,pp, not dp"),
            (2, ["--schedule", "zigzag"], "--schedule"),
            (2, ["--parallel", "pp,dp"], "--parallel 'pp,dp': expected dp, pp, tp, dp,pp or dp,tp"),
            (3, ["--dataset", "digits", "--layers", "64,64,64,10", "--parallel", "dp,pp", "--pp-size", "2"],
             "--parallel dp,pp on 3 ranks: --pp-size 2 does not divide them"),
            (2, ["--dataset", "digits", "--layers", "64,10", "--parallel", "dp,pp", "--pp-size", "2"],
             "--pp-size 2 needs at least 2 layers; --layers gives 1"),
            (4, ["--dataset", "digits", "--layers", "64,96,64,47,10", "--parallel", "dp,tp", "--tp-size", "2"],
             "--tp-size 2: the hidden width 47 of layers 2-3"),
            (4, ["--parallel", "dp,pp", "--pp-size", "2", "--layers", "64,64,64,10", "--batch", "1"],
             "--parallel dp,pp: 2 replicas need a --batch of at least as many rows, got 1"),
            (6, ["--parallel", "dp,pp", "--pp-size", "2", "--layers", "64,64,64,10", "--micro-batches", "2",
                 "--deterministic"], "--parallel dp,pp --deterministic: the global batch's --micro-batches (2) are "
             "dealt out whole to the 3 replicas (the same micro-batches on any grid), so each needs one: use "
             "--micro-batches 3 or more"),
            (2, ["--spares", "-1"], "--spares must be >= 0, got -1"),
            (2, ["--verify-every", "-1"], "--verify-every must be >= 0 (0 turns replica verification off), got -1"),
            (2, ["--inject", "bitflip:rank=1:step=3:target=weights"], "unknown target 'weights' (param, grad or optim)", 10),
            (2, ["--straggler-factor", "0.5"], "--straggler-factor must be a number above 1 and at most 1000, got 0.5"),
            (2, ["--straggler-window", "0"], "--straggler-window must be in [1, 1000000] checks, got 0"),
            (2, ["--verify-at-rest", "maybe"], "--verify-at-rest 'maybe': expected auto, on or off"),
            (2, ["--parallel", "pp", "--verify-reductions"], "--verify-reductions checks the replicas' gradient sum "
             "(--parallel dp, dp,pp or dp,tp); --parallel pp has one replica and no such sum"),
            (2, ["--inject", "wireflip:rank=1:step=3:bit=64"], "bit must be <= 63, got 64", 10),
            (2, ["--inject", "wireflip:rank=1:step=3:target=grad"], "target= only applies to bitflip", 10),
            # A second --layers was appended to the first (CLI11's vector option): now refused.
            (2, ["--layers", "64,64,10", "--layers", "64,10"], "--layers: At Most 1 required but received 2"),
            (2, ["--layers", "64,x,10"], "--layers '64,x,10': 'x' is not a width (expected integers such as 64,64,10)"),
            # Flags range-checked (each of these was accepted, or got a misleading message).
            (2, ["--steps", "3", "--progress-timeout", "nan"], "--progress-timeout must be a number of seconds in [0, 1e6] (0 = off), got nan"),
            (2, ["--steps", "3", "--ulfm-timeout", "inf"], "--ulfm-timeout must be a number of seconds in (0, 1e6], got inf"),
            (2, ["--steps", "3", "--batch", "99999999999"], "--batch must be in [1, 2147483647], got 99999999999"),
            (2, ["--steps", "3", "--batch", "5000"],
             "--batch 5000 is larger than the training set (1438 rows of digits after --held-out 0.2): use at most 1438"),
            (2, ["--epochs", "0", "--steps", "50"], "--epochs 0 --steps 50: give --epochs or --steps, not both"),
            (2, ["--steps", "0"], "--steps must be in [1, 1000000000], got 0"),
            (2, ["--steps", "-5"], "--steps must be in [1, 1000000000], got -5"),
            (2, ["--epochs", "0"], "--epochs must be in [1, 1000000000], got 0"),
            (2, ["--steps", "3", "--keep-checkpoints", "-1"], "--keep-checkpoints must be >= 0 (0 keeps all), got -1"),
            (2, ["--spares", "2"], "spares 2: the job has 2 process(es) and at least one must train; use 0 to 1 spares"),
        ]
        if os.environ.get("FTCC_TEST_HAS_GPU") != "1":
            bad.append((2, ["--device", "cuda", "--steps", "2"], "--device cuda: no usable CUDA device"))
        for n, args, needle, *help_lines in bad:
            refused(f"{n} ranks {args}", ftcc(n, *written, *args), needle, help_lines=sum(help_lines))
        # A --log-json that cannot be written (checked before anything starts; it used to be ignored).
        for path, needle in (("/nonexistent/run.jsonl", "--log-json '/nonexistent/run.jsonl': the folder '/nonexistent' does not exist"),
                             (d, "it is a folder")):
            refused(f"--log-json {path}", ftcc(2, "--checkpoint-dir", ck, "--checkpoint-every", "1", "--log-json", path), needle)
        # A checkpoint of another model, and a folder whose only checkpoint is corrupt, resumed
        # into the same folder.
        refused("checkpoint of another model", ftcc(2, *written, "--layers", "64,32,10", "--steps", "5", "--resume", ck),
                "layers 64,64,10 (checkpoint) vs 64,32,10 (now)")
        refused("corrupt checkpoint", ftcc(2, "--log-json", log, "--checkpoint-dir", ck_bad, "--checkpoint-every", "1",
                                           "--steps", "6", "--resume", ck_bad), "no valid checkpoint found")
        # Ranks started with different configurations (MPMD): flags that both accept but that
        # differ, and one rank's flags refused (it must not leave the other waiting).
        mpmd = lambda a, b: [run_cmd, "-n", "1", train, *FT_OPT, *written, *a, ":", "-n", "1", train, *FT_OPT, *written, *b]
        refused("mpmd --lr 0.1 / 0.2", mpmd(["--steps", "3", "--lr", "0.1"], ["--steps", "3", "--lr", "0.2"]),
                "ranks were started with different configurations: rank 1 differs from rank 0")
        refused("mpmd --batch 0 on rank 1", mpmd(["--steps", "3"], ["--steps", "3", "--batch", "0"]),
                "rank 1: --batch must be in [1, 2147483647], got 0 (ranks were started with different configurations")
        # An MPI without ULFM fault tolerance: refused unless --no-fault-tolerance.
        if not HAVE_ULFM:
            refused("built without ULFM", [run_cmd, "-n", "2", train, "--quiet", *written, "--steps", "3"],
                    "ULFM fault tolerance is off in this run (this ftcc-train was built against an MPI without ULFM)")
        elif kind == "openmpi":  # Open MPI: plain mpirun, no --with-ft ulfm
            plain = [*plain_mpirun, "-n", "2", train, "--quiet", *written, "--steps", "3"]
            refused("plain mpirun", plain, "ULFM fault tolerance is off in this run (not launched with --with-ft ulfm), "
                    "so a failed rank would end the job: launch with tools/ftcc-run, or pass --no-fault-tolerance", plain=True)
            refused("plain mpirun with --inject", plain + ["--no-fault-tolerance", "--inject", "kill:rank=1:step=2"],
                    "--inject needs ULFM fault tolerance", plain=True)
            refused("plain mpirun with --spares", plain + ["--no-fault-tolerance", "--spares", "1"],
                    "hot spares need ULFM fault tolerance", plain=True)
            with tempfile.TemporaryDirectory() as d2:
                p = subprocess.run([*plain_mpirun, "-n", "2", train, "--quiet", "--steps", "3", "--no-fault-tolerance",
                                    "--checkpoint-dir", d2, "--checkpoint-every", "3"], capture_output=True, text=True, timeout=60)
                check(p.returncode == 0 and "FTCC_SUMMARY" in p.stdout and "fault tolerance is off" in p.stderr
                      and "ckpt-0000000003.json" in os.listdir(d2),
                      f"plain mpirun with --no-fault-tolerance trains (with a warning): exit {p.returncode} {p.stderr.strip()[:200]}")

def pp_fault_free_matches_single_process():
    # Pipeline parallel: the same layer-by-layer math on every rank count (each micro-batch's
    # GEMMs are the same whatever the stage boundaries), so 1..4 stages give the same bits. Against
    # single-process (dp, 1 rank) training the batch's gradient is a sum of M micro-batch GEMMs
    # instead of one GEMM over the batch: float rounding (~1e-7 relative per step) accumulates over
    # the 138 steps, hence 1e-3 relative on the final loss, as for dp on several ranks.
    base, _ = run(1, *PP_MODEL)
    shas = set()
    for n in (1, 2, 3, 4):
        s, _ = run(n, *PP_MODEL, "--parallel", "pp", "--micro-batches", "4")
        check(rel(s["final_loss"], base["final_loss"]) < 1e-3,
              f"pp on {n} ranks: final loss {s['final_loss']:.6f} vs single process {base['final_loss']:.6f}")
        check(s["world_size_final"] == n, f"pp on {n} ranks: world {s['world_size_final']}")
        samples_exact(s, 6 * DIGITS_TRAIN, f"pp on {n} ranks")
        check(abs(s["eval_metric"] - base["eval_metric"]) < 0.01, f"pp on {n} ranks: accuracy {s['eval_metric']:.4f} vs {base['eval_metric']:.4f}")
        shas.add(s["param_sha256"])
        if n == 4:
            pp4 = s
    check(len(shas) == 1, f"pp on 1..4 ranks: one SHA-256 ({len(shas)} distinct)")
    # Every mode reports the same summary fields; pp's step phases are its own (train/step_breakdown.hpp).
    # The phases are parts of the step; how much of it they cover depends on the load (a stage
    # waiting for its neighbour is in no phase: 31% under a second suite). Each figure is a median
    # of its own, and medians do not add up: the phases' medians summed exceeded the median step by
    # 2.6% in one run (0.380 vs 0.371 ms). A phase counted twice (compute is ~90% of a step) would
    # exceed it by far more than the 15% allowed.
    check(set(pp4) == set(base), f"pp and dp summaries: the same fields (differ: {sorted(set(pp4) ^ set(base))})")
    check(base["grid"] == "1 rank" and pp4["grid"] == "1 replica x 4 ranks", f"grid: dp {base['grid']!r}, pp {pp4['grid']!r}")
    ms = pp4["step_ms"]
    phases = ("data", "compute", "exposed_comm", "optimizer", "snapshot")
    # verify: the --verify-every exchange (every 50 steps: its median is 0), on 2 or more ranks;
    # at_rest: the state sealed after each optimizer step and checked before the next and before
    # the buddy copy (--verify-at-rest auto: pp with one model replica).
    check(ms is not None and set(ms) == {"steps", "total", "verify", "at_rest", *phases} and ms["steps"] == pp4["steps"] - 1
          and ms["compute"] > 0 and ms["snapshot"] > 0 and sum(ms[p] for p in phases) <= ms["total"] * 1.15 + 1e-3,
          f"pp step_ms: {ms}")
    split = pp4["wall_split_s"]
    check(split is not None and 0 < split["data"] <= split["setup"] < pp4["wall_s"] and split["steps"] > 0
          and split["evaluation"] > 0, f"pp wall_split_s {split}, wall_s {pp4['wall_s']}")

def mp_fault_cases():
    bases = {}
    for row_case, par, ranks, faults, flags, expected, note in MP_FAULT_RUNS:
        if row_case != case:
            continue
        mode = MP[par]
        what = f"{par} on {ranks} ranks, " + " and ".join(describe(f) for f in faults) + (f" ({note})" if note else "")
        if (par, ranks) not in bases:
            bases[(par, ranks)], _ = run(ranks, *mode["args"])
        base = bases[(par, ranks)]
        inject = [a for f in faults for a in ("--inject", f)]
        final = ranks - len(faults)
        if expected[0] == "recovers":
            s, p = run(ranks, *mode["args"], *flags, *inject)
            check(s["world_size_final"] == final, f"{what}: world {s['world_size_initial']} -> {s['world_size_final']}")
            check(rel(s["final_loss"], base["final_loss"]) < 0.02,
                  f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
            if expected[1]:
                # Rolled back to a complete copy and redone with the same batches: the same bits.
                check(s["param_sha256"] == base["param_sha256"], f"{what}: SHA-256 equals the fault-free run's")
            samples_exact(s, 6 * DIGITS_TRAIN, what)
            check(len(s["recoveries"]) == 1 and mode["resplit"].format(final) in p.stderr,
                  f"{what}: one recovery, {mode['resplit'].format(final)}")
        elif expected[0] == "falls back":
            with tempfile.TemporaryDirectory() as d:
                s, p = run(ranks, *mode["args"], *flags, *inject, "--checkpoint-dir", os.path.join(d, "ck"))
            ckpt = f"ckpt-{expected[1]:010d}"
            check("FALLING BACK TO CHECKPOINT" in p.stderr and ckpt in p.stderr,
                  f"{what}: falls back to the step-{expected[1]} checkpoint and says so: " +
                  next((l for l in p.stderr.splitlines() if "CHECKPOINT" in l), "(no line)")[:200])
            check(s["world_size_final"] == final, f"{what}: world {s['world_size_initial']} -> {s['world_size_final']}")
            check(rel(s["final_loss"], base["final_loss"]) < 0.02,
                  f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
            samples_exact(s, 6 * DIGITS_TRAIN, f"{what}: after the checkpoint fallback")
        elif expected[0] == "lost":
            # Every survivor finds the state lost alike: a job-level error, agreed, one exit status.
            _, p = run(ranks, *mode["args"], *flags, *inject, expect_rc=None)
            check(p.returncode == expected[1] and "training state lost" in p.stderr and mode["lost"] in p.stderr,
                  f"{what}: exit {p.returncode} (expected {expected[1]}) naming the lost {mode['part']}: " +
                  next((l for l in p.stderr.splitlines() if "lost" in l), "(no line)")[:200])
        else:
            sys.exit(f"unknown expected outcome {expected}")

def tp_fault_free_matches_single_process():
    # Tensor parallel: each pair's output is a sum of per-rank partial GEMMs (allreduce), so the
    # summation order depends on the rank count: float rounding accumulated over 138 steps, 1e-3
    # relative on the final loss. On one rank the math is the single-process one: same bits.
    base, _ = run(1, *TP_MODEL)
    one, _ = run(1, *TP_MODEL, "--parallel", "tp")
    check(one["param_sha256"] == base["param_sha256"], "tp on 1 rank: same SHA-256 as single-process training")
    for n in (2, 4):
        s, _ = run(n, *TP_MODEL, "--parallel", "tp")
        check(rel(s["final_loss"], base["final_loss"]) < 1e-3,
              f"tp on {n} ranks: final loss {s['final_loss']:.6f} vs single process {base['final_loss']:.6f}")
        check(s["world_size_final"] == n, f"tp on {n} ranks: world {s['world_size_final']}")
        samples_exact(s, 6 * DIGITS_TRAIN, f"tp on {n} ranks")
    _, p = run(3, "--dataset", "digits", "--layers", "64,64,10", "--parallel", "tp", "--steps", "2", expect_rc=2)
    check("hidden width 64 of layers 0-1" in p.stderr and "not divisible by 3" in p.stderr,
          "tp: width not divisible by the rank count refused: " + p.stderr.strip()[-160:])

def mp_checkpoint_resume_and_log():
    # Checkpoints of pp/tp are in the dp format: resume across modes and rank counts.
    model = ["--dataset", "digits", "--layers", "64,96,64,48,10", "--lr", "0.05", "--batch", "64"]
    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ck")
        full, _ = run(2, *model, "--parallel", "pp", "--steps", "60")
        run(2, *model, "--parallel", "pp", "--steps", "40", "--checkpoint-dir", ck, "--checkpoint-every", "20")
        check(sorted(os.listdir(ck))[-1] == "ckpt-0000000040.safetensors", f"pp wrote checkpoints: {sorted(os.listdir(ck))}")
        s, p = run(3, *model, "--parallel", "pp", "--steps", "60", "--resume", ck)
        check("resumed from" in p.stderr and s["param_sha256"] == full["param_sha256"],
              "pp checkpoint at 40 resumed by pp on 3 ranks -> 60: same SHA-256 as uninterrupted")
        t, _ = run(2, *model, "--parallel", "tp", "--steps", "60", "--resume", ck)
        dp, _ = run(1, *model, "--steps", "60", "--resume", ck)
        check(rel(t["final_loss"], full["final_loss"]) < 1e-3 and rel(dp["final_loss"], full["final_loss"]) < 1e-3,
              f"the pp checkpoint resumed by tp ({t['final_loss']:.6f}) and dp ({dp['final_loss']:.6f}) vs {full['final_loss']:.6f}")
        for what, r in (("pp on 3 ranks", s), ("tp", t), ("dp", dp)):
            samples_exact(r, full["samples_seen"], f"the pp checkpoint resumed by {what}")
        for par in ("pp", "tp"):
            path = os.path.join(d, par + ".jsonl")
            s, _ = run(3, *model, "--parallel", par, "--steps", "40", "--log-json", path, "--inject", "kill:rank=0:step=15")
            events = [json.loads(l) for l in open(path)]
            rec = [e for e in events if e["event"] == "recovery"]
            check(len(rec) == 1 and rec[0]["failed"] == [0] and events[-1]["event"] == "summary",
                  f"{par} --log-json: one recovery naming rank 0, ends with the summary")
            check(s["world_size_final"] == 2 and s["steps"] == 40, f"{par}: 40 steps, world 3 -> 2")
            samples_exact(s, DIGITS_TRAIN + (40 - 23) * 64, f"{par}, rank 0 killed: 40 steps of 64 (23 per epoch)")

def non_finite():
    # A loss that diverges (--lr 1e6) or data holding NaN: the run stops at the step where the loss
    # became non-finite, decided from the reduced loss and gradients that every rank holds, so all
    # ranks stop at the same step with one message; non-zero exit status, no summary. The same
    # runs with a sane --lr finish with exactly once samples. Exit status and the job-level line
    # around the message are ftcc-train's (docs/training.md); here: non-zero and the message.
    import re
    message = re.compile(r"non-finite (loss|gradient) \((nan|-?inf|loss [^)]*)\) at step (\d+): the training diverged "
                         r"\(lower --lr, now ([^)]*)\) or the data holds NaN/Inf values")

    def diverges(what, n, args, kind):
        cmd = [run_cmd, "-n", str(n), train, "--quiet", *FT_OPT, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        found = {m.group(0) for m in message.finditer(p.stderr)}
        check(p.returncode != 0 and len(found) == 1 and f"non-finite loss ({kind})" in next(iter(found))
              and "FTCC_SUMMARY" not in p.stdout,
              f"{what}: exit {p.returncode}, one message: {sorted(found) or p.stderr[-600:]}")
        if found:
            print("     prints: " + next(l for l in p.stderr.splitlines() if "non-finite" in l))

    diabetes = ["--dataset", "diabetes", "--epochs", "30", "--batch", "32", "--momentum", "0.5"]
    # Diabetes' targets are not standardized (variance ~6000): the deeper pp/tp models need a
    # smaller --lr than the linear one to stay finite.
    modes = [("dp", ["--layers", "10,1"], "0.05"), ("dp --deterministic", ["--layers", "10,1", "--deterministic"], "0.05"),
             ("pp", ["--layers", "10,16,16,16,1", "--parallel", "pp"], "0.002"),
             ("tp", ["--layers", "10,16,1", "--parallel", "tp"], "0.002")]
    for what, margs, lr in modes:
        s, _ = run(4, *diabetes, *margs, "--lr", lr)
        samples_exact(s, 30 * DIABETES_TRAIN, f"{what} on 4 ranks, --lr {lr}")
        diverges(f"{what} on 4 ranks, --lr 1e6", 4, [*diabetes, *margs, "--lr", "1e6"], "inf")
    with tempfile.TemporaryDirectory() as d:
        # y = x0 + 2 x1 with NaN in every tenth row's x0 (some of them land in the first batch).
        path = os.path.join(d, "nan.csv")
        with open(path, "w") as f:
            for i in range(200):
                x0, x1 = (i * 37 % 101) / 101, (i * 53 % 89) / 89
                f.write(f"{'nan' if i % 10 == 3 else x0},{x1},{x0 + 2 * x1}\n")
        for det in ([], ["--deterministic"]):
            diverges(f"NaN in the data {' '.join(det)}", 2, ["--dataset", path, "--layers", "2,1", "--epochs", "2",
                                                           "--batch", "16", *det], "nan")

def samples_digest_catches_a_wrong_count():
    # The exactly-once check can fail, and then the job fails. A checkpoint record whose samples
    # digest or count was edited no longer verifies (its record_sha256): it is skipped with a note
    # and, with nothing valid left, --resume is refused (exit 2). The same edit with the record
    # digest recomputed (a forgery the digest cannot stop) resumes, and the samples fed are not the
    # ones the data cursor says: exit 4, one line naming expected vs seen, in dp, pp and tp (was
    # exit 0 with samples_digest_ok false). The untouched checkpoint gives an exact run.
    model = ["--dataset", "digits", "--layers", "64,64,10", "--lr", "0.05", "--batch", "64"]

    def resign(m):
        body = {k: v for k, v in m.items() if k != "record_sha256"}
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return dict(body, record_sha256=hashlib.sha256(text.encode()).hexdigest())

    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ck")
        run(2, *model, "--steps", "20", "--checkpoint-dir", ck, "--checkpoint-every", "20")
        meta = json.load(open(os.path.join(ck, "ckpt-0000000020.json")))
        check(meta.get("samples_seen") == 20 * 64 and len(meta.get("samples_digest", "")) == 16,
              f"the checkpoint records the samples seen and their digest: {meta.get('samples_seen')}, "
              f"{meta.get('samples_digest')}")
        check(resign(meta) == meta, "the record digest is reproducible as docs/training.md says")
        tampered = {}
        for what, change in (("digest", lambda m: m.update(samples_digest=f"{int(m['samples_digest'], 16) ^ 1:016x}")),
                             ("count", lambda m: m.update(samples_seen=m["samples_seen"] + 64))):
            for signed in (False, True):
                key = what + ("-resigned" if signed else "")
                tampered[key] = os.path.join(d, "ck-" + key)
                shutil.copytree(ck, tampered[key])
                m = dict(meta)
                change(m)
                with open(os.path.join(tampered[key], "ckpt-0000000020.json"), "w") as fh:
                    json.dump(resign(m) if signed else m, fh, indent=1)
        for mode in ("dp", "pp", "tp"):
            good, _ = run(2, *model, "--parallel", mode, "--steps", "40", "--resume", ck)
            samples_exact(good, DIGITS_TRAIN + 17 * 64, f"{mode}: resumed at 20, 40 steps")
            for what in ("digest", "count"):
                s, p = run(2, *model, "--parallel", mode, "--steps", "40", "--resume", tampered[what], expect_rc=2)
                err = stderr_lines(p.stderr)
                check(s is None and any("its record does not verify (record_sha256 mismatch)" in l for l in err)
                      and sum("no valid checkpoint found there" in l for l in err) == 1,
                      f"{mode}: an edited {what} is refused, the record does not verify: {err[-2:]}")
                s, p = run(2, *model, "--parallel", mode, "--steps", "40", "--resume", tampered[what + "-resigned"],
                           expect_rc=4)
                err = [l for l in stderr_lines(p.stderr) if "job error on rank" in l]
                fed = good["samples_seen"] + (64 if what == "count" else 0)
                want = f"exactly-once check failed: the committed steps fed {fed} samples (digest "
                check(s is None and len(err) == 1 and want in err[0]
                      and f"hold {good['samples_expected']} (digest {good['samples_digest_expected']})" in err[0],
                      f"{mode}: a wrong {what} (record re-signed) ends the job, exit 4, one line: {err}")

def checkpoint_files():
    # What stays on disk: --keep-checkpoints N (default 3) keeps the newest N complete checkpoints
    # after each save, 0 keeps all; a run's rank 0 removes the temporaries a killed write left (only
    # regular files named like the store's temporaries). Was: every checkpoint kept, and stale
    # .tmp files stayed for ever.
    model = [*DIGITS_MODEL, "--checkpoint-every", "2"]

    def ckpts(folder):
        return sorted(f for f in os.listdir(folder) if re.fullmatch(r"ckpt-[0-9]{10}\.(json|safetensors)", f))

    def steps_of(folder):
        return sorted({int(f[5:15]) for f in ckpts(folder) if f.endswith(".json")})

    with tempfile.TemporaryDirectory() as d:
        ck = os.path.join(d, "ck")
        run(2, *model, "--steps", "12", "--checkpoint-dir", ck)
        check(steps_of(ck) == [8, 10, 12] and len(ckpts(ck)) == 6,
              f"default --keep-checkpoints 3: the newest 3 checkpoints, complete ({ckpts(ck)})")
        stale = ["ckpt-0000000014.safetensors.tmp", "ckpt-0000000014.safetensors.tmp.tmp", "ckpt-0000000014.json.tmp"]
        foreign = ["ckpt-0000000014.json.tmp.bak", "notes.tmp", "ckpt-14.json.tmp"]
        for f in stale + foreign:
            with open(os.path.join(ck, f), "w") as fh:
                fh.write("partial")
        os.symlink("/dev/null", os.path.join(ck, "ckpt-0000000099.json.tmp"))  # not a file the store wrote
        s, p = run(2, *model, "--steps", "20", "--resume", ck, "--checkpoint-dir", ck, "--keep-checkpoints", "0")
        err = stderr_lines(p.stderr)
        for f in stale:
            check(not os.path.lexists(os.path.join(ck, f))
                  and sum(f"removed {os.path.join(ck, f)}: a temporary file left by an interrupted checkpoint write" in l
                          for l in err) == 1, f"stale {f} removed, and said once")
        check(all(os.path.exists(os.path.join(ck, f)) for f in foreign)
              and os.path.islink(os.path.join(ck, "ckpt-0000000099.json.tmp")),
              f"files not named like the store's temporaries, and symlinks, left alone: {sorted(os.listdir(ck))}")
        check(steps_of(ck) == [8, 10, 12, 14, 16, 18, 20], f"--keep-checkpoints 0 keeps all: {steps_of(ck)}")
        run(2, *model, "--steps", "24", "--resume", ck, "--checkpoint-dir", ck, "--keep-checkpoints", "1")
        check(steps_of(ck) == [24] and len(ckpts(ck)) == 2, f"--keep-checkpoints 1: only the newest ({ckpts(ck)})")
        s, _ = run(2, *DIGITS_MODEL, "--steps", "26", "--resume", ck)
        check(s["steps"] == 26, "the kept checkpoint resumes")
        # pp writes through the same store.
        ck2 = os.path.join(d, "ck2")
        run(2, *model, "--parallel", "pp", "--steps", "10", "--checkpoint-dir", ck2, "--keep-checkpoints", "2")
        check(steps_of(ck2) == [8, 10] and len(ckpts(ck2)) == 4, f"pp, --keep-checkpoints 2: {ckpts(ck2)}")

def spare_cases():
    # Hot spares (--spares S: the last S processes wait; one takes a lost rank's place, its rank and
    # data shard, with the state streamed from the survivors). --deterministic: every run's
    # parameters must be the fault-free run's, bit for bit, and every sample counted once.
    det = [*DIGITS, "--deterministic", "--hang-timeout", "5"]
    ref, _ = run(3, *det)

    def healed(what, n, spares, faults, world, joined, expect_rc=0, lines=()):
        s, p = run(n, *det, "--spares", str(spares), *(a for f in faults for a in ("--inject", f)), expect_rc=expect_rc)
        err = stderr_lines(p.stderr) + p.stdout.splitlines()  # recovery lines are on stdout
        for needle in lines:
            check(any(needle in l for l in err), f"{what}: a line says '{needle}'")
        if expect_rc != 0:
            return s, p
        got_joined = [r for e in s["recoveries"] for r in e.get("joined", [])]
        check(s["world_size_final"] == world and s["world_size_initial"] == n - spares,
              f"{what}: world {s['world_size_initial']} -> {s['world_size_final']} (expected {n - spares} -> {world})")
        check(got_joined == joined, f"{what}: spares that joined {got_joined} (expected {joined})")
        check(s["param_sha256"] == ref["param_sha256"],
              f"{what}: SHA-256 {s['param_sha256'][:12]} vs the fault-free 3-rank run's {ref['param_sha256'][:12]}")
        samples_exact(s, 6 * DIGITS_TRAIN, what)
        return s, p

    if case == "spares_heal":
        s, _ = healed("no fault, 1 spare", 4, 1, [], 3, [])
        check(s["recoveries"] == [], f"no fault, 1 spare: no recovery ({len(s['recoveries'])})")
        s, _ = healed("kill rank 1, 1 spare", 4, 1, [kill(1, 15)], 3, [3], lines=["hot spare 3 joined (0 spare(s) left"])
        ev = s["recoveries"][0]
        check(ev["survivors"] == [0, 3, 2] and ev["spares_left"] == 0 and ev["heal_ms"] > 0 and ev["old_size"] == 3
              and ev["committed_min"] == ev["committed_max"] == 14 and ev["transfer_bytes"] > 0,
              f"kill rank 1: spare 3 is training rank 1 (survivors {ev['survivors']}), none left, heal "
              f"{ev['heal_ms']:.2f} ms, the survivors' consistency point {ev['committed_min']}..{ev['committed_max']} "
              f"(14: the newcomer's -1 is not in it), {ev.get('transfer_bytes')} bytes streamed")
        # Rank 0 (the one that prints and checkpoints), then the spare that replaced rank 1, then
        # with no spare left a shrink.
        healed("kill 1, the spare in its place, then 0; 2 spares", 5, 2,
               [kill(1, 15), kill(3, 40, "allreduce"), kill(0, 70)], 2, [3, 4],
               lines=["hot spare 3 joined (1 spare(s) left", "hot spare 4 joined (0 spare(s) left", "no hot spare or respawn left: shrunk"])
        # 4 training ranks with 2 kills healed: the fault-free parameters (the 3-rank run's, as every
        # rank count's under --deterministic).
        healed("4 ranks, 2 spares, 2 kills healed", 6, 2, [kill(1, 15), kill(2, 40)], 4, [4, 5])
        s, _ = healed("kill rank 0 inside the allreduce, 1 spare", 4, 1, [kill(0, 20, "allreduce")], 3, [3])
        ev = s["recoveries"][0]  # published by the newcomer, now rank 0: the same facts as the others'
        check(ev["old_size"] == 3 and ev["new_size"] == 3 and ev["step"] in (20, 21) and ev["survivors"] == [3, 1, 2],
              f"rank 0 replaced: sizes {ev['old_size']} -> {ev['new_size']}, step {ev['step']}, survivors {ev['survivors']}")
    else:
        # A spare lost while it waits is only removed: the job ends at full size; a later loss shrinks.
        s, _ = healed("a spare dies while waiting", 4, 1, ["kill:rank=3:step=0:phase=spare"], 3, [])
        check([e["failed"] for e in s["recoveries"]] == [[3]], f"the lost spare is one recovery: {[e['failed'] for e in s['recoveries']]}")
        # A spare that hits an error of its own (here an injected exception as it starts to wait)
        # leaves alone with one line; the job goes on and ends at full size, status 0.
        s, p = healed("a spare throws as it starts to wait", 4, 1, ["throw:rank=3:step=0:phase=spare"], 3, [],
                      lines=["rank 3: hot spare could not get ready: injected error on rank 3"])
        check([e["failed"] for e in s["recoveries"]] == [[3]], f"the spare that left is one recovery: {[e['failed'] for e in s['recoveries']]}")
        healed("a spare dies while waiting, then rank 1", 4, 1, ["kill:rank=3:step=0:phase=spare", kill(1, 30)], 2, [],
               lines=["no hot spare or respawn left: shrunk"])
        # A survivor dies while the newcomer receives the state (inside the hooks): both spares join.
        s, _ = healed("rank 2 dies while spare 3 receives the state", 5, 2, [kill(1, 15), kill(2, 15, "hooks")], 3, [3, 4])
        check(s["recoveries"][0]["attempts"] >= 2, f"one recovery, retried: {s['recoveries'][0]['attempts']} attempts")
        # The newcomer itself dies while it receives the state, or in the shrink of the next attempt.
        healed("the newcomer dies receiving the state", 5, 2, [kill(1, 15), kill(3, 15, "hooks")], 3, [4])
        healed("the newcomer dies in the shrink", 5, 2, [kill(1, 15), kill(3, 15, "shrink")], 3, [4])
        # Every process that held the state lost: a job error, said once, exit 4.
        _, p = healed("both training ranks lost, 1 spare", 3, 1, [kill(0, 5), kill(1, 5)], 0, [], expect_rc=4,
                      lines=["every process that held training state was lost (ranks 0, 1); the 1 hot spare(s) alive hold none"])
        check(sum("job error" in l for l in stderr_lines(p.stderr)) == 1, "the job error is said once")

def mp_spares():
    # Hot spares in pp and tp: the newcomer takes the lost rank's stage or shard, rebuilt from the
    # buddy replicas like a survivor's part; the split stays the fault-free one, so the parameters
    # end bitwise equal to the fault-free run's (SHA-256).
    for mode in ("pp", "tp"):
        ref, _ = run(4, *MP[mode]["args"])
        for what, n, spares, faults, world, joined in (
                ("kill rank 1", 5, 1, [kill(1, 25)], 4, [4]),
                ("kill rank 0 inside an allreduce", 5, 1, [kill(0, 20, "allreduce")], 4, [4]),
                ("ranks 0 and 2 in one recovery, 2 spares", 6, 2, [kill(0, 20), kill(2, 20, "recovery")], 4, [4, 5]),
                ("rank 1, then rank 3 with no spare left", 5, 1, [kill(1, 20), kill(3, 50)], 3, [4])):
            s, p = run(n, *MP[mode]["args"], "--spares", str(spares), *(a for f in faults for a in ("--inject", f)))
            tag = f"{mode}, {what}"
            got = [r for e in s["recoveries"] for r in e.get("joined", [])]
            check(s["world_size_final"] == world and got == joined,
                  f"{tag}: world {s['world_size_final']} (expected {world}), spares joined {got} (expected {joined})")
            samples_exact(s, 6 * DIGITS_TRAIN, tag)
            if world == 4:
                check(s["param_sha256"] == ref["param_sha256"],
                      f"{tag}: SHA-256 {s['param_sha256'][:12]} = the fault-free 4-rank run's {ref['param_sha256'][:12]}")
                moved = [e.get("transfer_bytes", 0) for e in s["recoveries"] if e.get("joined")]
                check(all(b > 0 for b in moved), f"{tag}: state streamed to the newcomer(s): {moved} bytes")
            else:
                check(rel(s["final_loss"], ref["final_loss"]) < 0.02,
                      f"{tag}: final loss {s['final_loss']:.5f} within 2% of fault-free {ref['final_loss']:.5f}")

def respawn():
    # --respawn N: new processes (MPI_Comm_spawn of ftcc-train itself) fill places no spare was
    # left for, inside the recovery; they get the state from the survivors like a spare.
    det = [*DIGITS, "--deterministic", "--hang-timeout", "5"]
    ref, _ = run(3, *det)

    def respawned(what, n, extra, faults, world, joined, started, lines=(), root_may_go=False):
        """root_may_go: a process started by a respawn is killed in this run, and Open MPI's runtime
        then sometimes kills the process that spawned it too (the pool's rank 0, the spawn's root;
        docs/recovery.md): one place fewer, allowed only with rank 0 among the lost."""
        s, p = run(n, *det, *extra, *(a for f in faults for a in ("--inject", f)))
        lost = [r for e in s["recoveries"] for r in e["failed"]]
        if root_may_go and 0 in lost and 0 not in [int(f.split(":")[1].split("=")[1]) for f in faults]:
            print(f"note {what}: the runtime also took rank 0, the spawn's root (lost {lost})")
            world -= 1
        out = stderr_lines(p.stderr) + p.stdout.splitlines()
        for needle in lines:
            check(any(needle in l for l in out), f"{what}: a line says '{needle}'")
        got_joined = [r for e in s["recoveries"] for r in e.get("joined", [])]
        got_started = [r for e in s["recoveries"] for r in e.get("respawned", [])]
        check(s["world_size_final"] == world and got_joined == joined and got_started == started,
              f"{what}: world {s['world_size_final']} (expected {world}), joined {got_joined} (expected {joined}), "
              f"new processes {got_started} (expected {started})")
        check(s["param_sha256"] == ref["param_sha256"],
              f"{what}: SHA-256 {s['param_sha256'][:12]} vs the fault-free 3-rank run's {ref['param_sha256'][:12]}")
        samples_exact(s, 6 * DIGITS_TRAIN, what)
        return s

    s = respawned("kill rank 1, --respawn 1", 3, ["--respawn", "1"], [kill(1, 15)], 3, [3], [3],
                  lines=["new process 3 (respawned in"])
    ev = s["recoveries"][0]
    check(ev["respawn_ms"] > 0 and ev["respawns_left"] == 0 and ev["survivors"] == [0, 3, 2],
          f"the event: respawn {ev['respawn_ms']:.0f} ms, {ev['respawns_left']} left, survivors {ev['survivors']}")
    respawned("kill rank 0 inside an allreduce: the new process is rank 0 and reports", 3, ["--respawn", "1"],
              [kill(0, 20, "allreduce")], 3, [3], [3])
    respawned("rank 1, then the new process in its place; --respawn 2", 3, ["--respawn", "2"],
              [kill(1, 15), kill(3, 40)], 3, [3, 4], [3, 4], root_may_go=True)
    respawned("a spare first, then a respawn, then a shrink", 4, ["--spares", "1", "--respawn", "1"],
              [kill(1, 15), kill(2, 40), kill(0, 70)], 2, [3, 4], [4],
              lines=["hot spare 3 joined", "new process 4 (respawned in", "no hot spare or respawn left: shrunk"])
    # The new process dies while it receives the state: the recovery starts another one.
    respawned("the new process dies in the hooks; --respawn 2", 3, ["--respawn", "2"],
              [kill(1, 15), kill(3, 15, "hooks")], 3, [4], [3, 4], root_may_go=True)
    # Both new processes die in the recovery that started them, one per attempt: their deaths are
    # confirmed like the others' on this host, so 2 of the 5 go on (the simulation found them
    # counted as unconfirmed: quorum lost, exit 3).
    respawned("two new processes die in the hooks in turn; --respawn 2", 3, ["--respawn", "2"],
              [kill(1, 15), kill(3, 15, "hooks"), kill(4, 15, "hooks")], 2, [], [3, 4], root_may_go=True)
    for mode in ("pp", "tp"):
        mref, _ = run(4, *MP[mode]["args"])
        s, _ = run(4, *MP[mode]["args"], "--respawn", "1", "--inject", kill(1, 25))
        got = [r for e in s["recoveries"] for r in e.get("respawned", [])]
        check(s["world_size_final"] == 4 and got == [4] and s["param_sha256"] == mref["param_sha256"],
              f"{mode}, kill rank 1, --respawn 1: world {s['world_size_final']}, new processes {got}, SHA-256 "
              f"{s['param_sha256'][:12]} vs fault-free {mref['param_sha256'][:12]}")
        samples_exact(s, 6 * DIGITS_TRAIN, f"{mode} respawn")

def hybrid_fault_free():
    # dp,pp and dp,tp: replicas of a pipeline or a tp group, each on its rows of the global batch,
    # gradients summed over the replicas: the single-process model to float rounding.
    base, _ = run(1, *PP_MODEL)
    for name, n, args, grid in (("dp,pp", 4, HYBRID["dp,pp"], "2 replicas x 2 ranks"),
                                ("dp,pp 1f1b", 4, [*HYBRID["dp,pp"], "--schedule", "1f1b"], "2 replicas x 2 ranks"),
                                ("dp,pp", 6, [*HYBRID["dp,pp"][:-4], "--pp-size", "3", "--micro-batches", "4"], "2 replicas x 3 ranks"),
                                ("dp,tp", 4, HYBRID["dp,tp"], "2 replicas x 2 ranks")):
        ref = base if name.startswith("dp,pp") else run(1, *TP_MODEL)[0]
        s, _ = run(n, *args)
        check(s["grid"] == grid and s["world_size_final"] == n, f"{name} on {n} ranks: grid {s['grid']!r}")
        check(rel(s["final_loss"], ref["final_loss"]) < 1e-3,
              f"{name} on {n} ranks: final loss {s['final_loss']:.6f} vs single process {ref['final_loss']:.6f}")
        check(abs(s["eval_metric"] - ref["eval_metric"]) < 0.01, f"{name} on {n} ranks: accuracy {s['eval_metric']:.4f}")
        samples_exact(s, 6 * DIGITS_TRAIN, f"{name} on {n} ranks")
    # 1F1B and GPipe: the same parameters, bit for bit (pp and dp,pp), and 1F1B holds fewer
    # micro-batches' activations: with 16 micro-batches of 64 rows of width 1024 on 4 stages,
    # GPipe's stage 0 holds all 16 at once, 1F1B's at most 4.
    for name, n, args in (("pp", 4, [*PP_MODEL, "--parallel", "pp"]), ("dp,pp", 4, HYBRID["dp,pp"]),
                          ("pp, 2 micro-batches on 4 stages", 4, [*PP_MODEL, "--parallel", "pp", "--micro-batches", "2"])):
        g, _ = run(n, *args, "--schedule", "gpipe")
        f, _ = run(n, *args, "--schedule", "1f1b")
        check(g["param_sha256"] == f["param_sha256"], f"{name}: 1f1b {f['param_sha256'][:12]} vs gpipe {g['param_sha256'][:12]}")
    wide = ["--dataset", "synthetic:2048:64:8", "--layers", "64,1024,1024,1024,8", "--batch", "1024", "--steps", "4",
            "--micro-batches", "16", "--parallel", "pp"]
    g, _ = run(4, *wide, "--schedule", "gpipe")
    f, _ = run(4, *wide, "--schedule", "1f1b")
    held = 12 * 2 * 64 * 1024 * 4  # 12 micro-batches fewer, each at least its 64 x 1024 input and output
    check(g["param_sha256"] == f["param_sha256"], "wide pp: 1f1b and gpipe give the same bits")
    check(f["peak_tensor_bytes"] + held <= g["peak_tensor_bytes"],
          f"wide pp: peak tensor bytes 1f1b {f['peak_tensor_bytes']:,} vs gpipe {g['peak_tensor_bytes']:,} "
          f"(at least {held:,} less)")

def hybrid_fault_cases():
    bases = {}
    for row_case, mode, ranks, faults, flags, expected, note in HYBRID_FAULT_RUNS:
        if row_case != case:
            continue
        what = f"{mode} on {ranks} ranks, " + " and ".join(describe(f) for f in faults) + f" ({note})"
        args = [*HYBRID[mode], *flags]
        inject = [a for f in faults for a in ("--inject", f)]
        if expected[0] == "lost":
            _, p = run(ranks, *args, *inject, expect_rc=None)
            check(p.returncode == 4 and "training state lost" in p.stderr and expected[1] in p.stderr
                  and "in every model replica" in p.stderr,
                  f"{what}: exit {p.returncode} (expected 4) naming {expected[1]}: " +
                  next((l for l in p.stderr.splitlines() if "lost" in l), "(no line)")[:200])
            continue
        if (mode, ranks) not in bases:
            bases[(mode, ranks)], _ = run(ranks, *HYBRID[mode])
        base = bases[(mode, ranks)]
        with tempfile.TemporaryDirectory() as d:
            extra = ["--checkpoint-dir", os.path.join(d, "ck")] if expected[0] == "falls back" else []
            s, p = run(ranks, *args, *inject, *extra)
        final = ranks - len(faults)
        check(s["world_size_final"] == final, f"{what}: world {s['world_size_initial']} -> {s['world_size_final']}")
        if expected[0] == "falls back":
            check("FALLING BACK TO CHECKPOINT" in p.stderr and f"ckpt-{expected[1]:010d}" in p.stderr,
                  f"{what}: falls back to the step-{expected[1]} checkpoint")
        else:
            check(s["grid"] == expected[1] and expected[1] in p.stderr,
                  f"{what}: grid {s['grid']!r} (expected {expected[1]!r}), said in the log")
        check(rel(s["final_loss"], base["final_loss"]) < 0.02,
              f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
        samples_exact(s, 6 * DIGITS_TRAIN, what)
    if case == "dp_pp_double_failure":
        # A hot spare the re-formed grid leaves idle: 2 x 2 stages of a 2-layer model plus a spare;
        # ranks 2 and 3 die together, the spare takes place 2, place 3 goes: 3 ranks, and a 2-layer
        # model cuts over at most 2, so the spare is idle. Not --quiet: the end-of-run notes run too.
        small = [*PP_MODEL[:2], "--layers", "64,64,10", *PP_MODEL[4:], "--parallel", "dp,pp", "--pp-size", "2"]
        base, _ = run(4, *small)
        what = "dp,pp 2 x 2 + 1 spare, ranks 2 and 3 killed at step 20 (the spare idle)"
        p = subprocess.run([run_cmd, "-n", "5", train, *FT_OPT, *small, "--spares", "1", "--inject", "kill:rank=2:step=20",
                            "--inject", "kill:rank=3:step=20"], capture_output=True, text=True, timeout=120)
        sums = [json.loads(l[len("FTCC_SUMMARY "):]) for l in p.stdout.splitlines() if l.startswith("FTCC_SUMMARY ")]
        s = sums[0] if len(sums) == 1 else {}
        # (A crash after the summary would still exit 0, by the exit-status rule: hence "crashed".)
        ok = p.returncode == 0 and "crashed" not in p.stderr
        check(ok and s.get("world_size_final") == 3 and s.get("grid") == "1 replica x 2 ranks, 1 idle",
              f"{what}: exit {p.returncode}, no rank crashed, world {s.get('world_size_final')}, grid {s.get('grid')!r}" +
              ("" if ok else p.stderr[-1500:]))
        if s:
            check(rel(s["final_loss"], base["final_loss"]) < 0.02,
                  f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
            samples_exact(s, 6 * DIGITS_TRAIN, what)

# Silent data corruption (train/replica_verifier.hpp): one bit flipped on one rank, every mode with
# live replicas, --deterministic so that "the corrupted steps never reach the result" is checked
# bit for bit against the fault-free run of the same mode. Rows: (case, mode, ranks, flags, faults,
# expected): expected "excluded [R]" (a strict majority outvotes original rank R: it leaves, the
# others roll back; with a spare the world stays full), "rolled back" (two replicas differ: every
# rank rolls back, no one leaves), "stops" (the same mismatch again after the rollback: exit 4),
# "unseen" (no live replica, or --verify-every 0: the result differs from the fault-free run's, which
# shows the check above can fail). These rows test the vote: they run with --verify-at-rest off,
# since the check of state at rest (train/state_at_rest.hpp) catches a param or optim flip first.
# Rows with "--verify-at-rest" (corruption_at_rest) keep that check as given: "at rest [R]" (its state is
# found changed before its next use: one state_at_rest event, rank R restored from a live replica
# or a buddy copy, nobody leaves), "excluded at rest [R]" (found a second time: R leaves, a failure
# like any other), and "unseen" for a grad flip (a wrong computation: the optimizer seals what it
# wrote, and with one replica nothing else can see it), "lost" (no copy to restore from: exit 4).
CORRUPTION_DET = ["--deterministic", "--verify-every", "10"]
CORRUPTION_MODEL = ["--dataset", "digits", "--layers", "64,64,64,64,10", "--lr", "0.05", "--batch", "64",
                    "--epochs", "3", "--micro-batches", "6"]
CORRUPTION_MODES = {"dp": [], "dp,pp": ["--parallel", "dp,pp", "--pp-size", "2"],
                    "dp,tp": ["--parallel", "dp,tp", "--tp-size", "2"], "pp": ["--parallel", "pp"],
                    "tp": ["--parallel", "tp"]}
CORRUPTION_RUNS = [
    ("corruption_dp", "dp", 4, [], ["bitflip:rank=1:step=25"], ("excluded", 1)),
    ("corruption_dp", "dp", 3, [], ["bitflip:rank=2:step=25:target=grad"], ("excluded", 2)),
    ("corruption_dp", "dp", 5, ["--spares", "1"], ["bitflip:rank=0:step=25:target=optim"], ("excluded", 0)),
    ("corruption_dp", "dp", 2, [], ["bitflip:rank=1:step=25"], ("rolled back",)),
    ("corruption_dp", "dp", 2, [], ["bitflip:rank=0:step=25:times=2"], ("stops",)),
    # A flip, then a kill before the next check: the recovery's own check finds the two survivors
    # differ (no majority) and rolls both back.
    ("corruption_dp", "dp", 3, [], ["bitflip:rank=2:step=25:target=grad", "kill:rank=0:step=27"], ("rolled back",)),
    # A flip during a heal: rank 2 dies at step 22 and the spare takes its place with the state of
    # step 22 (already holding rank 1's corrupted gradients of step 21); the heal's own check
    # outvotes rank 1, and the newcomer's state, newer than the verified step, is dropped with the rest.
    ("corruption_dp", "dp", 5, ["--spares", "1"], ["bitflip:rank=1:step=21", "kill:rank=2:step=22"], ("rolled back",)),
    # The same with the copies' source corrupted: the spare gets rank 0's state, so two of the
    # three digests agree on the corrupted one. The heal's check excludes nobody (copied parts are
    # no independent votes); everyone rolls back.
    ("corruption_dp", "dp", 4, ["--spares", "1"], ["bitflip:rank=0:step=21", "kill:rank=2:step=22"], ("rolled back",)),
    # dp,pp 3 x 2 loses rank 1 and re-forms as 2 x 2 + 1 idle, ranks changing places, while rank 0
    # holds a corrupted stage: the heal's check finds no majority, and the ranks whose part changed
    # roll back through the restore plan from their verified copies.
    ("corruption_hybrid", "dp,pp", 6, [], ["bitflip:rank=0:step=21", "kill:rank=1:step=22"], ("rolled back",)),
    ("corruption_dp", "dp", 3, ["--verify-every", "0"], ["bitflip:rank=1:step=25"], ("unseen",)),
    ("corruption_hybrid", "dp,pp", 6, [], ["bitflip:rank=3:step=25"], ("excluded", 3)),
    ("corruption_hybrid", "dp,pp", 4, [], ["bitflip:rank=1:step=25:target=grad"], ("rolled back",)),
    ("corruption_hybrid", "dp,tp", 6, [], ["bitflip:rank=2:step=25:target=optim"], ("excluded", 2)),
    ("corruption_hybrid", "dp,tp", 5, ["--spares", "1"], ["bitflip:rank=3:step=25"], ("rolled back",)),
    ("corruption_hybrid", "pp", 2, [], ["bitflip:rank=1:step=25"], ("unseen",)),
    ("corruption_hybrid", "tp", 2, [], ["bitflip:rank=1:step=25:target=optim"], ("unseen",)),
    # on: everywhere, before the vote (dp: restored from a live replica at the same step).
    ("corruption_at_rest", "dp", 3, ["--verify-at-rest", "on"], ["bitflip:rank=1:step=25"], ("at rest", 1)),
    ("corruption_at_rest", "dp,pp", 4, ["--verify-at-rest", "on"], ["bitflip:rank=2:step=25"], ("at rest", 2)),
    # auto (the default): where no live replica can vote, i.e. pp and tp with one model replica
    # (restored from a buddy copy: every rank rolls back to it).
    ("corruption_at_rest", "pp", 2, ["--verify-at-rest", "auto"], ["bitflip:rank=1:step=25"], ("at rest", 1)),
    ("corruption_at_rest", "tp", 2, ["--verify-at-rest", "auto"], ["bitflip:rank=0:step=25:target=optim"], ("at rest", 0)),
    ("corruption_at_rest", "pp", 3, ["--verify-at-rest", "auto"], ["bitflip:rank=1:step=25", "bitflip:rank=1:step=30"],
     ("excluded at rest", 1)),
    ("corruption_at_rest", "pp", 2, ["--verify-at-rest", "auto"], ["bitflip:rank=1:step=25:target=grad"], ("unseen",)),
    # auto in dp: the vote's job (rank 1 outvoted at the check of step 30).
    ("corruption_at_rest", "dp", 3, ["--verify-at-rest", "auto"], ["bitflip:rank=1:step=25"], ("excluded", 1)),
    # One rank, on, no checkpoint: no copy to restore from, the documented stop (exit 4).
    ("corruption_at_rest", "dp", 1, ["--verify-at-rest", "on"], ["bitflip:rank=0:step=25"], ("lost",)),
]
CORRUPTION_CASES = sorted({r[0] for r in CORRUPTION_RUNS})


def silent_corruption():
    bases = {}
    for row_case, mode, ranks, flags, faults, expected in CORRUPTION_RUNS:
        if row_case != case:
            continue
        det = CORRUPTION_DET if "--verify-every" not in flags else ["--deterministic"]
        if "--verify-at-rest" not in flags:
            det = [*det, "--verify-at-rest", "off"]
        args = [*CORRUPTION_MODEL, *CORRUPTION_MODES[mode], *det]
        spares = int(flags[flags.index("--spares") + 1]) if "--spares" in flags else 0
        if mode not in bases:  # --deterministic: one SHA-256 on any grid, so one fault-free run per mode
            bases[mode], _ = run(2 if mode in ("dp", "pp", "tp") else 4, *CORRUPTION_MODEL, *CORRUPTION_MODES[mode], *CORRUPTION_DET)
        base = bases[mode]
        what = f"{mode} on {ranks} ranks{' (' + ' '.join(flags) + ')' if flags else ''}, {' and '.join(faults)}"
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "run.jsonl")
            s, p = run(ranks, *args, *flags, *[a for f in faults for a in ("--inject", f)], "--log-json", log,
                       expect_rc=None)
            events = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
        mismatches = [e for e in events if e["event"] == "replica_mismatch"]
        at_rest = [e for e in events if e["event"] == "state_at_rest"]
        flipped = sum("fault injection" in l and "bitflip" in l for l in p.stderr.splitlines())
        check(flipped >= 1, f"{what}: the flip was made and said ({flipped} line(s))")
        if expected[0] == "lost":
            check(p.returncode == 4 and "held only by rank(s) whose state was dropped (silent data corruption)" in p.stderr
                  and "training state lost" in p.stderr and [e.get("ranks") for e in at_rest] == [[0]],
                  f"{what}: exit {p.returncode} (expected 4), training state lost, events {at_rest}: {p.stderr[-600:]}")
            continue
        if expected[0] == "stops":
            check(p.returncode == 4 and "again after rolling back" in p.stderr and len(mismatches) == 2
                  and mismatches[-1]["repeated"] is True,
                  f"{what}: exit {p.returncode} (expected 4), the repeat named, events {mismatches}")
            continue
        if not finished(p, s, 3 * DIGITS_TRAIN, what):
            continue
        if expected[0] == "unseen":
            check(not mismatches and not at_rest and s["param_sha256"] != base["param_sha256"],
                  f"{what}: not detected ({len(mismatches) + len(at_rest)} events), final SHA-256 differs from the fault-free run's")
            continue
        check(s["param_sha256"] == base["param_sha256"],
              f"{what}: final SHA-256 {s['param_sha256'][:12]} equals the fault-free run's {base['param_sha256'][:12]}")
        if expected[0] in ("at rest", "excluded at rest"):
            rank, twice = expected[1], expected[0] == "excluded at rest"
            recs = s.get("recoveries", [])
            failed = sorted(r for ev in recs for r in ev.get("failed", []))
            said = f"ftcc-train: rank {rank}: its parameters or optimizer state changed after step"
            check(not mismatches and [e.get("ranks") for e in at_rest] == [[rank]]
                  and at_rest[0].get("step") == 26 and said in p.stderr
                  and failed == ([rank] if twice else []) and s["world_size_final"] == ranks - twice
                  and (not twice or f"rank {rank} excluded: its parameters or optimizer state changed" in p.stderr
                       and "for the second time" in p.stderr),
                  f"{what}: state_at_rest events {at_rest} (expected one naming rank {rank} at step 26; the second time it leaves), replica "
                  f"mismatches {mismatches}, failed {failed}, world {s['world_size_final']}")
            continue
        ev = mismatches[0] if len(mismatches) == 1 else {}
        if expected[0] == "excluded":
            rank = expected[1]
            lost = 1 + sum("kill" in f for f in faults)  # the outvoted rank and the killed ones
            left = ranks - spares - lost + min(spares, lost)
            check(ev.get("excluded") == [rank] and ev.get("undecided") == 0 and ev.get("rolled_back_to") == 20
                  and f"rank {rank} excluded" in p.stderr and s["world_size_final"] == left,
                  f"{what}: one event excluding rank {rank}, rolled back to step 20 ({ev}); world {s['world_size_final']} "
                  f"(expected {left})")
        else:
            kills = sum("kill" in f for f in faults)
            check(ev.get("excluded") == [] and ev.get("undecided", 0) > 0 and ev.get("rolled_back_to") == 20
                  and "no strict majority" in p.stderr and s["world_size_final"] == ranks - spares - kills + min(spares, kills),
                  f"{what}: one event, no majority, rolled back to step 20 ({ev}); world {s['world_size_final']}")


# Stragglers (train/straggler_watch.hpp): a rank slowed by `slow:` (it sleeps until its own time
# per step is F x its peers' median at the last check), checked every --verify-every 10 steps. Rows: (ranks, flags, faults, expected):
# "evicted" (it leaves; with a spare the world stays full), "reported" (a line and an event, it
# stays), "quiet" (slow for too few checks: no report).
# Timing on a shared 2-core machine is noisy (under a CPU hog a healthy rank measured 1.9x the other's
# median at two checks in a row): the slow rank is 8x slow and a straggler is 3x at 3 checks, so no
# row depends on a close measurement. The eviction rule itself (evicting only when predicted faster)
# is unit-tested (train_unit, StragglerWatch); its figures are bench/training/stragglers'.
# A small model: under ASan a step of 256-512-512-16 took 340 ms and the 8x rank 3 s, past the
# jobs' time limit.
STRAGGLER_MODEL = ["--dataset", "synthetic:4096:64:16", "--layers", "64,256,256,16", "--batch", "256",
                   "--steps", "120", "--lr", "0.01", "--verify-every", "10", "--straggler-factor", "3"]
# 120 steps: 9 epochs of 13 batches (3277 training rows after --held-out 0.2: 12 of 256 and one of
# 205), then 3 batches of 256.
STRAGGLER_SAMPLES = 9 * 3277 + 3 * 256
STRAGGLER_RUNS = [
    (4, ["--evict-stragglers"], ["slow:rank=3:step=20:factor=8"], "evicted"),
    (5, ["--evict-stragglers", "--spares", "1"], ["slow:rank=1:step=20:factor=8"], "evicted"),
    (4, [], ["slow:rank=2:step=20:factor=8:steps=40"], "reported"),  # slow until step 60: found at 50
    # Slow for 12 steps: at most 2 checks in a row, the window is 3.
    (4, ["--evict-stragglers"], ["slow:rank=2:step=20:factor=8:steps=12"], "quiet"),
    # pp and tp: a rank's waits for its neighbours (a pipeline's receives, tp's allreduces) are not
    # its own time, so only the slow stage or shard is reported, not the ranks that wait for it.
    (3, ["--parallel", "pp"], ["slow:rank=1:step=20:factor=8:steps=40"], "reported"),
    (2, ["--parallel", "tp"], ["slow:rank=0:step=20:factor=8:steps=40"], "reported"),
]


def stragglers():
    for ranks, flags, faults, expected in STRAGGLER_RUNS:
        what = f"{ranks} ranks {' '.join(flags)}, {' and '.join(faults)}"
        slow = int(re.search(r"rank=(\d+)", faults[0]).group(1))
        spares = int(flags[flags.index("--spares") + 1]) if "--spares" in flags else 0
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "run.jsonl")
            s, p = run(ranks, *STRAGGLER_MODEL, *flags, *[a for f in faults for a in ("--inject", f)], "--log-json", log)
            events = [json.loads(l) for l in open(log)]
        found = [e for e in events if e["event"] == "straggler"]
        samples_exact(s, STRAGGLER_SAMPLES, what)
        check(any("fault injection" in l and "slow:" in l for l in p.stderr.splitlines()), f"{what}: the slowdown said")
        if expected == "quiet":
            check(not found and "straggler" not in p.stderr and s["world_size_final"] == ranks - spares,
                  f"{what}: not reported ({found}), world {s['world_size_final']}")
            continue
        ev = found[0] if len(found) == 1 else {}
        check(ev.get("rank") == slow and ev.get("slowdown", 0) > 3,
              f"{what}: one straggler event naming rank {slow} ({found})")
        line = next((l for l in p.stderr.splitlines() if l.startswith("ftcc-train: straggler: rank")), "")
        if expected == "evicted":
            check(ev.get("evicted") is True and "evicting it" in line and f"rank {slow} evicted as a straggler" in p.stderr
                  and "after the eviction:" in p.stderr and s["world_size_final"] == (ranks - spares if spares else ranks - 1),
                  f"{what}: evicted, world {s['world_size_final']}: {line}")
        else:
            check(ev.get("evicted") is False and "evict" not in line and s["world_size_final"] == ranks,
                  f"{what}: reported, not evicted, world {s['world_size_final']}: {line}")


# Corruption in transit (--verify-reductions, comm/reduction_audit.hpp): `wireflip` flips a high
# bit (62 of the middle 64-bit word) of the first large message a rank receives in each collective
# call of the replicas' gradient sum. Rows: (mode, ranks, flags, fault, expected): "right" (one bad
# call: the repeat is right, used; nobody leaves; the final SHA-256 equals the fault-free run's),
# "excluded R" (a fault on every call: wrong again when repeated, the link probe names rank R's two
# incoming links, R leaves, the step is redone; the SHA-256 still equals the fault-free run's),
# "stops" (two ranks: the probe names both ends of the one link: exit 4), "unseen" (without
# --verify-reductions a corrupted sum that every replica applies passes the vote: the SHA-256
# differs, which shows the rows above can fail), "voted" (the same, on one host's shared memory:
# there every rank reduces a small bucket itself, so the flip changes rank 1's copy only, and the
# replicas' vote catches it and rolls back: the SHA-256 equals the fault-free run's). "--p2p" runs
# the row's collectives over MPI point-to-point (FTCC_SHM=0) instead of shared memory.
# --deterministic rows compare SHA-256s; the float row (no --deterministic: the bound of float
# rounding, overlapped buckets) compares the loss.
TRANSIT_MODEL = [*CORRUPTION_MODEL, "--verify-every", "10", "--verify-at-rest", "off"]
TRANSIT_RUNS = [
    ("dp", 3, ["--deterministic"], "wireflip:rank=1:step=12", ("right",)),
    ("dp", 3, ["--deterministic"], "wireflip:rank=1:step=12:times=1000", ("excluded", 1)),
    ("dp", 5, ["--deterministic", "--spares", "1"], "wireflip:rank=2:step=12:times=1000", ("excluded", 2)),
    ("dp", 2, ["--deterministic"], "wireflip:rank=1:step=12:times=1000", ("stops",)),
    ("dp", 2, ["--deterministic", "--no-verify-reductions", "--p2p"], "wireflip:rank=1:step=12", ("unseen",)),
    ("dp", 2, ["--deterministic", "--no-verify-reductions"], "wireflip:rank=1:step=12", ("voted",)),
    ("dp", 3, ["--deterministic", "--p2p"], "wireflip:rank=1:step=12:times=1000", ("excluded", 1)),
    ("dp,pp", 4, ["--deterministic"], "wireflip:rank=1:step=12", ("right",)),
    ("dp,pp", 6, ["--deterministic"], "wireflip:rank=2:step=12:times=1000", ("excluded", 2)),
    ("dp,tp", 6, ["--deterministic"], "wireflip:rank=3:step=12:times=1000", ("excluded", 3)),
    ("dp", 4, [], "wireflip:rank=2:step=12:times=1000", ("excluded", 2)),
]


def corruption_in_transit():
    bases = {}
    for mode, ranks, flags, fault, expected in TRANSIT_RUNS:
        det = "--deterministic" in flags
        verify = "--no-verify-reductions" not in flags
        env = {"FTCC_SHM": "0"} if "--p2p" in flags else None
        flags = [f for f in flags if f not in ("--no-verify-reductions", "--p2p")]
        args = [*TRANSIT_MODEL, *CORRUPTION_MODES[mode], *flags]
        key = (mode, det, ranks if not det else 0)
        if key not in bases:  # --deterministic: one SHA-256 on any grid; float: the same rank count
            bases[key], _ = run(ranks - ("--spares" in flags) if not det else (2 if mode == "dp" else 4),
                                *TRANSIT_MODEL, *CORRUPTION_MODES[mode], *[f for f in flags if f == "--deterministic"])
        base = bases[key]
        spares = int(flags[flags.index("--spares") + 1]) if "--spares" in flags else 0
        what = (f"{mode} on {ranks} ranks {' '.join(flags)} {'--verify-reductions ' if verify else ''}{fault}"
                f"{' (FTCC_SHM=0)' if env else ''}")
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "run.jsonl")
            s, p = run(ranks, *args, *(["--verify-reductions"] if verify else []), "--inject", fault, "--log-json", log,
                       expect_rc=None, env=env)
            events = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
        found = [e for e in events if e["event"] == "reduction_mismatch"]
        votes = [e for e in events if e["event"] == "replica_mismatch"]
        check(any("fault injection" in l and "wireflip" in l for l in p.stderr.splitlines()), f"{what}: the fault said")
        ev = found[0] if len(found) == 1 else {}
        if expected[0] == "stops":
            check(p.returncode == 4 and "no single rank to exclude: stopping" in p.stderr and ev.get("repeated") == "wrong"
                  and ev.get("excluded") == [] and ev.get("links") == [[0, 1]],
                  f"{what}: exit {p.returncode} (expected 4), one event naming link 0 -> 1 ({found}): {p.stderr[-600:]}")
            continue
        if not finished(p, s, 3 * DIGITS_TRAIN, what):
            continue
        if expected[0] == "unseen":
            check(not found and not votes and s["param_sha256"] != base["param_sha256"],
                  f"{what}: no event ({found}, {votes}), final SHA-256 differs from the fault-free run's")
            continue
        if expected[0] == "voted":
            check(not found and len(votes) == 1 and s["param_sha256"] == base["param_sha256"],
                  f"{what}: no reduction event ({found}), one replica vote ({votes}), final SHA-256 equals the fault-free run's")
            continue
        if det:
            check(s["param_sha256"] == base["param_sha256"],
                  f"{what}: final SHA-256 {s['param_sha256'][:12]} equals the fault-free run's {base['param_sha256'][:12]}")
        else:
            check(rel(s["final_loss"], base["final_loss"]) < 0.02,
                  f"{what}: final loss {s['final_loss']:.5f} within 2% of fault-free {base['final_loss']:.5f}")
        check(not votes, f"{what}: no replica verification mismatch ({votes})")
        failed = sorted(r for ev2 in s.get("recoveries", []) for r in ev2.get("failed", []))
        if expected[0] == "right":
            check(ev.get("repeated") == "right" and ev.get("step") == 12 and ev.get("excluded") == [] and not failed
                  and s["world_size_final"] == ranks and "repeated from the kept contributions: right, used" in p.stderr,
                  f"{what}: one event, right when repeated ({found}), nobody lost ({failed}), world {s['world_size_final']}")
            continue
        rank = expected[1]
        links = sorted(tuple(l) for l in ev.get("links", []))
        into = all(l[1] == rank for l in links) and len(links) == 2
        left = ranks - 1 if not spares else ranks - spares
        check(ev.get("repeated") == "wrong" and ev.get("excluded") == [rank] and into and failed == [rank]
              and s["world_size_final"] == left and f"rank {rank} excluded: the data on its links" in p.stderr,
              f"{what}: one event excluding rank {rank}, both links into it ({found}); failed {failed}, "
              f"world {s['world_size_final']} (expected {left})")


def cuda_modes():
    # --device cuda in every mode, where this machine has a GPU (exit 77, skipped, where it has
    # none). Each mode trains on the GPU as it does on the CPU: after 20 steps the same loss within
    # 1e-4 (only the kernels' rounding differs, by about 1e-6 there; a wrong gradient or a lost
    # partial sum moves it by far more. Over whole runs such rounding grows: pp's final loss moves
    # by 2% between two CPUs' libm); the whole run to the same accuracy; a kill recovered on the
    # survivors (within 2% of the fault-free GPU run, samples exactly once); and under
    # --deterministic one SHA-256 for 1 rank, N ranks and N ranks losing one.
    probe = run(1, *DIGITS_MODEL, "--device", "cuda", "--steps", "1", expect_rc=None)[1]
    if probe.returncode == 2 and "no usable CUDA device" in probe.stderr:
        print("SKIP: no usable CUDA device here: " + probe.stderr.strip().splitlines()[-1][:300])
        sys.exit(77)
    modes = [("dp", DIGITS, 4, [], []),
             ("pp", PP_MODEL, 4, ["--parallel", "pp", "--micro-batches", "4"], ["--parallel", "pp", "--micro-batches", "4"]),
             ("pp 1f1b", PP_MODEL, 3, ["--parallel", "pp", "--micro-batches", "4", "--schedule", "1f1b"],
              ["--parallel", "pp", "--micro-batches", "4", "--schedule", "1f1b"]),
             ("tp", TP_MODEL, 2, ["--parallel", "tp"], ["--parallel", "tp"]),
             ("dp,pp", PP_MODEL, 4, ["--parallel", "dp,pp", "--pp-size", "2", "--micro-batches", "4"],
              ["--parallel", "dp,pp", "--pp-size", "1", "--micro-batches", "4"]),
             ("dp,tp", TP_MODEL, 4, ["--parallel", "dp,tp", "--tp-size", "2", "--micro-batches", "4"],
              ["--parallel", "dp,tp", "--tp-size", "1", "--micro-batches", "4"])]
    for name, model, n, flags, alone in modes:
        at = model.index("--epochs")
        short = [*model[:at], *model[at + 2:], "--steps", "20"]
        cpu, _ = run(n, *short, *flags)
        gpu, _ = run(n, *short, *flags, "--device", "cuda")
        check(gpu["device"] == "cuda" and cpu["device"] == "cpu" and rel(gpu["final_loss"], cpu["final_loss"]) < 1e-4,
              f"{name} on {n} ranks, 20 steps: GPU loss {gpu['final_loss']:.7f}, CPU {cpu['final_loss']:.7f}")
        gpu, _ = run(n, *model, *flags, "--device", "cuda")
        samples_exact(gpu, 6 * DIGITS_TRAIN, f"{name} on the GPU")
        check(gpu["eval_metric"] > 0.95, f"{name} on the GPU: accuracy {gpu['eval_metric']:.4f} (steady "
              f"{gpu['step_samples_per_s']:.0f} samples/s: a model this small is launch-bound on a GPU)")
        killed, _ = run(n, *model, *flags, "--device", "cuda", "--inject", "kill:rank=1:step=15")
        samples_exact(killed, 6 * DIGITS_TRAIN, f"{name} on the GPU, rank 1 killed")
        check(killed["world_size_final"] == n - 1 and len(killed["recoveries"]) == 1
              and rel(killed["final_loss"], gpu["final_loss"]) < 0.02,
              f"{name}, rank 1 killed at step 15: {killed['world_size_final']} ranks left, final loss "
              f"{killed['final_loss']:.6f} (fault-free {gpu['final_loss']:.6f})")
        det = [*model, "--device", "cuda", "--deterministic"]
        shas = {"1 rank": run(1, *det, *alone)[0]["param_sha256"], f"{n} ranks": run(n, *det, *flags)[0]["param_sha256"],
                f"{n} ranks, rank 1 killed": run(n, *det, *flags, "--inject", "kill:rank=1:step=15")[0]["param_sha256"]}
        check(len(set(shas.values())) == 1, f"{name} --deterministic on the GPU: one SHA-256 for " +
              ", ".join(f"{w} {h[:12]}" for w, h in shas.items()))


def model_parallel_doc_commands():
    # Every ftcc-run command of docs/model-parallel.md's sh blocks, as printed (build/ is the build
    # folder): exit 0, one summary, and for a command with --inject a recovery of the named rank.
    text = open(os.path.join(root, "docs", "model-parallel.md")).read()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for cmd in re.sub(r"\\\n\s*", " ", block).splitlines():
            if cmd.startswith("tools/ftcc-run "):
                commands.append(cmd)
    check(len(commands) >= 5, f"{len(commands)} ftcc-run commands in docs/model-parallel.md")
    for cmd in commands:
        argv = shlex.split(cmd)
        argv = [os.path.join(root, a) if a == "tools/ftcc-run" else a.replace("build/", build + "/", 1)
                if a.startswith("build/") else a for a in argv]
        p = subprocess.run([*argv, "--quiet", *FT_OPT], capture_output=True, text=True, timeout=180)
        if "--device" in argv and p.returncode == 2 and "no usable CUDA device" in p.stderr:
            print(f"skip {cmd[:110]}: no GPU here (train_cuda_modes runs these modes where one is)")
            continue
        sums = [l for l in p.stdout.splitlines() if l.startswith("FTCC_SUMMARY ")]
        ok = p.returncode == 0 and len(sums) == 1
        if ok and "--inject" in argv:
            s = json.loads(sums[0][len("FTCC_SUMMARY "):])
            ok = len(s.get("recoveries", [])) == 1 and s["world_size_final"] == s["world_size_initial"] - 1
        check(ok, f"docs/model-parallel.md: {cmd[:110]}: exit {p.returncode}" + ("" if ok else p.stderr[-800:]))

# The cases: each name (meson test train_<name>) to the function that runs it.
CASES = {
    "fault_free_matches_single_process": fault_free_matches_single_process,
    **{c: kill_cases for c in ("kills_digits", "kills_diabetes")},
    "deterministic_with_kills": deterministic_with_kills,
    "pp_deterministic": pp_deterministic,
    "tp_deterministic": tp_deterministic,
    "checkpoint_resume": checkpoint_resume,
    "resume_config": resume_config,
    "optimizer_defaults": optimizer_defaults,
    "json_log": json_log,
    "bad_input": bad_input,
    "pp_fault_free_matches_single_process": pp_fault_free_matches_single_process,
    **{c: mp_fault_cases for c in MP_FAULT_CASES},
    "tp_fault_free_matches_single_process": tp_fault_free_matches_single_process,
    "mp_checkpoint_resume_and_log": mp_checkpoint_resume_and_log,
    "non_finite": non_finite,
    "samples_digest_catches_a_wrong_count": samples_digest_catches_a_wrong_count,
    "checkpoint_files": checkpoint_files,
    **{c: spare_cases for c in ("spares_heal", "spares_failures")},
    "mp_spares": mp_spares,
    "respawn": respawn,
    "hybrid_fault_free": hybrid_fault_free,
    **{c: hybrid_fault_cases for c in HYBRID_FAULT_CASES},
    "model_parallel_doc_commands": model_parallel_doc_commands,
    **{c: silent_corruption for c in CORRUPTION_CASES},
    "corruption_in_transit": corruption_in_transit,
    "stragglers": stragglers,
    "cuda_modes": cuda_modes,
}
if case not in CASES:
    sys.exit(f"unknown case {case}: one of {', '.join(sorted(CASES))}")
CASES[case]()

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print(f"{case}: all checks passed")
