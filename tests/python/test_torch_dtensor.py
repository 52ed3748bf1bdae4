#!/usr/bin/python3
"""DTensor on the collective backend, through DTensor's own test machinery.

Run as the test (meson suite 'python'), once per torch 2.x:

    /usr/bin/python3 tests/python/test_torch_dtensor.py [--python PY] [-v]

torch ships the base classes of its DTensor tests (torch/testing/_internal/distributed/
_tensor/common_dtensor.py), though not the tests themselves (they live in PyTorch's
source tree).  CollectiveDTensorTest is a subclass of DTensorContinuousTestBase that names
the backend "collective": four ranks are spawned once (multiprocessing "spawn"; each
imports this file, and so collective.torch) and join through a FileStore, and each test
below runs on all of them.  The op checks use the machinery DTensor's own op tests use:
DTensorConverter runs the op on every sharding of its arguments over the mesh (Shard of
each dimension, Replicate) and compares the full result with the op on plain tensors;
_test_op_on_dtensor does the same for a DTensor given.  Exit 0 when every test passed,
1 otherwise, 77 (skipped) where this torch has no DTensor test base (1.13).
"""
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
try:  # torch's test helpers import expecttest; a stand-in where it is not installed
    import expecttest  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "torch_suite"))

try:
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                          distribute_tensor)
    from torch.testing._internal.distributed._tensor.common_dtensor import (
        DTensorContinuousTestBase)
except ImportError as e:  # torch 1.13, or no torch
    BASE_MISSING = str(e)
    DTensorContinuousTestBase = unittest.TestCase
else:
    BASE_MISSING = None
    import collective.torch  # noqa: F401 - registers "collective" (in the spawned ranks too)


class CollectiveDTensorTest(DTensorContinuousTestBase):
    world_size = 4

    @classmethod
    def backend_str(cls):
        return "collective"

    @classmethod
    def device_type(cls):
        return "cpu"

    def mesh(self, shape=None):
        from torch.distributed.device_mesh import init_device_mesh

        return init_device_mesh("cpu", shape or (self.world_size,))

    def test_backend_is_collective(self):
        self.assertEqual(dist.get_backend(), "collective")

    def test_distribute_and_full_tensor(self):
        mesh = self.mesh()
        torch.manual_seed(0)
        full = torch.randn(8, 6)
        for placement in (Shard(0), Shard(1), Replicate()):
            d = distribute_tensor(full, mesh, [placement])
            self.assertEqual(d.full_tensor(), full)

    def test_redistribute(self):
        mesh = self.mesh()
        torch.manual_seed(1)
        full = torch.randn(12, 8)
        shardings = [Shard(0), Shard(1), Replicate()]
        for a in shardings:
            for b in shardings:
                d = distribute_tensor(full, mesh, [a]).redistribute(mesh, [b])
                self.assertEqual(d.placements, (b,))
                self.assertEqual(d.full_tensor(), full)
        # Partial -> Replicate is an all_reduce, Partial -> Shard a reduce_scatter
        local = torch.full((4, 4), float(self.rank + 1))
        p = DTensor.from_local(local, mesh, [Partial()])
        total = float(sum(r + 1 for r in range(self.world_size)))
        self.assertEqual(p.redistribute(mesh, [Replicate()]).to_local(),
                         torch.full((4, 4), total))
        self.assertEqual(p.redistribute(mesh, [Shard(0)]).full_tensor(),
                         torch.full((4, 4), total))

    def test_ops_on_every_sharding(self):
        mesh = self.mesh()
        torch.manual_seed(2)
        a, b = torch.randn(8, 12), torch.randn(12, 4)
        self._test_op(mesh, torch.mm, a, b)
        self._test_op(mesh, torch.add, a, torch.randn(8, 12))
        self._test_op(mesh, torch.sum, a)
        self._test_op(mesh, lambda x: torch.softmax(x, dim=-1), a)
        self._test_op(mesh, torch.nn.functional.linear, a, torch.randn(5, 12))

    def test_op_on_a_given_dtensor(self):
        mesh = self.mesh()
        torch.manual_seed(3)
        d = distribute_tensor(torch.randn(8, 8), mesh, [Shard(0)])
        self._test_op_on_dtensor(torch.matmul, d, d)
        self._test_op_on_dtensor(lambda x: x.mean(dim=0), d)

    def test_backward_through_shardings(self):
        mesh = self.mesh()
        torch.manual_seed(4)
        x, w = torch.randn(8, 6), torch.randn(6, 3)
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
        (dx @ dw).sum().backward()
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        (xr @ wr).sum().backward()
        self.assertEqual(dx.grad.full_tensor(), xr.grad)
        self.assertEqual(dw.grad.full_tensor(), wr.grad)

    def test_two_dim_mesh(self):
        mesh = self.mesh((2, 2))
        torch.manual_seed(5)
        full = torch.randn(8, 8)
        for placements in ([Shard(0), Shard(1)], [Replicate(), Shard(0)],
                           [Shard(1), Replicate()]):
            d = distribute_tensor(full, mesh, placements)
            self.assertEqual(d.full_tensor(), full)
            r = d.redistribute(mesh, [Replicate(), Replicate()])
            self.assertEqual(r.to_local(), full)
        d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        self._test_op_on_dtensor(torch.matmul, d, d)  # (DTensorConverter is for 1-D meshes)


def main():
    sys.path.insert(0, HERE)
    from torch_python import reexec

    argv = reexec(sys.argv)
    if BASE_MISSING:
        print(f"SKIP: this torch has no DTensor test base ({BASE_MISSING})")
        return 77
    os.environ.setdefault("COLL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    verbosity = 2 if "-v" in argv else 1
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(CollectiveDTensorTest)
    result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    print(f"torch {torch.__version__}: {result.testsRun} DTensor tests, "
          f"{len(result.failures) + len(result.errors)} failed, {len(result.skipped)} skipped")
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
