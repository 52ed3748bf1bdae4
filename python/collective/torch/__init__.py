"""The torch.distributed backend "collective".

Importing this module registers the backend with torch.distributed:

    import torch.distributed as dist
    import collective.torch                       # registers "collective"
    dist.init_process_group("collective")         # env://, tcp://, file://
    sub = dist.new_group([0, 1], backend="collective")

Each process group owns one communicator of the library (made from a unique id that
rank 0 of the group creates and hands to the others through the group's Store; the
group's timeout becomes the communicator's timeout_ms), a pool of library streams and a
completion thread.  Every call checks its arguments, stages non-contiguous tensors,
issues the operation on a stream of its own and returns a Work at once; the library
runs it on the communicator's progress thread while Python goes on.  The completion
thread waits for the operations in the order they were issued (calls on one
communicator run in that order), copies staged results back and completes the Work and
its Future: with the output tensors, or with a RuntimeError carrying the library's text
(which names the operation and the rank to blame).

It is built on the low-level module collective._core (Comm.raw with integer codes and
addresses, Stream, group_start/group_end, Error), never on the buffer-protocol methods
of collective.Communicator.  The tensors must be CPU tensors; see docs/python.md for
what each call supports.
"""
import atexit
import collections
import datetime
import os
import queue
import threading
import warnings
import weakref

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Work as _TorchWork

from . import _core

__all__ = ["BACKEND", "ProcessGroupCollective", "create_process_group"]

BACKEND = "collective"

# torch dtype -> the library's type name.  bool travels as uint8 (0 or 1), and its sum
# and product become max and min: logical or and logical and.
_TYPE_NAMES = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "uint8",
}
_DTYPE = {t: _core.DTYPES[n] for t, n in _TYPE_NAMES.items()}
_F = _core.FUNCS
_OP = _core.OPS
_RT = dist.ReduceOp.RedOpType
_OP_NAMES = {_RT.SUM: "sum", _RT.PRODUCT: "prod", _RT.MIN: "min", _RT.MAX: "max"}
if hasattr(_RT, "AVG"):
    _OP_NAMES[_RT.AVG] = "avg"
_BOOL_OPS = {"sum": "max", "prod": "min", "min": "min", "max": "max"}

# How many completed Work objects each group keeps referenced.  C++ callers inside torch
# (DDP's reducer) hold a Work returned by this Python class and may call wait() on it a
# little after it completed; the Python object must still be alive then, or the call
# falls through to the C++ base class.  The reducer waits before it issues anything new,
# so a few suffice; each kept Work holds its output tensors.
_KEEP_COMPLETED = 8

# Whether the library has collGather / collScatter (the bindings say "not in this build"
# otherwise, and gather and scatter fall back to groups of sends and receives).
_HAVE_ROOTED = [True]
_NOT_BUILT = "not in this build"

# How long closing a group at exit waits for operations still in flight before it aborts
# the communicator (their peers may be gone).
_CLOSE_GRACE_S = 10.0


def _fail(msg):
    return RuntimeError("collective: " + msg)


def _millis(timeout):
    """A timedelta (or seconds) as whole milliseconds, None when unset or not positive."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        ms = int(timeout.total_seconds() * 1000)
    else:
        ms = int(float(timeout) * 1000)
    return min(ms, 2**31 - 1) if ms > 0 else None


# ---------------------------------------------------------------------------------------
# Argument checks and staging.


def _check_tensor(t, what, call):
    """Refuses what the library cannot take, naming the tensor and the problem."""
    if not isinstance(t, torch.Tensor):
        raise _fail(f"{call}: {what} must be a torch.Tensor, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise _fail(
            f"{call}: {what} is on device {t.device}; the collective backend takes CPU tensors "
            f"only (move it with .cpu(), or use a group of another backend for {t.device.type})"
        )
    if t.layout != torch.strided:
        raise _fail(f"{call}: {what} has layout {t.layout}; only dense (strided) tensors are "
                    f"supported")
    if t.dtype not in _DTYPE:
        hint = " (view it with torch.view_as_real)" if t.is_complex() else ""
        raise _fail(
            f"{call}: {what} has dtype {t.dtype}, which the collective backend does not support"
            f"{hint}; supported: " + ", ".join(str(d) for d in _DTYPE)
        )


def _tensor_list(x, what, call):
    if isinstance(x, torch.Tensor):
        return [x]
    if not isinstance(x, (list, tuple)):
        raise _fail(f"{call}: {what} must be a list of tensors, not {type(x).__name__}")
    return list(x)


def _one(tensors, what, call):
    """The single tensor of a list (the *_multigpu forms with several are refused)."""
    ts = _tensor_list(tensors, what, call)
    if len(ts) != 1:
        raise _fail(
            f"{call}: takes exactly one tensor in {what} (got {len(ts)}); the collective "
            f"backend has one CPU device per process, so the *_multigpu forms are not supported"
        )
    # Name it as torch's wrappers do: tensors -> tensor, input_tensors -> input_tensor.
    _check_tensor(ts[0], what[:-1] if what.endswith("s") else what, call)
    return ts[0]


def _per_rank(lists, what, call, n, one_msg, list_name):
    """The inner list of n tensors that torch passes as [[t_0, ..., t_n-1]]; one_msg
    (with {got}) refuses another number of lists, list_name names the inner one."""
    if len(lists) != 1:
        raise _fail(f"{call}: " + one_msg.format(got=len(lists)))
    ts = _tensor_list(lists[0], f"{what}[0]", call)
    if len(ts) != n:
        raise _fail(f"{call}: the {list_name} list has {len(ts)} tensors; the group has "
                    f"{n} ranks")
    return ts


def _same_kind(ref, t, what, call, ref_what, numel=None):
    """t must have ref's dtype, and numel elements (default: ref's)."""
    _check_tensor(t, what, call)
    if t.dtype != ref.dtype:
        raise _fail(f"{call}: {what} has dtype {t.dtype} but {ref_what} has {ref.dtype}; "
                    f"all tensors of one call must have the same dtype")
    want = ref.numel() if numel is None else numel
    if t.numel() != want:
        raise _fail(f"{call}: {what} has {t.numel()} elements (shape {tuple(t.shape)}) but "
                    f"{want} are expected (from {ref_what}, shape {tuple(ref.shape)})")


def _src(t):
    """A contiguous tensor with t's data, for reading."""
    return t if t.is_contiguous() else t.contiguous()


