"""libcollective for Python: collectives on buffer-protocol objects (numpy arrays,
bytearrays, memoryviews), zero-copy.

    import collective, numpy as np
    with collective.Communicator.from_env() as comm:   # under collrun, torchrun, ...
        x = np.full(4, comm.rank, dtype=np.float32)
        comm.allreduce(x)                               # in place: x = sum over ranks
        h = comm.allgather(x, np.empty(4 * comm.size, np.float32), async_=True)
        out = h.wait()

See docs/python.md.  The methods of Communicator are those of the C extension
collective._core.Comm, so a call costs little more than the C call.
"""

import datetime as _datetime

from . import _core
from ._core import (
    DTYPES,
    FUNCS,
    OPS,
    SHRINK_ABORT,
    SHRINK_DEFAULT,
    SHRINK_DETECT,
    SPLIT_NOCOLOR,
    CudaError,
    Error,
    Handle,
    InProgress,
    InternalError,
    InvalidArgument,
    InvalidUsage,
    RemoteError,
    SystemError_,
    Timeout,
    get_unique_id,
)

__all__ = [
    "Communicator", "Handle", "group", "get_unique_id", "version",
    "Error", "InvalidArgument", "InvalidUsage", "SystemError_", "InternalError",
    "RemoteError", "Timeout", "InProgress", "CudaError",
    "DTYPES", "OPS", "FUNCS", "SHRINK_DEFAULT", "SHRINK_ABORT", "SHRINK_DETECT",
    "SPLIT_NOCOLOR",
]


def version():
    """The library's version as a (major, minor, patch) tuple."""
    v = _core.version()
    return (v // 10000, v // 100 % 100, v % 100)


def _timeout_ms(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, _datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError("timeout must be seconds (int or float) or a datetime.timedelta, "
                        "not %s" % type(timeout).__name__)
    if not seconds > 0:
        raise InvalidArgument("Communicator: timeout %r is not positive" % (timeout,))
    return max(1, int(round(seconds * 1000)))


class Communicator(_core.Comm):
    """A communicator: this rank's member of a group of ranks.

    Communicator(nranks, uid, rank, timeout=None, name=None) joins the ranks that
    pass the same uid (from get_unique_id() on one rank, sent to the others by any
    means); Communicator.from_env() joins the one a launcher describes (collrun,
    torchrun, mpirun, srun).  Both block until every rank has joined.  timeout
    (seconds or a datetime.timedelta) bounds every operation; name appears in
    the library's messages.

    Attributes rank and size; methods allreduce, broadcast, reduce, allgather,
    reduce_scatter, alltoall, gather, scatter, send, recv and barrier (each with
    async_=True for a Handle), split, shrink, abort and destroy.  As a context
    manager it is destroyed at the end of the block, or aborted when the block
    raises (so that no queued call is waited for).
    """

    def __init__(self, nranks, uid, rank, timeout=None, name=None):
        """Joins the communicator of nranks ranks that pass the same uid, as rank.

        Blocks (without the GIL) until every rank has joined, or raises an Error
        subclass naming the cause (wrong nranks, duplicate rank, unreachable root).
        """
        super().__init__(nranks, uid, rank, timeout_ms=_timeout_ms(timeout), name=name)

    def __enter__(self):
        """Returns the communicator itself."""
        return self

    def __exit__(self, exc_type, exc, tb):
        """destroy() at the end of the block; abort() when the block raised."""
        if exc_type is None:
            self.destroy()
        else:
            self.abort()
        return False


class _Group:
    """The context manager that group() returns."""

    __slots__ = ()

    def __enter__(self):
        """Opens the group (group_start)."""
        _core.group_start()
        return self

    def __exit__(self, exc_type, exc, tb):
        """Issues the group's calls (group_end), or none of them if the block raised."""
        if exc_type is None:
            _core.group_end()
            return False
        # The block failed part-way: issue none of its calls rather than a part
        # the peers do not expect; the block's own exception goes on.
        try:
            _core.group_end(cancel=True)
        except Error:
            pass
        return False


def group():
    """A context manager for grouped calls (collGroupStart / collGroupEnd).

    The calls made in the block on this thread are queued and issued together at
    its end: sends and receives progress together (so a rank may exchange with
    several peers in any order), then the collectives run in order.  The block's
    end blocks until the calls are done, unless they were made with async_=True,
    in which case they share one stream and their handles become ready together.
    A group's calls are either all blocking or all async_.  Buffers stay exported
    until the calls are done.  Groups nest; only the outermost issues anything.
    If the block raises, none of its calls is issued.

        with collective.group():
            comm.send(a, (comm.rank + 1) % comm.size)
            comm.recv(b, (comm.rank - 1) % comm.size)
    """
    return _Group()
