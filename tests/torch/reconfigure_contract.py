"""torch's reconfigure contract on backend ftcc: every scenario of torch 2.15's own contract tests.

Origin: the scenarios, their names and what each checks are those of PyTorch's
test/distributed/test_c10d_fault_tolerance.py (class AbstractFaultToleranceTest, run there for
gloo on 3 processes). That file's harness spawns its processes outside any MPI job; ftcc's
processes are an MPI job's, so this file is the harness adapted: it runs inside
`tools/ftcc-run -n 3`, every rank runs every test in the same order, and each test makes its
process group with a FileStore of its own in the job folder. The checks are written here again,
scenario by scenario; none is weakened.

    tools/ftcc-run -n 3 bench/training/.venv-torch/bin/python tests/torch/reconfigure_contract.py

Each rank prints one line, `CONTRACT {"rank": r, "passed": [...], "failed": [...], "skipped":
[...]}`, and exits 1 when a test failed (tests/torch/reconfigure.py reads the lines).
test_reconfigure_after_timeout is skipped, as torch skips it for every backend but nccl2 (it
checks nccl2's own timeout-triggered revoke).
"""
import json
import os
import sys
import unittest
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import ftcc_torch  # noqa: F401  (registers the backend)

# The MPI job numbers the processes (what ftcc-run's ranks are: ftcc_torch sets RANK from it in
# init_process_group's env:// path, which these tests do not take: they pass a store).
RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])
WORLD = int(os.environ["OMPI_COMM_WORLD_SIZE"])
STORE_DIR = os.path.join(os.environ.get("FTCC_JOB_DIR", "/tmp"), "contract-stores")


