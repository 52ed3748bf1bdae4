#!/usr/bin/python3
"""The torch.distributed backend "collective" (python/collective/torch/) against Gloo.

Run as the test (meson suite 'python'), once per supported torch:

    /usr/bin/python3 tests/python/test_torch_backend.py [--python PY] --nproc N [--timeout S]

which runs itself under PY (torch_python.py), checks that torch can be imported (else
exits 77, the reason printed), then runs itself under `PY -m torch.distributed.run` with N
ranks on a free port (torch_launch.py).  Each rank then runs every check below in one
process: each call of the collective backend is compared with the same call on a Gloo
group of the same ranks, or, where Gloo cannot (bfloat16, bool, reduce_scatter,
all_gather_into_tensor, AVG, empty all_gather), with a reference derived from a Gloo
all_reduce / all_gather of float64 or integer copies; then what torch 2.x asks of a
backend (torch2_checks.py, each check where this torch has the feature).  With N = 2 and
N = 4 it also runs the DDP comparison of ddp_checks.py; with N = 2 and N = 3 it
re-initialises through tcp:// and file://.  The first failing check prints its traceback
and exits 1 (torchrun stops the others); the launcher fails unless every rank printed its
PASS line.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------------------------------
# The worker (one rank under torchrun).


def worker():
    import datetime
    import warnings

    warnings.filterwarnings("ignore", message=".*(deprecated|private function).*")

    import torch
    import torch.distributed as dist

    import collective.torch  # noqa: F401 - registers "collective"

    torch.set_num_threads(1)
    R = dist.ReduceOp
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("collective", timeout=timeout)
    assert dist.get_backend() == "collective", dist.get_backend()
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    stats = {"checks": 0}

    # -- data and references ------------------------------------------------------------
    DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int32, torch.int64, torch.bool]
    GLOO_OK = {torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8,
               torch.int32, torch.int64}

    def vals(r, numel, dtype, salt=0):
        """Rank r's data: small integers (1..3), so that sums and products of up to four
        ranks are exact in every dtype and results must match bit for bit."""
        g = torch.Generator().manual_seed(1000 * r + 17 * numel + salt)
        if dtype == torch.bool:
            return torch.randint(0, 2, (numel,), generator=g).bool()
        return torch.randint(1, 4, (numel,), generator=g).to(dtype)

    def to_gloo(t):
        """A copy Gloo can move: bool as uint8, bfloat16 as float32 (both lossless)."""
        if t.dtype == torch.bool:
            return t.to(torch.uint8)
        if t.dtype == torch.bfloat16:
            return t.float()
        return t.clone()

    def same(got, want, what, tol=0.0):
        stats["checks"] += 1
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(f"{what}: got {got.dtype} {tuple(got.shape)}, want "
                                 f"{want.dtype} {tuple(want.shape)}")
        if tol:
            ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
        else:
            ok = torch.equal(got, want)
        if not ok:
            raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()} want "
                                 f"{want.flatten()[:8].tolist()}")

    def refused(fn, *words):
        """fn must raise, with every word in its message."""
        stats["checks"] += 1
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            for w in words:
                if w.lower() not in msg.lower():
                    raise AssertionError(f"refusal {msg!r} does not name {w!r}")
            return msg
        raise AssertionError(f"expected a refusal naming {words}")

    def ref_allreduce(x, op, group=gloo):
        if op == R.AVG:
            s = ref_allreduce(x, R.SUM, group)
            size = dist.get_world_size(group)
            if x.dtype.is_floating_point:
                return (s.double() / size).to(x.dtype)
            return torch.div(s, size, rounding_mode="trunc")
        if x.dtype == torch.bool:
            y = x.to(torch.int64)
            gop = {R.SUM: R.MAX, R.PRODUCT: R.MIN, R.MIN: R.MIN, R.MAX: R.MAX}[op]
            dist.all_reduce(y, op=gop, group=group)
            return y.bool()
        if x.dtype in GLOO_OK:
            y = x.clone()
        else:
            y = x.double()
        dist.all_reduce(y, op=op, group=group)
        return y.to(x.dtype)

    def gloo_all_gather(x, group=gloo):
        """Every rank's x (any dtype, any size, even empty) through Gloo."""
        size = dist.get_world_size(group)
        if x.numel() == 0:
            return [torch.empty_like(x) for _ in range(size)]
        y = to_gloo(x)
        outs = [torch.empty_like(y) for _ in range(size)]
        dist.all_gather(outs, y, group=group)
        return [o.to(x.dtype) for o in outs]

    # -- all_reduce ------------------------------------------------------------------------
    OPS = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]
    for dt in DTYPES:
        for op in OPS:
            if dt == torch.bool and op == R.AVG:
                continue
            for numel in (1, 1007):
                x = vals(rank, numel, dt, salt=int(op.value) if hasattr(op, "value") else 0)
                got = x.clone()
                dist.all_reduce(got, op=op)
                tol = 1e-3 if op == R.AVG and dt in (torch.float16, torch.bfloat16) else 0.0
                same(got, ref_allreduce(x, op), f"all_reduce {dt} {op} n={numel}", tol)
    # empty, large, random floats, a 0-dim tensor
    e = torch.empty(0)
    dist.all_reduce(e)
    same(e, torch.empty(0), "all_reduce empty")
    x = torch.randn(300000, generator=torch.Generator().manual_seed(rank))
    got = x.clone()
    dist.all_reduce(got)
    same(got, ref_allreduce(x, R.SUM), "all_reduce large float32", tol=1e-5)
    z = torch.tensor(float(rank + 1))
    dist.all_reduce(z, op=R.MAX)
    same(z, torch.tensor(float(n)), "all_reduce 0-dim")
    # non-contiguous tensors are staged and copied back; the untouched elements stay
    base = vals(rank, 64, torch.float32).view(8, 8)
    want_base = base.clone()
    want_base[:, ::2] = ref_allreduce(base[:, ::2].contiguous(), R.SUM)
    dist.all_reduce(base[:, ::2])
    same(base, want_base, "all_reduce non-contiguous")
    tt = vals(rank, 12, torch.int32).view(3, 4).t()
    want = ref_allreduce(tt.contiguous(), R.MAX)
    dist.all_reduce(tt, op=R.MAX)
    same(tt, want, "all_reduce transposed")
    # complex (torch views it as real)
    c = torch.complex(vals(rank, 5, torch.float32), vals(rank, 5, torch.float32, salt=1))
    want = torch.view_as_complex(ref_allreduce(torch.view_as_real(c).contiguous(), R.SUM))
    dist.all_reduce(c)
    same(c, want, "all_reduce complex64")
    # a leaf that requires grad
    w = torch.ones(4, requires_grad=True)
    dist.all_reduce(w)
    same(w.detach(), torch.full((4,), float(n)), "all_reduce requires_grad leaf")
    # all_reduce_coalesced
    a, b = vals(rank, 5, torch.float64), vals(rank, 7, torch.float64, salt=3)
    ra, rb = ref_allreduce(a, R.SUM), ref_allreduce(b, R.SUM)
    dist.all_reduce_coalesced([a, b])
    same(a, ra, "all_reduce_coalesced [0]")
    same(b, rb, "all_reduce_coalesced [1]")

    # -- broadcast / reduce ------------------------------------------------------------------
    for root in range(n):
        for dt in DTYPES:
            x = vals(rank, 33, dt, salt=root)
            got = x.clone()
            dist.broadcast(got, root)
            want = to_gloo(x)
            dist.broadcast(want, root, group=gloo)
            same(got, want.to(dt), f"broadcast {dt} root {root}")
        for dt in (torch.float32, torch.int64, torch.bfloat16, torch.bool, torch.uint8):
            for op in (R.SUM, R.MAX, R.PRODUCT):
                x = vals(rank, 21, dt, salt=root)
                got = x.clone()
                dist.reduce(got, root, op=op)
                want = ref_allreduce(x, op)
                if rank == root:
                    same(got, want, f"reduce {dt} {op} root {root}")
                else:
                    same(got, x, f"reduce {dt} leaves non-root {rank} alone")
    nc = torch.zeros(4, 6)
    if rank == 0:
        nc = torch.arange(24.).view(4, 6)
    view = nc[:, 1::2]
    dist.broadcast(view, 0)
    same(view, torch.arange(24.).view(4, 6)[:, 1::2], "broadcast non-contiguous")

    # -- all_gather --------------------------------------------------------------------------
    for dt in DTYPES:
        for numel in (0, 1, 129):
            x = vals(rank, numel, dt)
            outs = [torch.full((numel,), 0, dtype=dt) for _ in range(n)]
            dist.all_gather(outs, x)
            for r, (o, wnt) in enumerate(zip(outs, gloo_all_gather(x))):
                same(o, wnt, f"all_gather {dt} n={numel} from {r}")
    # 2-d and non-contiguous outputs
    x = vals(rank, 12, torch.float32).view(3, 4)
    outs = [torch.zeros(4, 3).t() for _ in range(n)]
    dist.all_gather(outs, x)
    for r, wnt in enumerate(gloo_all_gather(x)):
        same(outs[r], wnt, f"all_gather non-contiguous output {r}")
    # all_gather_into_tensor and the older _all_gather_base
    for dt in (torch.float32, torch.bfloat16, torch.bool, torch.int8):
        for numel in (0, 5):
            x = vals(rank, numel, dt)
            want = torch.cat(gloo_all_gather(x))
            out = torch.zeros(n * numel, dtype=dt)
            dist.all_gather_into_tensor(out, x)
            same(out, want, f"all_gather_into_tensor {dt} n={numel}")
            out2 = torch.zeros(n * numel, dtype=dt)
            dist._all_gather_base(out2, x)
            same(out2, want, f"_all_gather_base {dt} n={numel}")
    # in place: the input is this rank's block of the output
    out = torch.zeros(n * 3, dtype=torch.int32)
    out[rank * 3:(rank + 1) * 3] = vals(rank, 3, torch.int32)
    dist.all_gather_into_tensor(out, out[rank * 3:(rank + 1) * 3])
    same(out, torch.cat(gloo_all_gather(vals(rank, 3, torch.int32))), "all_gather in place")
    # all_gather_coalesced
    ins = [vals(rank, 3, torch.float32), vals(rank, 4, torch.float32, salt=1)]
    outs = [[torch.zeros(3), torch.zeros(4)] for _ in range(n)]
    dist.all_gather_coalesced(outs, ins)
    g0, g1 = gloo_all_gather(ins[0]), gloo_all_gather(ins[1])
    for r in range(n):
        same(outs[r][0], g0[r], f"all_gather_coalesced [{r}][0]")
        same(outs[r][1], g1[r], f"all_gather_coalesced [{r}][1]")

    # -- reduce_scatter ----------------------------------------------------------------------
    for dt in DTYPES:
        for op in (R.SUM, R.MIN, R.MAX, R.PRODUCT, R.AVG):
            if dt == torch.bool and op == R.AVG:
                continue
            numel = 6
            full = vals(rank, n * numel, dt)
            want = ref_allreduce(full, op)[rank * numel:(rank + 1) * numel]
            tol = 1e-3 if op == R.AVG and dt in (torch.float16, torch.bfloat16) else 0.0
            out = torch.zeros(numel, dtype=dt)
            dist.reduce_scatter(out, list(full.chunk(n)), op=op)
            same(out, want, f"reduce_scatter {dt} {op}", tol)
            out = torch.zeros(numel, dtype=dt)
            dist.reduce_scatter_tensor(out, full, op=op)
            same(out, want, f"reduce_scatter_tensor {dt} {op}", tol)
    full = vals(rank, n * 4, torch.float64)
    want = ref_allreduce(full, R.SUM)[rank * 4:(rank + 1) * 4]
    out = torch.zeros(4)
    out = torch.zeros(4, dtype=torch.float64)
    dist._reduce_scatter_base(out, full)
    same(out, want, "_reduce_scatter_base")
    out = torch.zeros(8, dtype=torch.float64)[::2]
    dist.reduce_scatter_tensor(out, full)
    same(out, want, "reduce_scatter_tensor non-contiguous output")
    out = torch.zeros(0)
    dist.reduce_scatter_tensor(out, torch.zeros(0))
    same(out, torch.zeros(0), "reduce_scatter_tensor empty")

    # -- all_to_all ---------------------------------------------------------------------------
    for dt in DTYPES:
        x = vals(rank, 3 * n, dt)
        got = torch.zeros(3 * n, dtype=dt)
        dist.all_to_all_single(got, x)
        want = torch.zeros(3 * n, dtype=to_gloo(x).dtype)
        dist.all_to_all_single(want, to_gloo(x), group=gloo)
        same(got, want.to(dt), f"all_to_all_single equal {dt}")
    # uneven splits (rows of a 2-d tensor): rank r sends (r + p) % 3 rows to rank p
    in_splits = [(rank + p) % 3 for p in range(n)]
    out_splits = [(p + rank) % 3 for p in range(n)]
    x = torch.arange(sum(in_splits) * 2, dtype=torch.float32).view(-1, 2) + 100 * rank
    got = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(got, x, out_splits, in_splits)
    want = torch.zeros(sum(out_splits), 2)
    dist.all_to_all_single(want, x, out_splits, in_splits, group=gloo)
    same(got, want, "all_to_all_single uneven")
    gotb = torch.zeros(sum(out_splits), 2, dtype=torch.bfloat16)
    dist.all_to_all_single(gotb, x.bfloat16(), out_splits, in_splits)
    same(gotb, want.bfloat16(), "all_to_all_single uneven bfloat16")
    # the list form (Gloo has none): tensor to rank p has p + 1 elements, values say who sent
    ins = [torch.full((p + 1,), rank * 10 + p, dtype=torch.int64) for p in range(n)]
    outs = [torch.zeros(rank + 1, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for src in range(n):
        same(outs[src], torch.full((rank + 1,), src * 10 + rank, dtype=torch.int64),
             f"all_to_all list from {src}")
    outs = [torch.zeros(2, 2, dtype=torch.bool).t() for _ in range(n)]
    dist.all_to_all(outs, [torch.full((2, 2), bool((rank + p) % 2)) for p in range(n)])
    for src in range(n):
        same(outs[src], torch.full((2, 2), bool((src + rank) % 2)), f"all_to_all bool {src}")

    # -- gather / scatter ----------------------------------------------------------------------
    for root in range(n):
        for dt in (torch.float32, torch.bfloat16, torch.bool, torch.int64):
            x = vals(rank, 7, dt, salt=root)
            outs = [torch.zeros(7, dtype=dt) for _ in range(n)] if rank == root else None
            dist.gather(x, outs, dst=root)
            gx = to_gloo(x)
            gouts = [torch.zeros_like(gx) for _ in range(n)] if rank == root else None
            dist.gather(gx, gouts, dst=root, group=gloo)
            if rank == root:
                for r in range(n):
                    same(outs[r], gouts[r].to(dt), f"gather {dt} root {root} from {r}")
            ins = [vals(p, 5, dt, salt=root + 7) for p in range(n)] if rank == root else None
            out = torch.zeros(5, dtype=dt)
            dist.scatter(out, ins, src=root)
            gout = torch.zeros_like(to_gloo(out))
            dist.scatter(gout, [to_gloo(t) for t in ins] if rank == root else None, src=root,
                         group=gloo)
            same(out, gout.to(dt), f"scatter {dt} root {root}")

    # the fallback for a library without collGather / collScatter: groups of sends/receives
    from collective.torch import _calls as ct

    ct.HAVE_ROOTED[0] = False
    try:
        root = n - 1
        outs = [torch.zeros(3) for _ in range(n)] if rank == root else None
        dist.gather(torch.full((3,), float(rank)), outs, dst=root)
        if rank == root:
            for r in range(n):
                same(outs[r], torch.full((3,), float(r)), f"gather fallback from {r}")
        out = torch.zeros(2, dtype=torch.int64)
        dist.scatter(out, [torch.full((2,), p) for p in range(n)] if rank == root else None,
                     src=root)
        same(out, torch.full((2,), rank), "scatter fallback")
    finally:
        ct.HAVE_ROOTED[0] = True

    # -- send / recv -------------------------------------------------------------------------
    if n > 1:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        for dt in (torch.float32, torch.bool, torch.bfloat16):
            mine = vals(rank, 9, dt)
            got = torch.zeros(9, dtype=dt)
            # even ranks send first, odd ranks receive first
            # (tags are accepted, and messages pair up in order)
            if rank % 2 == 0:
                dist.send(mine, nxt, tag=rank)
                dist.recv(got, prv, tag=prv)
            else:
                dist.recv(got, prv, tag=prv)
                dist.send(mine, nxt, tag=rank)
            same(got, vals(prv, 9, dt), f"send/recv ring {dt}")
        # isend/irecv, posted in an order that pairs up
        got = torch.zeros(4, 4)
        view = got[:, :2]
        if rank % 2 == 0:
            reqs = [dist.isend(torch.full((4, 2), float(rank)), nxt), dist.irecv(view, prv)]
        else:
            reqs = [dist.irecv(view, prv), dist.isend(torch.full((4, 2), float(rank)), nxt)]
        for q in reqs:
            q.wait()
        want = torch.zeros(4, 4)
        want[:, :2] = float(prv)
        same(got, want, "isend/irecv into a non-contiguous view")
        # batch_isend_irecv: both directions at once, in one library group
        to_next, to_prev = torch.full((3,), rank + 0.5), torch.full((3,), rank + 0.25)
        from_prev, from_next = torch.zeros(3), torch.zeros(3)
        ops = [dist.P2POp(dist.isend, to_next, nxt), dist.P2POp(dist.isend, to_prev, prv),
               dist.P2POp(dist.irecv, from_prev, prv), dist.P2POp(dist.irecv, from_next, nxt)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        same(from_prev, torch.full((3,), prv + 0.5), "batch_isend_irecv from prev")
        same(from_next, torch.full((3,), nxt + 0.25), "batch_isend_irecv from next")
        # irecv issued alone (the batch falls due and goes to the library by itself), then
        # isend on every rank: the receive, whose sender waits for this rank's send, must
        # keep neither the send's batch (the completion thread waits for the receive) nor
        # its library group (the communicator's queue) behind it.
        got = torch.zeros(5)
        rq = dist.irecv(got, prv)
        time.sleep(0.05)
        sq = dist.isend(torch.full((5,), rank + 0.75), nxt)
        rq.wait()
        sq.wait()
        same(got, torch.full((5,), prv + 0.75), "irecv alone, then isend")

    # -- barrier ---------------------------------------------------------------------------
    pg0 = dist.distributed_c10d._get_default_group()
    if not hasattr(pg0, "_set_sequence_number_for_group"):  # torch's group over our backend
        pg0 = pg0._get_backend(torch.device("cpu"))
    pg0._set_sequence_number_for_group()
    dist.barrier()
    assert pg0._get_sequence_number_for_group() == 1
    w = dist.barrier(async_op=True)
    w.wait()
    assert w.is_completed()

    # -- subgroups ---------------------------------------------------------------------------
    groups = [list(range(n))]
    if n >= 2:
        groups.append(list(range(n - 1, -1, -2)))  # every other rank, from the last
    if n >= 3:
        groups.append([1, 2])
    for ranks in groups:
        sub = dist.new_group(ranks, backend="collective", timeout=timeout)
        subg = dist.new_group(ranks, backend="gloo", timeout=timeout)
        if rank in ranks:
            assert dist.get_backend(sub) == "collective"
            x = vals(rank, 11, torch.int32, salt=len(ranks))
            got = x.clone()
            dist.all_reduce(got, op=R.SUM, group=sub)
            same(got, ref_allreduce(x, R.SUM, subg), f"subgroup {ranks} all_reduce")
            src = ranks[-1]
            b = x.clone()
            dist.broadcast(b, src, group=sub)
            bw = x.clone()
            dist.broadcast(bw, src, group=subg)
            same(b, bw, f"subgroup {ranks} broadcast from global rank {src}")
            outs = [torch.zeros(11, dtype=torch.int32) for _ in ranks]
            dist.all_gather(outs, x, group=sub)
            for o, wnt in zip(outs, gloo_all_gather(x, subg)):
                same(o, wnt, f"subgroup {ranks} all_gather")
            if len(ranks) > 1:
                me = ranks.index(rank)
                peer = ranks[(me + 1) % len(ranks)]
                back = ranks[(me - 1) % len(ranks)]
                mine, got = torch.full((2,), float(rank)), torch.zeros(2)
                ops = [dist.P2POp(dist.isend, mine, peer, sub),
                       dist.P2POp(dist.irecv, got, back, sub)]
                for q in dist.batch_isend_irecv(ops):
                    q.wait()
                same(got, torch.full((2,), float(back)), f"subgroup {ranks} send/recv")
            if len(ranks) < n:  # shutdown(): the communicator goes, later calls are refused
                sub.shutdown()
                refused(lambda: dist.all_reduce(torch.ones(1), group=sub), "shut down")
        else:
            assert sub == dist.GroupMember.NON_GROUP_MEMBER

    # -- async work: returns at once, runs while Python computes --------------------------
    # Up to three tries (decided together), in case a rank was descheduled for the whole
    # transfer on a loaded machine and saw it done at its first look.
    for attempt in range(3):
        big = torch.ones(8 << 20)  # 32 MiB of float32
        t0 = time.perf_counter()
        w = dist.all_reduce(big, async_op=True)
        issue_s = time.perf_counter() - t0
        fut = w.get_future()
        chained = fut.then(lambda f: f.value()[0].sum().item())
        spins = 0
        a = torch.randn(64, 64)
        deadline = time.perf_counter() + 60
        while not w.is_completed() and time.perf_counter() < deadline:
            a = torch.tanh(a @ a) * 0.5  # Python and torch compute while the library works
            spins += 1
        assert w.is_completed(), "a large async all_reduce did not finish while Python computed"
        assert w.is_success() and w.exception() is None and w.result() == [big]
        assert issue_s < 0.5, f"issuing an async all_reduce took {issue_s:.3f} s"
        w.wait()
        same(big[:1000], torch.full((1000,), float(n)), "async all_reduce result")
        assert abs(chained.wait() - n * (8 << 20)) < 1, chained.wait()
        assert isinstance(fut.value(), list) and fut.value()[0] is big
        again = torch.tensor([int(n > 1 and spins == 0)])
        dist.all_reduce(again, op=R.MAX, group=gloo)
        if not again.item():
            break
    else:
        raise AssertionError("three large async all_reduces were done before the call returned")
    stats["overlap"] = (f"issue {issue_s * 1000:.1f} ms, {spins} compute steps while in flight"
                        f" (try {attempt + 1})")
    # many outstanding works, completed in issue order
    ts = [torch.full((1000,), float(i)) for i in range(20)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for i, (t, wk) in enumerate(zip(ts, works)):
        wk.wait()
        same(t[:3], torch.full((3,), float(i * n)), f"outstanding all_reduce {i}")
    # the backend keeps what it needs alive: a staged temporary, no reference kept here
    import gc

    w = dist.all_reduce(torch.ones(6, 4)[:, 1], async_op=True)
    gc.collect()
    w.wait()
    same(w.get_future().value()[0], torch.full((6,), float(n)), "async on a dropped temporary")
    ws = [dist.all_gather([torch.zeros(2) for _ in range(n)], torch.ones(2), async_op=True),
          dist.broadcast(torch.ones(2), 0, async_op=True), dist.barrier(async_op=True)]
    for wk in ws:
        assert wk.wait() is True

    # a wait inside a callback of the completion thread is refused instead of hanging
    # (a callback attached after completion runs at once in this thread, where waiting works)
    import threading

    inner = []

    def nested(f):
        on_main = threading.current_thread() is threading.main_thread()
        try:
            dist.all_reduce(torch.ones(1))
            inner.append(("returned", on_main))
        except RuntimeError as e:
            inner.append((str(e), on_main))
        return f.value()

    chk = dist.all_reduce(torch.ones(4 << 20), async_op=True).get_future().then(nested)
    chk.wait()
    msg, on_main = inner[0]
    # torch 2.x says a blocking call is waited on at once: it runs inline on the calling
    # thread, so it works in a callback too; on 1.13 it would wait for the completion
    # thread it runs on, and is refused instead
    inline = hasattr(dist.AllreduceOptions(), "asyncOp")
    assert (msg == "returned") if on_main or inline else ("callback" in msg), inner
    # either way the nested all_reduce was issued, on every rank, and runs in order
    # the object collectives, built on broadcast and all_gather
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank, "sq": [rank] * rank})
    assert objs == [{"rank": r, "sq": [r] * r} for r in range(n)], objs
    lst = [rank, "x" * rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [0, ""], lst
    stats["checks"] += 3

    # -- refusals: each names the problem, and the group stays usable -----------------------
    refused(lambda: dist.all_reduce(torch.empty(3, device="meta")), "tensor is", "device meta",
            "CPU")
    refused(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int16)), "torch.int16")
    for op in (R.BAND, R.BOR, R.BXOR):
        refused(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32), op=op),
                op.name if hasattr(op, "name") else "B", "bitwise")
    refused(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.bool), op=R.AVG), "AVG", "bool")
    refused(lambda: dist.all_reduce(torch.zeros(3, dtype=torch.int32),
                                    op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM") if hasattr(dist, "_make_nccl_premul_sum") else None
    refused(lambda: dist.all_gather([torch.zeros(3) for _ in range(n + 1)], torch.zeros(3)),
            f"{n + 1} tensors", f"{n} ranks")
    refused(lambda: dist.all_gather([torch.zeros(3)] * (n - 1) + [torch.zeros(4)],
                                    torch.zeros(3)), "output tensor", "4 elements")
    refused(lambda: dist.all_gather_into_tensor(torch.zeros(3 * n + 1), torch.zeros(3)),
            "output", f"{3 * n} are expected")
    refused(lambda: dist.reduce_scatter(torch.zeros(2), [torch.zeros(2)] * (n - 1)
                                        + [torch.zeros(2, dtype=torch.float64)]), "dtype")
    refused(lambda: dist.reduce_scatter_tensor(torch.zeros(2), torch.zeros(2 * n + 2)),
            "input", "elements")
    refused(lambda: dist.all_to_all([torch.zeros(1)] * n, [torch.zeros(1)] * (n - 1)
                                    + [torch.zeros(1, dtype=torch.int32)]), "dtype")
    if n > 1:
        refused(lambda: dist.all_to_all_single(torch.zeros(n + 1), torch.zeros(n + 1)),
                "not a multiple")
    refused(lambda: dist.all_to_all_single(torch.zeros(n, 1), torch.zeros(n, 1), [1] * n,
                                           [2] * n), "split sizes", "sum")
    refused(lambda: dist.distributed_c10d._get_default_group().send([torch.zeros(1)], rank, 0),
            "itself")
    refused(lambda: dist.all_reduce(torch.zeros(3).to_sparse()), "layout")
    refused(lambda: dist.monitored_barrier(), "monitored_barrier")
    chk = torch.ones(2)
    dist.all_reduce(chk)
    same(chk, torch.full((2,), float(n)), "all_reduce after the refusals")

    # -- what torch 2.x asks of a backend (torch2_checks.py) ----------------------------
    sys.path.insert(0, HERE)
    import torch2_checks

    torch2_checks.run_all(rank, n, gloo, same, refused, stats)

    # -- DDP --------------------------------------------------------------------------------
    if n in (2, 4):
        import ddp_checks

        stats["ddp"] = ddp_checks.run_all(rank, n, None, gloo, stats)

    dist.barrier()
    dist.destroy_process_group()

    # -- tcp:// and file:// initialisation --------------------------------------------------
    if n in (2, 3):
        # Under torchrun, tcp:// would otherwise connect to the agent's store as a client.
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        for method in (f"tcp://127.0.0.1:{os.environ['COLL_TEST_TCP_PORT']}",
                       f"file://{os.environ['COLL_TEST_FILE']}"):
            dist.init_process_group("collective", init_method=method, rank=rank, world_size=n,
                                    timeout=timeout)
            x = vals(rank, 10, torch.float32)
            got = x.clone()
            dist.all_reduce(got)
            allx = [vals(r, 10, torch.float32) for r in range(n)]
            same(got, sum(allx[1:], allx[0]), f"all_reduce after {method} init")
            sub = dist.new_group([0, n - 1], backend="collective")
            if rank in (0, n - 1):
                y = torch.full((3,), float(rank))
                dist.all_reduce(y, group=sub)
                same(y, torch.full((3,), float(n - 1)), f"subgroup after {method} init")
            dist.barrier()
            dist.destroy_process_group()
            stats["init"] = stats.get("init", "") + method.split(":")[0] + " "

    print(f"PASS rank {rank} of {n}: {stats['checks']} checks; " +
          "; ".join(f"{k}: {v}" for k, v in stats.items() if k != "checks"), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import torch_launch

    sys.exit(torch_launch.main(__file__, __doc__, worker))
