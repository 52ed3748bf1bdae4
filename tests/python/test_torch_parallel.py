#!/usr/bin/python3
"""PyTorch's own parallelism (DDP, FSDP2, tensor and pipeline parallelism, DTensor,
functional collectives, distributed checkpoints) on the backend "collective", against
the same runs on Gloo and against one rank.

    PYTHONPATH=build/python /tmp/v213/bin/python tests/python/test_torch_parallel.py
    /usr/bin/python3 tests/python/test_torch_parallel.py --python VENV/bin/python
    ... --phase two --keep DIR       # one phase (main, two, cli8, grid8); files kept in DIR
    COLL_TORCH_PARALLEL_FULL=1 ...   # or --full: 12 steps instead of 4, and more cases

It runs under the interpreter that runs it, or under --python PATH (torch_python.py),
and exits 77, naming what is missing, where that torch lacks FSDP2, DTensor, tensor
parallelism, DeviceMesh's backend_override, torch.distributed.pipelining, DCP's
state_dict helpers or the functional collectives (torch 1.13 lacks them all).  Each
phase is one torchrun launch:

  main  (4 ranks)  ddp, fsdp, fsdp --offload, tp 4, pp 4 (gpipe, 1f1b), 2d (dp 2 x tp 2);
                   DTensor redistribute on a 4-rank and a 2 x 2 mesh against the whole
                   tensor; the functional collectives against Gloo; a DCP checkpoint of
                   an FSDP2 model and its AdamW state saved on the 4 ranks
  two   (2 ranks)  ddp, tp 2, pp 2 (gpipe, 1f1b), with --full fsdp; phase main's
                   checkpoint loaded into an FSDP2 model sharded over 2 ranks: every
                   tensor equal to the saved one
  cli8  (8 ranks)  the example's command itself, `train.py --mode 3d --compare ref.pt`
                   (pp 2 x dp 2 x tp 2, 1f1b), against phase main's 1-rank run
  grid8 (8 ranks, --full only)  3d (gpipe and 1f1b) against Gloo and one rank

In phases main, two and grid8 every training case trains examples/torch (model.py,
train.py) three times in one launch: on groups of the collective backend, on Gloo groups
of the same ranks (DeviceMesh's backend_override, or new_group(backend="gloo")), and on
one rank with no group (rank 0 trains that one).  The whole final parameters are
compared: the norm-wise relative difference to Gloo and to one rank must stay within
1e-6, and where no sum runs over more than two ranks (a + b is b + a, so both backends
add the same numbers in the same order) the collective run must equal the Gloo run bit
for bit.  Rank 0 prints a CHECK line per check with its figures; the launcher prints
them together at the end, then PASS or FAIL.  The kill test is test_torch_kill.py
--mode fsdp.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "examples", "torch")
WORKER_ENV = "COLL_TORCH_PARALLEL_WORKER"
TOL = 1e-6
PHASES = {"main": 4, "two": 2, "cli8": 8, "grid8": 8}
STEPS, STEPS_FULL = 4, 12


# ---------------------------------------------------------------------------------------
# The launcher.


# What the test needs of torch: (what, file under torch/, text the file must hold).
FEATURES = [
    ("FSDP2 (torch.distributed.fsdp.fully_shard)", "distributed/fsdp/__init__.py",
     "CPUOffloadPolicy"),
    ("DTensor (torch.distributed.tensor)", "distributed/tensor/__init__.py", "Partial"),
    ("tensor parallelism with SequenceParallel", "distributed/tensor/parallel/__init__.py",
     "SequenceParallel"),
    ("torch.distributed.pipelining", "distributed/pipelining/__init__.py", "Schedule1F1B"),
    ("DCP's get_state_dict", "distributed/checkpoint/state_dict.py", "def get_state_dict"),
    ("init_device_mesh(backend_override=...)", "distributed/device_mesh.py",
     "backend_override"),
    ("the functional all_to_all_single", "distributed/_functional_collectives.py",
     "def all_to_all_single"),
]


def torch_features():
    """(torch's version, [what it lacks]), read from the installed torch's files without
    importing it: importing torch and these modules takes 10-15 s of a busy core, and
    the ranks import them anyway (a rank that fails to, says so and the test skips)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None, ["torch"]
    root = os.path.dirname(spec.origin)
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = "(version unknown)"
    lacks = []
    for what, path, text in FEATURES:
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                ok = text in f.read()
        except OSError:
            ok = False
        if not ok:
            lacks.append(what)
    return version, lacks


def run(cmd, env, timeout):
    """Runs cmd in its own session; (exit status, output, seconds)."""
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        out += f"\n(killed after {timeout} s)"
    for line in out.splitlines():
        if not re.search(r"Warning|warnings.warn|warning_once|return func\(|^\s*$", line):
            print(line)
    return p.returncode, out, time.time() - t0


def torchrun(n, script, args, env, timeout, tmp, tag):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           "--monitor-interval", "0.5", "--log-dir", os.path.join(tmp, "logs-" + tag),
           script] + args
    return run(cmd, env, timeout)


