"""Every collective of the ftcc backend against gloo's on the same inputs, in one MPI job.

Every rank makes the same gloo calls in the same order whatever its own checks found (a check
that short-circuited a gloo call on one rank would hang the others).

    tools/ftcc-run -n 4 bench/training/.venv-torch/bin/python tests/torch/collectives_vs_gloo.py

The default group is ftcc; a gloo group of the same ranks is made beside it (dist.new_group on
the job's FileStore). For each dtype (float32/64, bfloat16, float16, int32/64, uint8) every rank
draws random inputs, runs the operation through both backends and compares: integers, MIN/MAX
and data movement exactly; float sums within 2(n-1) eps sum|x| and products within 2(n-1) eps
|x| relative (any summation order's rounding error bound, doubled), and AVG against gloo's SUM
divided by n (gloo has no AVG). Where gloo lacks an operation for a dtype, the reference is
computed from gloo's all_gather of the inputs. Every ftcc result must also be bitwise identical
on all ranks. Non-contiguous inputs, uneven all_to_all splits, uneven all_gather and reduce_scatter, every root of the rooted
operations, coalesced and _base variants, PREMUL_SUM (FSDP's gradient divide), asynchronous work
with futures, and bad use (a dtype, an op, a shape, a peer) are checked too. Prints one line per check; exits 1 on any failure.
"""
import sys
import warnings

import torch
import torch.distributed as dist

import ftcc_torch

torch.manual_seed(1234)
dist.init_process_group("ftcc")
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
failures = []
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.uint8]


def say(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL rank {rank}: {what}", flush=True)
    elif rank == 0:
        print(f"ok   {what}", flush=True)


def rand(dtype, shape, seed, prod=False, who=None):
    """Random inputs of rank `who` (default: this rank) for `seed`: any rank can recompute another's."""
    g = torch.Generator().manual_seed(seed * 1000 + (rank if who is None else who))
    if dtype.is_floating_point:
        t = torch.rand(shape, generator=g, dtype=torch.float64)
        t = 0.5 + 1.5 * t if prod else 2 * t - 1
        return t.to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 4 if prod else 256, shape, generator=g, dtype=torch.int64).to(dtype)
    return torch.randint(-3 if prod else -1000, 4 if prod else 1000, shape, generator=g, dtype=torch.int64).to(dtype)


def eps(dtype):
    return torch.finfo(dtype).eps if dtype.is_floating_point else 0.0


def same_everywhere(t):
    """t's bytes are the same on every rank (checked through gloo)."""
    flat = t.detach().contiguous().view(torch.uint8).reshape(-1).to(torch.int64)
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=gloo)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=gloo)
    return bool(torch.equal(lo, hi))


def close(ours, ref, dtype, op, inputs_abs_sum):
    if not dtype.is_floating_point or op in ("min", "max", "move"):
        return bool(torch.equal(ours, ref))
    a, b = ours.double(), ref.double()
    if op == "prod":
        return bool(((a - b).abs() <= 2 * (n - 1) * eps(dtype) * b.abs() + 1e-300).all())
    return bool(((a - b).abs() <= 2 * (n - 1) * eps(dtype) * inputs_abs_sum + 1e-300).all())


def abs_sum(x):
    s = x.double().abs()
    dist.all_reduce(s, group=gloo)
    return s


def gloo_or(fn, fallback):
    try:
        return fn()
    except (RuntimeError, ValueError, TypeError):
        return fallback()


def gathered(x):
    out = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(out, x, group=gloo)
    return out


def reference_reduce(x, op):
    parts = [p.double() if x.dtype.is_floating_point else p.to(torch.int64) for p in gathered(x)]
    acc = parts[0].clone()
    for p in parts[1:]:
        acc = {"sum": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum}[op](acc, p)
    return acc.to(x.dtype)


OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

