"""How a call of the backend runs, and the Work it returns.

Each process group owns a _State: its communicator, a pool of library streams, a
completion thread, and the sends and receives not yet issued.  A call reaches it as an
_Op (the library calls to make, on a stream or blocking, and what to do after) and runs
one of three ways:

  - inline, when the caller waits at once (torch 2.x says so with opts.asyncOp False):
    the library call blocks, without the GIL, on the calling thread, and the Work comes
    back completed;
  - on a library stream, otherwise: the call returns at once and the library runs the
    operation on the communicator's progress thread while Python goes on; the completion
    thread waits for the operations in issue order, copies staged results back and
    completes the Work and its Future;
  - sends and receives are held in a batch and issued together as one library group, so
    that two ranks that send to each other first (batch_isend_irecv, pipeline schedules)
    do not wait for each other.  The batch is issued when one of its Works is waited for
    or queried, when another call is made on the group, at _end_coalescing, or at the
    latest _P2P_BATCH_S after its last send or receive (by the group's batch thread, not
    the completion thread: that one may be waiting for a receive whose sender waits
    for this rank's send in the batch).

Calls of one communicator run in the order they were issued, however they run.
"""
import collections
import queue
import threading
import time
import weakref

import torch
from torch._C._distributed_c10d import Work as _TorchWork

from .. import _core
from ._tensors import FUNC, DTYPE, fail, millis

# How many completed Work objects each group keeps referenced.  C++ callers inside torch
# (DDP's reducer) hold a Work returned by this Python class and may call wait() on it a
# little after it completed; on torch versions that do not keep the Python object alive
# with the C++ one (1.13), it must still be alive then, or the call falls through to the
# C++ base class.  The reducer waits before it issues anything new, so a few suffice.
_KEEP_COMPLETED = 8

# How long sends and receives wait for more of their kind before the completion thread
# issues them: long enough to take in a batch_isend_irecv issued send by send (torch
# 2.13 and 1.13 do that for a Python process group), short enough not to hold up a send
# nobody waits for.
_P2P_BATCH_S = 0.002

# How long closing a group at exit waits for operations still in flight before it aborts
# the communicator (their peers may be gone).
_CLOSE_GRACE_S = 10.0

# Guards the fields that a Work's completion and its waiters share (_done, _event, _src).
_LOCK = threading.Lock()


def _unwrap(fut):
    return fut.value()


