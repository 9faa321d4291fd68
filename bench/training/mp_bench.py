#!/usr/bin/env python3
"""Model-parallel figures for docs/model-parallel.md: throughput of dp, pp and tp on the same
model and rank counts, state bytes per rank with and without replicas, and the recovery-time
breakdown of one kill. Not a test (no pass/fail); run by hand:

    bench/training/mp_bench.py BUILD_DIR [--repeat 3] [--sections throughput,memory,recovery,hybrid,deterministic]

Every figure is the median over --repeat runs of FTCC_SUMMARY's samples_per_s (samples over the
whole run's wall time, start-up included) or of the recovery event's phases. The hybrid section
runs every mode (dp, pp with GPipe and 1F1B, tp, dp x pp, dp x tp) on one 8-layer model on 4 and
8 ranks: steady samples/s (FTCC_SUMMARY's step_samples_per_s), the largest rank's peak bytes of
tensor storage over the steps (peak_tensor_bytes: data, model, optimizer, activations), and the
recovery of a kill of rank 1 at step 10 (total_ms of the recovery event, and the grid after it).
The deterministic section (not run by default) gives the cost of --deterministic in pp, dp,pp, tp
and dp,tp on 4 ranks: runs with and without the flag interleaved, median steady samples/s of each and the ratio.
"""
import json, os, re, statistics, subprocess, sys

build = sys.argv[1]
repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 3
sections = (sys.argv[sys.argv.index("--sections") + 1] if "--sections" in sys.argv
            else "throughput,memory,recovery,hybrid").split(",")
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
run_cmd = os.path.join(root, "tools", "ftcc-run")
train = os.path.join(build, "tools", "ftcc-train")


def run(n, *args):
    p = subprocess.run([run_cmd, "-n", str(n), train, "--log-every", "1000000", *args], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"failed: {args}\n{p.stderr[-2000:]}")
    line = next(l for l in p.stdout.splitlines() if l.startswith("FTCC_SUMMARY "))
    state = re.search(r"(?:pp|tp): state (\d+) B, replica/snapshot store (\d+) B", p.stderr)
    return json.loads(line[len("FTCC_SUMMARY "):]), (int(state[1]), int(state[2])) if state else None


MODELS = {
    "digits 64,96,64,48,10": ["--dataset", "digits", "--layers", "64,96,64,48,10", "--batch", "64", "--epochs", "6"],
    "synthetic 256,512,512,512,16": ["--dataset", "synthetic:4096:256:16", "--layers", "256,512,512,512,16",
                                     "--batch", "256", "--epochs", "2", "--lr", "0.01"],
}

def without_epochs(args):
    i = args.index("--epochs")
    return args[:i] + args[i + 2:]


if "throughput" in sections:
  print("| model | ranks | dp samples/s | pp samples/s (M=4) | tp samples/s |")
  print("|---|---|---|---|---|")
  for name, args in MODELS.items():
    for n in (1, 2, 4):
        row = []
        for par in (["--parallel", "dp"], ["--parallel", "pp", "--micro-batches", "4"], ["--parallel", "tp"]):
            row.append(statistics.median(run(n, *args, *par)[0]["samples_per_s"] for _ in range(repeat)))
        print(f"| {name} | {n} | " + " | ".join(f"{v:,.0f}" for v in row) + " |")

if "memory" in sections:
  print()
  print("| model | mode | ranks | replicas | state bytes (rank 0) | snapshot/replica store bytes (rank 0) |")
  print("|---|---|---|---|---|---|")
  for name, args in MODELS.items():
    for par in ("pp", "tp"):
        for k in (0, 1, 2):
            _, st = run(4, *without_epochs(args), "--parallel", par, "--replicas", str(k), "--steps", "3")
            if st is None:
                sys.exit(f"mp_bench: no '{par}: state N B, replica/snapshot store M B' line in the log of rank 0")
            print(f"| {name} | {par} | 4 | {k} | {st[0]:,} | {st[1]:,} |")

if "recovery" in sections:
  print()
  print("| model | mode | kill | detect | revoke | shrink | agree | hand-over (resync) | total ms |")
  print("|---|---|---|---|---|---|---|---|---|")
  for name, args in MODELS.items():
    for par in ("pp", "tp"):
        evs = [run(4, *args, "--parallel", par, "--inject", "kill:rank=1:step=10")[0]["recoveries"][0] for _ in range(repeat)]
        med = {k: statistics.median(e[k] for e in evs) for k in ("detect_ms", "revoke_ms", "shrink_ms", "agree_ms", "resync_ms", "total_ms")}
        print(f"| {name} | {par} | rank 1 at step 10 | " + " | ".join(f"{med[k]:.1f}" for k in
              ("detect_ms", "revoke_ms", "shrink_ms", "agree_ms", "resync_ms", "total_ms")) + " |")

