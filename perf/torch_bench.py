#!/usr/bin/python3
"""torch.distributed backend "collective" beside Gloo, and the Python package beside allreduce_perf.

A benchmark, not a test.  For each rank count it makes one torchrun launch in which every
rank holds two process groups, Gloo and collective, and times them interleaved (the order
alternates between repetitions; the best repetition counts):

  1. dist.all_reduce, dist.all_gather_into_tensor and dist.reduce_scatter_tensor (float32,
     sum) at 8 B, 64 KiB, 1 MiB, 16 MiB and 64 MiB (the whole buffer: all_gather's output,
     reduce_scatter's input): the time per call (mean over the ranks, as allreduce_perf's
     -a 1) and nccl-tests' busbw, algbw * 2(n-1)/n for all_reduce, algbw * (n-1)/n for
     the other two.
  2. The Python package alone: collective.Communicator.allreduce on numpy arrays (in
     place), beside allreduce_perf at the same sizes and rank count (collrun, in place,
     the best of --reps launches): the difference is what the binding costs per call.
  3. The cost of a call at the smallest size: the package, a blocking dist.all_reduce on
     the collective group, and dist.all_reduce(async_op=True).wait(), interleaved.
  4. DDP and, where torch has it, FSDP2 (fully_shard per layer) training of an MLP (--mlp,
     about 5.3 million parameters by default): examples/s over all ranks, collective
     beside Gloo.

Then it prints the results as markdown tables, with the ratios collective / Gloo (for
busbw and examples/s, above 1 means collective is faster) and package / allreduce_perf.

Usage, with the Python whose torch is measured (a venv of ./run.sh, or Debian's
/usr/bin/python3); the collective package importable, e.g. PYTHONPATH=build/python, or
found in --build-dir/python:

    build/venv/torch-2.13/bin/python perf/torch_bench.py [--ranks 2,4] [--reps 5]
        [--build-dir build] [--sizes 8,64K,1M,16M,64M] [--ops all_reduce,...] [--route R]
        [--mlp 512,2048,2048,10] [--batch 32] [--steps 6] [--ddp-reps 3]
        [--no-ddp] [--no-perf] [--json FILE]

The default run takes about 6 minutes on two cores.  --worker is internal (the ranks).
"""
import argparse
import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 8, 64K, 16M)")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def fmt_size(b):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= f and b % f == 0:
            return f"{b // f} {unit}"
    return f"{b} B"