class Work(_TorchWork):
    """Work of one call.  wait() blocks (without the GIL) until the operation is done and
    raises its failure as a RuntimeError; get_future() returns a torch Future that
    completes with the output tensors, or with that error (in C++ too, so DDP's reducer
    sees it)."""

    def __init__(self, call, outputs, state):
        super().__init__()
        self._call = call
        self._outputs = outputs
        self._state = state
        self._error = None
        self._done = False
        self._event = None      # made when a thread must block on it
        self._src = None        # the Future, made on the first get_future()
        self._fut = None
        self._batched = False   # a send or receive not yet issued
        self._stream_event = None  # CUDA calls: the event after the call on its stream
        self._followers = None  # Works that complete with this one (coalescing windows)
        self._source = None     # receives from any source: the sender's rank, once done

    # -- completion (the completion thread, or the issuing thread for inline calls) --------
    def _finish(self, error):
        with _LOCK:
            self._error = error
            self._done = True
            event, src, followers = self._event, self._src, self._followers
        if event is not None:
            event.set()
        if src is not None:
            if error is None:
                src.set_result(self._outputs)
            else:
                src.set_exception(error)
        if followers:
            for w in followers:
                w._finish(error)

    def _follow(self, other):
        """other completes when this Work does (at once if it has)."""
        with _LOCK:
            if not self._done:
                if self._followers is None:
                    self._followers = []
                self._followers.append(other)
                return
            error = self._error
        other._finish(error)

    def _issue_batch(self, inline):
        if self._batched:
            self._state.flush_batch(inline)

    # -- torch's Work interface ------------------------------------------------------------
    def wait(self, timeout=None):
        self._issue_batch(inline=True)
        if not self._done:
            if threading.current_thread() is self._state.thread:
                # A callback of an earlier call's future runs on the completion thread, which
                # completes this call only after the callback returns.
                raise fail(f"{self._call}: waiting for a call of the same group inside a "
                           f"future's callback would never end; chain it with then() instead")
            with _LOCK:
                event = None
                if not self._done:
                    if self._event is None:
                        self._event = threading.Event()
                    event = self._event
            ms = millis(timeout)
            if event is not None and not event.wait(None if ms is None else ms / 1000.0):
                raise fail(f"{self._call} did not complete within {ms} ms")
        if self._error is not None:
            raise RuntimeError(str(self._error))
        if self._stream_event is not None:
            torch.cuda.current_stream(self._stream_event.device).wait_event(self._stream_event)
        return True

    def is_completed(self):
        self._issue_batch(inline=False)
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        self._issue_batch(inline=False)
        return self._error

    def result(self):
        self.wait()
        return self._outputs

    def get_future(self):
        self._issue_batch(inline=False)
        with _LOCK:
            made = self._src is None
            if made:
                self._src = torch.futures.Future()
                # A future derived with then(): when _src holds an exception, the derived
                # one is failed in C++ as well, which is what C++ consumers look at.
                self._fut = self._src.then(_unwrap)
            done, error = self._done, self._error
        if made and done:
            if error is None:
                self._src.set_result(self._outputs)
            else:
                self._src.set_exception(error)
        return self._fut

    def synchronize(self):
        if self._stream_event is not None:
            self._stream_event.synchronize()

    def source_rank(self):
        """The rank a receive from any source (recv_anysource) got its message from."""
        if self._source is None:
            raise fail(f"{self._call}: source_rank() is only defined for receives from any "
                       f"source")
        self.wait()
        return int(self._source.item())

    _source_rank = source_rank

    def __repr__(self):
        state = "done" if self._done else "pending"
        if self._error is not None:
            state = "failed"
        return f"<collective work {self._call} {state}>"


class Op:
    """One call as the state runs it: launch(stream) makes the library calls (stream None:
    blocking), post() runs once they are done (copies back), keep holds what must stay
    alive until then."""

    __slots__ = ("call", "launch", "post", "keep")

    def __init__(self, call, launch, post=None, keep=()):
        self.call = call
        self.launch = launch
        self.post = post
        self.keep = keep


class _Pending:
    __slots__ = ("works", "stream", "op")

    def __init__(self, works, stream, op):
        self.works = works
        self.stream = stream
        self.op = op


_LIVE = weakref.WeakSet()