for di, dtype in enumerate(DTYPES):
    name = str(dtype).replace("torch.", "")
    # all_reduce: every op, a contiguous and a transposed (non-contiguous) input, sizes 1..4099
    for oi, (opname, op) in enumerate(OPS.items()):
        for count in (1, 7, 4099):
            x = rand(dtype, (count,), di * 100 + oi * 10 + count, prod=opname == "prod")
            ours, ref = x.clone(), x.clone()
            dist.all_reduce(ours, op=op)
            ref = gloo_or(lambda: (dist.all_reduce(ref, op=op, group=gloo), ref)[1], lambda: reference_reduce(x, opname))
            ok = [close(ours, ref, dtype, opname, abs_sum(x)), same_everywhere(ours)]  # both: gloo in step
            ok = all(ok)
            say(ok, f"all_reduce {opname} {name} x{count}")
        x = rand(dtype, (6, 5), di * 7 + oi, prod=opname == "prod").t()
        ours = x.clone().t().contiguous().t()  # the same strides as x: non-contiguous
        assert not ours.is_contiguous()
        dist.all_reduce(ours, op=op)
        ref = reference_reduce(x.contiguous(), opname)
        ok = [close(ours, ref, dtype, opname, abs_sum(x)), same_everywhere(ours)]
        say(all(ok), f"all_reduce {opname} {name} non-contiguous 5x6")
    if dtype.is_floating_point:
        x = rand(dtype, (33,), di + 5)
        ours, ref = x.clone(), x.clone()
        dist.all_reduce(ours, op=dist.ReduceOp.AVG)
        dist.all_reduce(ref, group=gloo)
        say(close(ours, (ref.double() / n).to(dtype), dtype, "sum", abs_sum(x) / n + eps(dtype)),
            f"all_reduce avg {name} (gloo sum / n)")
    # async work and its future
    x = rand(dtype, (100,), di + 11)
    ours = x.clone()
    work = dist.all_reduce(ours, async_op=True)
    fut = work.get_future()
    value = fut.wait()
    ref = reference_reduce(x, "sum")
    ok = close(value[0], ref, dtype, "sum", abs_sum(x))  # (gloo's collectives on every rank, always)
    say(work.is_completed() and ok, f"all_reduce async {name}: Work and its future")
    # broadcast from every root
    for root in range(n):
        x = rand(dtype, (257,), di * 31 + root)
        ours, ref = x.clone(), x.clone()
        dist.broadcast(ours, src=root)
        dist.broadcast(ref, src=root, group=gloo)
        say(torch.equal(ours, ref), f"broadcast {name} root {root}")
    # reduce to every root (the root's result only)
    for root in range(n):
        x = rand(dtype, (65,), di * 17 + root)
        ours = x.clone()
        dist.reduce(ours, dst=root)
        ref, bound = reference_reduce(x, "sum"), abs_sum(x)  # on every rank: gloo's collectives in step
        if rank == root:
            say(close(ours, ref, dtype, "sum", bound), f"reduce sum {name} root {root}")
    # all_gather, all_gather_into_tensor, gather, scatter
    x = rand(dtype, (3, 4), di + 41)
    outs = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(outs, x)
    ref = gathered(x)
    say(all(torch.equal(a, b) for a, b in zip(outs, ref)), f"all_gather {name}")
    flat = torch.empty((n * 3, 4), dtype=dtype)
    dist.all_gather_into_tensor(flat, x)
    say(torch.equal(flat, torch.cat(ref)), f"all_gather_into_tensor {name}")
    for root in (0, n - 1):
        outs = [torch.empty_like(x) for _ in range(n)] if rank == root else None
        dist.gather(x, outs, dst=root)
        if rank == root:
            say(all(torch.equal(a, b) for a, b in zip(outs, ref)), f"gather {name} root {root}")
        parts = [rand(dtype, (5,), di * 13 + p + 100 * root) for p in range(n)]
        mine = torch.empty(5, dtype=dtype)
        dist.scatter(mine, parts if rank == root else None, src=root)
        want = torch.empty(5, dtype=dtype)
        dist.scatter(want, parts if rank == root else None, src=root, group=gloo)
        say(torch.equal(mine, want), f"scatter {name} root {root}")
    # reduce_scatter (list and tensor)
    for opname in ("sum", "max"):
        x = rand(dtype, (n * 6,), di * 3 + len(opname))
        ours = torch.empty(6, dtype=dtype)
        dist.reduce_scatter(ours, list(x.chunk(n)), op=OPS[opname])
        full = reference_reduce(x, opname)
        want = full.chunk(n)[rank]
        say(close(ours, want, dtype, opname, abs_sum(x).chunk(n)[rank]), f"reduce_scatter {opname} {name}")
        ours = torch.empty(6, dtype=dtype)
        dist.reduce_scatter_tensor(ours, x, op=OPS[opname])
        say(close(ours, want, dtype, opname, abs_sum(x).chunk(n)[rank]), f"reduce_scatter_tensor {opname} {name}")
    # uneven all_gather and reduce_scatter (as NCCL's allgatherv / reduce_scatter_v): rank r's block
    # has r + 1 rows; the reference is every rank's input recomputed here from its seed
    sizes = [p + 1 for p in range(n)]
    x = rand(dtype, (sizes[rank], 3), di + 91)
    outs = [torch.empty((s, 3), dtype=dtype) for s in sizes]
    dist.all_gather(outs, x)
    ok = all(torch.equal(o, rand(dtype, (sizes[p], 3), di + 91, who=p)) for p, o in enumerate(outs))
    say(ok, f"all_gather {name} uneven sizes {sizes}")
    for opname in ("sum", "max"):
        seed = di * 7 + 300 + len(opname)
        ins = [rand(dtype, (sizes[p],), seed * 100 + p) for p in range(n)]  # my block for rank p
        ours = torch.empty(sizes[rank], dtype=dtype)
        dist.reduce_scatter(ours, ins, op=OPS[opname])
        blocks = [rand(dtype, (sizes[rank],), seed * 100 + rank, who=q) for q in range(n)]  # every rank's for me
        wide = [b.double() if dtype.is_floating_point else b.to(torch.int64) for b in blocks]
        acc = wide[0].clone()
        for b in wide[1:]:
            acc = torch.add(acc, b) if opname == "sum" else torch.maximum(acc, b)
        bound = sum(b.double().abs() for b in blocks)
        say(close(ours, acc.to(dtype), dtype, opname, bound), f"reduce_scatter {opname} {name} uneven sizes {sizes}")
    # all_to_all_single: equal parts, then uneven splits (rank r sends (r + p) % 3 rows to p)
    x = rand(dtype, (n * 2, 3), di + 77)
    ours, ref = torch.empty_like(x), torch.empty_like(x)
    dist.all_to_all_single(ours, x)
    dist.all_to_all_single(ref, x, group=gloo)
    say(torch.equal(ours, ref), f"all_to_all_single {name}")
    send = [(rank + p) % 3 for p in range(n)]
    recv = [(p + rank) % 3 for p in range(n)]
    x = rand(dtype, (sum(send), 2), di + 78)
    ours, ref = torch.empty((sum(recv), 2), dtype=dtype), torch.empty((sum(recv), 2), dtype=dtype)
    dist.all_to_all_single(ours, x, recv, send)
    dist.all_to_all_single(ref, x, recv, send, group=gloo)
    say(torch.equal(ours, ref), f"all_to_all_single {name} uneven splits")
    ins = [rand(dtype, (4,), di * 5 + p) for p in range(n)]
    outs = [torch.empty(4, dtype=dtype) for _ in range(n)]
    refs = [torch.empty(4, dtype=dtype) for _ in range(n)]
    dist.all_to_all(outs, ins)
    dist.all_to_all(refs, ins, group=gloo)
    say(all(torch.equal(a, b) for a, b in zip(outs, refs)), f"all_to_all {name}")
    # uneven blocks (gloo's all_to_all takes equal ones only): rank p sends rank q q+1 elements
    ins = [rand(dtype, (q + 1,), di * 5 + q) for q in range(n)]
    outs = [torch.empty(rank + 1, dtype=dtype) for _ in range(n)]
    dist.all_to_all(outs, ins)
    want = [rand(dtype, (rank + 1,), di * 5 + rank, who=p) for p in range(n)]
    say(all(torch.equal(a, b) for a, b in zip(outs, want)), f"all_to_all {name} uneven blocks")
    # send/recv around the ring (isend first everywhere: no ordering deadlock)
    if n > 1:
        x = rand(dtype, (50,), di + 91)
        got = torch.empty_like(x)
        s = dist.isend(x, (rank + 1) % n)
        dist.recv(got, (rank - 1) % n)
        s.wait()
        ref = gathered(x)[(rank - 1) % n]
        say(torch.equal(got, ref), f"send/recv ring {name}")

