#!/usr/bin/env python3
"""Starting a run from files, end to end (tools/ftcc-run + ftcc-train, real processes):

  * --init-weights W.safetensors: the parameters of W (by name; other tensors, such as a
    checkpoint's optimizer state, are ignored), fresh optimizer state, step 0. Checked: the same
    weights give the same bits in dp and tp on 1 rank, in pp on 1 and 2 ranks (the model-parallel
    driver scatters them to the stages), dp's loss to rounding in pp and tp on 2 ranks, and not the
    bits of a run from the seed; a file of
    another model, a file that is not safetensors, and --init-weights with --resume are refused
    with exit 2 and one line naming the file and the problem.
  * --resume of a folder that does not exist: exit 2 naming the folder, which is not created.

Usage: start_files_e2e.py BUILD_DIR
"""
import json, os, subprocess, sys, tempfile

build = sys.argv[1]
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
run_cmd = os.path.join(root, "tools", "ftcc-run")
train = os.path.join(build, "tools", "ftcc-train")
FT_OPT = [] if os.environ.get("FTCC_TEST_HAVE_ULFM", "1") == "1" else ["--no-fault-tolerance"]
failures = []


def run(n, *args, expect_rc=0):
    cmd = [run_cmd, "-n", str(n), train, "--quiet", *FT_OPT, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace", timeout=120)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: {' '.join(cmd)}\n  exit {p.returncode}, expected {expect_rc}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("FTCC_SUMMARY ")]
    return (json.loads(lines[0][len("FTCC_SUMMARY "):]) if lines else None), p


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def one_error_line(p):
    ours = [l for l in p.stderr.splitlines() if l.startswith("ftcc-train:")]
    return ours[0] if len(ours) == 1 else "\n".join(ours) or p.stderr[-400:]


model = ["--dataset", "digits", "--layers", "64,32,16,10", "--lr", "0.05", "--batch", "64"]
with tempfile.TemporaryDirectory() as d:
    ck = os.path.join(d, "ck")
    run(1, *model, "--steps", "30", "--checkpoint-dir", ck, "--checkpoint-every", "30")
    weights = os.path.join(ck, "ckpt-0000000030.safetensors")  # parameters + SGD state: the state is ignored
    fresh, _ = run(1, *model, "--steps", "10")
    dp, p = run(1, *model, "--steps", "10", "--init-weights", weights)
    check("initial weights from" in p.stderr, "dp says where its weights came from")
    check(dp["param_sha256"] != fresh["param_sha256"] and dp["final_loss"] < fresh["final_loss"],
          f"dp from trained weights: loss {dp['final_loss']:.4f} < {fresh['final_loss']:.4f} from the seed, other bits")
    # pp sums micro-batch gradients (another order than dp): the same bits for any rank count, and
    # dp's loss to rounding.
    pp1, _ = run(1, *model, "--steps", "10", "--init-weights", weights, "--parallel", "pp")
    pp, _ = run(2, *model, "--steps", "10", "--init-weights", weights, "--parallel", "pp")
    check(pp["param_sha256"] == pp1["param_sha256"], "pp on 2 ranks from the same weights: the same SHA-256 as pp on 1")
    check(abs(pp["final_loss"] - dp["final_loss"]) / dp["final_loss"] < 1e-3,
          f"pp on 2 ranks from the same weights: final loss {pp['final_loss']:.6f} vs dp {dp['final_loss']:.6f}")
    tp, _ = run(1, *model, "--steps", "10", "--init-weights", weights, "--parallel", "tp")
    check(tp["param_sha256"] == dp["param_sha256"], "tp on 1 rank from the same weights: the same SHA-256 as dp on 1")
    tp2, _ = run(2, *model, "--steps", "10", "--init-weights", weights, "--parallel", "tp")
    check(abs(tp2["final_loss"] - dp["final_loss"]) / dp["final_loss"] < 1e-3,
          f"tp on 2 ranks from the same weights: final loss {tp2['final_loss']:.6f} vs {dp['final_loss']:.6f}")

    # Refusals: exit 2, one line naming the file and what is wrong.
    other = os.path.join(d, "other")
    run(1, "--dataset", "digits", "--layers", "64,48,16,10", "--steps", "1", "--checkpoint-dir", other, "--checkpoint-every", "1")
    for what, args, needle in [
        ("weights of another model", ["--init-weights", os.path.join(other, "ckpt-0000000001.safetensors")],
         "tensor '0.weight': shape [48, 64] in the file, [32, 64] expected"),
        ("a file that is not safetensors", ["--init-weights", os.path.join(ck, "ckpt-0000000030.json")], "--init-weights '"),
        ("a file that does not exist", ["--init-weights", os.path.join(d, "nope.safetensors")], "nope.safetensors"),
        ("with --resume", ["--init-weights", weights, "--resume", ck], "--init-weights and --resume exclude each other"),
    ]:
        for par, n in (("dp", 2), ("pp", 2)):
            _, p = run(n, *model, "--steps", "5", "--parallel", par, *args, expect_rc=2)
            line = one_error_line(p)
            check(needle in line and "\n" not in line, f"{par}: {what}: exit 2, one line: {line[:220]}")

    missing = os.path.join(d, "no-such-run")
    for par in ("dp", "tp"):
        _, p = run(2, *model, "--steps", "5", "--parallel", par, "--resume", missing, expect_rc=2)
        line = one_error_line(p)
        check(f"--resume '{missing}': no such folder" in line and not os.path.exists(missing),
              f"{par}: --resume of a missing folder: exit 2, not created: {line[:200]}")

sys.exit(1 if failures else 0)
