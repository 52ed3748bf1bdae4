"""What the library can take of a torch tensor: argument checks that name the tensor and
the problem, the library's codes for dtypes and reduce ops, and staging (a contiguous
copy where a tensor is not contiguous, copied back once the call is done).

Pure functions and small classes over torch: no communicator, no threads.
"""
import datetime

import torch
import torch.distributed as dist

from .. import _core

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
DTYPE = {t: _core.DTYPES[n] for t, n in _TYPE_NAMES.items()}
FUNC = _core.FUNCS
OP = _core.OPS
_RT = dist.ReduceOp.RedOpType
_OP_NAMES = {_RT.SUM: "sum", _RT.PRODUCT: "prod", _RT.MIN: "min", _RT.MAX: "max"}
if hasattr(_RT, "AVG"):
    _OP_NAMES[_RT.AVG] = "avg"
_PREMUL = getattr(_RT, "PREMUL_SUM", None)
_BOOL_OPS = {"sum": "max", "prod": "min", "min": "min", "max": "max"}

# The devices whose tensors the backend takes: CPU memory, and CUDA device memory, which the
# library takes on the tensor's current CUDA stream (docs/device.md).
DEVICES = ("cpu", "cuda")


def fail(msg):
    return RuntimeError("collective: " + msg)


def millis(timeout):
    """A timedelta (or seconds) as whole milliseconds, None when unset or not positive."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        ms = int(timeout.total_seconds() * 1000)
    else:
        ms = int(float(timeout) * 1000)
    return min(ms, 2**31 - 1) if ms > 0 else None


def check_tensor(t, what, call):
    """Refuses what the library cannot take, naming the tensor and the problem.  (Each
    call of the backend makes these checks: the cheapest of torch's attributes first;
    t.device makes an object, is_cpu and is_cuda do not.)"""
    if not isinstance(t, torch.Tensor):
        raise fail(f"{call}: {what} must be a torch.Tensor, not {type(t).__name__}")
    if not (t.is_cpu or t.is_cuda) and t.device.type not in DEVICES:
        raise fail(
            f"{call}: {what} is on device {t.device}; the collective backend takes CPU and CUDA "
            f"tensors only (move it with .cpu(), or use a group of another backend for "
            f"{t.device.type})")
    if t.layout != torch.strided:
        raise fail(f"{call}: {what} has layout {t.layout}; only dense (strided) tensors are "
                   f"supported")
    if t.dtype not in DTYPE:
        hint = " (view it with torch.view_as_real)" if t.is_complex() else ""
        raise fail(
            f"{call}: {what} has dtype {t.dtype}, which the collective backend does not support"
            f"{hint}; supported: " + ", ".join(str(d) for d in DTYPE))


def tensor_list(x, what, call):
    if isinstance(x, torch.Tensor):
        return [x]
    if not isinstance(x, (list, tuple)):
        raise fail(f"{call}: {what} must be a list of tensors, not {type(x).__name__}")
    return list(x)


def one(tensors, what, call):
    """The single tensor of a list (the *_multigpu forms with several are refused)."""
    if type(tensors) is list and len(tensors) == 1:  # noqa: E721 - what torch passes
        t = tensors[0]
        check_tensor(t, what[:-1] if what.endswith("s") else what, call)
        return t
    ts = tensor_list(tensors, what, call)
    if len(ts) != 1:
        raise fail(
            f"{call}: takes exactly one tensor in {what} (got {len(ts)}); the collective "
            f"backend has one device per process, so the *_multigpu forms are not supported")
    # Name it as torch's wrappers do: tensors -> tensor, input_tensors -> input_tensor.
    check_tensor(ts[0], what[:-1] if what.endswith("s") else what, call)
    return ts[0]


def per_rank(lists, what, call, n, one_msg, list_name):
    """The inner list of n tensors that torch passes as [[t_0, ..., t_n-1]]; one_msg
    (with {got}) refuses another number of lists, list_name names the inner one."""
    if len(lists) != 1:
        raise fail(f"{call}: " + one_msg.format(got=len(lists)))
    ts = tensor_list(lists[0], f"{what}[0]", call)
    if len(ts) != n:
        raise fail(f"{call}: the {list_name} list has {len(ts)} tensors; the group has "
                   f"{n} ranks")
    return ts


def same_kind(ref, t, what, call, ref_what, numel=None):
    """t must have ref's dtype and device, and numel elements (default: ref's)."""
    check_tensor(t, what, call)
    if t.dtype != ref.dtype:
        raise fail(f"{call}: {what} has dtype {t.dtype} but {ref_what} has {ref.dtype}; "
                   f"all tensors of one call must have the same dtype")
    if t.device != ref.device:
        raise fail(f"{call}: {what} is on {t.device} but {ref_what} is on {ref.device}; "
                   f"all tensors of one call must be on one device")
    want = ref.numel() if numel is None else numel
    if t.numel() != want:
        raise fail(f"{call}: {what} has {t.numel()} elements (shape {tuple(t.shape)}) but "
                   f"{want} are expected (from {ref_what}, shape {tuple(ref.shape)})")


def same_list(ts, what, call):
    """Every tensor of ts checked, with ts[0]'s dtype and device."""
    for i, x in enumerate(ts):
        check_tensor(x, f"{what}[{i}]", call)
        if x.dtype != ts[0].dtype:
            raise fail(f"{call}: {what}[{i}] has dtype {x.dtype} but {what}[0] has "
                       f"{ts[0].dtype}; all tensors of one call must have the same dtype")
        if x.device != ts[0].device:
            raise fail(f"{call}: {what}[{i}] is on {x.device} but {what}[0] is on "
                       f"{ts[0].device}; all tensors of one call must be on one device")