class ReconfigureContract(unittest.TestCase):
    def setUp(self):
        os.makedirs(STORE_DIR, exist_ok=True)
        self.rank = RANK
        self.world_size = WORLD
        self.store_file = os.path.join(STORE_DIR, self.id().rsplit(".", 1)[-1])

    def tearDown(self):
        if dist.is_initialized():
            dist.destroy_process_group()

    # ---- the harness's helpers (the same steps as torch's) ---------------------------------
    def init_pg(self):
        self.store = dist.FileStore(self.store_file, self.world_size)
        self.store.set_timeout(timedelta(seconds=60))
        dist.init_process_group("ftcc", world_size=self.world_size, rank=self.rank, store=self.store,
                                timeout=timedelta(seconds=30), enable_reconfigure=True)
        self.pg = c10d._get_default_group()
        self.backend = dist.get_backend_impl(self.pg, torch.device("cpu"))
        self.assertTrue(dist._supports_reconfigure())
        self.assertTrue(self.backend.supports_reconfigure)

    def exchange_handles(self, key):
        """Every rank's handle through the store, in rank order."""
        self.store.set(f"{key}/{self.rank}", dist._get_reconfigure_handle())
        return [self.store.get(f"{key}/{r}").decode() for r in range(self.world_size)]

    def store_barrier(self, key):
        self.store.set(f"{key}/{self.rank}", "here")
        for r in range(self.world_size):
            self.store.get(f"{key}/{r}")

    def reconfigure(self, uuid, handles):
        dist._reconfigure(uuid, handles, timeout=timedelta(seconds=30)).wait()

    def reconfigured_pg(self, key, uuid):
        """A group reconfigured to every rank; the handles exchanged after it."""
        self.init_pg()
        self.reconfigure(uuid, self.exchange_handles(f"{key}/before"))
        self.assertEqual(dist.get_world_size(), self.world_size)
        self.assertEqual(dist.get_rank(), self.rank)
        return self.exchange_handles(f"{key}/after")

    def assert_filled(self, t, value):
        self.assertTrue(torch.equal(t, torch.full((4,), float(value))), f"{t.tolist()}, expected 4 x {value}")

    def check_sum(self, expected):
        t = torch.full((4,), dist.get_rank() + 1.0)
        dist.all_reduce(t)
        self.assert_filled(t, expected)

    # ---- the scenarios -----------------------------------------------------------------------
    def test_reconfigure_basic(self):
        self.reconfigured_pg("basic", 100)

    def test_reconfigure_then_all_reduce(self):
        self.reconfigured_pg("all_reduce", 200)
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    def test_reconfigure_then_send_recv(self):
        self.reconfigured_pg("send_recv", 300)
        me = dist.get_rank()
        right, left = (me + 1) % self.world_size, (me - 1) % self.world_size
        out, into = torch.full((4,), me + 1.0), torch.zeros(4)
        # Even ranks send first, odd ranks receive first (the order the contract uses).
        if me % 2 == 0:
            works = [self.backend.send([out], right, 0), self.backend.recv([into], left, 0)]
        else:
            works = [self.backend.recv([into], left, 0), self.backend.send([out], right, 0)]
        for w in works:
            w.wait()
        self.assert_filled(into, left + 1.0)

    def test_shrink_exclude_last_rank(self):
        handles = self.reconfigured_pg("shrink_last", 400)
        last = self.world_size - 1
        if self.rank != last:
            self.reconfigure(401, handles[:last])
            self.assertEqual(dist.get_world_size(), self.world_size - 1)
            self.assertEqual(dist.get_rank(), self.rank)
            self.check_sum((self.world_size - 1) * self.world_size // 2)
            t = torch.full((4,), 42.0) if dist.get_rank() == 0 else torch.zeros(4)
            dist.broadcast(t, group_src=0)
            self.assert_filled(t, 42.0)
        self.store_barrier("shrink_last/done")

    def test_shrink_exclude_middle_rank(self):
        handles = self.reconfigured_pg("shrink_middle", 500)
        middle = self.world_size // 2
        if self.rank != middle:
            self.reconfigure(501, [h for r, h in enumerate(handles) if r != middle])
            self.assertEqual(dist.get_world_size(), self.world_size - 1)
            self.assertEqual(dist.get_rank(), self.rank - (1 if self.rank > middle else 0))
            self.check_sum((self.world_size - 1) * self.world_size // 2)
        self.store_barrier("shrink_middle/done")

    def test_reconfigure_scale_down_up(self):
        self.init_pg()
        # Alone first: disjoint groups, one uuid each.
        self.reconfigure(600 + self.rank, [dist._get_reconfigure_handle()])
        self.assertEqual((dist.get_world_size(), dist.get_rank()), (1, 0))
        self.reconfigure(603, self.exchange_handles("scale_down_up"))
        self.assertEqual((dist.get_world_size(), dist.get_rank()), (self.world_size, self.rank))
        self.reconfigure(604 + self.rank, [dist._get_reconfigure_handle()])
        self.assertEqual((dist.get_world_size(), dist.get_rank()), (1, 0))
        self.store_barrier("scale_down_up/done")

    def test_reconfigure_single_to_all(self):
        self.init_pg()
        self.reconfigure(700 + self.rank, [dist._get_reconfigure_handle()])
        self.reconfigure(703, self.exchange_handles("single_to_all"))
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    def test_reconfigure_identity(self):
        self.reconfigured_pg("identity", 800)
        self.reconfigure(801, self.exchange_handles("identity/again"))
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    def test_reconfigure_late_join(self):
        self.init_pg()
        handles = self.exchange_handles("late_join/first")
        early = self.world_size // 2
        if self.rank < early:
            self.reconfigure(900, handles[:early])
        self.reconfigure(901, self.exchange_handles("late_join/all"))
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    def test_reconfigure_merge_split(self):
        self.init_pg()
        handles = self.exchange_handles("merge_split/first")
        half = self.world_size // 2
        if self.rank < half:
            self.reconfigure(1000, handles[:half])
        else:
            self.reconfigure(1001, handles[half:])
        self.reconfigure(1002, self.exchange_handles("merge_split/all"))
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    def test_reconfigure_after_abort(self):
        self.reconfigured_pg("abort", 1200)
        self.backend.abort()
        from torch._C._distributed_c10d import ErrorType
        # Not nccl2: an abort is no error of the backend's own.
        self.assertEqual(self.backend.get_error(), ErrorType.SUCCESS)
        self.reconfigure(1201, self.exchange_handles("abort/recover"))
        self.check_sum(self.world_size * (self.world_size + 1) // 2)

    @unittest.skip("nccl2's timeout-triggered revoke: torch runs it for nccl2 only")
    def test_reconfigure_after_timeout(self):
        pass

    def test_reconfigure_rejects_reused_uuid(self):
        self.init_pg()
        uuid = 1100 + self.rank
        self.reconfigure(uuid, [dist._get_reconfigure_handle()])
        with self.assertRaisesRegex(RuntimeError, "already used"):
            self.reconfigure(uuid, [dist._get_reconfigure_handle()])


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(ReconfigureContract)
    names = sorted(t.id().rsplit(".", 1)[-1] for t in suite)  # (a suite lets go of its tests as they run)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1 if RANK == 0 else 0).run(suite)
    bad = sorted({t.id().rsplit(".", 1)[-1] for t, _ in result.failures + result.errors})
    skipped = sorted(t.id().rsplit(".", 1)[-1] for t, _ in result.skipped)
    passed = [n for n in names if n not in bad and n not in skipped]
    print("CONTRACT " + json.dumps({"rank": RANK, "passed": passed, "failed": bad, "skipped": skipped}), flush=True)
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
