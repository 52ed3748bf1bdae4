"""What torch 2.x asks of a backend, on the collective backend against Gloo, in one process
per rank.

Imported by test_torch_backend.py after the default process group (backend
"collective") is up; each check runs where this torch has the feature (the names below)
and is skipped where it has not, saying so in the PASS line:

  - the group's name and description (group_name: DeviceMesh, functional collectives and
    DTensor resolve a group by it), destroy_process_group of a subgroup;
  - the 2.x method names: all_gather_single, reduce_scatter_single, all_to_all_single,
    the coalesced forms (torch's _coalescing_manager, and the functional collectives'
    all_gather_into_tensor_coalesced / reduce_scatter_tensor_coalesced), allreduce_coalesced;
  - PREMUL_SUM (FSDP2's gradient divide factor) as a scaled sum, with a float and a tensor
    factor, against the same scaling and a Gloo sum;
  - blocking calls run inline: the Work comes back completed;
  - sends and receives that cross: two ranks that each isend 4 MiB to the other before
    their irecv (loose, and in batch_isend_irecv) complete, which the library's blocking
    sends could not do one by one; receives from any source (recv and irecv without
    src, and the Work's source rank);
  - barrier with device_ids;
  - DeviceMesh and the functional collectives on it.
"""
import inspect

import torch
import torch.distributed as dist