# coalesced variants (what DDP's and FSDP's code paths call)
backend = dist.group.WORLD._get_backend(torch.device("cpu"))
ts = [rand(torch.float32, (k + 1,), 500 + k) for k in range(4)]
mine = [t.clone() for t in ts]
backend.allreduce_coalesced(mine).wait()
say(all(close(a, reference_reduce(t, "sum"), torch.float32, "sum", abs_sum(t)) for a, t in zip(mine, ts)),
    "allreduce_coalesced float32 (4 tensors, one collective)")
outs = [[torch.empty(k + 1) for k in range(len(ts))] for _ in range(n)]
with warnings.catch_warnings():  # deprecated in torch, still called by older code
    warnings.simplefilter("ignore", FutureWarning)
    dist.all_gather_coalesced(outs, ts)
say(all(torch.equal(outs[r][k], gathered(ts[k])[r]) for k in range(len(ts)) for r in range(n)),
    "all_gather_coalesced float32 (output_lists[rank][k], torch's layout)")
x = rand(torch.float32, (3, 2), 610)
flat = torch.empty((n * 3, 2)) if rank == n - 1 else None
dist.gather_single(x, flat, dst=n - 1)
want = torch.cat(gathered(x))
if rank == n - 1:
    say(torch.equal(flat, want), "gather_single (gather_into_tensor) float32 root n-1")
