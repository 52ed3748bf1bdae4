"""Trains the small transformer of model.py with PyTorch's own parallelism on the
torch.distributed backend "collective" (or on Gloo, to compare).

    python examples/torch/train.py --mode single --save ref.pt       # 1 rank, no group
    torchrun --nproc-per-node 4 examples/torch/train.py --mode ddp --compare ref.pt
    torchrun --nproc-per-node 4 examples/torch/train.py --mode fsdp [--offload]
    torchrun --nproc-per-node 2 examples/torch/train.py --mode tp
    torchrun --nproc-per-node 4 examples/torch/train.py --mode pp --schedule 1f1b
    torchrun --nproc-per-node 4 examples/torch/train.py --mode 2d          # dp 2 x tp 2
    torchrun --nproc-per-node 8 examples/torch/train.py --mode 3d          # pp 2 x dp 2 x tp 2

(with `PYTHONPATH=build/python` for the collective package, and `--master-addr
127.0.0.1 --master-port PORT` where torchrun needs them).  Every mode computes the same
maths as `--mode single`: the same initial weights (every rank draws them from one
seed), the same global batch of --batch sequences per step, the same mean loss, the
same AdamW update.  Only the order of float additions differs, so the final parameters
agree with the 1-rank run to a few 1e-7 (norm-wise relative).  --save writes them
(whole, gathered from every rank, named as in the 1-rank model); --compare prints
their difference to such a file.

The modes, and what runs underneath (docs/parallelism.md has the library's calls):

  ddp     DistributedDataParallel: each rank a replica on its rows of the batch; the
          gradients are averaged in buckets (all_reduce) during backward.
  fsdp    FSDP2 (fully_shard on each block, then on the whole model): each rank keeps
          1/N of every parameter, gradient and optimizer state; a block's parameters
          are gathered (all_gather_into_tensor) before its forward and backward, and its
          gradients averaged and scattered (reduce_scatter_tensor, AVG) after.
          --offload adds CPUOffloadPolicy (README.md says what that means on a CPU).
  tp      tensor parallelism over every rank (model.tensor_parallel has the plan).
  pp      pipeline parallelism, one stage per rank (--schedule gpipe or 1f1b,
          --microbatches M): activations and their gradients go between neighbouring
          stages as batch_isend_irecv.
  2d      tensor parallelism inside each pair of ranks (--tp), FSDP2 across the pairs.
  3d      pipeline stages (--pp) of tensor-parallel groups (--tp), FSDP2 across the
          replicas of each stage: ranks = pp x dp x tp.
  single  the reference: the whole model and batch on one rank, without any group.
"""
import argparse
import datetime
import logging
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402

MODES = ("single", "ddp", "fsdp", "tp", "pp", "2d", "3d")


def say(*args):
    print(*args, flush=True)


def local(t):
    """A DTensor's whole value (gathered from its mesh: a collective call), or t."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def whole_params(model, group=None):
    """Every parameter of the whole model, gathered from every rank: {name: tensor},
    named as in the 1-rank model.  Collective: every rank of `group` (default: the
    world) calls it, and every rank gets the same dictionary."""
    # DTensor warns that a parameter sharded by both FSDP and TP is gathered in two
    # all-gathers; that is slower, and here harmless (nothing is summed).
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mine = {name: local(p.detach()).clone() for name, p in model.named_parameters()}
    if group is None and not dist.is_initialized():
        return mine
    # A pipeline stage holds some of the names; the ranks of one stage hold the same.
    every = [None] * dist.get_world_size(group)
    dist.all_gather_object(every, mine, group=group)
    out = {}
    for d in every:
        for name, t in d.items():
            out.setdefault(name, t)
    return out


def difference(a, b):
    """Norm-wise relative difference of two {name: tensor} (b the reference), and
    whether they are equal bit for bit."""
    if sorted(a) != sorted(b):
        raise ValueError(f"different parameters: {sorted(set(a) ^ set(b))}")
    num = sum(float((a[k].double() - b[k].double()).pow(2).sum()) for k in b)
    den = sum(float(b[k].double().pow(2).sum()) for k in b)
    return (num / den) ** 0.5, all(torch.equal(a[k], b[k]) for k in b)


def rows(cfg, x, y, replica, replicas):
    """This data-parallel replica's share of the global batch."""
    n = cfg.batch // replicas
    return x[replica * n:(replica + 1) * n], y[replica * n:(replica + 1) * n]


class Log:
    """Prints the loss every `every` steps and at the last one, on one rank (`lead`).
    Each step it is due, every rank that holds a loss calls show(): the replicas' losses
    are averaged (an all_reduce over `group`, the data-parallel group) for the print."""

    def __init__(self, every, steps, lead=True):
        self.every, self.steps, self.lead = every, steps, lead
        self.losses = []

    def due(self, step):
        return step % self.every == 0 or step == self.steps - 1

    def show(self, step, loss, group=None, size=1):
        loss = loss.detach().clone()
        if size > 1:
            dist.all_reduce(loss, group=group)
        self.losses.append((step, loss.item() / size))
        if self.lead:
            say(f"step {step:3d} loss {self.losses[-1][1]:.4f}")


