"""The checks of test_torch_parallel.py beyond training: DTensor redistribute, the
functional collectives, and a distributed checkpoint saved on 4 ranks and loaded on 2.

Imported by the worker after the default process group (backend "collective") is up;
`chk` is its Checker (within, equal, line).
"""
import os

import torch
import torch.distributed as dist

# ---------------------------------------------------------------------------------------
# DTensor redistribute


def expected_local(full, mesh, placements):
    """This rank's block of `full` under `placements`, as DTensor lays it out: each
    Shard(d) of mesh dimension k cuts dimension d into mesh.size(k) chunks (torch.chunk:
    the last ones shorter or empty), in the order of the mesh dimensions."""
    from torch.distributed.tensor import Shard

    t = full
    for k, p in enumerate(placements):
        if isinstance(p, Shard):
            chunks = t.chunk(mesh.size(k), p.dim)
            i = mesh.get_local_rank(k)
            t = chunks[i] if i < len(chunks) else t.narrow(p.dim, 0, 0)
    return t


def dtensor_checks(chk, rank, n):
    """Redistributes between shardings on a 1-D mesh of every rank and on a 2 x 2 mesh,
    checking after each step this rank's block against the whole tensor and, for the
    Partial placements, against the sum (or mean) computed here.  The values are small
    integers, so every sum is exact and every block must match bit for bit."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard,
                                          distribute_tensor)

    def show(p):
        return "[" + ", ".join(str(x) for x in p) + "]"

    done = []

    def check(d, want_full, mesh, placements, what):
        got = d.to_local()
        want = expected_local(want_full, mesh, placements)
        chk.equal(f"DTensor {what}: rank {rank}'s block {tuple(got.shape)} differs from the "
                  f"expected {tuple(want.shape)}", got.shape == want.shape and torch.equal(
                      got, want))
        done.append(what)

    g = torch.Generator().manual_seed(7)
    # 10 x 6: 10 rows do not divide by 4 ranks (blocks of 3, 3, 3, 1).
    full = torch.randint(-50, 50, (10, 6), generator=g).float()
    mesh = init_device_mesh("cpu", (n,))
    steps = [[Shard(0)], [Shard(1)], [Replicate()], [Shard(1)], [Shard(0)], [Replicate()]]
    d = distribute_tensor(full, mesh, steps[0])
    check(d, full, mesh, steps[0], f"distribute {show(steps[0])}")
    for a, b in zip(steps, steps[1:]):
        d = d.redistribute(mesh, b)
        check(d, full, mesh, b, f"{show(a)} -> {show(b)}")
    chk.equal("DTensor full_tensor() is the whole tensor", torch.equal(d.full_tensor(), full))
    # Partial: each rank holds a term of the sum
    part = full + rank
    total = n * full + n * (n - 1) / 2
    for kind, want in (("sum", total), ("avg", total / n)):
        for target in ([Replicate()], [Shard(0)], [Shard(1)]):
            p = DTensor.from_local(part, mesh, [Partial(kind)])
            check(p.redistribute(mesh, target), want, mesh, target,
                  f"[Partial({kind})] -> {show(target)}")
    # a 2 x 2 mesh: shardings over two dimensions
    if n == 4:
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
        full2 = torch.randint(-50, 50, (6, 8), generator=g).float()
        steps = [[Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()],
                 [Shard(0), Shard(0)], [Replicate(), Replicate()]]
        d = distribute_tensor(full2, mesh2, steps[0])
        check(d, full2, mesh2, steps[0], f"2x2 distribute {show(steps[0])}")
        for a, b in zip(steps, steps[1:]):
            d = d.redistribute(mesh2, b)
            check(d, full2, mesh2, b, f"2x2 {show(a)} -> {show(b)}")
        part2 = full2 * (rank + 1)
        p = DTensor.from_local(part2, mesh2, [Partial(), Partial()])
        want = full2 * sum(range(1, n + 1))
        check(p.redistribute(mesh2, [Replicate(), Replicate()]), want, mesh2,
              [Replicate(), Replicate()], "2x2 [Partial, Partial] -> [Replicate, Replicate]")
        # [Partial, Shard(0)]: each rank holds its block of rows (by its coordinate b),
        # a term of a sum over mesh dimension a (the ranks of the same b: b and b + 2)
        b = mesh2.get_local_rank(1)
        p = DTensor.from_local(full2.chunk(2, 0)[b] * (rank + 1), mesh2, [Partial(), Shard(0)])
        want_block = full2.chunk(2, 0)[b] * sum(r + 1 for r in range(n) if r % 2 == b)
        got = p.redistribute(mesh2, [Replicate(), Shard(0)]).to_local()
        chk.equal("DTensor 2x2 [Partial, Shard(0)] -> [Replicate, Shard(0)]",
                  torch.equal(got, want_block))
        done.append("2x2 [Partial, Shard(0)] -> [Replicate, Shard(0)]")
    chk.line(f"DTensor redistribute, {n} ranks: {len(done)} steps, every block equal to the "
             f"whole tensor's (bitwise): " + "; ".join(done))


# ---------------------------------------------------------------------------------------
# The functional collectives


def functional_checks(chk, rank, n):
    """torch.distributed._functional_collectives on the default (collective) group
    against the same calls on a Gloo group of the same ranks, with random float data:
    all_reduce (sum, avg, max), all_gather_tensor and all_gather_single (dims 0 and 1),
    reduce_scatter_tensor and reduce_scatter_single (sum, avg; dims 0 and 1),
    all_to_all_single (equal and uneven splits)."""
    import torch.distributed._functional_collectives as fc

    coll = dist.group.WORLD
    gloo = dist.new_group(backend="gloo")
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(4 * n, 6, generator=g)
    worst, names, inexact = 0.0, [], []

    def both(name, fn, exact=False):
        """fn(group) on both; `exact`: the call moves data (or takes a max) without
        adding, so the results must be equal bit for bit."""
        nonlocal worst
        a = fc.wait_tensor(fn(coll))
        b = fc.wait_tensor(fn(gloo))
        if a.shape != b.shape:
            chk.equal(f"functional {name}: shape {tuple(a.shape)} against Gloo's "
                      f"{tuple(b.shape)}", False)
            return
        d = float((a.double() - b.double()).norm() / max(b.double().norm(), 1e-30))
        chk.within(f"functional {name} against Gloo", d)
        if exact:
            chk.equal(f"functional {name}: not bitwise equal to Gloo's ({d:.3g})",
                      torch.equal(a, b))
        worst = max(worst, d)
        names.append(name)
        if not torch.equal(a, b):
            inexact.append(name)

    for op in ("sum", "avg", "max"):
        both(f"all_reduce {op}", lambda grp, op=op: fc.all_reduce(x, op, grp), op == "max")
    for dim in (0, 1):
        both(f"all_gather_tensor dim {dim}", lambda grp, d=dim: fc.all_gather_tensor(x, d, grp),
             True)
        if hasattr(fc, "all_gather_single"):
            both(f"all_gather_single dim {dim}",
                 lambda grp, d=dim: fc.all_gather_single(x, d, grp), True)
    for op in ("sum", "avg"):
        for dim in (0,):
            both(f"reduce_scatter_tensor {op} dim {dim}",
                 lambda grp, op=op, d=dim: fc.reduce_scatter_tensor(x, op, d, grp))
        if hasattr(fc, "reduce_scatter_single"):
            both(f"reduce_scatter_single {op}",
                 lambda grp, op=op: fc.reduce_scatter_single(x, op, 0, grp))
    y = torch.randn(6 * n, 3, generator=g)
    both("reduce_scatter_tensor sum dim 1 (6n x 3n)",
         lambda grp: fc.reduce_scatter_tensor(torch.cat([y] * n, 1), "sum", 1, grp))
    both("all_to_all_single, equal splits",
         lambda grp: fc.all_to_all_single(x, None, None, grp), True)
    # uneven: rank r sends r + p + 1 rows to rank p
    rows_in = [rank + p + 1 for p in range(n)]
    rows_out = [p + rank + 1 for p in range(n)]
    z = torch.randn(sum(rows_in), 5, generator=g)
    both("all_to_all_single, uneven splits",
         lambda grp: fc.all_to_all_single(z, rows_out, rows_in, grp), True)
    dist.destroy_process_group(gloo)
    chk.line(f"functional collectives, {n} ranks, against Gloo: {len(names)} calls, largest "
             f"relative difference {worst:.2e}; bitwise equal but "
             f"{', '.join(inexact) or 'none'}; calls: " + ", ".join(names))


# ---------------------------------------------------------------------------------------
# Distributed checkpoints (DCP)


def _fsdp_model(cfg, nranks, seed):
    import model as M
    import train as T

    cfg = type(cfg)(**{**cfg.__dict__, "seed": seed})
    mesh = T.make_mesh((nranks,), ("dp",))
    model = T.shard(M.build(cfg), dp=mesh["dp"])
    return cfg, model, T.optimizer(cfg, model.parameters())


def _full_state(model, opt):
    """The model's and the optimizer's whole state, on every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    flat = {f"model.{k}": v.detach().clone() for k, v in msd.items()}
    for pid, st in osd["state"].items():
        for k, v in st.items():
            flat[f"optim.{pid}.{k}"] = torch.as_tensor(v).detach().clone()
    return flat


