#!/usr/bin/env python3
"""Steady samples/s of two builds of ftcc-train, interleaved in one run (A, B, A, B, ...), on the
hybrid model of mp_bench.py's hybrid section, so that a change is measured against its baseline
under the same load. Not a test; run by hand:

    bench/training/ab_throughput.py BUILD_A BUILD_B [--repeat 5] [--ranks 4] [--all-modes]

Prints one table row per mode: medians of FTCC_SUMMARY's step_samples_per_s over --repeat runs
of each build, B/A, and the smallest and largest of the runs' paired ratios. dp is the control:
code that a change of the model-parallel modes does not touch shows the noise of the machine.
--all-modes adds pp (GPipe, 1F1B) and tp, for a change of the loop every mode runs.
"""
import json, os, statistics, subprocess, sys

a_build, b_build = sys.argv[1], sys.argv[2]
repeat = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 5
n = int(sys.argv[sys.argv.index("--ranks") + 1]) if "--ranks" in sys.argv else 4
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
run_cmd = os.path.join(root, "tools", "ftcc-run")
model = ["--dataset", "synthetic:4096:256:16", "--layers", "256," + "512," * 7 + "16", "--batch", "256",
         "--steps", "40", "--lr", "0.01", "--log-every", "1000000"]
modes = {"dp x pp (pp 2, 1f1b)": ["--parallel", "dp,pp", "--pp-size", "2", "--micro-batches", str(16 // n),
                                  "--schedule", "1f1b"],
         "dp x tp (tp 2)": ["--parallel", "dp,tp", "--tp-size", "2"],
         "dp (control)": ["--parallel", "dp"]}
if "--all-modes" in sys.argv:
    modes.update({"pp gpipe": ["--parallel", "pp", "--micro-batches", "8"],
                  "pp 1f1b": ["--parallel", "pp", "--micro-batches", "8", "--schedule", "1f1b"],
                  "tp": ["--parallel", "tp"]})


def steady(build, mode):
    cmd = [run_cmd, "-n", str(n), os.path.join(build, "tools", "ftcc-train"), *model, *mode]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    line = next((l for l in p.stdout.splitlines() if l.startswith("FTCC_SUMMARY ")), None)
    if p.returncode != 0 or line is None:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return json.loads(line[len("FTCC_SUMMARY "):])["step_samples_per_s"]


got = {}
for r in range(repeat):
    for name, mode in modes.items():
        for build in ((a_build, b_build) if r % 2 == 0 else (b_build, a_build)):  # the order turns
            got.setdefault((name, build), []).append(steady(build, mode))
print(f"| mode | ranks | A samples/s | B samples/s | B/A | paired B/A, min and max | runs each |")
print("|---|---|---|---|---|---|---|")
for name in modes:
    a, b = (statistics.median(got[(name, build)]) for build in (a_build, b_build))
    pairs = [y / x for x, y in zip(got[(name, a_build)], got[(name, b_build)])]
    print(f"| {name} | {n} | {a:,.0f} | {b:,.0f} | {b / a:.2f} | {min(pairs):.2f}, {max(pairs):.2f} | {repeat} |", flush=True)
