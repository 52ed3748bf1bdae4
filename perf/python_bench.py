"""The cost of the Python package per call, against the C benchmark.

    collrun -n 2 /usr/bin/python3 perf/python_bench.py [-n ITERS] [-w WARMUP] [-b BYTES]
                                                       [-r REPEATS]

Times ITERS calls of comm.allreduce(x) on a float32 numpy array of BYTES bytes (in
place, blocking), the same loop as `allreduce_perf -b 8 -e 8 -n ITERS` times, and
also the out-of-place call, comm.raw(...) and async_=True + wait().  Each loop runs
REPEATS times; rank 0 prints the least and the median microseconds per call (on a
busy machine the least is the cost without interference).  Compare with
allreduce_perf run just before or after, on the same machine: the difference is the
binding's overhead.  PYTHONPATH must hold the build's python directory (BUILD/python).
"""
import argparse
import time

import numpy as np

import collective


def timed(comm, fn, iters, warmup):
    for _ in range(warmup):
        fn()
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t1 = time.perf_counter()
    return (t1 - t0) / iters * 1e6


def plain_loop(comm, x, iters, warmup):
    """The loop as a user writes it, no lambda in between."""
    for _ in range(warmup):
        comm.allreduce(x)
    comm.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.allreduce(x)
    return (time.perf_counter() - t0) / iters * 1e6


def report(comm, name, times, x, iters):
    if comm.rank == 0:
        times = sorted(times)
        print("%-36s %8.2f us least, %8.2f us median  (%d ranks, %d bytes, %d x %d calls)"
              % (name, times[0], times[len(times) // 2], comm.size, x.nbytes, len(times),
                 iters), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=10000, help="timed calls (default 10000)")
    ap.add_argument("-w", type=int, default=100, help="warm-up calls (default 100)")
    ap.add_argument("-b", type=int, default=8, help="bytes per call (default 8)")
    ap.add_argument("-r", type=int, default=5, help="repeats of each loop (default 5)")
    args = ap.parse_args()
    with collective.Communicator.from_env() as comm:
        x = np.ones(max(1, args.b // 4), dtype=np.float32)
        y = np.empty_like(x)
        addr = x.ctypes.data
        f, fl = collective.FUNCS["allreduce"], collective.DTYPES["float32"]
        s = collective.OPS["sum"]
        cases = [
            ("allreduce(x) in a lambda", lambda: comm.allreduce(x)),
            ("allreduce(x, y)", lambda: comm.allreduce(x, y)),
            ("raw(...)", lambda: comm.raw(f, addr, addr, x.size, fl, s, 0)),
            ("allreduce(x, async_=True).wait()", lambda: comm.allreduce(x, async_=True).wait()),
        ]
        report(comm, "comm.allreduce(x), plain loop",
               [plain_loop(comm, x, args.n, args.w) for _ in range(args.r)], x, args.n)
        for name, fn in cases:
            report(comm, name, [timed(comm, fn, args.n, args.w) for _ in range(args.r)], x,
                   args.n)


if __name__ == "__main__":
    main()