class _Dst:
    """Where a result lands: t itself when contiguous, else a contiguous stage that is copied
    back to t once the operation is done.  inout: the stage starts with t's data."""

    __slots__ = ("t", "buf")

    def __init__(self, t, inout=False):
        self.t = t
        if t.is_contiguous():
            self.buf = t
        else:
            self.buf = t.contiguous() if inout else torch.empty(t.shape, dtype=t.dtype)

    def back(self):
        if self.buf is not self.t:
            self.t.copy_(self.buf)


def _copy_back(dsts):
    def post():
        for d in dsts:
            d.back()
    return post


def _reduce_op(op, dtype, call):
    """The library's op code for a torch ReduceOp (or RedOpType) on tensors of dtype."""
    kind = getattr(op, "op", op)
    name = _OP_NAMES.get(kind)
    if name is None:
        label = getattr(kind, "name", str(kind))
        if label in ("BAND", "BOR", "BXOR"):
            raise _fail(f"{call}: ReduceOp.{label} is not supported: the collective backend has "
                        f"no bitwise reductions (SUM, PRODUCT, MIN, MAX and AVG are supported)")
        raise _fail(f"{call}: ReduceOp.{label} is not supported by the collective backend "
                    f"(SUM, PRODUCT, MIN, MAX and AVG are supported)")
    if dtype == torch.bool:
        if name == "avg":
            raise _fail(f"{call}: ReduceOp.AVG is not defined for torch.bool tensors")
        name = _BOOL_OPS[name]
    return _OP[name]


def _opts_op(opts, default_cls):
    """The reduce op of an options object, or opts itself when a ReduceOp was passed."""
    if opts is None:
        return dist.ReduceOp.SUM
    if isinstance(opts, default_cls):
        return opts.reduceOp
    return opts


def _root(opts, n, call):
    root = opts.rootRank
    if getattr(opts, "rootTensor", 0) != 0:
        raise _fail(f"{call}: rootTensor must be 0 (one tensor per process), got {opts.rootTensor}")
    if not 0 <= root < n:
        raise _fail(f"{call}: root rank {root} is outside the group of {n} ranks")
    return root


# ---------------------------------------------------------------------------------------
# Work.


def _unwrap(fut):
    return fut.value()


class _Work(_TorchWork):
    """Work of one call: completed by the group's completion thread.

    wait() blocks (without the GIL) until the operation is done and raises its failure as
    a RuntimeError; get_future() returns a torch Future that completes with the output
    tensors, or with that error (in C++ too, so DDP's reducer sees it)."""

    def __init__(self, call, outputs, done_thread=None):
        super().__init__()
        self._call = call
        self._done_thread = done_thread
        self._outputs = outputs
        self._error = None
        self._done = threading.Event()
        self._src = torch.futures.Future()
        # A future derived with then(): when _src holds an exception, the derived one is
        # failed in C++ as well, which is what C++ consumers of get_future() look at.
        self._fut = self._src.then(_unwrap)

    def _finish(self, error):
        self._error = error
        if error is None:
            self._src.set_result(self._outputs)
        else:
            self._src.set_exception(error)
        self._done.set()

    def wait(self, timeout=None):
        ms = _millis(timeout)
        if not self._done.is_set() and threading.current_thread() is self._done_thread:
            # A callback of an earlier call's future runs on the completion thread, which
            # completes this call only after the callback returns.
            raise _fail(f"{self._call}: waiting for a call of the same group inside a "
                        f"future's callback would never end; chain it with then() instead")
        if not self._done.wait(None if ms is None else ms / 1000.0):
            raise _fail(f"{self._call} did not complete within {ms} ms")
        if self._error is not None:
            raise RuntimeError(str(self._error))
        return True

    def is_completed(self):
        return self._done.is_set()

    def is_success(self):
        return self._done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def get_future(self):
        return self._fut

    def synchronize(self):
        pass

    def source_rank(self):
        raise _fail("source_rank() is only defined for receives from any source, which the "
                    "collective backend does not support")

    _source_rank = source_rank

    def __repr__(self):
        state = "done" if self._done.is_set() else "pending"
        if self._error is not None:
            state = "failed"
        return f"<collective work {self._call} {state}>"