for factor in (0.25, 3.0):
    x = rand(torch.float32, (129,), 620)
    ours, ref = x.clone(), x.clone()
    dist.all_reduce(ours, op=dist._make_nccl_premul_sum(factor))
    dist.all_reduce(ref, group=gloo)
    ok = close(ours, ref * factor, torch.float32, "sum", abs_sum(x) * factor)
    x2 = rand(torch.float32, (n * 4,), 621)
    out = torch.empty(4)
    dist.reduce_scatter_tensor(out, x2, op=dist._make_nccl_premul_sum(factor))
    want = (reference_reduce(x2, "sum") * factor).chunk(n)[rank]
    ok2 = close(out, want, torch.float32, "sum", abs_sum(x2).chunk(n)[rank] * factor)
    say(ok and ok2, f"PREMUL_SUM x{factor}: all_reduce and reduce_scatter_tensor (FSDP's gradient divide)")
with dist._coalescing_manager(async_ops=True) as cm:
    outs = [torch.empty(n * t.numel()) for t in ts]
    for o, t in zip(outs, ts):
        dist.all_gather_into_tensor(o, t)
cm.wait()
say(all(torch.equal(o, torch.cat(gathered(t))) for o, t in zip(outs, ts)), "all_gather_into_tensor coalesced")
dist.barrier()
say(True, "barrier")

# Results of 1 MiB and more come from reused blocks (pytorch/csrc/host_block_pool.hpp): each call
# twice over, with other data the second time, so a block handed out again with part of an older
# result left in it shows up; integer-valued floats, so every sum is exact whatever the order.
big = n * ((1 << 18) // n + 3)  # 1 MiB of float32 and a little more, a multiple of n
for rep in range(2):
    x = torch.arange(big, dtype=torch.float32).remainder(97 + rep) + rank + rep
    want = torch.arange(big, dtype=torch.float32).remainder(97 + rep) * n + n * (n - 1) / 2 + n * rep
    y = x.clone()
    dist.all_reduce(y)
    say(torch.equal(y, want), f"all_reduce of {big * 4} B (a pooled result block), pass {rep + 1}")
    out = torch.empty(big // n)
    dist.reduce_scatter_tensor(out, x)
    say(torch.equal(out, want.chunk(n)[rank]), f"reduce_scatter_tensor of {big * 4} B, pass {rep + 1}")
    flat = torch.empty(n * big)
    dist.all_gather_into_tensor(flat, x)
    say(all(torch.equal(c, x - rank + p) for p, c in enumerate(flat.chunk(n))), f"all_gather_into_tensor of {n} x {big * 4} B, pass {rep + 1}")
    r = x.clone()
    dist.reduce(r, dst=rep % n)
    say(rank != rep % n or torch.equal(r, want), f"reduce of {big * 4} B to rank {rep % n}, pass {rep + 1}")
# Each rank keeps at most 8 free blocks (512 MiB); a result still held for the other survivors
# (op_task.hpp) is not free yet, so only the job as a whole must show one kept.
blocks, held = ftcc_torch._C.host_block_pool_state()
say(blocks <= 8 and held <= 512 << 20, f"result blocks kept for reuse on rank {rank}: {blocks} ({held} B; at most 8 and 512 MiB)")
kept = torch.tensor([blocks])
dist.all_reduce(kept, group=gloo)
say(int(kept) >= 1, f"result blocks kept for reuse in the job: {int(kept)} (at least 1)")

# bad use: one clear error each, and the group still works afterwards
def refuses(fn, kinds, words, what):
    try:
        fn()
    except kinds as e:
        say(all(w in str(e) for w in words), f"refused: {what}: {str(e).splitlines()[0][:150]}")
        return
    say(False, f"not refused: {what}")


# int8, int16 and bool, and the bitwise reductions, against the rule applied to the gathered inputs
# (gathered through gloo as int64, which gloo moves for every width). Bool: SUM/MAX = or, PRODUCT/MIN = and.
g = torch.Generator().manual_seed(1234 + rank)
bitwise = {dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
           dist.ReduceOp.BXOR: torch.bitwise_xor, dist.ReduceOp.MIN: torch.minimum, dist.ReduceOp.MAX: torch.maximum}
for dtype, lo, hi in ((torch.int8, -128, 128), (torch.int16, -32768, 32768), (torch.int32, -2**31, 2**31),
                      (torch.uint8, 0, 256), (torch.bool, 0, 2)):
    for op, fn in list(bitwise.items()) + ([(dist.ReduceOp.SUM, torch.logical_or), (dist.ReduceOp.PRODUCT, torch.logical_and)]
                                           if dtype == torch.bool else []):
        x = torch.randint(lo, hi, (257,), generator=g, dtype=torch.int64).to(dtype)
        parts = gathered(x.to(torch.int64))
        want = parts[0].to(dtype)
        for q in parts[1:]:
            want = fn(want, q.to(dtype))
        got = x.clone()
        dist.all_reduce(got, op=op)
        say(got.dtype == dtype and torch.equal(got, want.to(dtype)), f"all_reduce {op} of {dtype}")
for dtype in (torch.int8, torch.int16):
    x = torch.randint(-20, 20, (33,), generator=g, dtype=torch.int64).to(dtype)
    want = sum(gathered(x.to(torch.int64))).to(dtype)  # wraps as the int type does
    got = x.clone()
    dist.all_reduce(got)
    say(torch.equal(got, want), f"all_reduce SUM of {dtype}")

refuses(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.uint16)), (TypeError, RuntimeError),
        ["ftcc", "UInt16", "not supported", "float32"], "uint16 tensors")
