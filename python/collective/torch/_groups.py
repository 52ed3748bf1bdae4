"""The two ways a backend plugs into torch.distributed, both over one communicator and the
calls of _calls.py:

  - ProcessGroupCollective, a Python subclass of torch's ProcessGroup: the group itself.
    Every torch version has it (1.13 and 2.x).  torch 2.x asks such a group for its name
    and description (group_name: DeviceMesh, functional collectives and DTensor resolve a
    group by it), which it keeps.
  - BackendCollective, a Python subclass of c10d's Backend (torch 2.14 and later can make
    one): torch's own ProcessGroup holds it as the backend of the devices it serves, so a
    device map such as "cpu:collective,cuda:nccl" puts it beside another backend, and torch
    keeps the group's name, description and coalescing.

Which one a group gets is decided in __init__.py (docs/python.md says why).
"""
import weakref

import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d

from ._calls import Calls
from ._work import State

BACKEND = "collective"

# Whether this torch can make a Python subclass of c10d's Backend (2.14 and later).
HAVE_BACKEND_CLASS = hasattr(_c10d, "Backend")
if HAVE_BACKEND_CLASS:
    class _Probe(_c10d.Backend):
        pass
    try:
        _Probe(0, 1)
    except TypeError:  # "No constructor defined!" before 2.14
        HAVE_BACKEND_CLASS = False
    del _Probe


def _label(name, rank, size, global_ranks):
    where = f"group {name!r}" if name else "group"
    if global_ranks and list(global_ranks) != list(range(size)):
        where += f" (global ranks {list(global_ranks)})"
    return f"{where}, rank {rank} of {size}"


class _Common(Calls):
    """What both classes keep: the communicator, its State, the count of calls."""

    def _setup(self, comm, rank, size, timeout, name, global_ranks):
        self._comm = comm
        self._timeout = timeout
        self._name = name
        self._desc = ""
        self._global_ranks = list(global_ranks) if global_ranks else None
        self._label = _label(name, rank, size, global_ranks)
        self._state = State(comm, self._label)
        self._seq = 0
        weakref.finalize(self, State.close, self._state)

    # Sends and receives outside a coalescing window wait for more of their kind
    # (_work.py): the group sees the wait or query that must issue them.
    _defer_p2p = True

    def _out(self, work):
        """What a call returns to torch: the Work itself."""
        return work

    # A blocking call that is done returns None (torch's dist.* functions take it so).
    _done_is_none = True

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

    def abort(self):
        """Ends the communicator now: calls in flight fail on this rank and, within the
        timeout, on the others."""
        try:
            self._comm.abort()
        finally:
            self._state.close()


class ProcessGroupCollective(_Common, dist.ProcessGroup):
    """A torch.distributed process group backed by one libcollective communicator.

    Made by torch.distributed (init_process_group / new_group with backend "collective");
    create_process_group(store, rank, size, timeout) makes one directly."""

    def __init__(self, comm, rank, size, timeout, name="", global_ranks=None):
        dist.ProcessGroup.__init__(self, rank, size)
        self._setup(comm, rank, size, timeout, name, global_ranks)

    # -- identity: torch 2.x sets and reads these through the C++ class ------------------
    def getBackendName(self):  # noqa: N802 - the name C++ looks up
        return BACKEND

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    def setGroupName(self, name):  # noqa: N802
        self._name = name

    def getGroupName(self):  # noqa: N802
        return self._name

    def setGroupDesc(self, desc):  # noqa: N802
        self._desc = desc

    def getGroupDesc(self):  # noqa: N802
        return self._desc

    @property
    def group_name(self):
        return self._name

    @property
    def group_desc(self):
        return self._desc

    # torch 2.14 looks for coalescing support on the group's backend for a device: this
    # group is its own backend for every device it takes.
    supports_coalescing = True

    def _get_backend(self, device=None):
        return self

    def __repr__(self):
        return f"<ProcessGroupCollective {self._label}>"


if HAVE_BACKEND_CLASS:
    class BackendCollective(_Common, _c10d.Backend):
        """A c10d Backend backed by one libcollective communicator, held by torch's own
        ProcessGroup (torch 2.14 and later)."""

        def __init__(self, comm, rank, size, timeout, name="", global_ranks=None):
            _c10d.Backend.__init__(self, rank, size)
            self._setup(comm, rank, size, timeout, name, global_ranks)

        @property
        def supports_coalescing(self):
            return True

        # torch's ProcessGroup hands back to Python the C++ side of what a call returns,
        # and a Python Work's is_completed() is not reached through it: so a call returns a
        # C++ Work over the Work's Future.  Its wait() is not seen here either, so sends and
        # receives outside a coalescing window (batch_isend_irecv opens one) are issued at
        # once, as NCCL issues them.
        _defer_p2p = False

        def _out(self, work):
            return _c10d._create_work_from_future(work.get_future())

        # torch's ProcessGroup needs a Work from every call of its backend.
        _done_is_none = False

        def getBackendName(self):  # noqa: N802
            return BACKEND

        def name(self):
            return BACKEND

        def __repr__(self):
            return f"<BackendCollective {self._label}>"
else:
    BackendCollective = None
