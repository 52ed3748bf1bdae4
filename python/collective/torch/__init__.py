"""The torch.distributed backend "collective".

Importing this module registers the backend with torch.distributed:

    import torch.distributed as dist
    import collective.torch                       # registers "collective"
    dist.init_process_group("collective")         # env://, tcp://, file://
    sub = dist.new_group([0, 1], backend="collective")

Each process group owns one communicator of the library, made from a unique id that rank
0 of the group creates and hands to the others through the group's Store; the group's
timeout becomes the communicator's timeout_ms.  Every call checks its arguments, stages
non-contiguous tensors and runs: inline when the caller waits at once, else on a library
stream while Python goes on (_work.py).  It is Python over the C extension
collective._core (Comm.raw on integer addresses), so one build of the library serves every
torch version: 1.13 and 2.x, one code path with feature checks where they differ.  The
tensors may be CPU tensors or CUDA tensors (on their current CUDA stream).  See
docs/python.md for what each call supports.

The modules: _tensors.py (checks, dtypes, ops, staging), _work.py (how a call runs, Work),
_calls.py (the calls under torch's names), _groups.py (the ProcessGroup and the Backend
class torch holds).
"""
import atexit
import os
import sys
import warnings

import torch.distributed as dist

from .. import _core
from ._groups import (BACKEND, HAVE_BACKEND_CLASS, BackendCollective,
                      ProcessGroupCollective)
from ._tensors import DEVICES, fail, millis
from ._work import close_all

__all__ = ["BACKEND", "ProcessGroupCollective", "BackendCollective", "HAVE_BACKEND_CLASS",
           "create_process_group", "ROUTE"]

# How a group plugs into torch: "process_group" (the group is a Python ProcessGroup: every
# version), "backend" (a c10d Backend held by torch's own ProcessGroup, where this torch can
# make one: 2.14 and later), or "auto": the backend when the group's device map names
# another backend beside this one ("cpu:collective,cuda:nccl", which only that route can
# serve), the process group otherwise (torch 2.14 does not pass a Python Backend's
# is_completed() on, and the process group's calls cost less: docs/python.md).  Set it
# before the group is made.
ROUTE = "auto"

_UID_KEY = "collective/unique_id"
_WARNED_COMM_ID = []


def _device_map():
    """The device map of the group torch is making ({"cpu": "collective", "cuda": "nccl"}),
    read from torch's frame that calls the backend's creator; None where it cannot be read
    (torch 1.13, or a caller that is not torch's)."""
    frame = sys._getframe(1)
    try:
        while frame is not None:
            config = frame.f_locals.get("backend_config")
            if config is not None and hasattr(config, "get_device_backend_map"):
                return dict(config.get_device_backend_map())
            frame = frame.f_back
        return None
    finally:
        del frame


def _route(device_map=None):
    if ROUTE not in ("auto", "backend", "process_group"):
        raise fail(f"collective.torch.ROUTE is {ROUTE!r}; it must be 'auto', 'backend' or "
                   f"'process_group'")
    mixed = device_map is not None and len(set(device_map.values())) > 1
    if ROUTE == "backend" or (ROUTE == "auto" and mixed):
        if not HAVE_BACKEND_CLASS:
            why = (f"the device map {device_map} puts another backend beside this one, which "
                   f"needs" if mixed else "collective.torch.ROUTE is 'backend', which needs")
            raise fail(f"{why} torch's Backend class from Python (torch 2.14 and later); "
                       f"this torch has none: give the group one backend")
        return BackendCollective
    return ProcessGroupCollective


def _comm(store, rank, size, timeout, name):
    """The group's communicator: rank 0 creates the unique id and publishes it in store (a
    torch.distributed Store, already prefixed for this group); the others read it.  Blocks
    until every rank of the group has joined (or fails within timeout)."""
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
        return _core.Comm(size, uid, rank, timeout_ms=millis(timeout), name=comm_name)
    except _core.Error as e:
        raise fail(f"creating the communicator of group {name!r} (rank {rank} of {size}) "
                   f"failed: {e}") from None


def create_process_group(store, rank, size, timeout, name="", global_ranks=None,
                         device_map=None):
    """Makes a group of the backend directly: a ProcessGroupCollective, or, with the
    backend route (ROUTE), a BackendCollective, which torch's ProcessGroup holds."""
    cls = _route(device_map)
    return cls(_comm(store, rank, size, timeout, name), rank, size, timeout, name,
               global_ranks)


def _create_from_options(backend_opts, pg_options=None):
    if pg_options is not None:
        raise fail("new_group: pg_options are not supported by the collective backend")
    return create_process_group(backend_opts.store, backend_opts.group_rank,
                                backend_opts.group_size, backend_opts.timeout,
                                backend_opts.group_id, backend_opts.global_ranks_in_group,
                                _device_map())


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    try:  # torch 2.x: the devices it serves
        dist.Backend.register_backend(BACKEND, _create_from_options, extended_api=True,
                                      devices=list(DEVICES))
    except TypeError:  # torch 1.13: no devices
        dist.Backend.register_backend(BACKEND, _create_from_options, extended_api=True)


_register()
atexit.register(close_all)