refuses(lambda: dist.all_reduce(torch.zeros(3), op=dist.ReduceOp.BAND), (ValueError, RuntimeError),
        ["ftcc", "BAND", "Float", "integer or bool"], "ReduceOp.BAND of float32")
refuses(lambda: dist.reduce(torch.zeros(3), dst=0, op=dist._make_nccl_premul_sum(2.0)), (ValueError, RuntimeError),
        ["ftcc", "PREMUL_SUM", "all_reduce"], "PREMUL_SUM in reduce")
refuses(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int64), op=dist.ReduceOp.AVG), (ValueError, RuntimeError),
        ["ftcc", "AVG"], "AVG of int64")
refuses(lambda: dist.all_gather([torch.zeros(2)] * (n + 1), torch.zeros(2)), (ValueError, RuntimeError),
        ["ftcc", "allgather", "tensors"], "all_gather with a list of n+1 tensors")
refuses(lambda: dist.all_gather_into_tensor(torch.zeros(n * 2 + 1), torch.zeros(2)), (ValueError, RuntimeError),
        ["ftcc", "elements"], "all_gather_into_tensor of the wrong size")
refuses(lambda: dist.all_gather([torch.zeros(p + 2) for p in range(n)], torch.zeros(1)), (ValueError, RuntimeError),
        ["ftcc", "allgather", f"output[{rank}]", "must match rank r's tensor"],
        "uneven all_gather whose entry for this rank is not its tensor's size")
refuses(lambda: dist.reduce_scatter(torch.zeros(1), [torch.zeros(p + 2) for p in range(n)]), (ValueError, RuntimeError),
        ["ftcc", "reduce_scatter", f"input[{rank}]", "must match rank r's tensor"],
        "uneven reduce_scatter whose entry for this rank is not its output's size")
refuses(lambda: dist.send(torch.zeros(2), (rank + 1) % n, tag=1 << 20), (ValueError, RuntimeError), ["ftcc", "tag"],
        "a send tag past ftcc's range")
refuses(lambda: dist.recv(torch.zeros(2)), (ValueError, RuntimeError), ["ftcc", "any source"], "recv from any source")
refuses(lambda: dist.shrink_group([0]) if rank != 0 else dist.shrink_group([n - 1]), (ValueError, RuntimeError),
        ["ftcc", "no rank of this group failed"], "shrink_group when no rank failed")
x = torch.full((4,), float(rank + 1))
dist.all_reduce(x)
say(torch.equal(x, torch.full((4,), n * (n + 1) / 2)), "the group still works after the refusals")
if torch.cuda.is_available():
    x = torch.full((1000,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    say(bool((x.cpu() == n * (n + 1) / 2).all()), "all_reduce of a CUDA tensor (host staging)")
elif rank == 0:
    print("skip CUDA tensors: no GPU here (torch cannot make a CUDA tensor)", flush=True)

total = torch.tensor([len(failures)])
dist.all_reduce(total, group=gloo)
if rank == 0:
    print(f"collectives_vs_gloo: {n} ranks: {'all checks passed' if int(total) == 0 else f'{int(total)} FAILED'}",
          flush=True)
dist.destroy_process_group()
sys.exit(1 if int(total) else 0)