def run_all(rank, n, gloo, same, refused, stats):
    done, skipped = [], []
    R = dist.ReduceOp
    c10d = dist.distributed_c10d
    pg = c10d._get_default_group()

    def has(name, obj=dist):
        ok = hasattr(obj, name)
        if not ok:
            skipped.append(name)
        return ok

    def gloo_sum(x):
        y = x.double()
        dist.all_reduce(y, group=gloo)
        return y

    # -- names --------------------------------------------------------------------------
    if has("group_name", dist.ProcessGroup):
        name = pg.group_name
        assert isinstance(name, str) and name, repr(name)
        assert c10d._resolve_process_group(name) is not None if hasattr(
            c10d, "_resolve_process_group") else True
        assert isinstance(pg.group_desc, str), pg.group_desc
        sub = dist.new_group(list(range(n)), backend="collective", group_desc="checks")
        assert sub.group_name and sub.group_name != name, (sub.group_name, name)
        assert sub.group_desc == "checks", sub.group_desc
        x = torch.full((3,), float(rank))
        dist.all_reduce(x, group=sub)
        same(x, torch.full((3,), float(n * (n - 1) // 2)), "all_reduce on a named subgroup")
        dist.destroy_process_group(sub)
        assert sub not in c10d._world.pg_map
        done.append("names")

    # -- a device map with another backend beside this one: torch's Backend route ------
    if has("BackendConfig", c10d):
        import collective.torch as ct

        mixed = "cpu:collective,cuda:gloo"
        if ct.HAVE_BACKEND_CLASS:
            sub = dist.new_group(backend=mixed)
            assert isinstance(sub._get_backend(torch.device("cpu")), ct.BackendCollective)
            x = torch.full((5,), float(rank))
            dist.all_reduce(x, group=sub)
            same(x, torch.full((5,), float(n * (n - 1) // 2)), f"all_reduce on {mixed}")
            w = dist.all_reduce(x, group=sub, async_op=True)
            w.wait()
            same(x, torch.full((5,), float(n * n * (n - 1) // 2)), f"async on {mixed}")
            dist.destroy_process_group(sub)
            done.append("mixed device map")
        else:
            refused(lambda: dist.new_group(backend=mixed), "device map", "2.14")

    # -- the 2.x method names ----------------------------------------------------------
    x = torch.arange(4, dtype=torch.float32) + 10 * rank
    out = torch.zeros(4 * n)
    w = pg.all_gather_single(out, x, _opts("AllgatherOptions")) if hasattr(
        pg, "all_gather_single") else pg._allgather_base(out, x)
    w.wait()
    want = torch.cat([torch.arange(4, dtype=torch.float32) + 10 * r for r in range(n)])
    same(out, want, "all_gather_single")
    full = torch.arange(2 * n, dtype=torch.float64) * (rank + 1)
    o = torch.zeros(2, dtype=torch.float64)
    dist.reduce_scatter_tensor(o, full)
    same(o, gloo_sum(full)[2 * rank:2 * rank + 2], "reduce_scatter_tensor")
    # coalesced: several tensors of different sizes in one call
    if hasattr(pg, "allgather_into_tensor_coalesced") or has("all_gather_single_coalesced", pg):
        ins = [torch.full((k + 1,), float(rank * 10 + k)) for k in range(3)]
        outs = [torch.zeros(n * (k + 1)) for k in range(3)]
        fn = getattr(pg, "all_gather_single_coalesced", None) or \
            pg.allgather_into_tensor_coalesced
        fn(outs, ins, _opts("AllgatherOptions")).wait()
        for k in range(3):
            same(outs[k], torch.cat([torch.full((k + 1,), float(r * 10 + k))
                                     for r in range(n)]), f"all_gather coalesced [{k}]")
        ins = [torch.arange(n * (k + 2), dtype=torch.float32) * (rank + k + 1)
               for k in range(3)]
        outs = [torch.zeros(k + 2) for k in range(3)]
        fn = getattr(pg, "reduce_scatter_single_coalesced", None) or \
            pg.reduce_scatter_tensor_coalesced
        fn(outs, ins, _opts("ReduceScatterOptions")).wait()
        for k in range(3):
            want = gloo_sum(ins[k]).float()[rank * (k + 2):(rank + 1) * (k + 2)]
            same(outs[k], want, f"reduce_scatter coalesced [{k}]")
        done.append("coalesced")
    # torch's coalescing manager: the ops recorded in the block become one coalesced call
    if "async_ops" in inspect.signature(c10d._coalescing_manager).parameters:
        ts = [torch.full((k + 2,), float(rank + k)) for k in range(3)]
        with c10d._coalescing_manager(async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        for k, t in enumerate(ts):
            same(t, torch.full((k + 2,), float(sum(r + k for r in range(n)))),
                 f"coalescing manager all_reduce [{k}]")
        ins = [torch.full((k + 1,), float(rank)) for k in range(2)]
        outs = [torch.zeros(n * (k + 1)) for k in range(2)]
        with c10d._coalescing_manager():
            for i, o in zip(ins, outs):
                dist.all_gather_into_tensor(o, i)
        for k, o in enumerate(outs):
            same(o, torch.arange(n, dtype=torch.float32).repeat_interleave(k + 1),
                 f"coalescing manager all_gather_into_tensor [{k}]")
        done.append("coalescing manager")
    else:
        skipped.append("_coalescing_manager(async_ops)")

    # -- the contract torch keeps for Python process groups (its test_c10d_pypg), on this
    #    backend's group: what torch asks of the group object itself -----------------------
    backend = pg._get_backend(torch.device("cpu")) if type(pg) is dist.ProcessGroup else pg
    assert backend.name() == "collective", backend.name()
    assert (backend.rank(), backend.size()) == (rank, n), (backend.rank(), backend.size())
    functional = getattr(torch.ops, "_c10d_functional", None)
    if functional is not None and hasattr(functional, "all_gather_into_tensor_out"):
        # the functional op reaches the group through its registered name
        out = torch.empty(2 * n)
        try:
            functional.all_gather_into_tensor_out(torch.full((2,), float(rank)), n,
                                                  pg.group_name, out=out)
        except RuntimeError as e:
            # torch 2.13's C++ op asks the group for a Backend object, which a Python
            # ProcessGroup has none of (torch's own contract test for it came with 2.14)
            if "No backend type associated" not in str(e):
                raise
            skipped.append("_c10d_functional.all_gather_into_tensor_out for a Python "
                           "ProcessGroup")
        else:
            functional.wait_tensor(out)
            same(out, torch.arange(n, dtype=torch.float32).repeat_interleave(2),
                 "_c10d_functional.all_gather_into_tensor_out by group name")
            done.append("contract: functional op by name")
    if "async_ops" in inspect.signature(c10d._coalescing_manager).parameters:
        # with a device, torch calls the group's _start_coalescing / _end_coalescing around
        # the calls and collects the one Work of the end
        ts = [torch.full((3,), float(rank)) for _ in range(2)]
        with c10d._coalescing_manager(pg, torch.device("cpu"), async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=pg)
        cm.wait()
        assert len(cm.works) == 1, cm.works
        for t in ts:
            same(t, torch.full((3,), float(n * (n - 1) // 2)), "coalescing manager with a device")
        done.append("contract: coalescing with a device")
    o = torch.zeros(2)
    backend.reduce_scatter_single(o, torch.ones(2 * n)).wait()  # no options: asynchronous
    same(o, torch.full((2,), float(n)), "reduce_scatter_single called directly")

    # -- PREMUL_SUM ---------------------------------------------------------------------
    if isinstance(getattr(dist, "_make_nccl_premul_sum", lambda f: None)(2.0).__getstate__(),
                  tuple):
        for factor in (0.25, torch.tensor([0.5])):
            x = torch.randn(37, generator=torch.Generator().manual_seed(rank), dtype=torch.float32)
            scaled = x * factor
            want = gloo_sum(scaled).float()
            got = x.clone()
            dist.all_reduce(got, op=dist._make_nccl_premul_sum(factor))
            same(got, want, f"all_reduce PREMUL_SUM {factor}", tol=1e-6)
            full = torch.randn(3 * n, generator=torch.Generator().manual_seed(rank + 9))
            o = torch.zeros(3)
            dist.reduce_scatter_tensor(o, full, op=dist._make_nccl_premul_sum(factor))
            same(o, gloo_sum(full * factor).float()[3 * rank:3 * rank + 3],
                 f"reduce_scatter_tensor PREMUL_SUM {factor}", tol=1e-6)
            same(full, torch.randn(3 * n, generator=torch.Generator().manual_seed(rank + 9)),
                 "PREMUL_SUM leaves the input alone")
        if hasattr(R, "PREMUL_SUM") and callable(R.PREMUL_SUM):
            got = torch.ones(4)
            dist.all_reduce(got, op=R.PREMUL_SUM(2.0))
            same(got, torch.full((4,), 2.0 * n), "all_reduce ReduceOp.PREMUL_SUM(2.0)")
        done.append("premul_sum")
    else:
        skipped.append("PREMUL_SUM with a readable factor")

    # -- blocking calls come back completed -------------------------------------------
    if hasattr(dist.AllreduceOptions(), "asyncOp"):
        opts = dist.AllreduceOptions()
        opts.asyncOp = False
        t = torch.ones(2)
        w = pg.allreduce([t], opts)  # None: complete (torch's dist.* take it so)
        assert w is None or w.is_completed(), "a blocking allreduce came back pending"
        same(t, torch.full((2,), float(n)), "blocking allreduce, inline")
        done.append("inline")

    # -- sends and receives that cross -------------------------------------------------
    if n > 1:
        big = 1 << 20  # 4 MiB of float32: past the transports' buffers
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        mine = torch.full((big,), float(rank))
        got = torch.zeros(big)
        # every rank sends first, then receives: loose isends that cross
        ws = [dist.isend(mine, nxt), dist.irecv(got, prv)]
        for w in ws:
            w.wait()
        same(got[:4], torch.full((4,), float(prv)), "loose isends that cross, 4 MiB")
        got2 = torch.zeros(big)
        ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got2, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(got2[-4:], torch.full((4,), float(prv)), "batch_isend_irecv that cross, 4 MiB")
        # a blocking send and receive paired in order
        if rank % 2 == 0:
            dist.send(mine[:8], nxt)
            dist.recv(got[:8], prv)
        else:
            dist.recv(got[:8], prv)
            dist.send(mine[:8], nxt)
        same(got[:8], torch.full((8,), float(prv)), "blocking send/recv")
        done.append("crossing p2p")

    # -- receives from any source: every other rank sends to each rank in turn, which
    #    takes the messages with dist.recv / irecv without src, and is told who sent ----
    if n > 1:
        for sink in range(n):
            if rank == sink:
                got = {}
                for k in range(2 * (n - 1)):
                    t = torch.full((5,), -1.0)
                    if k % 2 == 0:
                        src = dist.recv(t)
                    else:
                        w = dist.irecv(t)
                        w.wait()
                        src = w._source_rank()
                    assert 0 <= src < n and src != rank, src
                    same(t, torch.full((5,), float(src * 10 + got.get(src, 0))),
                         f"recv from any source, message {k}")
                    got[src] = got.get(src, 0) + 1
                assert got == {p: 2 for p in range(n) if p != rank}, got
            else:
                for k in range(2):
                    dist.send(torch.full((5,), float(rank * 10 + k)), sink)
            dist.barrier()
        done.append("recv from any source")

    # -- barrier with device_ids --------------------------------------------------------
    if int(torch.__version__.split(".")[0]) >= 2:  # 1.13 passes device_ids to NCCL only
        dist.barrier(device_ids=[0])
        done.append("barrier device_ids")
    else:
        skipped.append("barrier(device_ids) for other backends than NCCL")

    # -- DeviceMesh and the functional collectives ---------------------------------------
    try:
        from torch.distributed.device_mesh import init_device_mesh
        import torch.distributed._functional_collectives as fc
    except ImportError:
        skipped.append("device_mesh")
    else:
        mesh = init_device_mesh("cpu", (n,))
        g = mesh.get_group()
        t = torch.full((4,), float(rank + 1))
        r = fc.all_reduce(t, "sum", mesh)
        same(fc.wait_tensor(r), torch.full((4,), float(n * (n + 1) // 2)),
             "functional all_reduce")
        r = fc.all_gather_tensor(torch.full((2,), float(rank)), 0, g)
        same(fc.wait_tensor(r), torch.arange(n, dtype=torch.float32).repeat_interleave(2),
             "functional all_gather_tensor")
        r = fc.reduce_scatter_tensor(torch.ones(2 * n), "sum", 0, g)
        same(fc.wait_tensor(r), torch.full((2,), float(n)),
             "functional reduce_scatter_tensor")
        if hasattr(fc, "all_gather_into_tensor_coalesced"):
            rs = fc.all_gather_into_tensor_coalesced([torch.full((1,), float(rank)),
                                                      torch.full((2,), 1.0)], g)
            same(fc.wait_tensor(rs[0]), torch.arange(n, dtype=torch.float32),
                 "functional all_gather coalesced [0]")
            fc.wait_tensor(rs[1])
            rs = fc.reduce_scatter_tensor_coalesced([torch.ones(n), torch.ones(2 * n)],
                                                    "sum", [0, 0], g)
            fc.wait_tensor(rs[0])
            same(fc.wait_tensor(rs[1]), torch.full((2,), float(n)),
                 "functional reduce_scatter coalesced [1]")
        done.append("device_mesh + functional")
    stats["torch2"] = ", ".join(done) + (f" (this torch has no {', '.join(skipped)})"
                                         if skipped else "")


def _opts(name):
    return getattr(torch._C._distributed_c10d, name)()
