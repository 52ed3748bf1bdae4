#!/usr/bin/env python3
"""The Python package collective on 1 to N ranks (suite 'python').

    collrun -n N /usr/bin/python3 tests/python/test_package.py

with PYTHONPATH=BUILD/python.  Every collective x every numpy dtype the library can
carry (and bfloat16 through dtype=) x every op, in place and out of place, every root,
against numpy references computed locally from deterministic per-rank inputs chosen
so that every partial result is exact; then handles, groups, split, shrink, the
constructor, raw() and streams, threads, and refused arguments (each named in its
error, the library's text kept).  Exits 77 when numpy is missing.
"""
import datetime
import sys
import threading
import time

try:
    import numpy as np
except ImportError as e:
    print("test_package: skipped: numpy cannot be imported by %s (%s); install python3-numpy"
          % (sys.executable, e))
    sys.exit(77)

import collective

failures = []
passed = 0


def check(cond, what):
    global passed
    if cond:
        passed += 1
    else:
        failures.append(what)
        if len(failures) <= 20:
            print("FAIL [rank %d]: %s" % (R, what), flush=True)


def expect_error(fn, exc, words, what):
    """fn() must raise exc with every word of words in its text."""
    try:
        fn()
    except exc as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        check(not missing, "%s: %r lacks %r" % (what, text, missing))
        return e
    except Exception as e:  # noqa: BLE001 - report what came instead
        check(False, "%s: raised %r, want %s" % (what, e, exc.__name__))
        return None
    check(False, "%s: no error, want %s" % (what, exc.__name__))
    return None


comm = collective.Communicator.from_env()
R, N = comm.rank, comm.size

# ------------------------------------------------------------------ types ---

# name, numpy dtype, dtype= for the call, kind of arithmetic for the reference.
TYPED = [
    ("int8", np.int8, None, "int"), ("uint8", np.uint8, None, "uint"),
    ("int32", np.int32, None, "int"), ("uint32", np.uint32, None, "uint"),
    ("int64", np.int64, None, "int"), ("uint64", np.uint64, None, "uint"),
    ("intc", np.intc, None, "int"), ("uintc", np.uintc, None, "uint"),
    ("longlong", np.longlong, None, "int"), ("ulonglong", np.ulonglong, None, "uint"),
    ("float16", np.float16, None, "float"), ("float32", np.float32, None, "float"),
    ("float64", np.float64, None, "float"), ("bool", np.bool_, None, "bool"),
    ("bfloat16", np.uint16, "bfloat16", "bf16"),
]
# Types without a library type: moved as bytes, refused by reductions.
UNTYPED = [
    ("int16", np.int16), ("uint16", np.uint16), ("complex64", np.complex64),
    ("complex128", np.complex128), ("longdouble", np.longdouble),
    ("big-endian float32", np.dtype(">f4")),
]
OPS = ["sum", "prod", "max", "min", "avg"]
COUNTS = [1, 7, 1003]


def f32_to_bf16(a):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = b + 0x7FFF + ((b >> 16) & 1)
    return (b >> 16).astype(np.uint16)


def bf16_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def base_values(rank, count, salt):
    """Small integers in [-2, 3]: every sum, product and partial result is exact in
    every type, bfloat16 included."""
    i = np.arange(count, dtype=np.int64)
    return (rank * 7 + i * 3 + salt * 5 + 1) % 6 - 2


def make(t, rank, count, salt=0):
    name, npt, _, kind = t
    v = base_values(rank, count, salt)
    if kind == "bf16":
        return f32_to_bf16(v.astype(np.float32))
    if kind == "bool":
        return v > 0
    if kind == "uint":
        v = v + 2
    return v.astype(npt)


def make_untyped(npt, rank, count, salt=0):
    return (base_values(rank, count, salt) + 10 * rank).astype(npt)


