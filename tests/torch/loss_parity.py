"""ftcc's losses against PyTorch's on the same inputs (forward value and gradient).

    loss_parity.py PROG    PROG: tests/torch/loss_parity_prog (built by meson)

Each case makes float32 predictions and targets here, runs PROG on them (ftcc, CPU and, where a GPU
is present, CUDA) and compares with torch.nn.functional.cross_entropy (targets as class
probabilities) or mse_loss, computed by torch in float32 and in float64. Accepted: the loss
within 1e-5 relative of torch's float32 value, and every gradient element within 1e-5 of the
largest gradient element (absolute 1e-5 of the gradient's scale); a wrong formula misses both by
orders of magnitude. The error against the float64 result is printed too, as a measure of our own
rounding. Exits 1 naming the failed cases."""
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

prog = sys.argv[1]
gen = torch.Generator().manual_seed(20261203)


def randn(rows, cols, scale=1.0):
    return torch.randn(rows, cols, generator=gen) * scale


def one_hot(rows, cols):
    labels = torch.randint(0, cols, (rows,), generator=gen)
    return F.one_hot(labels, cols).float()


def soft(rows, cols):
    return torch.softmax(randn(rows, cols, 2.0), dim=1)


def smoothed(rows, cols, eps=0.1):
    return one_hot(rows, cols) * (1 - eps) + eps / cols


# name, loss, logits, targets
cases = [
    ("digits-like 64x10 one-hot", "cross-entropy", randn(64, 10), one_hot(64, 10)),
    ("one row, one class", "cross-entropy", randn(1, 1), torch.ones(1, 1)),
    ("7x3 soft labels", "cross-entropy", randn(7, 3), soft(7, 3)),
    ("33x33 label smoothing 0.1", "cross-entropy", randn(33, 33, 3.0), smoothed(33, 33)),
    ("256x1000 logits x10", "cross-entropy", randn(256, 1000, 10.0), one_hot(256, 1000)),
    ("16x10 logits x1000 (stability)", "cross-entropy", randn(16, 10, 1000.0), one_hot(16, 10)),
    ("5x4 logits near -1e4", "cross-entropy", randn(5, 4) - 1e4, soft(5, 4)),
    ("mse 64x10", "mse", randn(64, 10), randn(64, 10)),
    ("mse 1x1", "mse", randn(1, 1), randn(1, 1)),
]


def torch_loss(kind, x, t):
    x = x.clone().requires_grad_(True)
    loss = F.cross_entropy(x, t) if kind == "cross-entropy" else F.mse_loss(x, t)
    loss.backward()
    return loss.detach(), x.grad


def run_ftcc(kind, device, x, t, tmp):
    src, dst = os.path.join(tmp, "in.bin"), os.path.join(tmp, "out.bin")
    with open(src, "wb") as f:
        f.write(struct.pack("<qq", *x.shape))
        f.write(x.contiguous().numpy().astype("<f4").tobytes())
        f.write(t.contiguous().numpy().astype("<f4").tobytes())
    r = subprocess.run([prog, kind, device, src, dst], capture_output=True, text=True)
    if r.returncode == 77:
        return None
    if r.returncode != 0:
        raise RuntimeError(f"{prog} exited {r.returncode}: {r.stderr.strip()}")
    raw = open(dst, "rb").read()
    loss = struct.unpack("<f", raw[:4])[0]
    grad = torch.frombuffer(bytearray(raw[4:]), dtype=torch.float32).reshape(x.shape)
    return loss, grad


failed = []
with tempfile.TemporaryDirectory() as tmp:
    for name, kind, x, t in cases:
        ref_loss, ref_grad = torch_loss(kind, x, t)
        exact_loss, exact_grad = torch_loss(kind, x.double(), t.double())
        for device in ("cpu", "cuda"):
            got = run_ftcc(kind, device, x, t, tmp)
            if got is None:
                continue
            loss, grad = got
            scale = max(ref_grad.abs().max().item(), 1e-30)
            loss_err = abs(loss - ref_loss.item()) / max(abs(ref_loss.item()), 1e-30)
            grad_err = (grad - ref_grad).abs().max().item() / scale
            exact_loss_err = abs(loss - exact_loss.item()) / max(abs(exact_loss.item()), 1e-30)
            exact_grad_err = (grad.double() - exact_grad).abs().max().item() / scale
            ok = loss_err <= 1e-5 and grad_err <= 1e-5 and torch.isfinite(grad).all().item()
            print(f"{'ok  ' if ok else 'FAIL'} {name} [{device}]: loss {loss:.7g} vs torch {ref_loss.item():.7g} "
                  f"(rel {loss_err:.1e}; vs float64 {exact_loss_err:.1e}), gradient max diff {grad_err:.1e} "
                  f"of its scale (vs float64 {exact_grad_err:.1e})")
            if not ok:
                failed.append(f"{name} [{device}]")
if failed:
    print("loss_parity: failed: " + ", ".join(failed))
    sys.exit(1)
print(f"loss_parity: {len(cases)} cases match torch {torch.__version__}")
