"""The calls of torch.distributed's backend interface, under every name torch 1.13 and 2.x
use for them, as one mixin for both ways of plugging into torch (_groups.py): each checks
its arguments, stages what is not contiguous, and hands the library calls to the group's
State (_work.py), which runs them inline, on a stream, or batched (sends and receives).

The class that mixes it in provides _comm, _state, _seq, rank() and size().
"""
import torch
import torch.distributed as dist

from .. import _core
from ._tensors import (DTYPE, FUNC, OP, Dst, check_tensor, copy_back, fail, is_async, one,
                       opts_op, per_rank, reduction, root_of, same_kind, same_list, src,
                       tensor_list)
from ._work import Op, Work, p2p_group

# Whether the library has collGather / collScatter (the bindings say "not in this build"
# otherwise, and gather and scatter fall back to groups of sends and receives).
HAVE_ROOTED = [True]
_NOT_BUILT = "not in this build"

_F_ALLREDUCE = FUNC["allreduce"]
_F_BROADCAST = FUNC["broadcast"]
_F_REDUCE = FUNC["reduce"]
_F_ALLGATHER = FUNC["allgather"]
_F_REDUCE_SCATTER = FUNC["reduce_scatter"]
_F_ALLTOALL = FUNC["alltoall"]
_F_RECV_ANY = FUNC["recv_any"]
_OPT = torch._C._distributed_c10d