def reduce_ref(t, ins, op):
    name, npt, _, kind = t
    n = len(ins)
    if kind in ("float", "bf16"):
        st = np.stack([bf16_to_f32(a) if kind == "bf16" else a for a in ins]).astype(np.float64)
        if op == "avg":
            s = st.sum(axis=0)
            if kind == "float" and npt == np.float64:
                r = s / n
            else:
                r = s.astype(np.float32) / np.float32(n)
        else:
            r = {"sum": st.sum, "prod": st.prod, "max": st.max, "min": st.min}[op](axis=0)
        return f32_to_bf16(r.astype(np.float32)) if kind == "bf16" else r.astype(npt)
    st = np.stack([a.astype(np.int64) for a in ins])
    if op == "avg":
        s = st.sum(axis=0)
        r = np.sign(s) * (np.abs(s) // n)
    else:
        r = {"sum": st.sum, "prod": st.prod, "max": st.max, "min": st.min}[op](axis=0)
    return r.astype(np.uint8).view(np.bool_) if kind == "bool" else r.astype(npt)


def same(a, b):
    """Bitwise equal, except for the padding bytes of long double items."""
    a = np.ascontiguousarray(a)
    b = np.ascontiguousarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" and a.dtype.itemsize > 8 * (2 if a.dtype.kind == "c" else 1):
        return np.array_equal(a, b)
    return np.array_equal(a.view(np.uint8), b.view(np.uint8))


def cat(arrays):
    """np.concatenate keeping the dtype (it drops a foreign byte order)."""
    return np.concatenate(arrays).astype(arrays[0].dtype)


def kw(t):
    return {"dtype": t[2]} if t[2] else {}


# ------------------------------------------------------------ collectives ---

t0 = time.time()
for t in TYPED:
    for count in COUNTS:
        for op in OPS:
            ins = [make(t, r, count) for r in range(N)]
            ref = reduce_ref(t, ins, op)
            what = "allreduce %s %s count %d" % (t[0], op, count)
            x = ins[R].copy()
            out = comm.allreduce(x, op=op, **kw(t))
            check(out is x and same(x, ref), what + " in place")
            x = ins[R].copy()
            y = np.zeros_like(x)
            out = comm.allreduce(x, y, op, **kw(t))
            check(out is y and same(y, ref) and same(x, ins[R]), what + " out of place")

            rs_ins = [make(t, r, N * count, salt=1) for r in range(N)]
            rs_ref = reduce_ref(t, rs_ins, op)[R * count:(R + 1) * count]
            what = "reduce_scatter %s %s count %d" % (t[0], op, count)
            x = rs_ins[R].copy()
            y = np.zeros(count, dtype=x.dtype)
            out = comm.reduce_scatter(x, y, op, **kw(t))
            check(out is y and same(y, rs_ref), what + " out of place")
            x = rs_ins[R].copy()
            blk = x[R * count:(R + 1) * count]
            comm.reduce_scatter(x, blk, op=op, **kw(t))
            check(same(blk, rs_ref), what + " in place")

            for root in range(N):
                what = "reduce %s %s count %d root %d" % (t[0], op, count, root)
                x = ins[R].copy()
                y = np.zeros_like(x)
                comm.reduce(x, y if R == root else None, op, root, **kw(t))
                if R == root:
                    check(same(y, ref), what + " out of place")
                check(same(x, ins[R]), what + ": send unchanged")
                x = ins[R].copy()
                comm.reduce(x, op=op, root=root, **kw(t))
                if R == root:
                    check(same(x, ref), what + " in place")
# Large counts, which the library cuts into chunks and pipelines.
BIG = (1 << 17) + 3
for t in [t for t in TYPED if t[0] in ("int8", "float32", "bfloat16", "float64")]:
    for op in ("sum", "max"):
        what = "%s %s count %d" % (t[0], op, BIG)
        ins = [make(t, r, BIG, salt=8) for r in range(N)]
        x = ins[R].copy()
        comm.allreduce(x, op=op, **kw(t))
        check(same(x, reduce_ref(t, ins, op)), "allreduce " + what)
        ins = [make(t, r, N * BIG, salt=9) for r in range(N)]
        y = np.zeros(BIG, dtype=ins[0].dtype)
        comm.reduce_scatter(ins[R], y, op, **kw(t))
        check(same(y, reduce_ref(t, ins, op)[R * BIG:(R + 1) * BIG]), "reduce_scatter " + what)
    y = np.zeros(N * BIG, dtype=ins[0].dtype)
    comm.allgather(ins[R][:BIG], y, **kw(t))
    check(same(y, cat([a[:BIG] for a in ins])), "allgather %s count %d" % (t[0], BIG))
    x = ins[R][:BIG].copy()
    comm.broadcast(x, root=N - 1, **kw(t))
    check(same(x, ins[N - 1][:BIG]), "broadcast %s count %d" % (t[0], BIG))
print("[%d] reductions: %.1f s" % (R, time.time() - t0), flush=True)

# The movement collectives, on the typed and the untyped types.
MOVERS = [(t[0], t[1], kw(t), lambda r, c, s, t=t: make(t, r, c, s)) for t in TYPED]
MOVERS += [(n, npt, {}, lambda r, c, s, npt=npt: make_untyped(npt, r, c, s))
           for n, npt in UNTYPED]
t0 = time.time()
for name, npt, k, gen in MOVERS:
    for count in COUNTS[:2] if name in dict(UNTYPED) else COUNTS:
        for root in range(N):
            what = "broadcast %s count %d root %d" % (name, count, root)
            data = gen(root, count, 2)
            x = data.copy() if R == root else np.zeros_like(data)
            out = comm.broadcast(x, root=root, **k)
            check(out is x and same(x, data), what + " in place")
            y = np.zeros_like(data)
            out = comm.broadcast(data.copy() if R == root else None, y, root, **k)
            check(out is y and same(y, data), what + " out of place")

            what = "gather %s count %d root %d" % (name, count, root)
            mine = gen(R, count, 3)
            full = cat([gen(r, count, 3) for r in range(N)])
            y = np.zeros_like(full) if R == root else None
            out = comm.gather(mine, y, root, **k)
            if R == root:
                check(out is y and same(y, full), what + " out of place")
                y = np.zeros_like(full)
                y[root * count:(root + 1) * count] = mine
                comm.gather(y[root * count:(root + 1) * count], y, root=root, **k)
                check(same(y, full), what + " in place")
            else:
                check(out is None, what + ": None off the root")
                comm.gather(mine, root=root, **k)

            what = "scatter %s count %d root %d" % (name, count, root)
            full = gen(root, N * count, 4)
            y = np.zeros(count, dtype=full.dtype)
            out = comm.scatter(full.copy() if R == root else None, y, root, **k)
            check(out is y and same(y, full[R * count:(R + 1) * count]), what + " out of place")
            if R == root:
                s = full.copy()
                comm.scatter(s, s[root * count:(root + 1) * count], root=root, **k)
                check(same(s, full), what + " in place")
            else:
                y = np.zeros(count, dtype=full.dtype)
                comm.scatter(None, y, root=root, **k)
                check(same(y, full[R * count:(R + 1) * count]), what + " in place (peer)")

        what = "allgather %s count %d" % (name, count)
        full = cat([gen(r, count, 5) for r in range(N)])
        y = np.zeros_like(full)
        out = comm.allgather(gen(R, count, 5), y, **k)
        check(out is y and same(y, full), what + " out of place")
        y = np.zeros_like(full)
        y[R * count:(R + 1) * count] = gen(R, count, 5)
        comm.allgather(y[R * count:(R + 1) * count], y, **k)
        check(same(y, full), what + " in place")

        what = "alltoall %s count %d" % (name, count)
        sends = [gen(r, N * count, 6) for r in range(N)]
        want = cat([sends[i][R * count:(R + 1) * count] for i in range(N)])
        y = np.zeros_like(want)
        out = comm.alltoall(sends[R].copy(), y, **k)
        check(out is y and same(y, want), what + " out of place")
        x = sends[R].copy()
        out = comm.alltoall(x, **k)
        check(out is x and same(x, want), what + " in place")

        what = "send/recv %s count %d" % (name, count)
        nxt, prv = (R + 1) % N, (R - 1) % N
        y = np.zeros(count, dtype=gen(0, 1, 0).dtype)
        with collective.group():
            comm.send(gen(R, count, 7), nxt, **k)   # a temporary: the group keeps it
            out = comm.recv(y, prv, **k)
        check(out is y and same(y, gen(prv, count, 7)), what + " ring in a group")
print("[%d] movement: %.1f s" % (R, time.time() - t0), flush=True)

# Count 0 and bytes-like objects other than numpy arrays.
e = np.zeros(0, np.float32)
check(comm.allreduce(e) is e, "allreduce of 0 elements")
comm.allgather(e, np.zeros(0, np.float32))
comm.broadcast(e, root=0)
ba = bytearray([R + 1] * 5)
comm.allreduce(ba, op="max")
check(ba == bytearray([N] * 5), "allreduce on a bytearray")
mv = memoryview(bytearray(8)).cast("d")
mv[0] = R
comm.allreduce(mv)
check(mv[0] == N * (N - 1) / 2, "allreduce on a memoryview cast to 'd'")
if N > 1 and R == 0:
    comm.send(b"hello", 1)       # bytes are fine to send
elif N > 1 and R == 1:
    buf = bytearray(5)
    comm.recv(buf, 0)
    check(buf == b"hello", "send of bytes")

# --------------------------------------------------------------- handles ---

xs = [np.full(5, R + k, np.float64) for k in range(8)]
hs = [comm.allreduce(x, async_=True) for x in xs]
for k in reversed(range(8)):
    out = hs[k].wait()
    check(out is xs[k] and hs[k].result is xs[k], "handle %d: result is the buffer" % k)
    check(np.all(xs[k] == N * (N - 1) / 2 + N * k), "handle %d: value" % k)
check(all(h.done() for h in hs), "handles done after wait")
check(hs[0].wait() is xs[0], "second wait returns the result again")

x = np.arange(4, dtype=np.float32) + R
y = np.zeros(4 * N, np.float32)
h = comm.allgather(x, y, async_=True)
deadline = time.time() + 30
while not h.done() and time.time() < deadline:
    time.sleep(0.0002)
check(h.done(), "done() becomes True")
check(h.wait() is y and same(y, np.concatenate([np.arange(4, dtype=np.float32) + r
                                                  for r in range(N)])), "allgather handle")
check("done" in repr(h), "handle repr %r" % h)

ba = bytearray(16)
h = comm.allreduce(ba, async_=True)
try:
    ba.extend(b"x")
    check(False, "a buffer of a pending handle can be resized")
except BufferError:
    passed += 1
h.wait()
ba.extend(b"x")
check(len(ba) == 17, "the buffer is released after wait")

h = comm.barrier(async_=True)
check(h.wait() is None and h.result is None, "async barrier")
comm.barrier()
h = comm.broadcast(np.full(3, R, np.int32), root=0, async_=True)
del h  # collected without wait: it waits for the call first
hs = [comm.reduce(np.full(2, 1.0), None, "sum", r, async_=True) for r in range(N)]
del hs
comm.barrier()
z = np.zeros(2, np.int64)
with collective.group():
    hs = comm.send(np.full(2, R, np.int64), (R + 1) % N, async_=True)
    hr = comm.recv(z, (R - 1) % N, async_=True)
check(hs.wait() is None and hr.wait() is z and np.all(z == (R - 1) % N),
      "async send and recv in a group")

# ----------------------------------------------------------------- groups ---

a = np.full(3, float(R))
b = np.full(3, float(2 * R))
with collective.group():
    ha = comm.allreduce(a, async_=True)
    hb = comm.allreduce(b, async_=True)
    check(not ha.done(), "a handle is not done while its group is open")
    expect_error(ha.wait, collective.InvalidUsage, ["still open"], "wait inside the group")
check(ha.wait() is a and hb.wait() is b, "group handles' results")
check(np.all(a == N * (N - 1) / 2) and np.all(b == N * (N - 1)), "group of async allreduces")

with collective.group():
    with collective.group():   # nested: only the outer end issues
        comm.allreduce(a)
    comm.allreduce(b)
check(np.all(a == N * N * (N - 1) / 2), "nested group")

a = np.ones(3)
try:
    with collective.group():
        comm.allreduce(a)
        raise RuntimeError("boom")
except RuntimeError:
    pass
check(np.all(a == 1), "a group whose block raised issues nothing")
try:
    with collective.group():
        comm.allreduce(a)
        comm.allreduce(a, async_=True)
    check(False, "a group mixing blocking and async calls")
except collective.InvalidUsage as e:
    check("stream" in e.message, "mixed group: the library's text: %r" % e.message)
comm.barrier()
check(np.all(a == 1), "a refused group issues nothing")
expect_error(collective._core.group_end, collective.InvalidUsage, ["no group"],
             "group_end without group_start")

# -------------------------------------------------------- split and shrink ---

sub = comm.split(None if (R == 0 and N > 1) else 1 + R % 2, key=-R)
if R == 0 and N > 1:
    check(sub is None, "split with color None gives None")
else:
    members = [r for r in range(N) if not (r == 0 and N > 1) and r % 2 == R % 2]
    check(isinstance(sub, collective.Communicator), "split returns a Communicator")
    check(sub.size == len(members), "split size %d, want %d" % (sub.size, len(members)))
    check(sub.rank == sorted(members, reverse=True).index(R), "split orders by key")
    v = np.array([R], np.int64)
    sub.allreduce(v)
    check(v[0] == sum(members), "allreduce on the split communicator")
    sub.destroy()
    sub.destroy()  # idempotent
    expect_error(lambda: sub.allreduce(v), collective.InvalidUsage, ["destroyed"],
                 "a call on a destroyed communicator")

if N > 1:
    if R != N - 1:
        small = comm.shrink(exclude=[N - 1])
        check(small.size == N - 1 and small.rank == R, "shrink: size and rank")
        v = np.ones(2)
        small.allreduce(v)
        check(np.all(v == N - 1), "allreduce after shrink")
        small.destroy()
    comm.barrier()

# revoke(): every rank revokes a copy; calls on it then fail, shrink() still works.
dup = comm.split(0, key=R)
dup.revoke()
dup.revoke()  # idempotent
expect_error(lambda: dup.allreduce(np.ones(2)), collective.RemoteError, ["revoked"],
             "a call on a revoked communicator")
again = dup.shrink()
v = np.ones(2)
again.allreduce(v)
check(np.all(v == N), "allreduce after shrinking a revoked communicator")
again.destroy()
dup.destroy()
expect_error(lambda: dup.revoke(), collective.InvalidUsage, ["destroyed"],
             "revoke on a destroyed communicator")

# grow(): ranks 0..N-2 split off a communicator and take the last rank back in,
# which joins with Communicator.join() and the id rank 0 made with grow_id().
if N > 1:
    old = comm.split(0 if R < N - 1 else None, key=R)
    gid = bytearray(collective._core.UNIQUE_ID_BYTES)
    if R == 0:
        gid[:] = old.grow_id()
    comm.broadcast(gid, root=0)
    if R < N - 1:
        expect_error(lambda: old.grow(N - 1), collective.InvalidArgument, ["does not exceed"],
                     "grow to no more ranks")
        grown = old.grow(N, bytes(gid) if R == 0 else None)
    else:
        expect_error(lambda: collective.Communicator.join(N, bytes(gid), 0),
                     collective.InvalidArgument, ["outside"], "join with an existing rank")
        grown = collective.Communicator.join(N, bytes(gid), R)
    check(isinstance(grown, collective.Communicator), "grow returns a Communicator")
    check(grown.size == N and grown.rank == R, "grow: size and rank")
    v = np.ones(3)
    grown.allreduce(v)
    check(np.all(v == N), "allreduce on the grown communicator")
    grown.destroy()
    if old is not None:
        if R == 1:
            expect_error(old.grow_id, collective.InvalidUsage, ["only rank 0"],
                         "grow_id on rank 1")
        old.destroy()

# The constructor, with a unique id sent over the first communicator.
uid = bytearray(collective._core.UNIQUE_ID_BYTES)
if R == 0:
    uid[:] = collective.get_unique_id()
comm.broadcast(uid, root=0)
with collective.Communicator(N, bytes(uid), R, timeout=datetime.timedelta(seconds=60),
                             name="pytest") as c2:
    v = np.full(2, R + 1, np.int32)
    c2.allreduce(v, op="prod")
    check(np.all(v == np.prod(np.arange(1, N + 1))), "Communicator(nranks, uid, rank)")
    check("rank %d of %d" % (R, N) in repr(c2), "repr %r" % c2)
expect_error(lambda: c2.barrier(), collective.InvalidUsage, ["destroyed"],
             "after the with block")
expect_error(lambda: collective.Communicator(N, b"short", R), collective.InvalidArgument,
             ["uid", "128"], "a short uid")

# --------------------------------------------------- raw() and streams ---

core = collective._core
s = core.Stream()
x = np.ones(3, np.float32)
comm.raw(core.FUNCS["allreduce"], x.ctypes.data, x.ctypes.data, 3, core.DTYPES["float32"],
         core.OPS["sum"], 0, s)
s.synchronize()
check(np.all(x == N) and s.query(), "raw on a stream")
comm.raw(core.FUNCS["allreduce"], x.ctypes.data, x.ctypes.data, 3, core.DTYPES["float32"],
         core.OPS["max"], 0)
check(np.all(x == N), "raw blocking")
e = expect_error(lambda: comm.raw(core.FUNCS["allreduce"], x.ctypes.data, x.ctypes.data, 3,
                                  99, 0, 0), collective.InvalidArgument,
                 ["datatype 99"], "raw with a bad dtype code")
s.destroy()
s.destroy()
expect_error(s.synchronize, collective.InvalidUsage, ["destroyed"], "a destroyed stream")

# ---------------------------------------------------------------- threads ---

if N > 1 and R < 2:
    # The GIL is released while a call blocks: a thread runs meanwhile.
    ticks = [0]
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    th = threading.Thread(target=tick)
    th.start()
    buf = np.zeros(1)
    if R == 0:
        comm.recv(buf, 1)
        stop.set()
        th.join()
        check(ticks[0] > 10, "a thread ran while recv blocked (%d ticks)" % ticks[0])
    else:
        time.sleep(0.3)
        comm.send(buf, 0)
        stop.set()
        th.join()
comm.barrier()

# One thread at a time per communicator; abort() from another thread.
pair = comm.split(1 if R < 2 else None)
if pair is not None and pair.size == 2:
    peer = 1 - pair.rank
    got = np.zeros(1)
    if pair.rank == 0:
        th = threading.Thread(target=lambda: pair.recv(got, peer))
        th.start()
        while True:   # until the thread's recv is in progress
            try:
                pair.broadcast(got, root=99)
            except collective.InvalidUsage as e:
                check("another thread" in str(e), "a second thread is refused: %s" % e)
                break
            except collective.InvalidArgument:
                time.sleep(0.001)
        comm.send(np.zeros(1), 1)     # tell the peer to send now
        th.join()
    else:
        comm.recv(np.zeros(1), 0)
        pair.send(np.full(1, 5.0), peer)
    errs = []
    if pair.rank == 0:
        def blocked():
            try:
                pair.recv(got, peer)   # never sent: abort() ends it
            except collective.Error as e:
                errs.append(e)
        th = threading.Thread(target=blocked)
        th.start()
        time.sleep(0.2)
        pair.abort()
        th.join(30)
        check(not th.is_alive() and len(errs) == 1, "abort() ends a blocked call")
        check(errs and "aborted" in str(errs[0]), "its error says aborted: %r" % errs)
        pair.abort()  # idempotent
        expect_error(lambda: pair.barrier(), collective.InvalidUsage, ["aborted"],
                     "a call after abort")
        comm.send(np.zeros(1), 1)     # the peer may abort its side now
    else:
        comm.recv(np.zeros(1), 0)
        pair.abort()
elif pair is not None:
    pair.destroy()
comm.barrier()

# ----------------------------------------------------------------- errors ---

x4 = np.arange(4, dtype=np.float32)
expect_error(lambda: comm.allreduce(np.zeros(8)[::2]), collective.InvalidArgument,
             ["allreduce", "send", "C-contiguous"], "a strided send")
ro = np.zeros(4, np.float32)
ro.flags.writeable = False
expect_error(lambda: comm.allreduce(x4, ro), ValueError, ["recv", "read-only"],
             "a read-only recv")
expect_error(lambda: comm.allreduce(bytes(8)), ValueError, ["send", "read-only"],
             "in place in bytes")
expect_error(lambda: comm.allreduce([1.0, 2.0]), TypeError, ["send", "buffer protocol", "list"],
             "a list")
expect_error(lambda: comm.allgather(x4, np.zeros(4 * N + 1, np.float32)),
             collective.InvalidArgument,
             ["allgather", "recv", str(4 * N + 1), str(4 * N)], "allgather recv size")
expect_error(lambda: comm.allgather(x4), TypeError, ["recv"], "allgather without recv")
expect_error(lambda: comm.reduce_scatter(np.zeros(4 * N + 1, np.float32), x4),
             collective.InvalidArgument, ["send", str(4 * N + 1), str(4 * N)],
             "reduce_scatter send size")
expect_error(lambda: comm.alltoall(np.zeros(N + 1 if N > 1 else 1, np.float32),
                                   np.zeros(5, np.float32)),
             collective.InvalidArgument, ["alltoall"], "alltoall sizes")
expect_error(lambda: comm.allreduce(x4, np.zeros(4)), collective.InvalidArgument,
             ["recv", "float64", "float32"], "recv of another type")
expect_error(lambda: comm.allreduce(x4, op="mean"), collective.InvalidArgument,
             ["op", "mean"], "a bad op")
expect_error(lambda: comm.allreduce(x4, op=1.5), TypeError, ["op"], "op of a bad type")
expect_error(lambda: comm.allreduce(x4, dtype="int7"), collective.InvalidArgument,
             ["dtype", "int7"], "a bad dtype")
expect_error(lambda: comm.allreduce(x4, dtype="bfloat16"), collective.InvalidArgument,
             ["dtype", "bfloat16"], "dtype of another size")
expect_error(lambda: comm.allreduce(np.zeros(3, np.int16)), collective.InvalidArgument,
             ["send", "dtype="], "a reduction of int16")
expect_error(lambda: comm.allreduce(x4, bogus=1), TypeError, ["bogus"], "a bad keyword")
expect_error(lambda: comm.allreduce(x4, None, "sum", 4), TypeError, ["positional"],
             "too many positional arguments")
expect_error(lambda: comm.allreduce(), TypeError, ["send"], "no send")
expect_error(lambda: comm.send(x4), TypeError, ["peer"], "send without peer")
expect_error(lambda: comm.send(x4, "one"), TypeError, ["peer"], "a peer of a bad type")
expect_error(lambda: comm.gather(x4, None, R), collective.InvalidArgument,
             ["gather", "recv", "root"], "gather without recv on the root")
expect_error(lambda: comm.scatter(None, x4, R), collective.InvalidArgument,
             ["scatter", "send", "root"], "scatter without send on the root")
e = expect_error(lambda: comm.broadcast(x4, root=N), collective.InvalidArgument,
                 ["collBroadcast", "root %d" % N], "root out of range")
if e is not None:
    check(e.code == 4 and isinstance(e, ValueError) and e.message.startswith("collBroadcast"),
          "the error carries the code and the library's text: %r %r" % (e.code, e.message))
    check("collInvalidArgument" in str(e) and e.message in str(e), "str() shows both: %s" % e)
expect_error(lambda: comm.send(x4, N), collective.InvalidArgument, ["peer %d" % N],
             "peer out of range")
expect_error(lambda: comm.reduce(x4, root=-1), collective.InvalidArgument, ["root -1"],
             "negative root")
check(issubclass(collective.Timeout, TimeoutError) and collective.Timeout.code == 8,
      "Timeout is a TimeoutError with code 8")
check(issubclass(collective.RemoteError, collective.Error), "RemoteError is an Error")
comm.barrier()   # refused calls left the communicator usable
check(comm.async_error() == 0, "no refused call poisoned the communicator")

# bytes() (collCommGetBytes): rank 0 sends 4000 bytes to rank 1, which count with the
# message's 16-byte header on each side, and nothing on the other ranks.
b0 = comm.bytes()
check(isinstance(b0, tuple) and len(b0) == 2 and all(isinstance(v, int) and v >= 0 for v in b0),
      "bytes() is a (sent, received) pair of ints: %r" % (b0,))
if N >= 2 and R == 0:
    comm.send(np.zeros(1000, np.float32), 1)
elif N >= 2 and R == 1:
    comm.recv(np.zeros(1000, np.float32), 0)
b1 = comm.bytes()
want = (4016 if N >= 2 and R == 0 else 0, 4016 if N >= 2 and R == 1 else 0)
check((b1[0] - b0[0], b1[1] - b0[1]) == want,
      "bytes() around a send of 4000 bytes grew by %r, want %r"
      % ((b1[0] - b0[0], b1[1] - b0[1]), want))

# A failure during an async call: a size mismatch poisons a throwaway communicator,
# and wait() raises the library's text, which names both sizes.
pair = comm.split(1 if R < 2 else None)
if pair is not None and pair.size == 2:
    if pair.rank == 0:
        h = pair.send(np.zeros(2, np.float64), 1, async_=True)
    else:
        h = pair.recv(np.zeros(1, np.float64), 0, async_=True)
    if pair.rank == 1:
        e = expect_error(h.wait, collective.InvalidUsage, ["16 bytes", "8"],
                         "a failed async call: the library's text names both sizes")
        check(pair.async_error() != 0, "the failure poisoned the communicator")
        expect_error(h.wait, collective.InvalidUsage, ["16 bytes"], "wait raises again")
    else:
        try:   # the send may have completed before the receiver refused it
            h.wait()
        except collective.Error:
            pass
    pair.destroy()
elif pair is not None:
    pair.destroy()
comm.barrier()

comm.destroy()
comm.destroy()
expect_error(comm.bytes, collective.InvalidUsage, ["bytes", "destroyed"],
             "bytes() of a destroyed communicator")
print("[%d] %d passed, %d failed" % (R, passed, len(failures)), flush=True)
sys.exit(1 if failures else 0)