if "hybrid" in sections:
  # 8 linear layers (pp cuts at most 8 stages), hidden widths divisible by 8 (tp's even split).
  model = ["--dataset", "synthetic:4096:256:16", "--layers", "256," + "512," * 7 + "16", "--batch", "256",
           "--steps", "40", "--lr", "0.01"]
  # Micro-batches of 32 rows everywhere (as Megatron fixes the micro-batch size): pp cuts the
  # 256 rows into 8, each of dp x pp's n/2 replicas its 512/n rows into 16/n.
  modes = [("dp", lambda n: ["--parallel", "dp"]),
           ("pp gpipe", lambda n: ["--parallel", "pp", "--micro-batches", "8", "--schedule", "gpipe"]),
           ("pp 1f1b", lambda n: ["--parallel", "pp", "--micro-batches", "8", "--schedule", "1f1b"]),
           ("tp", lambda n: ["--parallel", "tp"]),
           ("dp x pp (pp 2, 1f1b)", lambda n: ["--parallel", "dp,pp", "--pp-size", "2", "--micro-batches", str(16 // n),
                                              "--schedule", "1f1b"]),
           ("dp x tp (tp 2)", lambda n: ["--parallel", "dp,tp", "--tp-size", "2"])]
  print()
  print("| mode | ranks | grid | samples/s (steady) | peak tensor MB (largest rank) | recovery ms (kill rank 1 at step 10) | grid after |")
  print("|---|---|---|---|---|---|---|")
  for n in (4, 8):
    for name, mode in modes:
      par = mode(n)
      runs = [run(n, *model, *par)[0] for _ in range(repeat)]
      kills = [run(n, *model, *par, "--inject", "kill:rank=1:step=10")[0] for _ in range(repeat)]
      sps = statistics.median(r["step_samples_per_s"] for r in runs)
      peak = statistics.median(r["peak_tensor_bytes"] for r in runs) / 1e6
      rec = statistics.median(k["recoveries"][0]["total_ms"] for k in kills)
      grid, after = runs[0].get("grid", f"{n} ranks"), kills[0].get("grid", f"{n - 1} ranks")
      print(f"| {name} | {n} | {grid} | {sps:,.0f} | {peak:.1f} | {rec:.0f} | {after} |", flush=True)
  # Where activations dominate (1024 rows of width 1024, 16 micro-batches of 64 rows, 4 stages):
  # GPipe holds all 16 micro-batches' activations on a stage, 1F1B at most 4.
  wide = ["--dataset", "synthetic:2048:64:8", "--layers", "64,1024,1024,1024,8", "--batch", "1024", "--steps", "4",
          "--micro-batches", "16", "--parallel", "pp"]
  print()
  print("| activation-heavy pp, 4 ranks | peak tensor MB (largest rank) | samples/s (steady) |")
  print("|---|---|---|")
  for sched in ("gpipe", "1f1b"):
    runs = [run(4, *wide, "--schedule", sched)[0] for _ in range(repeat)]
    print(f"| {sched} | {statistics.median(r['peak_tensor_bytes'] for r in runs) / 1e6:.1f} | "
          f"{statistics.median(r['step_samples_per_s'] for r in runs):,.0f} |", flush=True)

if "deterministic" in sections:
  # pp's flag changes nothing in a fault-free pipeline; dp,pp's exact sum of per-micro-batch
  # gradients over the replicas does, and so do tp's loops and exact sums over the hidden
  # features (docs/training.md, "--deterministic").
  model = ["--dataset", "digits", "--layers", "64,256,256,256,10", "--lr", "0.05", "--batch", "64", "--epochs", "6",
           "--micro-batches", "4"]
  print()
  print("| mode, 4 ranks | samples/s (steady) | with --deterministic | ratio | SHA-256 equal with and without |")
  print("|---|---|---|---|---|")
  for name, par in (("pp", ["--parallel", "pp"]), ("dp,pp 2 x 2", ["--parallel", "dp,pp", "--pp-size", "2"]),
                    ("tp", ["--parallel", "tp"]), ("dp,tp 2 x 2", ["--parallel", "dp,tp", "--tp-size", "2"])):
    plain, det = [], []
    for _ in range(repeat):
      plain.append(run(4, *model, *par)[0])
      det.append(run(4, *model, *par, "--deterministic")[0])
    a = statistics.median(r["step_samples_per_s"] for r in plain)
    b = statistics.median(r["step_samples_per_s"] for r in det)
    same = plain[0]["param_sha256"] == det[0]["param_sha256"]
    print(f"| {name} | {a:,.0f} | {b:,.0f} | {b / a:.2f} | {'yes' if same else 'no'} |", flush=True)
