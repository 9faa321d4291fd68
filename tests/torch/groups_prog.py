"""Sub-groups on ftcc, for tests/torch/groups.py: new_group, split_group and a 2 x 2 DeviceMesh on
4 ranks, their collectives checked against the values they must give, then STEPS steps of
all_reduce on the mesh's two dimensions and the default group.

The mesh's "replicate" dimension is declared a replica group (ftcc_torch.set_transparent(True,
group)); its "shard" dimension stays explicit, as every sub-group is by default. A rank lost
mid-run: the default group and the replica group go on transparently; a call on the shard group
that lost a member raises RankFailure, which this program catches and prints ("shard group:
RankFailure [...]"), and then it goes on with the default group alone.
Every rank prints "RESULT {json}" at the end.
"""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import ftcc_torch

dist.init_process_group("ftcc")
r, n = dist.get_rank(), dist.get_world_size()
checks = {}
g01, g23 = dist.new_group([0, 1]), dist.new_group([2, 3])
t = torch.tensor([float(r + 1)])
dist.all_reduce(t, group=g01 if r < 2 else g23)
checks["new_group"] = t.item() == (3.0 if r < 2 else 7.0) and dist.get_rank(g01 if r < 2 else g23) == r % 2
sub = dist.split_group(split_ranks=[[0, 2], [1, 3]])
u = torch.tensor([float(r + 1)])
dist.all_reduce(u, group=sub)
checks["split_group"] = u.item() == (4.0 if r % 2 == 0 else 6.0) and dist.get_world_size(sub) == 2
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
rep, shard = mesh.get_group("replicate"), mesh.get_group("shard")
x = torch.tensor([float(r + 1)])
dist.all_reduce(x, group=shard)
y = x.clone()
dist.all_reduce(y, group=rep)
checks["mesh"] = y.item() == 10.0 and x.item() == (3.0 if r < 2 else 7.0)
g = [torch.zeros(1, dtype=torch.int64) for _ in range(2)]
dist.all_gather(g, torch.tensor([r], dtype=torch.int64), group=rep)
checks["mesh_replicate_members"] = [int(v) for v in g] == [r % 2, r % 2 + 2]
ftcc_torch.set_transparent(True, rep)

shard_failure = None
if int(os.environ.get("STEPS", "0")):
    print(f"rank {r}: loop started", flush=True)  # what tests/torch/groups.py waits for before its kill
for step in range(int(os.environ.get("STEPS", "0"))):
    if shard_failure is None:
        try:
            a = torch.tensor([1.0])
            dist.all_reduce(a, group=shard)
        except ftcc_torch.RankFailure as e:
            shard_failure = e.failed_ranks
            print(f"rank {r}: shard group: RankFailure {e.failed_ranks} at step {step}", flush=True)
    b = torch.tensor([1.0])
    dist.all_reduce(b, group=rep)
    c = torch.tensor([1.0])
    dist.all_reduce(c)
    time.sleep(0.01)
if int(os.environ.get("STEPS", "0")):
    checks["default_group_counts_survivors"] = c.item() == dist.get_world_size()
    checks["replica_group_counts_survivors"] = b.item() == dist.get_world_size(rep)
print("RESULT " + json.dumps({"orig": r, "size": dist.get_world_size(), "rep_size": dist.get_world_size(rep),
                              "shard_failure": shard_failure, "checks": checks}), flush=True)
dist.destroy_process_group()