def checkpoint_save(chk, cfg, tmp):
    """An FSDP2 model sharded over the 4 ranks, trained 2 steps (so that AdamW has its
    state), saved with dcp.save: model and optimizer, each rank its shards.  Rank 0 also
    writes the whole state (torch.save) for the loading phase to compare with."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    import model as M

    n = dist.get_world_size()
    cfg, model, opt = _fsdp_model(cfg, n, seed=5)
    for step in range(2):
        x, y = M.batch(cfg, step)
        x, y = x[dist.get_rank()::n], y[dist.get_rank()::n]
        loss = M.loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    msd, osd = get_state_dict(model, opt)
    where = os.path.join(tmp, "dcp")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=where)
    state = _full_state(model, opt)
    if dist.get_rank() == 0:
        torch.save(state, os.path.join(tmp, "dcp-whole.pt"))
    dist.barrier()
    files = sorted(os.listdir(where))
    chk.line(f"DCP save on {n} ranks: {len(state)} tensors (model and AdamW state) in "
             f"{where}: {', '.join(files)}")


def checkpoint_load(chk, cfg, tmp):
    """Loads phase main's checkpoint into an FSDP2 model of other initial weights,
    sharded over 2 ranks (each rank's shards differ from any saving rank's), with
    dcp.load; every tensor of the model and the optimizer must equal the saved one."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    n = dist.get_world_size()
    where = os.path.join(tmp, "dcp")
    saved = torch.load(os.path.join(tmp, "dcp-whole.pt"))
    cfg, model, opt = _fsdp_model(cfg, n, seed=9)
    before = _full_state(model, opt)
    msd, osd = get_state_dict(model, opt)   # makes AdamW's (empty) state to load into
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=where)
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    after = _full_state(model, opt)
    chk.equal(f"DCP load: the names {sorted(set(after) ^ set(saved))[:6]} differ",
              sorted(after) == sorted(saved))
    differ = [k for k in saved if k in after and not torch.equal(after[k], saved[k])]
    chk.equal(f"DCP load on {n} ranks: {len(differ)} tensors differ from the saved "
              f"ones: {differ[:4]}", not differ)
    moved = sum(not torch.equal(before[k], saved[k]) for k in saved if k.startswith("model"))
    chk.equal("DCP load: the model's initial weights were already the saved ones", moved)
    chk.line(f"DCP load on {n} ranks of a 4-rank checkpoint: {len(saved)} tensors, "
             f"{len(saved) - len(differ)} equal bit for bit ({moved} model tensors "
             f"changed by the load)")