def optimizer(cfg, params):
    return torch.optim.AdamW(params, lr=cfg.lr)


# -- the modes ---------------------------------------------------------------------------

def train_single(cfg, log=None):
    """The reference: the whole model on one rank, no process group."""
    model = M.build(cfg)
    opt = optimizer(cfg, model.parameters())
    for step in range(cfg.steps):
        x, y = M.batch(cfg, step)
        loss = M.loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log and log.due(step):
            log.show(step, loss)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def train_ddp(cfg, group=None, log=None):
    """DistributedDataParallel over `group` (default: the world)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    size, me = dist.get_world_size(group), dist.get_rank(group)
    model = DDP(M.build(cfg), process_group=group)
    opt = optimizer(cfg, model.parameters())
    for step in range(cfg.steps):
        x, y = rows(cfg, *M.batch(cfg, step), me, size)
        loss = M.loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()           # the gradients are averaged here, bucket by bucket
        opt.step()
        if log and log.due(step):
            log.show(step, loss, group, size)
    return whole_params(model.module, group)


def shard(model, dp=None, tp=None, offload=False):
    """Tensor parallelism over the 1-D mesh `tp`, then FSDP2 over the 1-D mesh `dp`
    (where given; for both, two dimensions of one mesh): fully_shard on each block (one
    all-gather and one reduce-scatter per block and step), then on the root (the rest:
    embeddings, final norm, head)."""
    if tp is not None:
        M.tensor_parallel(model, tp)
    if dp is not None:
        from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

        # pin_memory needs an accelerator; on a CPU-only machine it must be off.
        policy = CPUOffloadPolicy(pin_memory=False) if offload else OffloadPolicy()
        for block in model.layers.values():
            fully_shard(block, mesh=dp, offload_policy=policy)
        fully_shard(model, mesh=dp, offload_policy=policy)
    return model


def train_sharded(cfg, dp=None, tp=None, offload=False, log=None):
    """fsdp (dp only), tp (tp only) and 2d (both): every rank runs the same loop; only
    the model's layout differs."""
    model = shard(M.build(cfg), dp, tp, offload)
    replicas = dp.size() if dp else 1
    replica = dp.get_local_rank() if dp else 0
    opt = optimizer(cfg, model.parameters())
    for step in range(cfg.steps):
        # Every rank of a tensor group takes the replica's whole share.
        x, y = rows(cfg, *M.batch(cfg, step), replica, replicas)
        loss = M.loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if log and log.due(step):
            log.show(step, loss, dp.get_group() if dp else None, replicas)
    return whole_params(model)


def train_pipeline(cfg, pp, dp=None, tp=None, schedule="1f1b", microbatches=4, log=None):
    """pp (the 1-D mesh `pp` only) and 3d (with dp and tp, three dimensions of one
    mesh): each rank builds the stage of its pp coordinate by hand from the whole model
    (model.pipeline_stage), splits it over its tensor group and shards it over its data
    group as train_sharded does, and the schedule runs the micro-batches through the
    stages."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stages, stage = pp.size(), pp.get_local_rank()
    first, last = stage == 0, stage == stages - 1
    replicas = dp.size() if dp else 1
    replica = dp.get_local_rank() if dp else 0
    part = shard(M.pipeline_stage(M.build(cfg), cfg, stage, stages), dp, tp)
    # What one micro-batch looks like between the stages, given so that the stages need
    # not infer it (with tensor parallelism each rank passes on its share of the
    # positions); requires_grad says that its gradient goes back.
    mb = cfg.batch // replicas // microbatches
    act = torch.empty(mb, cfg.seq // (tp.size() if tp else 1), cfg.dim, requires_grad=True)
    inp = torch.empty(mb, cfg.seq, dtype=torch.long) if first else act
    out = torch.empty(mb, cfg.seq, cfg.vocab, requires_grad=True) if last else act
    pipe = PipelineStage(part, stage, stages, torch.device("cpu"), input_args=(inp,),
                         output_args=(out,), group=pp.get_group())
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    # The schedule averages the micro-batches' losses' gradients (scale_grads), so the
    # step is the same as one on the replica's whole share.
    sched = kind(pipe, n_microbatches=microbatches, loss_fn=M.loss_fn)
    opt = optimizer(cfg, part.parameters())
    for step in range(cfg.steps):
        x, y = rows(cfg, *M.batch(cfg, step), replica, replicas)
        opt.zero_grad()
        losses = []
        if first:
            sched.step(x)
        elif last:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        opt.step()
        if log and last and log.due(step):
            log.show(step, torch.stack(losses).mean(), dp.get_group() if dp else None,
                     replicas)
    return whole_params(part)


# -- the command -------------------------------------------------------------------------

def make_mesh(shape, names, backend=None):
    """A DeviceMesh over every rank; `backend` (e.g. "gloo") makes its groups on that
    backend instead of the default group's."""
    from torch.distributed.device_mesh import init_device_mesh

    override = {n: backend for n in names} if backend else None
    return init_device_mesh("cpu", shape, mesh_dim_names=names, backend_override=override)