class Calls:
    """torch's backend calls on one communicator."""

    # -- running a call --------------------------------------------------------------------
    def _submit(self, call, launch, outputs, post=None, keep=(), opts=None, like=None):
        """_run, returning what torch takes (_groups.py: the Work itself, or a C++ Work
        over its Future).  A blocking call (torch 2.x's opts.asyncOp False) returns None
        where the group may (_done_is_none): torch's dist.* functions take None as a call
        that is already complete, which saves making a Work."""
        cuda = like is not None and like.is_cuda
        if self._done_is_none and not cuda and not is_async(opts):
            self._state.submit(Op(call, launch, post, keep), None, True)
            self._seq += 1
            return None
        return self._out(self._run(call, launch, outputs, post, keep, opts, like))

    def _run(self, call, launch, outputs, post=None, keep=(), opts=None, like=None):
        """Runs launch (the library calls, on the stream it is given) for a new Work; like
        is a tensor of the call (None: a CPU call).

        CUDA tensors go to the library on the tensor's current CUDA stream: the call
        returns once the work is enqueued there (as with NCCL), and later work on that
        stream sees the result."""
        work = Work(call, outputs, self._state)
        if like is not None and like.is_cuda:
            stream = torch.cuda.current_stream(like.device)
            handle = stream.cuda_stream
            self._state.submit(Op(call, lambda _: launch(handle), post, keep), work, True)
            event = torch.cuda.Event()
            event.record(stream)
            work._stream_event = event
        else:
            self._state.submit(Op(call, launch, post, keep), work, not is_async(opts))
        self._seq += 1
        return work

    def _coalesced(self, outputs, inputs, call, gather):
        """The lists of a coalesced call, checked pair by pair: one dtype and device, and
        each output n times its input (gather), or each input n times its output."""
        n = self.size()
        ins = tensor_list(inputs, "inputs", call)
        outs = tensor_list(outputs, "outputs", call)
        if len(ins) != len(outs):
            raise fail(f"{call}: {len(outs)} outputs for {len(ins)} inputs")
        if not ins:
            raise fail(f"{call}: inputs is empty")
        small, large, small_what, large_what = (ins, outs, "inputs", "outputs") if gather \
            else (outs, ins, "outputs", "inputs")
        same_list(small, small_what, call)
        for i, (a, b) in enumerate(zip(small, large)):
            same_kind(a, b, f"{large_what}[{i}]", call, f"{small_what}[{i}]",
                      numel=n * a.numel())
        return outs, ins

    def _check_peer(self, peer, call):
        n = self.size()
        if not isinstance(peer, int) or not 0 <= peer < n:
            raise fail(f"{call}: peer rank {peer} is outside the group of {n} ranks")
        if peer == self.rank():
            raise fail(f"{call}: rank {peer} cannot send to or receive from itself")

    # -- allreduce -------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        call = "allreduce"
        t = one(tensors, "tensors", call)
        red = reduction(opts_op(opts, _OPT.AllreduceOptions), t.dtype, call)
        if t.is_contiguous():  # the common case: no stage, nothing to copy back
            buf, post = t, None
        else:
            d = Dst(t, inout=True)
            buf, post = d.buf, copy_back([d])
        if red.factor is not None:
            buf.copy_(red.scaled(buf))
        comm, ptr, count, dt, code = self._comm, buf.data_ptr(), buf.numel(), DTYPE[t.dtype], \
            red.code

        def launch(s):
            comm.raw(_F_ALLREDUCE, ptr, ptr, count, dt, code, 0, s)

        return self._submit(call, launch, [t], post, (buf,), opts, t)

    def allreduce_coalesced(self, tensors, opts=None):
        call = "allreduce_coalesced"
        ts = tensor_list(tensors, "tensors", call)
        if not ts:
            raise fail(f"{call}: tensors is empty")
        same_list(ts, "tensors", call)
        red = reduction(opts_op(opts, _OPT.AllreduceCoalescedOptions), ts[0].dtype, call)
        flat = red.scaled(torch.cat([x.reshape(-1) for x in ts]))
        comm = self._comm

        def launch(s):
            comm.raw(_F_ALLREDUCE, flat.data_ptr(), flat.data_ptr(), flat.numel(),
                     DTYPE[flat.dtype], red.code, 0, s)

        def post():
            off = 0
            for x in ts:
                x.copy_(flat[off:off + x.numel()].view(x.shape))
                off += x.numel()

        return self._submit(call, launch, ts, post, (flat,), opts, ts[0])

    # -- broadcast / reduce ----------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        call = "broadcast"
        t = one(tensors, "tensors", call)
        if isinstance(opts, int):
            root = opts
            if not 0 <= root < self.size():
                raise fail(f"{call}: root rank {root} is outside the group of {self.size()} "
                           f"ranks")
            opts = None
        else:
            root = root_of(opts if opts is not None else dist.BroadcastOptions(), self.size(),
                           call)
        d = Dst(t, inout=True)
        buf = d.buf
        comm, ptr, count, dt = self._comm, buf.data_ptr(), buf.numel(), DTYPE[t.dtype]

        def launch(s):
            comm.raw(_F_BROADCAST, ptr, ptr, count, dt, 0, root, s)

        return self._submit(call, launch, [t], copy_back([d]), (buf,), opts, t)

    def reduce(self, tensors, opts=None, op=None):
        call = "reduce"
        t = one(tensors, "tensors", call)
        if isinstance(opts, int):  # reduce(tensor, root, op=SUM)
            o = dist.ReduceOptions()
            o.rootRank = opts
            if op is not None:
                o.reduceOp = op
            opts = o
        elif opts is None:
            opts = dist.ReduceOptions()
        root = root_of(opts, self.size(), call)
        red = reduction(opts.reduceOp, t.dtype, call)
        is_root = self.rank() == root
        d = Dst(t, inout=True)
        buf = d.buf
        # Off the root the input stays as it was; a scaled sum reads a scaled copy.
        send = red.scaled(buf)
        comm, count, dt = self._comm, buf.numel(), DTYPE[t.dtype]

        def launch(s):
            comm.raw(_F_REDUCE, send.data_ptr(), buf.data_ptr() if is_root else 0, count, dt,
                     red.code, root, s)

        return self._submit(call, launch, [t], copy_back([d]) if is_root else None,
                            (buf, send), opts, t)

    # -- allgather -------------------------------------------------------------------------
    def allgather(self, output_tensors, input_tensors, opts=None):
        call = "allgather"
        n = self.size()
        if isinstance(input_tensors, torch.Tensor):  # allgather(List[Tensor], Tensor)
            output_tensors = [output_tensors]
        t = one(input_tensors, "input_tensors", call)
        outs = per_rank(tensor_list(output_tensors, "output_tensors", call), "output_tensors",
                        call, n, "takes one list of output tensors (got {got}); the "
                        "*_multigpu forms are not supported", "output")
        for i, o in enumerate(outs):
            same_kind(t, o, f"output tensor {i}", call, "the input tensor")
        s = src(t)
        count = s.numel()
        flat = torch.empty(n * count, dtype=t.dtype, device=t.device)
        comm, dt = self._comm, DTYPE[t.dtype]

        def launch(st):
            comm.raw(_F_ALLGATHER, s.data_ptr(), flat.data_ptr(), count, dt, 0, 0, st)

        def post():
            for i, o in enumerate(outs):
                o.copy_(flat[i * count:(i + 1) * count].view(o.shape))

        return self._submit(call, launch, outs, post, (s, flat), opts, t)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        call = "all_gather_into_tensor"
        n = self.size()
        check_tensor(input, "input", call)
        same_kind(input, output, "output", call, "input", numel=n * input.numel())
        s = src(input)
        d = Dst(output)
        buf = d.buf
        comm, sp, bp, count, dt = self._comm, s.data_ptr(), buf.data_ptr(), s.numel(), \
            DTYPE[input.dtype]

        def launch(st):
            comm.raw(_F_ALLGATHER, sp, bp, count, dt, 0, 0, st)

        return self._submit(call, launch, [output], copy_back([d]), (s, buf), opts,
                            input)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Each inputs[i] gathered into outputs[i], as one allgather of their concatenation."""
        call = "all_gather_into_tensor_coalesced"
        n = self.size()
        outs, ins = self._coalesced(outputs, inputs, call, gather=True)
        if len(ins) == 1:
            return self.all_gather_single(outs[0], ins[0], opts)
        flat_in = torch.cat([x.reshape(-1) for x in ins])
        total = flat_in.numel()
        flat = torch.empty(n * total, dtype=flat_in.dtype, device=flat_in.device)
        comm, dt = self._comm, DTYPE[flat_in.dtype]

        def launch(st):
            comm.raw(_F_ALLGATHER, flat_in.data_ptr(), flat.data_ptr(), total, dt, 0, 0, st)

        def post():
            rows = flat.view(n, total)
            off = 0
            for x, o in zip(ins, outs):
                k = x.numel()
                o.view(n, k).copy_(rows[:, off:off + k]) if o.is_contiguous() else \
                    o.copy_(rows[:, off:off + k].reshape(o.shape))
                off += k

        return self._submit(call, launch, outs, post, (flat_in, flat), opts, flat)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        call = "allgather_coalesced"
        n = self.size()
        ins = tensor_list(input_list, "input_list", call)
        outs = tensor_list(output_lists, "output_lists", call)
        if not ins:
            raise fail(f"{call}: input_list is empty")
        if len(outs) != n:
            raise fail(f"{call}: output_lists has {len(outs)} lists; the group has {n} ranks")
        same_list(ins, "input_list", call)
        for r, lst in enumerate(outs):
            lst = tensor_list(lst, f"output_lists[{r}]", call)
            if len(lst) != len(ins):
                raise fail(f"{call}: output_lists[{r}] has {len(lst)} tensors; input_list has "
                           f"{len(ins)}")
            for i, o in enumerate(lst):
                same_kind(ins[i], o, f"output_lists[{r}][{i}]", call, f"input_list[{i}]")
        flat_in = torch.cat([x.reshape(-1) for x in ins])
        count = flat_in.numel()
        flat = torch.empty(n * count, dtype=flat_in.dtype, device=flat_in.device)
        comm, dt = self._comm, DTYPE[flat_in.dtype]

        def launch(st):
            comm.raw(_F_ALLGATHER, flat_in.data_ptr(), flat.data_ptr(), count, dt, 0, 0, st)

        def post():
            for r, lst in enumerate(outs):
                off = r * count
                for o in lst:
                    o.copy_(flat[off:off + o.numel()].view(o.shape))
                    off += o.numel()

        return self._submit(call, launch, [o for lst in outs for o in lst], post,
                            (flat_in, flat), opts, flat)

    # -- reduce_scatter --------------------------------------------------------------------
    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        call = "reduce_scatter"
        n = self.size()
        if isinstance(output_tensors, torch.Tensor):  # reduce_scatter(Tensor, List, op)
            output_tensors = [output_tensors]
            input_tensors = [input_tensors]
            op = opts if opts is not None else dist.ReduceOp.SUM
            opts = None
        else:
            op = opts_op(opts, _OPT.ReduceScatterOptions)
        out = one(output_tensors, "output_tensors", call)
        ins = per_rank(tensor_list(input_tensors, "input_tensors", call), "input_tensors",
                       call, n, "takes one list of input tensors (got {got}); the "
                       "*_multigpu forms are not supported", "input")
        for i, x in enumerate(ins):
            same_kind(out, x, f"input tensor {i}", call, "the output tensor")
        red = reduction(op, out.dtype, call)
        flat = torch.cat([x.reshape(-1) for x in ins]) if ins else \
            torch.empty(0, dtype=out.dtype, device=out.device)
        flat = red.scaled(flat)
        return self._reduce_scatter_into(call, flat, out, red, opts)

    def _reduce_scatter_into(self, call, flat, out, red, opts):
        d = Dst(out)
        buf = d.buf
        comm, fp, bp, count, dt, code = self._comm, flat.data_ptr(), buf.data_ptr(), \
            buf.numel(), DTYPE[out.dtype], red.code

        def launch(st):
            comm.raw(_F_REDUCE_SCATTER, fp, bp, count, dt, code, 0, st)

        return self._submit(call, launch, [out], copy_back([d]), (flat, buf), opts,
                            out)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        call = "reduce_scatter_tensor"
        n = self.size()
        check_tensor(output, "output", call)
        same_kind(output, input, "input", call, "output", numel=n * output.numel())
        red = reduction(opts_op(opts, _OPT.ReduceScatterOptions), output.dtype, call)
        return self._reduce_scatter_into(call, red.scaled(src(input)), output, red, opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """Each inputs[i] reduced and scattered into outputs[i], as one reduce-scatter of
        their blocks side by side (rank r's block holds every input's block r)."""
        call = "reduce_scatter_tensor_coalesced"
        n = self.size()
        outs, ins = self._coalesced(outputs, inputs, call, gather=False)
        if len(ins) == 1:
            return self.reduce_scatter_single(outs[0], ins[0], opts)
        red = reduction(opts_op(opts, _OPT.ReduceScatterOptions), outs[0].dtype, call)
        flat = red.scaled(torch.cat([x.reshape(n, -1) for x in ins], dim=1).reshape(-1))
        total = sum(o.numel() for o in outs)
        res = torch.empty(total, dtype=outs[0].dtype, device=outs[0].device)
        comm, fp, rp, dt, code = self._comm, flat.data_ptr(), res.data_ptr(), DTYPE[res.dtype], \
            red.code

        def launch(st):
            comm.raw(_F_REDUCE_SCATTER, fp, rp, total, dt, code, 0, st)

        def post():
            off = 0
            for o in outs:
                o.copy_(res[off:off + o.numel()].view(o.shape))
                off += o.numel()

        return self._submit(call, launch, outs, post, (flat, res), opts, res)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- all-to-all ------------------------------------------------------------------------
    def all_to_all_single(self, output, input, output_split_sizes=None,  # noqa: A002
                          input_split_sizes=None, opts=None):
        call = "all_to_all_single"
        n = self.size()
        check_tensor(input, "input", call)
        same_kind(input, output, "output", call, "input", numel=output.numel())
        osp = list(output_split_sizes or [])
        isp = list(input_split_sizes or [])
        if not osp and not isp:
            if input.numel() % n:
                raise fail(f"{call}: input has {input.numel()} elements, not a multiple of the "
                           f"group size {n}; pass split sizes")
            s = src(input)
            d = Dst(output)
            buf = d.buf
            comm, count, dt = self._comm, input.numel() // n, DTYPE[input.dtype]

            def launch(st):
                comm.raw(_F_ALLTOALL, s.data_ptr(), buf.data_ptr(), count, dt, 0, 0, st)

            return self._submit(call, launch, [output], copy_back([d]), (s, buf), opts,
                                input)

        # Uneven: split sizes count rows (the first dimension); a group of sends and
        # receives, one pair per peer (itself included).
        def splits(sp, t, what):
            if t.dim() == 0:
                raise fail(f"{call}: {what} is a 0-dim tensor; split sizes need a first "
                           f"dimension")
            rows = t.shape[0]
            if not sp:
                if rows % n:
                    raise fail(f"{call}: {what} has {rows} rows, not a multiple of the group "
                               f"size {n}; pass its split sizes")
                sp = [rows // n] * n
            if len(sp) != n:
                raise fail(f"{call}: {what} split sizes {sp} have {len(sp)} entries; the group "
                           f"has {n} ranks")
            if any((not isinstance(x, int)) or x < 0 for x in sp) or sum(sp) != rows:
                raise fail(f"{call}: {what} split sizes {sp} must be non-negative and sum to "
                           f"its {rows} rows")
            return sp

        isp = splits(isp, input, "input")
        osp = splits(osp, output, "output")
        s = src(input)
        d = Dst(output)
        buf = d.buf
        in_row = s[0].numel() if s.shape[0] else 0
        out_row = buf[0].numel() if buf.shape[0] else 0
        if s.shape[0] and buf.shape[0] and in_row != out_row:
            raise fail(f"{call}: input rows have {in_row} elements but output rows have "
                       f"{out_row}")
        fsrc = s.reshape(-1)
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
        comm = self._comm

        def launch(st):
            p2p_group(comm, st, sends, recvs)

        return self._submit(call, launch, [output], copy_back([d]), (s, buf, fsrc, fbuf), opts,
                            input)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        call = "all_to_all"
        n = self.size()
        outs = tensor_list(output_tensors, "output_tensor_list", call)
        ins = tensor_list(input_tensors, "input_tensor_list", call)
        if len(outs) != n or len(ins) != n:
            raise fail(f"{call}: the lists have {len(ins)} input and {len(outs)} output "
                       f"tensors; the group has {n} ranks")
        same_list(ins, "input_tensor_list", call)
        for i, o in enumerate(outs):
            check_tensor(o, f"output_tensor_list[{i}]", call)
            if o.dtype != ins[0].dtype:
                raise fail(f"{call}: output_tensor_list[{i}] has dtype {o.dtype} but "
                           f"input_tensor_list[0] has {ins[0].dtype}; all tensors of one call "
                           f"must have the same dtype")
        srcs = [src(x) for x in ins]
        dsts = [Dst(o) for o in outs]
        sends = [(srcs[p], p) for p in range(n)]
        recvs = [(dsts[p].buf, p) for p in range(n)]
        comm = self._comm

        def launch(st):
            p2p_group(comm, st, sends, recvs)

        return self._submit(call, launch, outs, copy_back(dsts),
                            (srcs, [d.buf for d in dsts]), opts, ins[0])

    # -- gather / scatter ------------------------------------------------------------------
    def gather(self, output_tensors, input_tensors, opts=None):
        call = "gather"
        n = self.size()
        if isinstance(input_tensors, torch.Tensor):  # gather(List[Tensor], Tensor, root)
            o = dist.GatherOptions()
            o.rootRank = opts
            opts = o
            output_tensors = [output_tensors] if output_tensors else []
        t = one(input_tensors, "input_tensors", call)
        root = root_of(opts if opts is not None else dist.GatherOptions(), n, call)
        is_root = self.rank() == root
        lists = tensor_list(output_tensors, "output_tensors", call)
        if is_root:
            outs = per_rank(lists, "output_tensors", call, n,
                            "the root takes one list of output tensors (got {got})", "gather")
            for i, o in enumerate(outs):
                same_kind(t, o, f"gather_list[{i}]", call, "the input tensor")
        else:
            if lists and any(len(tensor_list(x, "output_tensors", call)) for x in lists):
                raise fail(f"{call}: only the root rank {root} takes a gather list")
            outs = []
        s = src(t)
        count = s.numel()
        flat = torch.empty(n * count if is_root else 0, dtype=t.dtype, device=t.device)
        parts = [(flat[i * count:(i + 1) * count], i) for i in range(n)] if is_root else []
        comm = self._comm

        def launch(st):
            if HAVE_ROOTED[0]:
                try:
                    return comm.raw(FUNC["gather"], s.data_ptr(),
                                    flat.data_ptr() if is_root else 0, count, DTYPE[t.dtype],
                                    0, root, st)
                except _core.InvalidUsage as e:
                    if _NOT_BUILT not in str(e):
                        raise
                    HAVE_ROOTED[0] = False
            # A library without collGather: a group of sends to the root.
            p2p_group(comm, st, [(s, root)], parts)

        def post():
            for i, o in enumerate(outs):
                o.copy_(flat[i * count:(i + 1) * count].view(o.shape))

        return self._submit(call, launch, outs if is_root else [t], post if is_root else None,
                            (s, flat), opts, t)

    def scatter(self, output_tensors, input_tensors, opts=None):
        call = "scatter"
        n = self.size()
        if isinstance(output_tensors, torch.Tensor):  # scatter(Tensor, List[Tensor], root)
            o = dist.ScatterOptions()
            o.rootRank = opts
            opts = o
            input_tensors = [input_tensors] if input_tensors else []
        out = one(output_tensors, "output_tensors", call)
        root = root_of(opts if opts is not None else dist.ScatterOptions(), n, call)
        is_root = self.rank() == root
        lists = tensor_list(input_tensors, "input_tensors", call)
        count = out.numel()
        if is_root:
            ins = per_rank(lists, "input_tensors", call, n,
                           "the root takes one list of input tensors (got {got})", "scatter")
            for i, x in enumerate(ins):
                same_kind(out, x, f"scatter_list[{i}]", call, "the output tensor")
            flat = torch.cat([x.reshape(-1) for x in ins])
        else:
            if lists and any(len(tensor_list(x, "input_tensors", call)) for x in lists):
                raise fail(f"{call}: only the root rank {root} takes a scatter list")
            flat = torch.empty(0, dtype=out.dtype, device=out.device)
        d = Dst(out)
        buf = d.buf
        parts = [(flat[i * count:(i + 1) * count], i) for i in range(n)] if is_root else []
        comm = self._comm

        def launch(st):
            if HAVE_ROOTED[0]:
                try:
                    return comm.raw(FUNC["scatter"], flat.data_ptr() if is_root else 0,
                                    buf.data_ptr(), count, DTYPE[out.dtype], 0, root, st)
                except _core.InvalidUsage as e:
                    if _NOT_BUILT not in str(e):
                        raise
                    HAVE_ROOTED[0] = False
            # A library without collScatter: a group of receives from the root.
            p2p_group(comm, st, parts, [(buf, root)])

        return self._submit(call, launch, [out], copy_back([d]), (flat, buf), opts, out)

    # -- point to point --------------------------------------------------------------------
    def _p2p(self, kind, tensors, peer, tag):
        t = one(tensors, "tensors", kind)
        # Tags are accepted and not matched (as NCCL's backend does): messages between two
        # ranks pair up in the order they were sent.
        self._check_peer(peer, kind)
        if kind == "send":
            buf, d = src(t), None
        else:
            d = Dst(t)
            buf = d.buf
        work = Work(kind, [t], self._state)
        # A CUDA tensor's message is issued from this thread, on its current stream.
        self._state.add_p2p(kind, kind, buf, peer, d, work, self._defer_p2p and not t.is_cuda)
        self._seq += 1
        return self._out(work)

    def send(self, tensors, dstRank, tag=0):  # noqa: N803 - torch's names
        return self._p2p("send", tensors, dstRank, tag)

    def recv(self, tensors, srcRank, tag=0):  # noqa: N803
        return self._p2p("recv", tensors, srcRank, tag)

    def recv_anysource(self, tensors, tag=0):
        """A receive from whichever rank sends first (collRecvAny), after the sends and
        receives batched before it; the Work's source_rank() says who sent, once done.
        Tags are not matched, as for recv."""
        call = "recv_anysource"
        t = one(tensors, "tensors", call)
        if t.is_cuda:
            raise fail(f"{call}: tensor is on {t.device}; a receive from any source takes "
                       f"CPU tensors (recv with src= takes CUDA tensors)")
        d = Dst(t)
        buf = d.buf
        source = torch.full((1,), -1, dtype=torch.int32)
        comm, count, dt = self._comm, buf.numel(), DTYPE[t.dtype]

        def launch(s):
            comm.raw(_F_RECV_ANY, source.data_ptr(), buf.data_ptr(), count, dt, 0, 0, s)

        work = self._run(call, launch, [t], copy_back([d]), (buf, source))
        work._source = source
        return self._out(work)

    # Coalescing (batch_isend_irecv, torch's _coalescing_manager): the calls between start
    # and end run as they come, their sends and receives as one group at the end, and the
    # Work of the end completes when all of them have.  torch 1.13 calls these without a
    # device, 2.x with one; torch's Backend calls them start_coalescing / end_coalescing.
    def _start_coalescing(self, device=None):
        self._state.open_window("_start_coalescing")

    def _end_coalescing(self, device=None):
        work = Work("coalesced", [], self._state)
        self._state.close_window("_end_coalescing", work)
        return self._out(work)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    # -- barrier ---------------------------------------------------------------------------
    def barrier(self, opts=None):
        """A one-byte allreduce on the CPU: it completes after every earlier call of the
        group.  device_ids (a CUDA device per rank, as NCCL takes them) are accepted: the
        token stays on the CPU, and the devices' current streams are synchronized first so
        that work enqueued there before the barrier is done when it returns."""
        call = "barrier"
        ids = getattr(opts, "device_ids", None) if opts is not None else None
        if ids and torch.cuda.is_available():
            for i in ids:
                torch.cuda.current_stream(i).synchronize()
        token = torch.zeros(1, dtype=torch.uint8)
        comm = self._comm
        ptr = token.data_ptr()

        def launch(s):
            comm.raw(_F_ALLREDUCE, ptr, ptr, 1, DTYPE[torch.uint8], OP["max"], 0, s)

        return self._submit(call, launch, [], None, (token,), opts)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        raise fail("monitored_barrier is not supported; use barrier(): a rank that dies or "
                   "fails makes it fail on every other rank within the group's timeout, "
                   "naming that rank")
