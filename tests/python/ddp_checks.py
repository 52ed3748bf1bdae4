"""DDP on the collective backend against DDP on Gloo, in one process per rank.

Imported by test_torch_backend.py (N = 2 and N = 4) after the default process group
(backend "collective") is up.  Each check builds the same small MLP twice from one seed,
wraps one copy in DistributedDataParallel over the collective group and the other over a
Gloo group of the same ranks, trains both for a few steps on the same per-rank data and
compares every parameter and buffer (plain, find_unused_parameters, broadcast_buffers
off, two comm hooks, tiny buckets, static_graph with bucket views, uneven inputs under
Join): the norm-wise relative difference must stay within the tolerance (1e-6, and 5e-3
with the fp16 compression hook, whose fp16 sums may round in another order).
"""
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6


class MLP(nn.Module):
    """Linear-BatchNorm-ReLU-Linear, plus a branch that only some steps use."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 4)
        self.side = nn.Linear(32, 4)

    def forward(self, x, use_side=False):
        h = torch.relu(self.bn(self.fc1(x)))
        y = self.fc2(h)
        if use_side:
            y = y + self.side(h)
        return y


def rel_diff(a, b):
    den = b.double().norm().item()
    num = (a.double() - b.double()).norm().item()
    return num / den if den else num


def train(model, rank, steps, branchy, uneven=False):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if uneven:
        # Rank r has r more batches than rank 0; the ranks that run out join early.
        with Join([model]):
            train_steps(model, opt, rank, steps + rank, branchy)
    else:
        train_steps(model, opt, rank, steps, branchy)


def train_steps(model, opt, rank, steps, branchy):
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * rank + step)
        x = torch.randn(8, 16, generator=g)
        target = torch.randn(8, 4, generator=g)
        # With find_unused_parameters, the side branch is left out on odd steps.
        out = model(x, use_side=(step % 2 == 0) if branchy else True)
        loss = ((out - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def compare(rank, n, coll_pg, gloo_pg, what, tol, steps=STEPS, branchy=False,
            hook=None, uneven=False, **ddp_kw):
    torch.manual_seed(1234)
    base = MLP()
    # Different initial weights on each rank: DDP must broadcast rank 0's.
    with torch.no_grad():
        for p in base.parameters():
            p.add_(0.01 * rank)
    a = DDP(copy.deepcopy(base), process_group=coll_pg, **ddp_kw)
    b = DDP(copy.deepcopy(base), process_group=gloo_pg, **ddp_kw)
    if hook is not None:
        a.register_comm_hook(coll_pg, hook)
        b.register_comm_hook(gloo_pg, hook)
    train(a, rank, steps, branchy, uneven)
    train(b, rank, steps, branchy, uneven)
    worst = 0.0
    sa, sb = a.module.state_dict(), b.module.state_dict()
    for name in sb:
        if not sb[name].is_floating_point():
            if not torch.equal(sa[name], sb[name]):
                raise AssertionError(f"DDP {what}: {name} differs: {sa[name]} vs {sb[name]}")
            continue
        d = rel_diff(sa[name], sb[name])
        worst = max(worst, d)
        if d > tol:
            raise AssertionError(f"DDP {what}: {name} relative difference {d:.3g} > {tol}")
    # The replicas must agree across ranks too.
    flat = torch.cat([p.detach().reshape(-1) for p in a.module.parameters()])
    mx, mn = flat.clone(), flat.clone()
    dist.all_reduce(mx, op=dist.ReduceOp.MAX, group=gloo_pg)
    dist.all_reduce(mn, op=dist.ReduceOp.MIN, group=gloo_pg)
    if not torch.equal(mx, mn):
        raise AssertionError(f"DDP {what}: the collective replicas differ across ranks")
    return worst


def run_all(rank, n, coll_pg, gloo_pg, stats):
    """Every DDP check; returns a summary.  coll_pg None is the default group."""
    pg = coll_pg if coll_pg is not None else dist.distributed_c10d._get_default_group()
    res = {}
    res["plain"] = compare(rank, n, pg, gloo_pg, "plain", 1e-6)
    res["unused"] = compare(rank, n, pg, gloo_pg, "find_unused_parameters", 1e-6,
                            branchy=True, find_unused_parameters=True)
    res["no-bcast-buffers"] = compare(rank, n, pg, gloo_pg, "broadcast_buffers=False", 1e-6,
                                      broadcast_buffers=False)
    res["allreduce_hook"] = compare(rank, n, pg, gloo_pg, "allreduce_hook", 1e-6,
                                    hook=default_hooks.allreduce_hook)
    res["fp16_hook"] = compare(rank, n, pg, gloo_pg, "fp16_compress_hook", 5e-3,
                               hook=default_hooks.fp16_compress_hook)
    res["small-buckets"] = compare(rank, n, pg, gloo_pg, "bucket_cap_mb=0.001", 1e-6,
                                   bucket_cap_mb=0.001)
    res["static_graph"] = compare(rank, n, pg, gloo_pg, "static_graph, bucket views", 1e-6,
                                  static_graph=True, gradient_as_bucket_view=True)
    res["join"] = compare(rank, n, pg, gloo_pg, "uneven inputs under Join", 1e-6, steps=3,
                          uneven=True, find_unused_parameters=True, branchy=True)
    stats["checks"] += len(res)
    return ", ".join(f"{k} {v:.1e}" for k, v in res.items())