def mesh_for(args, world):
    """The grid of a mode: (shape, dimension names)."""
    if args.mode in ("fsdp",):
        return (world,), ("dp",)
    if args.mode == "tp":
        return (world,), ("tp",)
    if args.mode == "pp":
        return (world,), ("pp",)
    if args.mode == "2d":
        return (world // args.tp, args.tp), ("dp", "tp")
    if args.mode == "3d":
        return (args.pp, world // (args.pp * args.tp), args.tp), ("pp", "dp", "tp")
    raise ValueError(args.mode)


def check_grid(args, cfg, world):
    """The refusals, before any work: a message naming the flag."""
    tp = {"tp": world, "2d": args.tp, "3d": args.tp}.get(args.mode, 1)
    pp = {"pp": world, "3d": args.pp}.get(args.mode, 1)
    if world % (tp * pp):
        return f"--tp {tp} x --pp {pp} must divide the {world} ranks"
    dp = world // (tp * pp) if args.mode not in ("tp", "pp") else 1
    if cfg.heads % tp or cfg.seq % tp or cfg.vocab % tp:
        return f"--tp {tp} must divide --heads {cfg.heads}, --seq {cfg.seq}, --vocab {cfg.vocab}"
    if pp > cfg.n_layers:
        return f"{pp} pipeline stages need at least {pp} layers (--layers {cfg.n_layers})"
    mb = args.microbatches if pp > 1 else 1
    if cfg.batch % (dp * mb):
        return f"--batch {cfg.batch} must divide into {dp} replicas x {mb} micro-batches"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=MODES, default="ddp")
    ap.add_argument("--backend", choices=("collective", "gloo"), default="collective")
    ap.add_argument("--tp", type=int, default=2, help="tensor group size (2d, 3d)")
    ap.add_argument("--pp", type=int, default=2, help="pipeline stages (3d)")
    ap.add_argument("--schedule", choices=("gpipe", "1f1b"), default="1f1b")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--offload", action="store_true", help="fsdp, 2d: CPUOffloadPolicy")
    ap.add_argument("--steps", type=int, default=M.Config.steps)
    ap.add_argument("--batch", type=int, default=M.Config.batch)
    ap.add_argument("--dim", type=int, default=M.Config.dim)
    ap.add_argument("--heads", type=int, default=M.Config.heads)
    ap.add_argument("--layers", type=int, default=M.Config.n_layers)
    ap.add_argument("--lr", type=float, default=M.Config.lr)
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60, help="seconds, per call")
    ap.add_argument("--save", metavar="FILE", help="write the final parameters (whole)")
    ap.add_argument("--compare", metavar="FILE", help="print the difference to a --save")
    args = ap.parse_args(argv)
    cfg = M.Config(steps=args.steps, batch=args.batch, dim=args.dim, heads=args.heads,
                   n_layers=args.layers, lr=args.lr)
    torch.set_num_threads(1)  # many ranks share few cores

    t0 = time.time()
    if args.mode == "single":
        rank, params = 0, train_single(cfg, Log(args.log_every, cfg.steps))
    else:
        if args.backend == "collective":
            import collective.torch  # noqa: F401 - registers the backend
        dist.init_process_group(args.backend,
                                timeout=datetime.timedelta(seconds=args.timeout))
        rank, world = dist.get_rank(), dist.get_world_size()
        why = check_grid(args, cfg, world)
        if why:
            if rank == 0:
                say(f"{args.mode} on {world} ranks: {why}")
            dist.destroy_process_group()
            return 2
        log = Log(args.log_every, cfg.steps, lead=rank == 0)
        if args.mode == "ddp":
            params = train_ddp(cfg, log=log)
        else:
            mesh = make_mesh(*mesh_for(args, world))
            dims = {n: mesh[n] for n in mesh.mesh_dim_names}
            if args.mode in ("pp", "3d"):
                # The last stage knows the loss; its first rank prints it.
                pp = dims.pop("pp")
                log.lead = pp.get_local_rank() == pp.size() - 1 and all(
                    m.get_local_rank() == 0 for m in dims.values())
                params = train_pipeline(cfg, pp, schedule=args.schedule,
                                        microbatches=args.microbatches, log=log, **dims)
            else:
                params = train_sharded(cfg, offload=args.offload, log=log, **dims)
    if rank == 0:
        n = sum(t.numel() for t in params.values())
        say(f"{args.mode}: {cfg.steps} steps, {n} parameters, {time.time() - t0:.1f} s")
        if args.save:
            torch.save(params, args.save)
            say(f"wrote {args.save}")
        if args.compare:
            diff, same = difference(params, torch.load(args.compare))
            say(f"against {args.compare}: relative difference {diff:.3g}"
                + (" (bitwise equal)" if same else ""))
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