class _Pending:
    __slots__ = ("works", "stream", "post", "keep", "call")

    def __init__(self, works, stream, post, keep, call):
        self.works = works
        self.stream = stream
        self.post = post
        self.keep = keep
        self.call = call


# ---------------------------------------------------------------------------------------
# The per-group state: communicator, streams, completion thread.

_LIVE = weakref.WeakSet()


class _State:
    def __init__(self, comm, label):
        self.comm = comm
        self.label = label
        self.lock = threading.Lock()  # one issuing thread at a time on the communicator
        self.free = []  # idle streams
        self.queue = queue.SimpleQueue()
        self.recent = collections.deque(maxlen=_KEEP_COMPLETED)
        self.closed = False
        self.destroyed = False
        self.inflight = 0
        self.thread = threading.Thread(target=self._run, name=f"collective-done {label}",
                                       daemon=True)
        self.thread.start()
        _LIVE.add(self)

    # Streams are only taken and given back under self.lock.
    def _take(self):
        return self.free.pop() if self.free else _core.Stream()

    def issue(self, call, launch, works, post=None, keep=()):
        """Runs launch(stream) (which issues the library calls on stream) and queues the
        completion.  A refusal raises here, and nothing is queued."""
        with self.lock:
            if self.closed:
                raise _fail(f"{call}: the process group {self.label} has been shut down")
            stream = self._take()
            try:
                launch(stream)
            except _core.Error as e:
                self.free.append(stream)
                # Bad arguments are refused; a poisoned communicator fails every call.
                how = "refused" if isinstance(e, (_core.InvalidArgument, _core.InvalidUsage)) \
                    else "failed"
                raise _fail(f"{call} on {self.label} {how}: {e}") from None
            except BaseException:
                self.free.append(stream)
                raise
            self.inflight += 1
            self.queue.put(_Pending(works, stream, post, keep, call))

    def _run(self):
        torch.set_grad_enabled(False)  # copies back into leaves that require grad
        while True:
            item = self.queue.get()
            if item is None:
                break
            error = None
            try:
                item.stream.synchronize()  # releases the GIL while it waits
            except _core.Error as e:
                error = _fail(f"{item.call} on {self.label} failed: {self._cause(e)}")
            except BaseException as e:  # noqa: BLE001 - reported through the Work
                error = _fail(f"{item.call} on {self.label} failed: {e!r}")
            if error is None and item.post is not None:
                try:
                    item.post()
                except BaseException as e:  # noqa: BLE001
                    error = _fail(f"{item.call} on {self.label}: copying the result back "
                                  f"failed: {e!r}")
            with self.lock:
                self.free.append(item.stream)
                self.inflight -= 1
            item.keep = None
            for w in item.works:
                try:
                    w._finish(error)
                except BaseException:  # noqa: BLE001 - a callback of the user's failed
                    pass
                self.recent.append(w)
        if self.destroyed is False and self._in_own_thread_close:
            self._teardown()

    _in_own_thread_close = False

    def _cause(self, e):
        """The library's text for a failure a stream reported: the communicator's last
        error (read under the issuing lock: the text belongs to the communicator)."""
        with self.lock:
            try:
                text = self.comm.last_error()
            except _core.Error:
                text = ""
        name = type(e).__name__
        if isinstance(e, _core.Timeout):
            # torch's own tests and tools look for "Timed out" in a timeout's message.
            return f"Timed out ({text})" if text else f"Timed out ({e})"
        return f"{text} ({name})" if text else str(e)

    def close(self):
        """Finishes the group: waits a while for the operations in flight, aborts the
        communicator if they do not end, and frees streams and communicator."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.queue.put(None)
        if threading.current_thread() is self.thread:
            self._in_own_thread_close = True  # the loop tears down once it ends
            return
        self.thread.join(_CLOSE_GRACE_S)
        if self.thread.is_alive():
            try:
                self.comm.abort()
            except _core.Error:
                pass
            self.thread.join()
        self._teardown()

    def _teardown(self):
        if self.destroyed:
            return
        self.destroyed = True
        for s in self.free:
            try:
                s.destroy()
            except _core.Error:
                pass
        self.free = []
        try:
            self.comm.destroy()
        except _core.Error:
            pass


@atexit.register
def _close_all():
    for st in list(_LIVE):
        st.close()


# ---------------------------------------------------------------------------------------
# The process group.


class ProcessGroupCollective(dist.ProcessGroup):
    """A torch.distributed process group backed by one libcollective communicator.

    Made by torch.distributed (init_process_group / new_group with backend "collective");
    create_process_group(store, rank, size, timeout) makes one directly."""

    def __init__(self, comm, rank, size, timeout, name="", global_ranks=None):
        super().__init__(rank, size)
        self._comm = comm
        self._timeout = timeout
        self._name = name
        self._global_ranks = list(global_ranks) if global_ranks else None
        where = f"group {name!r}" if name else "group"
        if self._global_ranks and self._global_ranks != list(range(size)):
            where += f" (global ranks {self._global_ranks})"
        self._label = f"{where}, rank {rank} of {size}"
        self._state = _State(comm, self._label)
        self._coalescing = None
        self._seq = 0
        weakref.finalize(self, _State.close, self._state)

    # -- identity --------------------------------------------------------------------
    def getBackendName(self):  # noqa: N802 - the name C++ looks up
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    def __repr__(self):
        return f"<ProcessGroupCollective {self._label}>"

    def _set_sequence_number_for_group(self):
        """Restarts the count of calls (every rank starts from 0 together)."""
        self._seq = 0

    def _get_sequence_number_for_group(self):
        """The number of calls issued on this group since the count started."""
        return self._seq

    def shutdown(self):
        """Waits for the operations in flight and frees the communicator; later calls on
        this group are refused."""
        self._state.close()

    # -- issuing ---------------------------------------------------------------------
    def _issue(self, call, launch, outputs, post=None, keep=()):
        if self._coalescing is not None:
            raise _fail(f"{call}: only send and recv may be issued between _start_coalescing "
                        f"and _end_coalescing (batch_isend_irecv)")
        work = _Work(call, outputs, self._state.thread)
        self._state.issue(call, launch, [work], post, keep)
        self._seq += 1
        return work

    def _raw(self, func, send, recv, count, dtype, op, root, stream):
        self._comm.raw(_F[func], send, recv, count, _DTYPE[dtype], op, root, stream)

    def _check_peer(self, peer, call):
        n = self.size()
        if not isinstance(peer, int) or not 0 <= peer < n:
            raise _fail(f"{call}: peer rank {peer} is outside the group of {n} ranks")
        if peer == self.rank():
            raise _fail(f"{call}: rank {peer} cannot send to or receive from itself")

    def _p2p_group(self, stream, sends, recvs):
        """Issues sends [(tensor, peer)] and receives [(tensor, peer)] as one library group:
        they progress together, in any order, without deadlock."""
        _core.group_start()
        try:
            for t, peer in sends:
                self._raw("send", t.data_ptr(), 0, t.numel(), t.dtype, 0, peer, stream)
            for t, peer in recvs:
                self._raw("recv", 0, t.data_ptr(), t.numel(), t.dtype, 0, peer, stream)
        finally:
            _core.group_end()

    # -- allreduce -------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        call = "allreduce"
        t = _one(tensors, "tensors", call)
        op = _reduce_op(_opts_op(opts, dist.AllreduceOptions), t.dtype, call)
        d = _Dst(t, inout=True)
        buf = d.buf

        def launch(s):
            self._raw("allreduce", buf.data_ptr(), buf.data_ptr(), buf.numel(), t.dtype, op, 0, s)

        return self._issue(call, launch, [t], _copy_back([d]), keep=(buf,))

    def allreduce_coalesced(self, tensors, opts=None):
        call = "allreduce_coalesced"
        ts = _tensor_list(tensors, "tensors", call)
        if not ts:
            raise _fail(f"{call}: tensors is empty")
        for i, x in enumerate(ts):
            _check_tensor(x, f"tensors[{i}]", call)
            if x.dtype != ts[0].dtype:
                raise _fail(f"{call}: tensors[{i}] has dtype {x.dtype} but tensors[0] has "
                            f"{ts[0].dtype}; all tensors of one call must have the same dtype")
        op = _reduce_op(_opts_op(opts, dist.AllreduceCoalescedOptions), ts[0].dtype, call)
        flat = torch.cat([x.reshape(-1) for x in ts])

        def launch(s):
            self._raw("allreduce", flat.data_ptr(), flat.data_ptr(), flat.numel(), flat.dtype,
                      op, 0, s)

        def post():
            off = 0
            for x in ts:
                x.copy_(flat[off:off + x.numel()].view(x.shape))
                off += x.numel()

        return self._issue(call, launch, ts, post, keep=(flat,))

    # -- broadcast / reduce ------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        call = "broadcast"
        t = _one(tensors, "tensors", call)
        if isinstance(opts, int):
            root = opts
            if not 0 <= root < self.size():
                raise _fail(f"{call}: root rank {root} is outside the group of {self.size()} ranks")
        else:
            root = _root(opts if opts is not None else dist.BroadcastOptions(), self.size(), call)
        d = _Dst(t, inout=True)
        buf = d.buf

        def launch(s):
            self._raw("broadcast", buf.data_ptr(), buf.data_ptr(), buf.numel(), t.dtype, 0, root, s)

        return self._issue(call, launch, [t], _copy_back([d]), keep=(buf,))

    def reduce(self, tensors, opts=None, op=None):
        call = "reduce"
        t = _one(tensors, "tensors", call)
        if isinstance(opts, int):  # reduce(tensor, root, op=SUM)
            o = dist.ReduceOptions()
            o.rootRank = opts
            if op is not None:
                o.reduceOp = op
            opts = o
        elif opts is None:
            opts = dist.ReduceOptions()
        root = _root(opts, self.size(), call)
        rop = _reduce_op(opts.reduceOp, t.dtype, call)
        is_root = self.rank() == root
        d = _Dst(t, inout=True)
        buf = d.buf

        def launch(s):
            # Off the root nothing is received: the input stays as it was.
            recv = buf.data_ptr() if is_root else 0
            self._raw("reduce", buf.data_ptr(), recv, buf.numel(), t.dtype, rop, root, s)

        return self._issue(call, launch, [t], _copy_back([d]) if is_root else None, keep=(buf,))

    # -- allgather ---------------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        call = "allgather"
        n = self.size()
        if isinstance(input_tensors, torch.Tensor):  # allgather(List[Tensor], Tensor)
            output_tensors = [output_tensors]
        t = _one(input_tensors, "input_tensors", call)
        outs = _per_rank(_tensor_list(output_tensors, "output_tensors", call), "output_tensors",
                         call, n, "takes one list of output tensors (got {got}); the "
                         "*_multigpu forms are not supported", "output")
        for i, o in enumerate(outs):
            _same_kind(t, o, f"output tensor {i}", call, "the input tensor")
        src = _src(t)
        count = src.numel()
        flat = torch.empty(n * count, dtype=t.dtype)

        def launch(s):
            self._raw("allgather", src.data_ptr(), flat.data_ptr(), count, t.dtype, 0, 0, s)

        def post():
            for i, o in enumerate(outs):
                o.copy_(flat[i * count:(i + 1) * count].view(o.shape))

        return self._issue(call, launch, outs, post, keep=(src, flat))

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        call = "all_gather_into_tensor"
        n = self.size()
        _check_tensor(input, "input", call)
        _same_kind(input, output, "output", call, "input", numel=n * input.numel())
        src = _src(input)
        d = _Dst(output)
        buf = d.buf

        def launch(s):
            self._raw("allgather", src.data_ptr(), buf.data_ptr(), src.numel(), input.dtype, 0,
                      0, s)

        return self._issue(call, launch, [output], _copy_back([d]), keep=(src, buf))

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        call = "allgather_coalesced"
        n = self.size()
        ins = _tensor_list(input_list, "input_list", call)
        outs = _tensor_list(output_lists, "output_lists", call)
        if not ins:
            raise _fail(f"{call}: input_list is empty")
        if len(outs) != n:
            raise _fail(f"{call}: output_lists has {len(outs)} lists; the group has {n} ranks")
        for i, x in enumerate(ins):
            _check_tensor(x, f"input_list[{i}]", call)
            if x.dtype != ins[0].dtype:
                raise _fail(f"{call}: input_list[{i}] has dtype {x.dtype} but input_list[0] has "
                            f"{ins[0].dtype}; all tensors of one call must have the same dtype")
        for r, lst in enumerate(outs):
            lst = _tensor_list(lst, f"output_lists[{r}]", call)
            if len(lst) != len(ins):
                raise _fail(f"{call}: output_lists[{r}] has {len(lst)} tensors; input_list has "
                            f"{len(ins)}")
            for i, o in enumerate(lst):
                _same_kind(ins[i], o, f"output_lists[{r}][{i}]", call, f"input_list[{i}]")
        flat_in = torch.cat([x.reshape(-1) for x in ins])
        count = flat_in.numel()
        flat = torch.empty(n * count, dtype=flat_in.dtype)

        def launch(s):
            self._raw("allgather", flat_in.data_ptr(), flat.data_ptr(), count, flat_in.dtype,
                      0, 0, s)

        def post():
            for r, lst in enumerate(outs):
                off = r * count
                for o in lst:
                    o.copy_(flat[off:off + o.numel()].view(o.shape))
                    off += o.numel()

        return self._issue(call, launch, [o for lst in outs for o in lst], post,
                           keep=(flat_in, flat))

    # -- reduce_scatter ------------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        call = "reduce_scatter"
        n = self.size()
        if isinstance(output_tensors, torch.Tensor):  # reduce_scatter(Tensor, List, op)
            output_tensors = [output_tensors]
            input_tensors = [input_tensors]
            opts_op = opts if opts is not None else dist.ReduceOp.SUM
        else:
            opts_op = _opts_op(opts, dist.ReduceScatterOptions)
        out = _one(output_tensors, "output_tensors", call)
        ins = _per_rank(_tensor_list(input_tensors, "input_tensors", call), "input_tensors",
                        call, n, "takes one list of input tensors (got {got}); the "
                        "*_multigpu forms are not supported", "input")
        for i, x in enumerate(ins):
            _same_kind(out, x, f"input tensor {i}", call, "the output tensor")
        op = _reduce_op(opts_op, out.dtype, call)
        flat = torch.cat([x.reshape(-1) for x in ins]) if ins else torch.empty(0, dtype=out.dtype)
        d = _Dst(out)
        buf = d.buf

        def launch(s):
            self._raw("reduce_scatter", flat.data_ptr(), buf.data_ptr(), buf.numel(), out.dtype,
                      op, 0, s)

        return self._issue(call, launch, [out], _copy_back([d]), keep=(flat, buf))

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        call = "reduce_scatter_tensor"
        n = self.size()
        _check_tensor(output, "output", call)
        _same_kind(output, input, "input", call, "output", numel=n * output.numel())
        op = _reduce_op(_opts_op(opts, dist.ReduceScatterOptions), output.dtype, call)
        src = _src(input)
        d = _Dst(output)
        buf = d.buf

        def launch(s):
            self._raw("reduce_scatter", src.data_ptr(), buf.data_ptr(), buf.numel(),
                      output.dtype, op, 0, s)

        return self._issue(call, launch, [output], _copy_back([d]), keep=(src, buf))

    # -- all-to-all ----------------------------------------------------------------------
    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        call = "all_to_all_single"
        n = self.size()
        _check_tensor(input, "input", call)
        _check_tensor(output, "output", call)
        if output.dtype != input.dtype:
            raise _fail(f"{call}: output has dtype {output.dtype} but input has {input.dtype}")
        osp = list(output_split_sizes or [])
        isp = list(input_split_sizes or [])
        if not osp and not isp:
            if input.numel() % n:
                raise _fail(f"{call}: input has {input.numel()} elements, not a multiple of the "
                            f"group size {n}; pass split sizes")
            if output.numel() != input.numel():
                raise _fail(f"{call}: output has {output.numel()} elements but input has "
                            f"{input.numel()}; with equal splits they must match")
            src = _src(input)
            d = _Dst(output)
            buf = d.buf
            count = input.numel() // n

            def launch(s):
                self._raw("alltoall", src.data_ptr(), buf.data_ptr(), count, input.dtype, 0, 0, s)

            return self._issue(call, launch, [output], _copy_back([d]), keep=(src, buf))

        # Uneven: split sizes count rows (the first dimension); a group of sends and
        # receives, one pair per peer (itself included).
        def splits(sp, t, what):
            if t.dim() == 0:
                raise _fail(f"{call}: {what} is a 0-dim tensor; split sizes need a first dimension")
            rows = t.shape[0]
            if not sp:
                if rows % n:
                    raise _fail(f"{call}: {what} has {rows} rows, not a multiple of the group "
                                f"size {n}; pass its split sizes")
                sp = [rows // n] * n
            if len(sp) != n:
                raise _fail(f"{call}: {what} split sizes {sp} have {len(sp)} entries; the group "
                            f"has {n} ranks")
            if any((not isinstance(x, int)) or x < 0 for x in sp) or sum(sp) != rows:
                raise _fail(f"{call}: {what} split sizes {sp} must be non-negative and sum to its "
                            f"{rows} rows")
            return sp

        isp = splits(isp, input, "input")
        osp = splits(osp, output, "output")
        src = _src(input)
        d = _Dst(output)
        buf = d.buf
        in_row = src[0].numel() if src.shape[0] else 0
        out_row = buf[0].numel() if buf.shape[0] else 0
        if src.shape[0] and buf.shape[0] and in_row != out_row:
            raise _fail(f"{call}: input rows have {in_row} elements but output rows have "
                        f"{out_row}")
        fsrc = src.reshape(-1)
        fbuf = buf.view(-1)
        sends, recvs = [], []
        off = 0
        for p in range(n):
            sends.append((fsrc[off * in_row:(off + isp[p]) * in_row], p))
            off += isp[p]
        off = 0
        for p in range(n):
            recvs.append((fbuf[off * out_row:(off + osp[p]) * out_row], p))
            off += osp[p]

        def launch(s):
            self._p2p_group(s, sends, recvs)

        return self._issue(call, launch, [output], _copy_back([d]), keep=(src, buf, fsrc, fbuf))

    def alltoall(self, output_tensors, input_tensors, opts=None):
        call = "all_to_all"
        n = self.size()
        outs = _tensor_list(output_tensors, "output_tensor_list", call)
        ins = _tensor_list(input_tensors, "input_tensor_list", call)
        if len(outs) != n or len(ins) != n:
            raise _fail(f"{call}: the lists have {len(ins)} input and {len(outs)} output tensors; "
                        f"the group has {n} ranks")
        for i, x in enumerate(ins):
            _check_tensor(x, f"input_tensor_list[{i}]", call)
        for i, o in enumerate(outs):
            _check_tensor(o, f"output_tensor_list[{i}]", call)
        dt = ins[0].dtype
        for what, lst in (("input_tensor_list", ins), ("output_tensor_list", outs)):
            for i, x in enumerate(lst):
                if x.dtype != dt:
                    raise _fail(f"{call}: {what}[{i}] has dtype {x.dtype} but "
                                f"input_tensor_list[0] has {dt}; all tensors of one call must "
                                f"have the same dtype")
        srcs = [_src(x) for x in ins]
        dsts = [_Dst(o) for o in outs]
        sends = [(srcs[p], p) for p in range(n)]
        recvs = [(dsts[p].buf, p) for p in range(n)]

        def launch(s):
            self._p2p_group(s, sends, recvs)

        return self._issue(call, launch, outs, _copy_back(dsts),
                           keep=(srcs, [d.buf for d in dsts]))

    # -- gather / scatter ----------------------------------------------------------------
    def gather(self, output_tensors, input_tensors, opts=None):
        call = "gather"
        n = self.size()
        if isinstance(input_tensors, torch.Tensor):  # gather(List[Tensor], Tensor, root)
            o = dist.GatherOptions()
            o.rootRank = opts
            opts = o
            output_tensors = [output_tensors] if output_tensors else []
        t = _one(input_tensors, "input_tensors", call)
        root = _root(opts if opts is not None else dist.GatherOptions(), n, call)
        is_root = self.rank() == root
        lists = _tensor_list(output_tensors, "output_tensors", call)
        if is_root:
            outs = _per_rank(lists, "output_tensors", call, n,
                             "the root takes one list of output tensors (got {got})", "gather")
            for i, o in enumerate(outs):
                _same_kind(t, o, f"gather_list[{i}]", call, "the input tensor")
        else:
            if lists and any(len(_tensor_list(x, "output_tensors", call)) for x in lists):
                raise _fail(f"{call}: only the root rank {root} takes a gather list")
            outs = []
        src = _src(t)
        count = src.numel()
        flat = torch.empty(n * count if is_root else 0, dtype=t.dtype)

        parts = [(flat[i * count:(i + 1) * count], i) for i in range(n)] if is_root else []

        def launch(s):
            if _HAVE_ROOTED[0]:
                try:
                    return self._raw("gather", src.data_ptr(), flat.data_ptr() if is_root else 0,
                                     count, t.dtype, 0, root, s)
                except _core.InvalidUsage as e:
                    if _NOT_BUILT not in str(e):
                        raise
                    _HAVE_ROOTED[0] = False
            # A library without collGather: a group of sends to the root.
            self._p2p_group(s, [(src, root)], parts)

        def post():
            for i, o in enumerate(outs):
                o.copy_(flat[i * count:(i + 1) * count].view(o.shape))

        return self._issue(call, launch, outs if is_root else [t], post if is_root else None,
                           keep=(src, flat))

    def scatter(self, output_tensors, input_tensors, opts=None):
        call = "scatter"
        n = self.size()
        if isinstance(output_tensors, torch.Tensor):  # scatter(Tensor, List[Tensor], root)
            o = dist.ScatterOptions()
            o.rootRank = opts
            opts = o
            input_tensors = [input_tensors] if input_tensors else []
        out = _one(output_tensors, "output_tensors", call)
        root = _root(opts if opts is not None else dist.ScatterOptions(), n, call)
        is_root = self.rank() == root
        lists = _tensor_list(input_tensors, "input_tensors", call)
        count = out.numel()
        if is_root:
            ins = _per_rank(lists, "input_tensors", call, n,
                            "the root takes one list of input tensors (got {got})", "scatter")
            for i, x in enumerate(ins):
                _same_kind(out, x, f"scatter_list[{i}]", call, "the output tensor")
            flat = torch.cat([x.reshape(-1) for x in ins])
        else:
            if lists and any(len(_tensor_list(x, "input_tensors", call)) for x in lists):
                raise _fail(f"{call}: only the root rank {root} takes a scatter list")
            flat = torch.empty(0, dtype=out.dtype)
        d = _Dst(out)
        buf = d.buf

        parts = [(flat[i * count:(i + 1) * count], i) for i in range(n)] if is_root else []

        def launch(s):
            if _HAVE_ROOTED[0]:
                try:
                    return self._raw("scatter", flat.data_ptr() if is_root else 0, buf.data_ptr(),
                                     count, out.dtype, 0, root, s)
                except _core.InvalidUsage as e:
                    if _NOT_BUILT not in str(e):
                        raise
                    _HAVE_ROOTED[0] = False
            # A library without collScatter: a group of receives from the root.
            self._p2p_group(s, parts, [(buf, root)])

        return self._issue(call, launch, [out], _copy_back([d]), keep=(flat, buf))

    # -- point to point ------------------------------------------------------------------
    def _p2p(self, kind, tensors, peer, tag):
        call = kind
        t = _one(tensors, "tensors", call)
        # Tags are accepted and not matched (as NCCL's backend does): messages between two
        # ranks pair up in the order they were sent.
        self._check_peer(peer, call)
        if kind == "send":
            buf = _src(t)
            d = None
        else:
            d = _Dst(t)
            buf = d.buf
        if self._coalescing is not None:
            work = _Work(call, [t], self._state.thread)
            self._coalescing.append((kind, buf, peer, d, work))
            return work

        def launch(s):
            if kind == "send":
                self._raw("send", buf.data_ptr(), 0, buf.numel(), t.dtype, 0, peer, s)
            else:
                self._raw("recv", 0, buf.data_ptr(), buf.numel(), t.dtype, 0, peer, s)

        return self._issue(call, launch, [t], _copy_back([d]) if d else None, keep=(buf,))

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 - torch's names
        return self._p2p("send", tensors, dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        return self._p2p("recv", tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        raise _fail("recv from any source is not supported: pass src= to recv/irecv")

    def _start_coalescing(self):
        if self._coalescing is not None:
            raise _fail("_start_coalescing: already coalescing")
        self._coalescing = []

    def _end_coalescing(self, reqs=None):
        ops, self._coalescing = self._coalescing, None
        if ops is None:
            raise _fail("_end_coalescing without _start_coalescing")
        if not ops:
            return
        sends = [(buf, peer) for kind, buf, peer, _, _ in ops if kind == "send"]
        recvs = [(buf, peer) for kind, buf, peer, _, _ in ops if kind == "recv"]
        dsts = [d for _, _, _, d, _ in ops if d is not None]
        works = [w for _, _, _, _, w in ops]

        def launch(s):
            self._p2p_group(s, sends, recvs)

        self._state.issue("batch_isend_irecv", launch, works, _copy_back(dsts),
                          keep=[b for _, b, _, _, _ in ops])
        self._seq += 1

    # -- barrier -------------------------------------------------------------------------
    def barrier(self, opts=None):
        call = "barrier"
        if opts is not None and getattr(opts, "device_ids", None):
            raise _fail(f"{call}: device_ids are not supported (CPU only)")
        token = torch.zeros(1, dtype=torch.uint8)

        def launch(s):
            self._raw("allreduce", token.data_ptr(), token.data_ptr(), 1, torch.uint8,
                      _OP["max"], 0, s)

        return self._issue(call, launch, [], keep=(token,))

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        raise _fail("monitored_barrier is not supported; use barrier(): a rank that dies or "
                    "fails makes it fail on every other rank within the group's timeout, "
                    "naming that rank")


# ---------------------------------------------------------------------------------------
# Creation and registration.

_UID_KEY = "collective/unique_id"
_WARNED_COMM_ID = []


def create_process_group(store, rank, size, timeout, name="", global_ranks=None):
    """Makes the group's communicator: rank 0 creates the unique id and publishes it in
    store (a torch.distributed Store, already prefixed for this group); the others read it.
    Blocks until every rank of the group has joined (or fails within timeout)."""
    ms = _millis(timeout)
    if os.environ.get("COLL_COMM_ID") and not _WARNED_COMM_ID:
        _WARNED_COMM_ID.append(True)
        warnings.warn("COLL_COMM_ID is set: every process group of the collective backend "
                      "then names that one address as its root; unset it (the backend passes "
                      "a fresh unique id through the group's store)", RuntimeWarning)
    if rank == 0:
        uid = _core.get_unique_id()
        store.set(_UID_KEY, uid)
    else:
        uid = bytes(store.get(_UID_KEY))
    comm_name = f"torch-{name}" if name else "torch"
    try:
        comm = _core.Comm(size, uid, rank, timeout_ms=ms, name=comm_name)
    except _core.Error as e:
        raise _fail(f"creating the communicator of group {name!r} (rank {rank} of {size}) "
                    f"failed: {e}") from None
    return ProcessGroupCollective(comm, rank, size, timeout, name, global_ranks)


def _create_from_options(backend_opts, pg_options=None):
    if pg_options is not None:
        raise _fail("new_group: pg_options are not supported by the collective backend")
    return create_process_group(backend_opts.store, backend_opts.group_rank,
                                backend_opts.group_size, backend_opts.timeout,
                                backend_opts.group_id, backend_opts.global_ranks_in_group)


def _register():
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_from_options, extended_api=True)


_register()
