"""Running a torch test's ranks under torchrun, as the torch tests share it.

    sys.exit(torch_launch.main(__file__, __doc__, worker_main))

main() is a test's whole entry point: in the launcher it takes the test's options
(--nproc, --timeout, --python; see torch_python.py for the last), checks that torch and
collective.torch can be imported (else 77, or 1), and runs the test file itself under
`python -m torch.distributed.run` with the options users type for that torch version; in a
rank (torchrun sets WORKER_ENV for it) it calls worker(), which exits the rank with 1 on
any exception.  The test passes when torchrun exits 0 and every rank printed
"PASS rank R of N: ...".
"""
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

WORKER_ENV = "COLL_TORCH_TEST_WORKER"


def free_port():
    """A port that can be bound now, drawn from 61000-65535: above the kernel's ephemeral
    ports, so that no socket's connection is given it before torchrun listens there (as
    collrun draws its own)."""
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randint(61000, 65535)
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 61000-65535")


def torch_major():
    import torch

    return int(torch.__version__.split(".")[0])


def torchrun_args(nproc, port, log_dir):
    """torchrun's options as users spell them: torch 2.x's, or 1.13's (underscores, and
    -r 1 -t 1, without which Debian's 1.13 fails at start)."""
    if torch_major() >= 2:
        return ["--nproc-per-node", str(nproc), "--monitor-interval", "0.5",
                "--master-addr", "127.0.0.1", "--master-port", str(port), "--log-dir", log_dir]
    return ["-r", "1", "-t", "1", "--nproc_per_node", str(nproc), "--monitor_interval", "0.5",
            "--master_addr", "127.0.0.1", "--master_port", str(port), "--log_dir", log_dir]


def launch(script, doc, argv, env_extra=None, skip_unless=None):
    import argparse

    ap = argparse.ArgumentParser(description=doc.strip().split("\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150.0)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError as e:
        print(f"SKIP: torch cannot be imported by {sys.executable}: {e}")
        return 77
    if not dist.is_available() or not dist.is_gloo_available():
        print("SKIP: this torch has no torch.distributed with Gloo")
        return 77
    why = skip_unless() if skip_unless else None
    if why:
        print(f"SKIP: {why}")
        return 77
    try:
        import collective.torch  # noqa: F401
    except ImportError as e:
        print(f"FAIL: collective.torch cannot be imported "
              f"(PYTHONPATH={os.environ.get('PYTHONPATH')}): {e}")
        return 1
    tmp = tempfile.mkdtemp(prefix="coll-torch-")
    env = dict(os.environ)
    env[WORKER_ENV] = "1"
    env["COLL_TEST_TCP_PORT"] = str(free_port())
    env["COLL_TEST_FILE"] = os.path.join(tmp, "init")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(env_extra or {})
    cmd = [sys.executable, "-m", "torch.distributed.run"] + torchrun_args(
        args.nproc, free_port(), os.path.join(tmp, "logs")) + [os.path.abspath(script)]
    print(f"+ torch {__import__('torch').__version__}:", " ".join(cmd), flush=True)
    t0 = time.time()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, _ = p.communicate()
        print(out)
        print(f"FAIL: torchrun with {args.nproc} ranks did not finish within {args.timeout} s")
        return 1
    print(out)
    # torchrun's prefixing writer can splice two ranks' lines into one, so the PASS
    # lines are found anywhere in the output, one per rank, not at line starts
    passed = set(re.findall(r"PASS rank (\d+) of \d+:", out))
    print(f"torchrun exit {p.returncode}, {len(passed)} of {args.nproc} ranks passed, "
          f"{time.time() - t0:.1f} s")
    if p.returncode != 0 or len(passed) != args.nproc:
        print("FAIL")
        return 1
    return 0


def run_worker(worker):
    """Runs a rank's worker(); any exception is printed and ends the rank with 1 at once
    (torchrun then stops the others)."""
    try:
        worker()
    except BaseException:  # noqa: BLE001 - any failure fails this rank at once
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    return 0


def main(script, doc, worker, env_extra=None, skip_unless=None):
    """The entry point of a torch test (see the module's docstring); skip_unless(), run in
    the launcher under the test's Python, returns why the test cannot run here, or None."""
    if os.environ.get(WORKER_ENV):
        return run_worker(worker)
    from torch_python import reexec

    return launch(script, doc, reexec(sys.argv)[1:], env_extra, skip_unless)
