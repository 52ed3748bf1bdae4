#!/usr/bin/python3
"""CUDA tensors through the torch.distributed backend, against the stand-in CUDA driver.

Run as the test (meson suite 'python'), with the stand-in driver that the C device tests
use (tests/fake_cuda.c, built as BUILD/tests/libcuda.so.1) named by COLL_FAKE_CUDA:

    COLL_FAKE_CUDA=build/tests/libcuda.so.1 /usr/bin/python3 tests/python/test_torch_device.py \\
        [--python PY] --nproc 2

The backend passes a CUDA tensor's device pointer to the library with the tensor's current
CUDA stream (`torch.cuda.current_stream(device).cuda_stream`), and the library stages it
through pinned memory on that stream (docs/device.md).  Without a GPU, torch cannot make a
CUDA tensor, so each rank makes stand-ins: tensors whose `device` says cuda:0 and whose
data_ptr() is device memory of the stand-in driver (which the host cannot touch: its
pages are mapped PROT_NONE, so any read or write by the host through the pointer would
crash), with torch.cuda's current_stream and Event answered for the legacy default stream.
What is checked is the backend's path for CUDA tensors with the library's real device
path under it: all_reduce (every op, in place), broadcast, all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single and batch_isend_irecv, each result read back
through the driver's host view and compared with the same call on CPU tensors; the Work
of a CUDA call is complete at once (the call is enqueued on the stream, as with NCCL),
and wait() makes the current stream wait for the call's event.  tests/gpu/run.sh runs the
same calls on a real GPU where there is one.
"""
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def worker():
    import torch

    if not os.environ.get("COLL_FAKE_CUDA"):
        return real_gpu_worker()
    lib = ctypes.CDLL(os.path.abspath(os.environ["COLL_FAKE_CUDA"]), mode=ctypes.RTLD_GLOBAL)
    lib.fake_cuda_malloc.restype = ctypes.c_void_p
    lib.fake_cuda_malloc.argtypes = [ctypes.c_size_t]
    lib.fake_cuda_host_view.restype = ctypes.c_void_p
    lib.fake_cuda_host_view.argtypes = [ctypes.c_void_p]
    lib.fake_cuda_stream_sync.argtypes = [ctypes.c_void_p]

    import collective.torch  # noqa: F401 - registers "collective"

    class Event:
        """torch.cuda.Event for the stand-in: the legacy default stream, in order."""
        def __init__(self, *a, **k):
            self.device = torch.device("cuda", 0)

        def record(self, stream=None):
            self.stream = stream

        def synchronize(self):
            lib.fake_cuda_stream_sync(None)

    class Stream:
        cuda_stream = 0  # the legacy default stream
        device = torch.device("cuda", 0)

        def wait_event(self, event):
            lib.fake_cuda_stream_sync(None)  # the stand-in's streams are one in order

        def synchronize(self):
            lib.fake_cuda_stream_sync(None)

    # What torch's dist.* functions ask of torch.cuda about a CUDA tensor, answered for
    # one device of compute capability 8.0.
    torch.cuda.current_stream = lambda device=None: Stream()
    torch.cuda.Event = Event
    torch.cuda.get_device_capability = lambda device=None: (8, 0)
    torch.cuda.current_device = lambda: 0

    class DeviceTensor(torch.Tensor):
        """A stand-in CUDA tensor: its data lives in the stand-in driver's device memory."""
        @staticmethod
        def __new__(cls, numel, dtype):
            t = torch.Tensor._make_subclass(cls, torch.empty(numel, dtype=dtype))
            nbytes = max(1, numel * t.element_size())
            t._dev = lib.fake_cuda_malloc(nbytes)
            t._host = (ctypes.c_char * nbytes).from_address(lib.fake_cuda_host_view(t._dev))
            return t

        @property
        def device(self):
            return torch.device("cuda", 0)

        @property
        def is_cuda(self):
            return True

        def data_ptr(self):
            return self._dev

        def put(self, cpu):
            """Copies a CPU tensor's values in (through the host view)."""
            lib.fake_cuda_stream_sync(None)
            b = cpu.contiguous().view(torch.uint8).numpy().tobytes()
            ctypes.memmove(self._host, b, len(b))
            return self

        def get(self):
            """Its values as a CPU tensor, once the stream is past the calls on it."""
            lib.fake_cuda_stream_sync(None)
            raw = torch.frombuffer(bytearray(bytes(self._host)), dtype=torch.uint8)
            return raw[:self.numel() * self.element_size()].view(self.dtype).clone()

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            # torch's own checks read only metadata; never the (host-invisible) data
            return super().__torch_function__(func, types, args, kwargs or {})

    def dev(cpu):
        return DeviceTensor(cpu.numel(), cpu.dtype).put(cpu)

    checks(dev, lambda numel, dtype: DeviceTensor(numel, dtype), lambda t: t.get(),
           "CUDA tensors on the stand-in driver")