def src(t):
    """A contiguous tensor with t's data, for reading."""
    return t if t.is_contiguous() else t.contiguous()


class Dst:
    """Where a result lands: t itself when contiguous, else a contiguous stage that is copied
    back to t once the operation is done.  inout: the stage starts with t's data."""

    __slots__ = ("t", "buf")

    def __init__(self, t, inout=False):
        self.t = t
        if t.is_contiguous():
            self.buf = t
        else:
            self.buf = t.contiguous() if inout else torch.empty(t.shape, dtype=t.dtype,
                                                                device=t.device)

    def back(self):
        if self.buf is not self.t:
            self.t.copy_(self.buf)


def copy_back(dsts):
    """A post step copying the stages of dsts back, or None when none is staged."""
    staged = [d for d in dsts if d is not None and d.buf is not d.t]
    if not staged:
        return None

    def post():
        for d in staged:
            d.back()
    return post


class Reduction:
    """A torch reduce op as the library runs it: the op's code, and for PREMUL_SUM the
    factor each rank's input is multiplied by before the sum (a float or a tensor)."""

    __slots__ = ("code", "factor")

    def __init__(self, code, factor=None):
        self.code = code
        self.factor = factor

    def scaled(self, t):
        """t multiplied by the factor into a new tensor (t itself without a factor)."""
        if self.factor is None:
            return t
        f = self.factor
        if isinstance(f, torch.Tensor):
            f = f.to(device=t.device)
        return torch.mul(t, f).to(t.dtype)


# The Reduction of each (RedOpType, dtype) met so far (PREMUL_SUM, which carries a factor
# of its own, aside): a call looks its op up instead of working it out again.
_REDUCTIONS = {}


def reduction(op, dtype, call):
    """The Reduction for a torch ReduceOp (or RedOpType) on tensors of dtype."""
    kind = getattr(op, "op", op)
    known = _REDUCTIONS.get((kind, dtype))
    if known is not None:
        return known
    if _PREMUL is not None and kind == _PREMUL:
        state = op.__getstate__() if hasattr(op, "__getstate__") else None
        factor = state[1] if isinstance(state, tuple) and len(state) > 1 else None
        if factor is None:  # a bare RedOpType, or torch 1.13, which hides the factor
            raise fail(f"{call}: ReduceOp.PREMUL_SUM without a factor that this torch shows; "
                       f"make it with ReduceOp.PREMUL_SUM(factor) (torch 2.x)")
        if not (dtype.is_floating_point):
            raise fail(f"{call}: ReduceOp.PREMUL_SUM needs a floating-point tensor, not "
                       f"{dtype}")
        if isinstance(factor, torch.Tensor) and factor.numel() != 1:
            raise fail(f"{call}: ReduceOp.PREMUL_SUM's factor must be a scalar (a tensor of "
                       f"one element), not a tensor of {factor.numel()}")
        return Reduction(OP["sum"], factor)
    name = _OP_NAMES.get(kind)
    if name is None:
        label = getattr(kind, "name", str(kind))
        if label in ("BAND", "BOR", "BXOR"):
            raise fail(f"{call}: ReduceOp.{label} is not supported: the collective backend has "
                       f"no bitwise reductions (SUM, PRODUCT, MIN, MAX, AVG and PREMUL_SUM are "
                       f"supported)")
        raise fail(f"{call}: ReduceOp.{label} is not supported by the collective backend "
                   f"(SUM, PRODUCT, MIN, MAX, AVG and PREMUL_SUM are supported)")
    if dtype == torch.bool:
        if name == "avg":
            raise fail(f"{call}: ReduceOp.AVG is not defined for torch.bool tensors")
        name = _BOOL_OPS[name]
    red = _REDUCTIONS[(kind, dtype)] = Reduction(OP[name])
    return red


def opts_op(opts, default_cls):
    """The reduce op of an options object, or opts itself when a ReduceOp was passed."""
    if opts is None:
        return dist.ReduceOp.SUM
    if isinstance(opts, default_cls):
        return opts.reduceOp
    return opts


def is_async(opts):
    """Whether the caller may not wait at once: torch 2.x says so in opts.asyncOp
    (async_op of the dist.* call); without it (torch 1.13, C++ callers' defaults) a
    call is taken as asynchronous."""
    return getattr(opts, "asyncOp", True) if opts is not None else True


def root_of(opts, n, call):
    root = opts.rootRank
    if getattr(opts, "rootTensor", 0) != 0:
        raise fail(f"{call}: rootTensor must be 0 (one tensor per process), got "
                   f"{opts.rootTensor}")
    if not 0 <= root < n:
        raise fail(f"{call}: root rank {root} is outside the group of {n} ranks")
    return root
