#!/usr/bin/python3
"""A rank dies in the middle of training on the collective backend: DDP, or FSDP2.

    /usr/bin/python3 tests/python/test_torch_kill.py [--nproc 4] [--timeout-s 10] [--mode ddp]
    /tmp/v213/bin/python tests/python/test_torch_kill.py --mode fsdp

The launcher starts N ranks (this file with --worker, init through tcp://, no torchrun:
its agent would stop the survivors as soon as one rank dies, before they could report).
Each rank trains a small MLP over a process group with a short timeout, and at step
KILL_STEP the last rank SIGKILLs itself:

  - ddp (DistributedDataParallel): before its forward pass; every survivor is then
    inside backward, in DDP's bucketed allreduce;
  - fsdp (FSDP2, fully_shard on each of four blocks and the root, over a DeviceMesh of
    the default group): in the middle of its forward, in a forward pre-hook of the third
    block (after FSDP2 has gathered that block's parameters); every survivor is then
    waiting in the all-gather of the fourth block's, or, if it gets that far, in
    backward's reduce-scatters.

Where the victim dies, each survivor first issues an async all_reduce of its own (which
the victim never joins).  Every survivor must see its training call fail with a
RuntimeError naming the dead rank within the timeout; that async all_reduce must fail
too (its wait, its future, its state), a call issued afterwards must fail at once, and
the process must then exit without hanging.  The launcher checks every survivor's report
(message, time) and exit status, and that the killed rank died of SIGKILL.  Exit 77 when
torch is missing, or (--mode fsdp) has no FSDP2.
"""
import os
import re
import signal
import subprocess
import sys
import time

KILL_STEP = 3


def launch(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--timeout-s", type=float, default=10.0)
    ap.add_argument("--mode", choices=("ddp", "fsdp"), default="ddp")
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torch.distributed as dist  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch cannot be imported by {sys.executable}: {e}")
        return 77
    if args.mode == "fsdp":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
            from torch.distributed.device_mesh import init_device_mesh  # noqa: F401
        except Exception as e:  # noqa: BLE001 - torch 1.13's fsdp raises a ValueError
            print(f"SKIP: torch {torch.__version__} has no FSDP2: importing fully_shard "
                  f"raised {type(e).__name__}: {e}")
            return 77
    n = args.nproc
    victim = n - 1
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for r in range(n):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(r), str(n), str(port),
               str(args.timeout_s), args.mode]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True,
                                      start_new_session=True))
    # Startup (torch import, init) plus the steps plus the timeout, with room to spare.
    limit = time.time() + 60 + 3 * args.timeout_s
    outs = [None] * n
    hung = []
    for r, p in enumerate(procs):
        try:
            outs[r], _ = p.communicate(timeout=max(1.0, limit - time.time()))
        except subprocess.TimeoutExpired:
            hung.append(r)
            os.killpg(p.pid, signal.SIGKILL)
            outs[r], _ = p.communicate()
    failures = []
    for r, (p, out) in enumerate(zip(procs, outs)):
        for line in out.splitlines():
            print(f"[rank {r}] {line}")
        if r in hung:
            failures.append(f"rank {r} hung (killed by the launcher)")
            continue
        if r == victim:
            if p.returncode != -signal.SIGKILL:
                failures.append(f"rank {r} should have died of SIGKILL, exit {p.returncode}")
            continue
        if p.returncode != 0:
            failures.append(f"survivor {r} exited {p.returncode}")
        m = re.search(r"^CAUGHT after ([0-9.]+) s: (.*)$", out, re.M)
        if not m:
            failures.append(f"survivor {r} did not report a failed call")
            continue
        secs, msg = float(m.group(1)), m.group(2)
        if not re.search(rf"\brank {victim}\b", msg):
            failures.append(f"survivor {r}: the message does not name rank {victim}: {msg}")
        if secs > args.timeout_s + 5:
            failures.append(f"survivor {r}: the failure took {secs:.1f} s, timeout "
                            f"{args.timeout_s} s")
        if "AFTER-FAILURE raised" not in out:
            failures.append(f"survivor {r}: a call after the failure did not raise")
        m = re.search(r"^PENDING raised: (.*)$", out, re.M)
        if not m or not re.search(rf"\brank {victim}\b", m.group(1)):
            failures.append(f"survivor {r}: the async call in flight did not fail naming rank "
                            f"{victim}")
        if "PENDING future raised" not in out or "completed True success False" not in out:
            failures.append(f"survivor {r}: the failed work's future or state is wrong")
    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"PASS ({args.mode}): {n - 1} survivors saw rank {victim}'s death as a "
              f"RuntimeError naming it")
    return 1 if failures else 0


def worker(rank, n, port, timeout_s, mode):
    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import collective.torch  # noqa: F401

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group("collective", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=n, timeout=timeout)
    torch.manual_seed(0)
    victim = n - 1
    at = {"step": 0, "t0": None, "pending": None}

    def strike(where):
        """The victim dies here; the survivors issue a call that it never joins."""
        if rank == victim:
            print(f"rank {rank} kills itself at step {at['step']} {where}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        at["t0"] = time.time()
        # An async call in flight when the rank dies: its Work must fail too.
        at["pending"] = dist.all_reduce(torch.ones(1 << 16), async_op=True)

    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                  nn.Linear(64, 4)), bucket_cap_mb=0.01)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (n,))  # over the default group
        blocks = [nn.Sequential(nn.Linear(32 if i == 0 else 64, 64), nn.ReLU())
                  for i in range(4)]
        model = nn.Sequential(*blocks, nn.Linear(64, 4))
        for b in blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
        # Registered after fully_shard's own pre-hook: block 2's parameters are gathered
        # on every rank when the victim dies.
        blocks[2].register_forward_pre_hook(
            lambda mod, args: strike("in the forward of block 2")
            if at["step"] == KILL_STEP else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        for step in range(KILL_STEP + 5):
            at["step"] = step
            if step == KILL_STEP and mode == "ddp":
                strike("before its forward pass")
            x = torch.randn(16, 32)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print(f"step {step} done", flush=True)
    except RuntimeError as e:
        t0 = at["t0"]
        elapsed = time.time() - (t0 if t0 is not None else time.time())
        msg = " ".join(str(e).split())
        print(f"CAUGHT after {elapsed:.2f} s: {msg}", flush=True)
    else:
        print(f"rank {rank}: training went on without rank {victim}", flush=True)
        return 1
    pending = at["pending"]
    try:
        pending.wait()
        print("PENDING returned", flush=True)
    except RuntimeError as e:
        print(f"PENDING raised: {' '.join(str(e).split())}", flush=True)
    try:
        pending.get_future().wait()
        print("PENDING future returned", flush=True)
    except RuntimeError as e:
        print(f"PENDING future raised: {' '.join(str(e).split())[:200]}", flush=True)
    print(f"PENDING state: completed {pending.is_completed()} success {pending.is_success()}",
          flush=True)
    # The group is poisoned: later calls fail at once or through their work, never hang.
    try:
        w = dist.all_reduce(torch.ones(8), async_op=True)
        w.wait()
        print("AFTER-FAILURE returned", flush=True)
    except RuntimeError as e:
        print(f"AFTER-FAILURE raised: {' '.join(str(e).split())}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        r, size, p, t = sys.argv[2:6]
        sys.exit(worker(int(r), int(size), int(p), float(t),
                        sys.argv[6] if len(sys.argv) > 6 else "ddp"))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_launch import free_port
    from torch_python import reexec

    sys.exit(launch(reexec(sys.argv)[1:]))