def real_gpu_worker():
    """The same checks with real CUDA tensors (tests/gpu/run.sh, on a machine with a GPU)."""
    import torch

    import collective.torch  # noqa: F401 - registers "collective"

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    checks(lambda cpu: cpu.cuda(), lambda numel, dtype: torch.empty(numel, dtype=dtype,
                                                                    device="cuda"),
           lambda t: t.cpu(), f"CUDA tensors on {torch.cuda.get_device_name()}")


def checks(dev, empty, get, what_on):
    """Each call on device tensors (dev(cpu): a copy on the device; empty(numel, dtype);
    get(t): its values on the CPU) against the same call on CPU tensors."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    n = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("collective")
    checks = [0]

    def same(got, want, what):
        checks[0] += 1
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: got {got[:6].tolist()} want {want[:6].tolist()}")

    pg = dist.distributed_c10d._get_default_group()
    R = dist.ReduceOp
    for dt in (torch.float32, torch.int32, torch.bfloat16):
        for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT):
            x = (torch.arange(37) % 3 + 1 + rank).to(dt)
            want = x.clone()
            dist.all_reduce(want, op=op)            # the same call on CPU tensors
            d = dev(x)
            w = dist.all_reduce(d, op=op, async_op=True)
            assert w.is_completed(), "a CUDA call's Work is complete once it is enqueued"
            w.wait()
            same(get(d), want, f"all_reduce {dt} {op}")
    x = torch.arange(10, dtype=torch.float64) * (rank + 1)
    d = dev(x)
    dist.broadcast(d, n - 1)
    same(get(d), torch.arange(10, dtype=torch.float64) * n, "broadcast")
    x = torch.full((4,), float(rank))
    out = empty(4 * n, torch.float32)
    dist.all_gather_into_tensor(out, dev(x))
    same(get(out), torch.arange(n, dtype=torch.float32).repeat_interleave(4),
         "all_gather_into_tensor")
    full = torch.arange(3 * n, dtype=torch.float32) + rank
    o = empty(3, torch.float32)
    dist.reduce_scatter_tensor(o, dev(full))
    want = torch.zeros(3 * n)
    for r in range(n):
        want += torch.arange(3 * n, dtype=torch.float32) + r
    same(get(o), want[3 * rank:3 * rank + 3], "reduce_scatter_tensor")
    a2a = torch.arange(2 * n, dtype=torch.int64) + 100 * rank
    o = empty(2 * n, torch.int64)
    dist.all_to_all_single(o, dev(a2a))
    same(get(o), torch.tensor([100 * r + 2 * rank + k for r in range(n) for k in range(2)]),
         "all_to_all_single")
    if n > 1:
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        got = empty(1 << 18, torch.float32)  # 1 MiB
        ops = [dist.P2POp(dist.isend, dev(torch.full((1 << 18,), float(rank))), nxt),
               dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        same(get(got)[-3:], torch.full((3,), float(prv)), "batch_isend_irecv")
    del pg
    dist.barrier()
    dist.destroy_process_group()
    print(f"PASS rank {rank} of {n}: {checks[0]} checks of {what_on}", flush=True)


def skip_unless():
    fake = os.environ.get("COLL_FAKE_CUDA")
    if fake:
        return None if os.path.exists(fake) else \
            f"COLL_FAKE_CUDA ({fake}) does not name the stand-in CUDA driver"
    import torch

    return None if torch.cuda.is_available() else \
        "no GPU, and COLL_FAKE_CUDA names no stand-in CUDA driver"


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    import torch_launch

    sys.exit(torch_launch.main(__file__, __doc__, worker, skip_unless=skip_unless))