def iters_for(nbytes):
    """Calls per timed loop: about the same time per loop at every size."""
    if nbytes <= 64 << 10:
        return 200 if nbytes <= 1024 else 50
    if nbytes <= 1 << 20:
        return 20
    return max(2, (32 << 20) // nbytes * 2)


def busbw(nbytes, t, n):
    return nbytes / t / 1e9 * 2 * (n - 1) / n if t > 0 else 0.0


# ---------------------------------------------------------------------------------------
# The ranks (under torchrun)

def worker(a):
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    import collective
    import collective.torch  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    collective.torch.ROUTE = a.route  # how the collective group plugs into torch
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"gloo": dist.group.WORLD, "collective": dist.new_group(backend="collective")}
    order = ["gloo", "collective"]

    def mean_over_ranks(x, op=dist.ReduceOp.SUM):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=op)  # Gloo, outside every timed region
        return t.item() / (n if op == dist.ReduceOp.SUM else 1)

    def timed(call, sync, iters, warmup):
        for _ in range(warmup):
            call()
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        return (time.perf_counter() - t0) / iters

    out = {"n": n, "colls": {}, "package": {}, "cost": {}, "ddp": {}, "fsdp": {}}
    t_start = time.time()

    def note(what):
        if rank == 0:
            print(f"# {n} ranks: {what} done at {time.time() - t_start:.1f} s",
                  file=sys.stderr, flush=True)

    # 1. The collectives on the two groups; a size is the bytes of the whole buffer (the
    #    output of all_gather_into_tensor, the input of reduce_scatter_tensor), as
    #    nccl-tests counts it.
    def coll_call(op, nbytes, g):
        count = max(n, nbytes // 4 // n * n)
        if op == "all_reduce":
            x = torch.ones(count)
            return lambda: dist.all_reduce(x, group=g)
        if op == "all_gather_into_tensor":
            x, y = torch.ones(count // n), torch.empty(count)
            return lambda: dist.all_gather_into_tensor(y, x, group=g)
        x, y = torch.ones(count), torch.empty(count // n)
        return lambda: dist.reduce_scatter_tensor(y, x, group=g)

    for op in a.ops:
        out["colls"][op] = {}
        for nbytes in a.sizes:
            iters = iters_for(nbytes)
            calls = {name: coll_call(op, nbytes, groups[name]) for name in order}
            best = {}
            for rep in range(a.reps):
                for name in (order if rep % 2 == 0 else order[::-1]):
                    g = groups[name]
                    t = timed(calls[name], lambda: dist.barrier(group=g), iters, 2)
                    t = mean_over_ranks(t)
                    best[name] = min(best.get(name, t), t)
            out["colls"][op][nbytes] = best
            note(f"dist.{op} {fmt_size(nbytes)}")

    # 2. The plain package on numpy arrays (a communicator of its own).
    uid_fn = getattr(collective, "get_unique_id", None) or collective._core.get_unique_id
    box = [uid_fn() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    comm = collective.Communicator(n, box[0], rank)
    for nbytes in a.sizes:
        arr = np.ones(max(1, nbytes // 4), dtype=np.float32)
        iters = iters_for(nbytes)
        best = None
        for rep in range(a.reps):
            t = mean_over_ranks(timed(lambda: comm.allreduce(arr), comm.barrier, iters, 2))
            best = t if best is None else min(best, t)
        out["package"][nbytes] = best
        note(f"package allreduce {fmt_size(nbytes)}")
    # The per-call cost at the smallest size: the package, the blocking dist.all_reduce on
    # the collective group, and one waited for at once (async_op=True, then wait()), over
    # many more calls, interleaved.
    small = min(a.sizes)
    arr = np.ones(max(1, small // 4), dtype=np.float32)
    x = torch.ones(max(1, small // 4))
    g = groups["collective"]
    costs = {"package": lambda: comm.allreduce(arr), "dist": lambda: dist.all_reduce(x, group=g),
             "async_wait": lambda: dist.all_reduce(x, group=g, async_op=True).wait()}
    for rep in range(a.reps):
        for name, fn in (list(costs.items()) if rep % 2 == 0 else list(costs.items())[::-1]):
            t = mean_over_ranks(timed(fn, comm.barrier, 10 * iters_for(small), 50))
            out["cost"][name] = min(out["cost"].get(name, t), t)
    note("per-call cost")
    comm.destroy()

    # 3. DDP training of an MLP, one model per group, the same initial weights.
    if a.steps > 0:
        dims = a.mlp
        torch.manual_seed(0)
        layers = []
        for i in range(len(dims) - 1):
            layers.append(nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        base = nn.Sequential(*layers)
        nparams = sum(p.numel() for p in base.parameters())
        models, opts = {}, {}
        for name in order:
            m = copy.deepcopy(base)
            models[name] = nn.parallel.DistributedDataParallel(m, process_group=groups[name])
            opts[name] = torch.optim.SGD(models[name].parameters(), lr=0.01)
        gen = torch.Generator().manual_seed(1 + rank)
        xs = torch.randn(a.batch, dims[0], generator=gen)
        ys = torch.randint(0, dims[-1], (a.batch,), generator=gen)

        def step(name):
            opts[name].zero_grad()
            F.cross_entropy(models[name](xs), ys).backward()
            opts[name].step()

        best = {}
        for rep in range(a.ddp_reps):
            for name in (order if rep % 2 == 0 else order[::-1]):
                t = timed(lambda: step(name), lambda: dist.barrier(group=groups[name]),
                          a.steps, 2)
                t = mean_over_ranks(t, dist.ReduceOp.MAX)  # a step ends with the slowest rank
                best[name] = min(best.get(name, t), t)
        note("DDP")
        out["ddp"] = {"params": nparams, "batch": a.batch,
                      **{name: n * a.batch / best[name] for name in order}}

    # 4. FSDP2 (fully_shard on every Linear and the root) on the same MLP, where this torch
    #    has it.  Gloo has no AVG, which FSDP2 reduces gradients with: both groups sum and
    #    divide afterwards (set_force_sum_reduction_for_comms), so they do the same work.
    try:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        fully_shard = None
    if a.steps > 0 and fully_shard is not None:
        models, opts = {}, {}
        for name in order:
            mesh = DeviceMesh.from_group(groups[name], "cpu")
            m = copy.deepcopy(base)
            for layer in m:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(m, mesh=mesh)
            m.set_force_sum_reduction_for_comms(True)
            models[name] = m
            opts[name] = torch.optim.SGD(m.parameters(), lr=0.01)
        best = {}
        for rep in range(a.ddp_reps):
            for name in (order if rep % 2 == 0 else order[::-1]):
                t = timed(lambda: step(name), lambda: dist.barrier(group=groups[name]),
                          a.steps, 2)
                t = mean_over_ranks(t, dist.ReduceOp.MAX)
                best[name] = min(best.get(name, t), t)
        note("FSDP2")
        out["fsdp"] = {name: n * a.batch / best[name] for name in order}

    dist.barrier()
    if rank == 0:
        print("TORCH_BENCH_RESULT " + json.dumps(out), flush=True)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    # Tearing down a Gloo DDP reducer can deadlock in torch 1.13 (a Gloo worker thread
    # frees a tensor and waits for the GIL, which the main thread holds while it joins
    # that thread).  A benchmark has nothing to save: leave without the teardown.
    time.sleep(0.2)
    os._exit(0)


# ---------------------------------------------------------------------------------------
# The driver

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_build(build_dir):
    cands = [build_dir] if build_dir else [os.path.join(REPO, "build"), os.path.join(REPO, "build-py")]
    for d in cands:
        if d and os.path.exists(os.path.join(d, "perf", "allreduce_perf")):
            return os.path.abspath(d)
    return os.path.abspath(build_dir) if build_dir else None


def run_ranks(a, n, env):
    import torch

    if int(torch.__version__.split(".")[0]) >= 2:
        launch = ["--nproc-per-node", str(n), "--master-port", str(free_port())]
    else:  # 1.13's spelling, and -r 1 -t 1, without which Debian's 1.13 fails at start
        launch = ["-r", "1", "-t", "1", "--nproc_per_node", str(n), "--master_port",
                  str(free_port())]
    cmd = [sys.executable, "-m", "torch.distributed.run"] + launch + [
           os.path.abspath(__file__), "--worker", "--ops", ",".join(a.ops), "--route", a.route,
           "--sizes", ",".join(str(s) for s in a.sizes), "--reps", str(a.reps),
           "--mlp", ",".join(str(d) for d in a.mlp), "--batch", str(a.batch),
           "--steps", str(0 if a.no_ddp else a.steps), "--ddp-reps", str(a.ddp_reps)]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=a.timeout)
    for line in p.stdout.splitlines():
        m = re.search(r"TORCH_BENCH_RESULT (.*)$", line)
        if m:
            return json.loads(m.group(1))
    sys.stderr.write(p.stdout[-5000:])
    raise SystemExit(f"torch_bench: the {n}-rank launch failed (status {p.returncode})")


def run_perf(a, build, n, env):
    """allreduce_perf's in-place time per call (us) at each size, best of a.reps launches."""
    collrun = os.path.join(build, "tools", "collrun")
    perf = os.path.join(build, "perf", "allreduce_perf")
    res = {}
    for nbytes in a.sizes:
        best = None
        for _ in range(a.reps):
            cmd = [collrun, "-n", str(n), "--no-prefix", perf, "-b", str(nbytes), "-e",
                   str(nbytes), "-n", str(iters_for(nbytes)), "-w", "2", "-c", "0"]
            p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=a.timeout)
            if p.returncode != 0:
                sys.stderr.write(p.stdout[-3000:])
                raise SystemExit(f"torch_bench: allreduce_perf failed (status {p.returncode})")
            for line in p.stdout.splitlines():
                f = line.split()
                if len(f) >= 13 and not line.lstrip().startswith("#") and f[0].isdigit():
                    t = float(f[9])  # in place (us), as the package's call
                    best = t if best is None else min(best, t)
        res[nbytes] = best
    return res


def ratio(x, y):
    return f"{x / y:.2f}" if x and y else "-"


BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather_into_tensor": lambda n: (n - 1) / n,
       "reduce_scatter_tensor": lambda n: (n - 1) / n}


def report(a, results, perf):
    for op in a.ops:
        print(f"\n### dist.{op}, float32 (sum): collective beside Gloo "
              f"(best of {a.reps}, interleaved)\n")
        print("| ranks | size | Gloo time (us) | collective time (us) | Gloo busbw (GB/s) "
              "| collective busbw (GB/s) | busbw collective/Gloo |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for n, r in results.items():
            f = BUS[op](n)
            for nb in a.sizes:
                row = r["colls"][op][str(nb)]
                g, c = row["gloo"], row["collective"]
                print(f"| {n} | {fmt_size(nb)} | {g * 1e6:.1f} | {c * 1e6:.1f} | "
                      f"{nb / g / 1e9 * f:.3f} | {nb / c / 1e9 * f:.3f} | {ratio(g, c)} |")
    print("\n### The Python package (Communicator.allreduce on numpy, in place) beside "
          "allreduce_perf\n")
    print("| ranks | size | package (us) | allreduce_perf (us) | binding cost (us/call) "
          "| package/allreduce_perf |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, r in results.items():
        for nb in a.sizes:
            pk = r["package"][str(nb)] * 1e6
            pf = perf.get(n, {}).get(nb)
            pf_s = f"{pf:.1f}" if pf is not None else "-"
            diff = f"{pk - pf:+.1f}" if pf is not None else "-"
            print(f"| {n} | {fmt_size(nb)} | {pk:.1f} | {pf_s} | {diff} | {ratio(pk, pf)} |")
    small = min(a.sizes)
    print(f"\n### The cost of a call at {fmt_size(small)}: dist.all_reduce on the collective "
          f"group beside the package (best of {a.reps}, interleaved)\n")
    print("| ranks | package (us) | dist.all_reduce (us) | over the package (us) "
          "| async_op=True + wait() (us) | over the package (us) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, r in results.items():
        c = {k: v * 1e6 for k, v in r["cost"].items()}
        print(f"| {n} | {c['package']:.1f} | {c['dist']:.1f} | {c['dist'] - c['package']:+.1f} "
              f"| {c['async_wait']:.1f} | {c['async_wait'] - c['package']:+.1f} |")
    if not a.no_ddp:
        first = next(iter(results.values()))["ddp"]
        for what, key in (("DDP", "ddp"), ("FSDP2 (fully_shard, summed gradients)", "fsdp")):
            if not all(r.get(key) for r in results.values()):
                print(f"\n({what}: not measured with this torch)")
                continue
            print(f"\n### {what} training, MLP {'-'.join(str(d) for d in a.mlp)} "
                  f"({first['params'] / 1e6:.2f} M parameters), batch {a.batch} per rank, "
                  f"best of {a.ddp_reps} x {a.steps} steps, interleaved\n")
            print("| ranks | Gloo (examples/s) | collective (examples/s) | collective/Gloo |")
            print("|---:|---:|---:|---:|")
            for n, r in results.items():
                d = r[key]
                print(f"| {n} | {d['gloo']:.0f} | {d['collective']:.0f} | "
                      f"{ratio(d['collective'], d['gloo'])} |")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--sizes", default="8,64K,1M,16M,64M")
    p.add_argument("--route", default="auto", choices=("auto", "process_group", "backend"),
                   help="collective.torch.ROUTE for the collective group (backend: torch 2.14+)")
    p.add_argument("--ops", default=",".join(BUS),
                   help="the collectives timed (default: all three)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--mlp", default="512,2048,2048,10",
                   help="layer widths (default: about 5.3 M parameters)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=6, help="DDP steps per repetition")
    p.add_argument("--ddp-reps", type=int, default=3)
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--no-perf", action="store_true", help="skip allreduce_perf")
    p.add_argument("--build-dir", default=None)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--json", default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.sizes = [parse_size(s) for s in a.sizes.split(",") if s]
    a.ops = [o for o in a.ops.split(",") if o]
    for o in a.ops:
        if o not in BUS:
            p.error(f"--ops: {o!r} is not one of {', '.join(BUS)}")
    a.mlp = [int(d) for d in a.mlp.split(",") if d]
    if len(a.mlp) < 2:
        p.error("--mlp needs at least two widths")
    if a.worker:
        return worker(a)

    ranks = [int(r) for r in a.ranks.split(",") if r]
    build = find_build(a.build_dir)
    env = dict(os.environ)
    env.setdefault("COLL_SOCKET_IFNAME", "lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    if build and os.path.isdir(os.path.join(build, "python", "collective")):
        pkg = os.path.join(build, "python")
        env["PYTHONPATH"] = pkg + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    t0 = time.time()
    results, perf = {}, {}
    for n in ranks:
        results[n] = run_ranks(a, n, env)
        if not a.no_perf:
            if not build or not shutil.which(os.path.join(build, "perf", "allreduce_perf")):
                print("# allreduce_perf not found (--build-dir); its column is left empty")
                a.no_perf = True
            else:
                perf[n] = run_perf(a, build, n, env)
    report(a, results, perf)
    print(f"\n# {time.time() - t0:.0f} s; torch {__import__('torch').__version__}, "
          f"{os.cpu_count()} CPUs")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "allreduce_perf": perf}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