def launch(argv):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--phase", action="append", choices=list(PHASES),
                    help="run only this phase (repeatable)")
    ap.add_argument("--full", action="store_true",
                    default=os.environ.get("COLL_TORCH_PARALLEL_FULL") == "1",
                    help="more steps and cases (also COLL_TORCH_PARALLEL_FULL=1)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    ap.add_argument("--keep", help="a directory for the checkpoint and logs (kept)")
    args = ap.parse_args(argv)
    version, lacks = torch_features()
    if lacks:
        print(f"SKIP: torch {version or ''} of {sys.executable} has no " + ", ".join(lacks))
        return 77
    phases = args.phase or [p for p in PHASES if args.full or p != "grid8"]
    if "two" in phases and "main" not in phases and not (
            args.keep and os.path.exists(os.path.join(args.keep, "dcp"))):
        print("FAIL: phase 'two' loads the checkpoint that phase 'main' saves: run both, "
              "or give --keep DIR of a run of 'main'")
        return 1
    tmp = args.keep or tempfile.mkdtemp(prefix="coll-torch-par-")
    os.makedirs(tmp, exist_ok=True)
    print(f"torch {version}, {sys.executable}, phases {' '.join(phases)}"
          f"{' (full)' if args.full else ''}, files in {tmp}", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", COLL_TORCH_PARALLEL_DIR=tmp,
               COLL_TORCH_PARALLEL_FULL="1" if args.full else "0")
    t_all = time.time()
    checks, failures, skipped = [], [], []
    for phase in phases:
        n = PHASES[phase]
        if phase == "cli8":
            rc, out, secs = cli_phase(env, args.timeout, tmp, checks)
            if rc:
                failures.append(f"phase {phase} ({n} ranks)")
            continue
        rc, out, secs = torchrun(n, os.path.abspath(__file__), [],
                                 dict(env, **{WORKER_ENV: phase}), args.timeout, tmp, phase)
        passed = set(re.findall(rf"PASS rank (\d+) of {n}\b", out))
        checks += re.findall(r"CHECK (.*)$", out, re.M)
        print(f"phase {phase}: torchrun exit {rc}, {len(passed)} of {n} ranks passed, "
              f"{secs:.1f} s", flush=True)
        skip = re.search(r"^SKIP: (.*)$", out, re.M)
        if skip and not passed:
            skipped.append(skip.group(1))
        elif rc != 0 or len(passed) != n:
            failures.append(f"phase {phase} ({n} ranks)")
    print("\nchecks (rank 0's figures):")
    for c in checks:
        print("  " + c)
    print(f"\ntotal {time.time() - t_all:.1f} s")
    if failures:
        print("FAIL: " + ", ".join(failures) + f" (logs and files in {tmp})")
        return 1
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    if skipped:
        print("SKIP: " + skipped[0])
        return 77
    print(f"PASS: {len(checks)} checks in {len(phases)} phases")
    return 0


def cli_phase(env, timeout, tmp, checks):
    """The example's command itself under torchrun, as a user runs it: --mode 3d on 8
    ranks (pp 2 x dp 2 x tp 2), its parameters compared (--compare) with the 1-rank run
    that phase main saved, or that --mode single writes here."""
    script = os.path.join(EXAMPLE, "train.py")
    ref = os.path.join(tmp, "ref.pt")
    steps = ["--steps", str(STEPS_FULL if env["COLL_TORCH_PARALLEL_FULL"] == "1" else STEPS)]
    if not os.path.exists(ref):
        rc, out, _ = run([sys.executable, script, "--mode", "single", "--save", ref] + steps,
                         env, timeout)
        if rc:
            return rc, out, 0
    rc, out, secs = torchrun(8, script, ["--mode", "3d", "--log-every", "1", "--compare", ref]
                             + steps, env, timeout, tmp, "cli8")
    m = re.search(r"relative difference (\S+)( \(bitwise equal\))?", out)
    losses = re.findall(r"^(?:\[\S+\]:?\s*)?step\s+\d+ loss (\S+)", out, re.M)
    diff = float(m.group(1)) if m else float("nan")
    checks.append(f"example train.py --mode 3d on 8 ranks (torchrun, pp 2 x dp 2 x tp 2, "
                  f"1f1b, 4 micro-batches): against 1 rank {diff:.2e}; losses "
                  f"{' '.join(losses)}; {secs:.1f} s")
    print(f"phase cli8: torchrun exit {rc}, {secs:.1f} s", flush=True)
    if rc or not diff <= TOL or len(losses) < 2:
        print(f"FAIL: the example's 3d run: exit {rc}, difference {diff}, "
              f"{len(losses)} losses printed")
        return rc or 1, out, secs
    return 0, out, secs


# ---------------------------------------------------------------------------------------
# The worker (one rank under torchrun).


class Checker:
    """Records each check's figures and failures; rank 0 prints them."""

    def __init__(self, rank):
        self.rank = rank
        self.failures = []
        self.count = 0

    def line(self, text):
        if self.rank == 0:
            print("CHECK " + text, flush=True)

    def fail(self, what):
        self.failures.append(what)
        print(f"FAILED on rank {self.rank}: {what}", flush=True)

    def within(self, what, diff, tol=TOL):
        self.count += 1
        if not diff <= tol:
            self.fail(f"{what}: relative difference {diff:.3g} > {tol:g}")

    def equal(self, what, ok):
        self.count += 1
        if not ok:
            self.fail(what)


def worker():
    import datetime
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    # DTensor on a CPU mesh says once that it moves Shard(i) -> Shard(j) as an all-gather
    # and a chunk, not an all-to-all (docs/parallelism.md).
    logging.getLogger("torch.distributed.tensor._collective_utils").setLevel(logging.ERROR)

    import torch
    import torch.distributed as dist

    try:
        import torch.distributed.checkpoint  # noqa: F401
        import torch.distributed.fsdp  # noqa: F401
        import torch.distributed.pipelining  # noqa: F401
        import torch.distributed.tensor.parallel  # noqa: F401
    except Exception as e:  # noqa: BLE001 - torch 1.13's fsdp raises a ValueError
        print(f"SKIP: torch {torch.__version__}: {type(e).__name__}: {e}", flush=True)
        sys.exit(77)
    try:
        import collective.torch  # noqa: F401 - registers "collective"
    except ImportError as e:
        print(f"FAIL: collective.torch cannot be imported "
              f"(PYTHONPATH={os.environ.get('PYTHONPATH')}): {e}", flush=True)
        sys.exit(1)

    sys.path.insert(0, EXAMPLE)
    import model as M
    import train as T

    torch.set_num_threads(1)
    phase = os.environ[WORKER_ENV]
    tmp = os.environ["COLL_TORCH_PARALLEL_DIR"]
    full = os.environ.get("COLL_TORCH_PARALLEL_FULL") == "1"
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("collective", timeout=timeout)
    chk = Checker(rank)
    cfg = M.Config(steps=STEPS_FULL if full else STEPS)
    t_start = time.time()

    # The reference: the same steps on one rank, trained by rank 0 and handed round.
    t0 = time.time()
    # (The other ranks train one step meanwhile, so that the first case's timing does not
    # carry what a process's first training step initialises.)
    box = [T.train_single(cfg if rank == 0 else M.Config(steps=1))]
    box = box if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    ref = box[0]
    if rank == 0 and phase == "main":
        torch.save(ref, os.path.join(tmp, "ref.pt"))  # for phase cli8's --compare
    chk.line(f"1-rank reference: {cfg.steps} steps, "
             f"{sum(t.numel() for t in ref.values())} parameters, {time.time() - t0:.1f} s")

    made = []  # the DDP groups of each run, destroyed after it
    meshes = {}

    def mesh(shape, roles, backend):
        """{role: 1-D mesh} of a DeviceMesh whose groups are on `backend`, one per layout
        and backend, made at its first use and kept: two runs of one layout then use the
        same communicators (the library's planner may choose another algorithm, hence
        another order of the sums, for another communicator of the same ranks), and a
        DeviceMesh's groups must outlive it anyway (a later mesh of the same layout may
        be handed them).  The dimension names carry the backend's: a DeviceMesh compares
        equal to another of the same layout and names whatever its groups, so DTensor's
        caches would run a Gloo run's calls on a collective mesh's groups (or the other
        way round) if the names were the same."""
        key = (shape, roles, backend)
        if key not in meshes:
            names = tuple(r if backend == "collective" else f"{backend}_{r}" for r in roles)
            m = T.make_mesh(shape, names, backend)
            meshes[key] = {r: m[nm] for r, nm in zip(roles, names)}
        return meshes[key]

    def group(backend):
        g = dist.new_group(backend=backend, timeout=timeout)
        made.append(g)
        return g

    def cleanup():
        for g in made:
            dist.destroy_process_group(g)
        made.clear()

    def log():
        return T.Log(1, cfg.steps, lead=False)

    def compare(name, run, bitwise=False):
        """Trains `run(backend, log)` on collective and on Gloo groups; compares each
        with the other and with the 1-rank reference."""
        out, logs, secs = {}, {}, {}
        for backend in ("collective", "gloo"):
            t0 = time.time()
            logs[backend] = log()
            out[backend] = run(backend, logs[backend])
            secs[backend] = time.time() - t0
            cleanup()
        d_gloo, same = T.difference(out["collective"], out["gloo"])
        d_ref, _ = T.difference(out["collective"], ref)
        d_gloo_ref, _ = T.difference(out["gloo"], ref)
        chk.within(f"{name}: collective against Gloo", d_gloo)
        chk.within(f"{name}: collective against 1 rank", d_ref)
        if bitwise:
            chk.equal(f"{name}: collective and Gloo should be equal bit for bit (the same "
                      f"order of every sum), relative difference {d_gloo:.3g}", same)
        loss = logs["collective"].losses
        chk.line(f"{name}: against Gloo {d_gloo:.2e}{' (bitwise)' if same else ''}; "
                 f"against 1 rank {d_ref:.2e} (Gloo against 1 rank {d_gloo_ref:.2e})"
                 + (f"; last loss {loss[-1][1]:.6f}" if loss else "")
                 + f"; {secs['collective']:.1f} s collective, {secs['gloo']:.1f} s Gloo")
        return out["collective"]

    def cases():
        """(name, run(backend, log), bitwise expected) for this phase."""
        def sharded(shape, roles, offload=False):
            return lambda b, lg: T.train_sharded(cfg, **mesh(shape, roles, b),
                                                 offload=offload, log=lg)

        def pipeline(shape, roles, schedule):
            return lambda b, lg: T.train_pipeline(cfg, **mesh(shape, roles, b),
                                                  schedule=schedule, microbatches=4, log=lg)

        def ddp(b, lg):
            return T.train_ddp(cfg, group(b), lg)

        # bitwise: no sum over more than two ranks (a + b is b + a), so both backends add
        # the same numbers in the same order
        if phase == "main":
            yield "ddp, 4 ranks", ddp, False
            yield "fsdp, 4 ranks", sharded((4,), ("dp",)), False
            yield "fsdp --offload, 4 ranks", sharded((4,), ("dp",), True), False
            yield "tp, 4 ranks", sharded((4,), ("tp",)), False
            for s in ("gpipe", "1f1b"):
                yield f"pp {s}, 4 stages, 4 micro-batches", pipeline((4,), ("pp",), s), True
            yield "2d, dp 2 x tp 2", sharded((2, 2), ("dp", "tp")), True
        elif phase == "two":
            yield "ddp, 2 ranks", ddp, True
            if full:
                yield "fsdp, 2 ranks", sharded((2,), ("dp",)), True
            yield "tp, 2 ranks", sharded((2,), ("tp",)), True
            for s in ("gpipe", "1f1b"):
                yield f"pp {s}, 2 stages, 4 micro-batches", pipeline((2,), ("pp",), s), True
        elif phase == "grid8":
            for s in ("1f1b", "gpipe") if full else ("1f1b",):
                yield (f"3d {s}, pp 2 x dp 2 x tp 2, 4 micro-batches",
                       pipeline((2, 2, 2), ("pp", "dp", "tp"), s), True)

    results = {}
    for name, run, bitwise in cases():
        results[name] = compare(name, run, bitwise)
    if "fsdp, 4 ranks" in results:
        same = T.difference(results["fsdp --offload, 4 ranks"], results["fsdp, 4 ranks"])[1]
        chk.equal("fsdp with and without CPUOffloadPolicy should be equal bit for bit", same)
        chk.line(f"fsdp --offload against fsdp: {'bitwise equal' if same else 'DIFFERENT'}")

    if phase == "main":
        import torch_parallel_checks as PC

        PC.dtensor_checks(chk, rank, n)
        PC.functional_checks(chk, rank, n)
        PC.checkpoint_save(chk, cfg, tmp)
    elif phase == "two":
        import torch_parallel_checks as PC

        PC.checkpoint_load(chk, cfg, tmp)

    bad = torch.tensor([len(chk.failures)])
    dist.all_reduce(bad)
    dist.destroy_process_group()
    if bad.item():
        print(f"rank {rank}: {len(chk.failures)} failed checks here, {bad.item()} in all",
              flush=True)
        sys.stdout.flush()
        os._exit(1)
    print(f"PASS rank {rank} of {n}: {chk.count} checks, {time.time() - t_start:.1f} s",
          flush=True)


if __name__ == "__main__":
    if os.environ.get(WORKER_ENV):
        sys.path.insert(0, HERE)
        from torch_launch import run_worker

        sys.exit(run_worker(worker))
    else:
        sys.path.insert(0, HERE)
        from torch_launch import free_port
        from torch_python import reexec  # --python PATH: run under that Python

        sys.exit(launch(reexec(sys.argv)[1:]))