class State:
    """One process group's runtime: communicator, streams, completion thread, batch."""

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
        # Sends and receives not yet issued: (kind, buffer, peer, Dst or None, Work).
        self.batch = []
        self.batch_due = None     # when the batch thread issues the batch
        self.batch_cv = threading.Condition(self.lock)  # batch_due set, or closed
        self.batcher = None       # the batch thread, started with the first deferred batch
        self.window = None        # the Works of a coalescing window, when one is open
        self.thread = threading.Thread(target=self._run, name=f"collective-done {label}",
                                       daemon=True)
        self.thread.start()
        _LIVE.add(self)

    # -- issuing (callers hold no lock) ----------------------------------------------------
    def submit(self, op, work, blocking):
        """Runs op for work (None: no Work, for a blocking call): inline when blocking, else
        on a stream.  A refusal or an inline failure raises here."""
        with self.lock:
            self._check_open(op.call)
            if self.batch:  # program order: the earlier sends and receives first
                self._flush(inline=False)
            works = [work] if work is not None else []
            if self.window is not None:
                self.window.extend(works)
            if blocking:
                self._inline(op, works)
            else:
                self._issue(op, works)

    def add_p2p(self, call, kind, buf, peer, dst, work, defer):
        """Holds a send or receive for the next batch.  Outside a coalescing window, and
        unless defer, it is issued at once on a stream (with what the batch holds)."""
        with self.lock:
            self._check_open(call)
            work._batched = True
            self.batch.append((kind, buf, peer, dst, work))
            if self.window is not None:
                self.window.append(work)
                return
            if not defer:
                self._flush(inline=False)
                return
            wake = self.batch_due is None
            self.batch_due = time.monotonic() + _P2P_BATCH_S
            if self.batcher is None:
                self.batcher = threading.Thread(target=self._batch_run,
                                                name=f"collective-batch {self.label}",
                                                daemon=True)
                self.batcher.start()
            elif wake:
                self.batch_cv.notify()

    def flush_batch(self, inline):
        with self.lock:
            if self.batch:
                self._flush(inline)

    def open_window(self, call):
        with self.lock:
            self._check_open(call)
            if self.window is not None:
                raise fail(f"{call}: already coalescing")
            self.window = []

    def close_window(self, call, work):
        """Ends a coalescing window: its sends and receives are issued as one group, and
        work completes when every call of the window has."""
        with self.lock:
            works, self.window = self.window, None
            if works is None:
                raise fail(f"{call} without _start_coalescing")
            if self.batch:
                self.batch[-1][4]._follow(work)
                self._flush(inline=False)
            elif works:
                works[-1]._follow(work)
            else:
                work._finish(None)

    # -- under self.lock -------------------------------------------------------------------
    def _check_open(self, call):
        if self.closed:
            raise fail(f"{call}: the process group {self.label} has been shut down")

    def _take(self):
        return self.free.pop() if self.free else _core.Stream()

    def _issue(self, op, works):
        stream = self._take()
        try:
            op.launch(stream)
        except _core.Error as e:
            self.free.append(stream)
            raise fail(f"{op.call} on {self.label} {self._how(e)}: {e}") from None
        except BaseException:
            self.free.append(stream)
            raise
        self.inflight += 1
        self.queue.put(_Pending(works, stream, op))

    def _inline(self, op, works):
        try:
            op.launch(None)
        except _core.Error as e:
            if self._how(e) == "refused":
                raise fail(f"{op.call} on {self.label} refused: {e}") from None
            error = fail(f"{op.call} on {self.label} failed: {self._cause(e)}")
            for w in works:
                w._finish(error)
            raise error from None
        error = None
        if op.post is not None:
            try:
                op.post()
            except BaseException as e:  # noqa: BLE001 - reported through the Work
                error = fail(f"{op.call} on {self.label}: copying the result back failed: "
                             f"{e!r}")
        for w in works:
            w._finish(error)
            self.recent.append(w)
        if error is not None:
            raise error

    def _flush(self, inline):
        """Issues the batch as one library group.  A failure completes its Works with it."""
        ops, self.batch, self.batch_due = self.batch, [], None
        sends = [(buf, peer) for kind, buf, peer, _, _ in ops if kind == "send"]
        recvs = [(buf, peer) for kind, buf, peer, _, _ in ops if kind == "recv"]
        works = [w for _, _, _, _, w in ops]
        for w in works:
            w._batched = False
        call = ops[0][0] if len(ops) == 1 else "batch_isend_irecv"
        comm = self.comm
        cuda = next((b.device for _, b, _, _, _ in ops if b.is_cuda), None)
        if cuda is not None:
            # Device buffers: the whole group on the current CUDA stream, enqueued now.
            cuda_stream = torch.cuda.current_stream(cuda)
            handle = cuda_stream.cuda_stream
            inline = True

            def launch(stream):
                p2p_group(comm, handle, sends, recvs)
        else:
            def launch(stream):
                p2p_group(comm, stream, sends, recvs)

        from ._tensors import copy_back
        op = Op(call, launch, copy_back([d for _, _, _, d, _ in ops]),
                keep=[b for _, b, _, _, _ in ops])
        try:
            if inline:
                self._inline(op, works)
            else:
                self._issue(op, works)
        except RuntimeError as e:
            for w in works:
                if not w._done:
                    w._finish(e)
            return
        if cuda is not None:
            event = torch.cuda.Event()
            event.record(cuda_stream)
            for w in works:
                w._stream_event = event

    @staticmethod
    def _how(e):
        # Bad arguments are refused; a poisoned communicator fails every call.
        return "refused" if isinstance(e, (_core.InvalidArgument, _core.InvalidUsage)) \
            else "failed"

    def _cause(self, e):
        """The library's text for a failure: the communicator's last error (read under the
        issuing lock, which the caller holds: the text belongs to the communicator)."""
        try:
            text = self.comm.last_error()
        except _core.Error:
            text = ""
        name = type(e).__name__
        if isinstance(e, _core.Timeout):
            # torch's own tests and tools look for "Timed out" in a timeout's message.
            return f"Timed out ({text})" if text else f"Timed out ({e})"
        return f"{text} ({name})" if text else str(e)

    # -- the completion thread -------------------------------------------------------------
    def _run(self):
        torch.set_grad_enabled(False)  # copies back into leaves that require grad
        while True:
            item = self.queue.get()
            if item is None:
                break
            self._complete(item)
        if self.destroyed is False and self._in_own_thread_close:
            self._teardown()

    # -- the batch thread -------------------------------------------------------------------
    def _batch_run(self):
        """Issues the batch of sends and receives when it falls due, until the group
        closes (close issues what is left)."""
        with self.lock:
            while not self.closed:
                due = self.batch_due
                if due is None:
                    self.batch_cv.wait()
                    continue
                left = due - time.monotonic()
                if left > 0:
                    self.batch_cv.wait(left)
                    continue
                if self.batch:
                    self._flush(inline=False)
                else:
                    self.batch_due = None

    def _complete(self, item):
        error = None
        op = item.op
        try:
            item.stream.synchronize()  # releases the GIL while it waits
        except _core.Error as e:
            with self.lock:
                error = fail(f"{op.call} on {self.label} failed: {self._cause(e)}")
        except BaseException as e:  # noqa: BLE001 - reported through the Work
            error = fail(f"{op.call} on {self.label} failed: {e!r}")
        if error is None and op.post is not None:
            try:
                op.post()
            except BaseException as e:  # noqa: BLE001
                error = fail(f"{op.call} on {self.label}: copying the result back "
                             f"failed: {e!r}")
        with self.lock:
            self.free.append(item.stream)
            self.inflight -= 1
        item.op = None
        for w in item.works:
            try:
                w._finish(error)
            except BaseException:  # noqa: BLE001 - a callback of the user's failed
                pass
            self.recent.append(w)

    _in_own_thread_close = False

    # -- the end ---------------------------------------------------------------------------
    def close(self):
        """Finishes the group: issues what is batched, waits a while for the operations in
        flight, aborts the communicator if they do not end, frees streams and
        communicator."""
        with self.lock:
            if self.closed:
                return
            if self.batch:
                self._flush(inline=False)
            self.closed = True
            self.batch_cv.notify_all()
        if self.batcher is not None and threading.current_thread() is not self.batcher:
            self.batcher.join()
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


def close_all():
    for st in list(_LIVE):
        st.close()


def raw(comm, func, send, recv, count, dtype, op, root, stream):
    """One library call on addresses: func a key of FUNCS, dtype a torch dtype."""
    comm.raw(FUNC[func], send, recv, count, DTYPE[dtype], op, root, stream)


def p2p_group(comm, stream, sends, recvs):
    """Issues sends [(tensor, peer)] and receives [(tensor, peer)] as one library group: they
    progress together, in any order, without deadlock."""
    _core.group_start()
    try:
        for t, peer in sends:
            raw(comm, "send", t.data_ptr(), 0, t.numel(), t.dtype, 0, peer, stream)
        for t, peer in recvs:
            raw(comm, "recv", 0, t.data_ptr(), t.numel(), t.dtype, 0, peer, stream)
    finally:
        _core.group_end()
