/* collective._core: the collectives on buffer-protocol objects (Comm.allreduce and
 * the others): their arguments, buffers and checks.
 *
 * A call takes its buffers zero-copy: each is exported (PyObject_GetBuffer) for
 * the time the library may touch it, which keeps the memory alive and a numpy
 * array from being resized.  Its element type comes from the buffer's format, or
 * from dtype=, which reinterprets items of the same size (or raw bytes).  Every
 * check happens before the library is called, so a refused call sends nothing.
 *
 *   comm.allreduce(x)         parse -> export x -> collAllReduce (GIL released)
 *                             -> release x -> return x
 *   comm.allreduce(x, async_=True)
 *                             ... -> collAllReduce on a pooled stream -> Handle;
 *                             x stays exported until wait() or the handle dies
 *   with collective.group():  blocking calls: their views wait in the group's
 *       comm.send(a, 1)       held list until group_end has run them; async calls
 *       comm.recv(b, 1)       share one pending set (one stream) per group
 *
 * The pending sets and handles of async calls are in _stream.c. */
#include "_core.h"

#include <string.h>

/* ------------------------------------------------------------ arguments --- */

enum arg { A_SEND, A_RECV, A_OP, A_ROOT, A_PEER, A_BUF, A_ASYNC, A_DTYPE, A_N };
static const char *const arg_names[A_N] = {"send", "recv", "op", "root", "peer", "buf",
                                           "async_", "dtype"};
static PyObject *arg_strs[A_N];

static const char *const op_names[collNumOps] = {"sum", "prod", "max", "min", "avg"};
static PyObject *op_strs[collNumOps];

static const char *const dtype_names[collNumTypes] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
    "bfloat16"};
static const size_t dtype_sizes[collNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static PyObject *dtype_strs[collNumTypes];

#define BIT(a) (1u << (a))
#define KW_COMMON (BIT(A_ASYNC) | BIT(A_DTYPE))

struct call_spec {
    const char *fn;
    enum coll_py_func func;
    int npos;
    enum arg pos[4];
    unsigned kw;  /* the keywords it takes */
    bool reduces; /* the data must have a library type */
};

static const struct call_spec spec_allreduce = {
    "allreduce", COLL_PY_ALLREDUCE, 3, {A_SEND, A_RECV, A_OP},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_OP) | KW_COMMON, true};
static const struct call_spec spec_broadcast = {
    "broadcast", COLL_PY_BROADCAST, 3, {A_SEND, A_RECV, A_ROOT},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_ROOT) | KW_COMMON, false};
static const struct call_spec spec_reduce = {
    "reduce", COLL_PY_REDUCE, 4, {A_SEND, A_RECV, A_OP, A_ROOT},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_OP) | BIT(A_ROOT) | KW_COMMON, true};
static const struct call_spec spec_allgather = {
    "allgather", COLL_PY_ALLGATHER, 2, {A_SEND, A_RECV},
    BIT(A_SEND) | BIT(A_RECV) | KW_COMMON, false};
static const struct call_spec spec_reduce_scatter = {
    "reduce_scatter", COLL_PY_REDUCE_SCATTER, 3, {A_SEND, A_RECV, A_OP},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_OP) | KW_COMMON, true};
static const struct call_spec spec_alltoall = {
    "alltoall", COLL_PY_ALLTOALL, 2, {A_SEND, A_RECV},
    BIT(A_SEND) | BIT(A_RECV) | KW_COMMON, false};
static const struct call_spec spec_gather = {
    "gather", COLL_PY_GATHER, 3, {A_SEND, A_RECV, A_ROOT},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_ROOT) | KW_COMMON, false};
static const struct call_spec spec_scatter = {
    "scatter", COLL_PY_SCATTER, 3, {A_SEND, A_RECV, A_ROOT},
    BIT(A_SEND) | BIT(A_RECV) | BIT(A_ROOT) | KW_COMMON, false};
static const struct call_spec spec_send = {
    "send", COLL_PY_SEND, 2, {A_BUF, A_PEER}, BIT(A_BUF) | BIT(A_PEER) | KW_COMMON, false};
static const struct call_spec spec_recv = {
    "recv", COLL_PY_RECV, 2, {A_BUF, A_PEER}, BIT(A_BUF) | BIT(A_PEER) | KW_COMMON, false};

/* What a call was given, once parsed. */
struct call_in {
    PyObject *send, *recv; /* NULL: not given (None counts as not given) */
    const char *send_name, *recv_name;
    collRedOp_t op;
    int root; /* or peer */
    int dtype; /* -1: from the buffers */
    bool async;
    bool no_result; /* barrier: returns None, its handle's result is None */
};

static int parse_args(const struct call_spec *sp, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, PyObject **a)
{
    for (int i = 0; i < A_N; i++)
        a[i] = NULL;
    if (nargs > sp->npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)",
                     sp->fn, sp->npos, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[sp->pos[i]] = args[i];
    if (kwnames == NULL)
        return 0;
    Py_ssize_t nkw = PyTuple_Size(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GetItem(kwnames, k);
        if (kw == NULL)
            return -1;
        int idx = -1;
        for (int j = 0; j < A_N && idx < 0; j++)
            if (kw == arg_strs[j])
                idx = j;
        for (int j = 0; j < A_N && idx < 0; j++)
            if (PyUnicode_Compare(kw, arg_strs[j]) == 0)
                idx = j;
        if (idx < 0 || !(sp->kw & BIT(idx))) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
                         sp->fn, kw);
            return -1;
        }
        if (a[idx] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", sp->fn,
                         arg_names[idx]);
            return -1;
        }
        a[idx] = args[nargs + k];
    }
    return 0;
}

/* The index of o among names (the interned strs first, then by value); -1 when o
 * is a str that names none of them, -2 when it is no str. */
static int name_index(PyObject *o, PyObject *const *strs, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (o == strs[i])
            return i;
    if (!PyUnicode_Check(o))
        return -2;
    for (int i = 0; i < n; i++)
        if (PyUnicode_CompareWithASCIIString(o, names[i]) == 0)
            return i;
    return -1;
}

static int parse_op(const char *fn, PyObject *o, collRedOp_t *op_p)
{
    if (o == NULL) {
        *op_p = collSum;
        return 0;
    }
    int i = name_index(o, op_strs, op_names, collNumOps);
    if (i >= 0) {
        *op_p = (collRedOp_t)i;
        return 0;
    }
    if (i == -1) {
        coll_py_raise_fmt(collInvalidArgument, "%s: op '%U' is not one of sum, prod, max, min, "
                          "avg", fn, o);
        return -1;
    }
    if (PyLong_Check(o)) {
        long v = PyLong_AsLong(o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0 || v >= collNumOps) {
            coll_py_raise_fmt(collInvalidArgument, "%s: op %ld is not a code of OPS", fn, v);
            return -1;
        }
        *op_p = (collRedOp_t)v;
        return 0;
    }
    coll_py_type_error(o, "%s: op must be a str ('sum', 'prod', 'max', 'min', 'avg')", fn);
    return -1;
}

static int parse_dtype(const char *fn, PyObject *o, int *dtype_p)
{
    *dtype_p = -1;
    if (o == NULL || o == Py_None)
        return 0;
    int i = name_index(o, dtype_strs, dtype_names, collNumTypes);
    if (i >= 0) {
        *dtype_p = i;
        return 0;
    }
    if (i == -1) {
        coll_py_raise_fmt(collInvalidArgument, "%s: dtype '%U' is not one of int8, uint8, "
                          "int32, uint32, int64, uint64, float16, float32, float64, bfloat16",
                          fn, o);
        return -1;
    }
    coll_py_type_error(o, "%s: dtype must be a str such as 'bfloat16'", fn);
    return -1;
}

static int parse_int(const char *fn, const char *name, PyObject *o, int dflt, int *out)
{
    if (o == NULL) {
        if (dflt == -1) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, name);
            return -1;
        }
        *out = dflt;
        return 0;
    }
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            coll_py_type_error(o, "%s: %s must be an int", fn, name);
        } else if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            coll_py_raise_fmt(collInvalidArgument, "%s: %s %R is out of range", fn, name, o);
        }
        return -1;
    }
    if (v < -2147483647L - 1 || v > 2147483647L) {
        coll_py_raise_fmt(collInvalidArgument, "%s: %s %ld is out of range", fn, name, v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* -------------------------------------------------------------- buffers --- */

/* One exported buffer and how the library sees it.  typed false: its items have
 * no library type (int16, complex, structs, foreign byte order): it moves as
 * bytes (uint8) and cannot be reduced. */
struct buf {
    Py_buffer v; /* v.obj NULL: none */
    collDataType_t dtype;
    size_t count; /* elements of dtype */
    bool typed;
};

#if PY_LITTLE_ENDIAN
#define NATIVE_ORDER '<'
#else
#define NATIVE_ORDER '>'
#endif

/* The library type of a buffer format, or -1. */
static int format_dtype(const char *f, Py_ssize_t isz)
{
    if (f == NULL)
        return isz == 1 ? collUint8 : -1;
    if (*f == '@' || *f == '=' || *f == NATIVE_ORDER)
        f++;
    if (f[0] == '\0' || f[1] != '\0')
        return -1;
    switch (f[0]) {
    case 'b':
        return isz == 1 ? collInt8 : -1;
    case 'B':
    case 'c':
    case '?':
        return isz == 1 ? collUint8 : -1;
    case 'i':
    case 'l':
    case 'q':
    case 'n':
        return isz == 1 ? collInt8 : isz == 4 ? collInt32 : isz == 8 ? collInt64 : -1;
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
        return isz == 1 ? collUint8 : isz == 4 ? collUint32 : isz == 8 ? collUint64 : -1;
    case 'e':
        return isz == 2 ? collFloat16 : -1;
    case 'f':
        return isz == 4 ? collFloat32 : -1;
    case 'd':
        return isz == 8 ? collFloat64 : -1;
    default:
        return -1;
    }
}

static const char *buf_type_name(const struct buf *b)
{
    return b->typed ? dtype_names[b->dtype] : "bytes (untyped items)";
}

static int get_buf(const char *fn, const char *name, PyObject *o, bool writable, int dtype,
                   struct buf *b)
{
    if (PyObject_GetBuffer(o, &b->v, writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) < 0) {
        b->v.obj = NULL;
        if (!PyObject_CheckBuffer(o)) {
            PyErr_Clear();
            coll_py_type_error(o, "%s: %s must support the buffer protocol (a numpy array, "
                               "bytearray, memoryview...)", fn, name);
            return -1;
        }
        if (writable) {
            Py_buffer t;
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if (PyObject_GetBuffer(o, &t, PyBUF_RECORDS_RO) == 0) {
                PyBuffer_Release(&t);
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                PyObject *type_name = coll_py_type_name(o);
                if (type_name != NULL) {
                    coll_py_raise_fmt(collInvalidArgument, "%s: %s is read-only (%.100U), but "
                                      "it receives the result", fn, name, type_name);
                    Py_DECREF(type_name);
                }
                return -1;
            }
            PyErr_Clear();
            PyErr_Restore(et, ev, tb);
        }
        return -1;
    }
    if (!PyBuffer_IsContiguous(&b->v, 'C')) {
        PyBuffer_Release(&b->v);
        b->v.obj = NULL;
        coll_py_raise_fmt(collInvalidArgument, "%s: %s is not C-contiguous (numpy."
                          "ascontiguousarray makes a contiguous copy)", fn, name);
        return -1;
    }
    Py_ssize_t isz = b->v.itemsize > 0 ? b->v.itemsize : 1;
    if (dtype >= 0) {
        size_t esize = dtype_sizes[dtype];
        if ((size_t)isz != esize && isz != 1) {
            coll_py_raise_fmt(collInvalidArgument, "%s: dtype %s has %zu-byte elements, but "
                              "%s has %zd-byte items (format '%s')", fn, dtype_names[dtype],
                              esize, name, isz, b->v.format ? b->v.format : "B");
            goto fail;
        }
        if ((size_t)b->v.len % esize != 0) {
            coll_py_raise_fmt(collInvalidArgument, "%s: %s has %zd bytes, not a whole number "
                              "of %s elements", fn, name, b->v.len, dtype_names[dtype]);
            goto fail;
        }
        b->dtype = (collDataType_t)dtype;
        b->count = (size_t)b->v.len / esize;
        b->typed = true;
        return 0;
    }
    int dt = format_dtype(b->v.format, isz);
    b->typed = dt >= 0;
    b->dtype = b->typed ? (collDataType_t)dt : collUint8;
    b->count = (size_t)b->v.len / (b->typed ? dtype_sizes[dt] : 1);
    return 0;
fail:
    PyBuffer_Release(&b->v);
    b->v.obj = NULL;
    return -1;
}

static void buf_release(struct buf *b)
{
    if (b->v.obj != NULL)
        PyBuffer_Release(&b->v);
    b->v.obj = NULL;
}

static int check_reducible(const char *fn, const char *name, const struct buf *b)
{
    if (b->typed)
        return 0;
    coll_py_raise_fmt(collInvalidArgument, "%s: %s has items of format '%s' (%zd bytes), which "
                      "have no reduction type; reinterpret them with dtype= (for example "
                      "dtype='bfloat16')", fn, name, b->v.format ? b->v.format : "B",
                      b->v.itemsize);
    return -1;
}

static int check_same_type(const char *fn, const struct call_in *in, const struct buf *s,
                           const struct buf *r)
{
    if (s->dtype == r->dtype && s->typed == r->typed)
        return 0;
    coll_py_raise_fmt(collInvalidArgument, "%s: %s holds %s, but %s holds %s", fn,
                      in->recv_name, buf_type_name(r), in->send_name, buf_type_name(s));
    return -1;
}

/* recv (or send, per name) must have want elements. */
static int check_count(const char *fn, const char *name, const struct buf *b, size_t want,
                       const char *how)
{
    if (b->count == want)
        return 0;
    coll_py_raise_fmt(collInvalidArgument, "%s: %s has %zu elements of %s, needs %zu (%s)", fn,
                      name, b->count, buf_type_name(b), want, how);
    return -1;
}

/* ------------------------------------------------------------ the calls --- */

/* Exports the buffers of a call and works out its pointers and count. */
struct call_plan {
    struct buf s, r;
    const void *sendp;
    void *recvp;
    size_t count;
    collDataType_t dtype;
    PyObject *result;
};

static int plan_call(struct py_comm *c, const struct call_spec *sp, const struct call_in *in,
                     struct call_plan *pl)
{
    const char *fn = sp->fn;
    const char *sn = in->send_name, *rn = in->recv_name;
    struct buf *s = &pl->s, *r = &pl->r;
    bool is_root = in->root == c->rank;
    size_t n = (size_t)c->size;
    switch (sp->func) {
    case COLL_PY_ALLREDUCE:
    case COLL_PY_ALLTOALL:
        if (in->send == NULL)
            goto missing_send;
        if (get_buf(fn, sn, in->send, in->recv == NULL, in->dtype, s) < 0)
            return -1;
        if (sp->reduces && check_reducible(fn, sn, s) < 0)
            return -1;
        if (sp->func == COLL_PY_ALLTOALL && s->count % n != 0) {
            coll_py_raise_fmt(collInvalidArgument, "%s: %s has %zu elements, not a multiple "
                              "of the %zu ranks", fn, sn, s->count, n);
            return -1;
        }
        pl->sendp = s->v.buf;
        pl->recvp = s->v.buf;
        pl->result = in->send;
        if (in->recv != NULL) {
            if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0 ||
                check_same_type(fn, in, s, r) < 0 ||
                check_count(fn, rn, r, s->count, "as many as send") < 0)
                return -1;
            pl->recvp = r->v.buf;
            pl->result = in->recv;
        }
        pl->count = sp->func == COLL_PY_ALLTOALL ? s->count / n : s->count;
        pl->dtype = s->dtype;
        return 0;
    case COLL_PY_BROADCAST:
        if (in->recv == NULL) {
            if (in->send == NULL)
                goto missing_send;
            if (get_buf(fn, sn, in->send, !is_root, in->dtype, s) < 0)
                return -1;
            pl->sendp = s->v.buf;
            pl->recvp = s->v.buf;
            pl->count = s->count;
            pl->dtype = s->dtype;
            pl->result = in->send;
            return 0;
        }
        if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0)
            return -1;
        pl->recvp = r->v.buf;
        pl->count = r->count;
        pl->dtype = r->dtype;
        pl->result = in->recv;
        if (is_root) {
            if (in->send == NULL)
                goto missing_send;
            if (get_buf(fn, sn, in->send, false, in->dtype, s) < 0 ||
                check_same_type(fn, in, s, r) < 0 ||
                check_count(fn, sn, s, r->count, "as many as recv") < 0)
                return -1;
            pl->sendp = s->v.buf;
        }
        return 0;
    case COLL_PY_REDUCE:
        if (in->send == NULL)
            goto missing_send;
        if (get_buf(fn, sn, in->send, is_root && in->recv == NULL, in->dtype, s) < 0 ||
            check_reducible(fn, sn, s) < 0)
            return -1;
        pl->sendp = s->v.buf;
        pl->recvp = s->v.buf;
        pl->count = s->count;
        pl->dtype = s->dtype;
        pl->result = in->send;
        /* Off the root recvbuff stays NULL, so the library writes nothing there. */
        if (!is_root)
            pl->recvp = NULL;
        if (in->recv != NULL) {
            pl->result = in->recv;
            pl->recvp = NULL;
            if (is_root) {
                if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0 ||
                    check_same_type(fn, in, s, r) < 0 ||
                    check_count(fn, rn, r, s->count, "as many as send") < 0)
                    return -1;
                pl->recvp = r->v.buf;
            }
        }
        return 0;
    case COLL_PY_ALLGATHER:
    case COLL_PY_GATHER:
        if (in->send == NULL)
            goto missing_send;
        if (get_buf(fn, sn, in->send, false, in->dtype, s) < 0)
            return -1;
        pl->sendp = s->v.buf;
        pl->count = s->count;
        pl->dtype = s->dtype;
        pl->result = in->recv;
        if (sp->func == COLL_PY_GATHER && !is_root)
            return 0; /* recv is read on the root only */
        if (in->recv == NULL) {
            if (sp->func == COLL_PY_GATHER)
                coll_py_raise_fmt(collInvalidArgument, "%s: %s is required on the root (rank "
                                  "%d)", fn, rn, in->root);
            else
                PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, rn);
            return -1;
        }
        if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0 ||
            check_same_type(fn, in, s, r) < 0)
            return -1;
        if (r->count != n * s->count) {
            coll_py_raise_fmt(collInvalidArgument, "%s: %s has %zu elements of %s, needs %zu "
                              "(%zu ranks x %zu elements of %s)", fn, rn, r->count,
                              buf_type_name(r), n * s->count, n, s->count, sn);
            return -1;
        }
        pl->recvp = r->v.buf;
        return 0;
    case COLL_PY_REDUCE_SCATTER:
    case COLL_PY_SCATTER:
        if (in->recv == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, rn);
            return -1;
        }
        if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0)
            return -1;
        if (sp->reduces && check_reducible(fn, rn, r) < 0)
            return -1;
        pl->recvp = r->v.buf;
        pl->count = r->count;
        pl->dtype = r->dtype;
        pl->result = in->recv;
        if (sp->func == COLL_PY_SCATTER && !is_root)
            return 0; /* send is read on the root only */
        if (in->send == NULL) {
            if (sp->func == COLL_PY_SCATTER)
                coll_py_raise_fmt(collInvalidArgument, "%s: %s is required on the root (rank "
                                  "%d)", fn, sn, in->root);
            else
                goto missing_send;
            return -1;
        }
        if (get_buf(fn, sn, in->send, false, in->dtype, s) < 0 ||
            check_same_type(fn, in, s, r) < 0)
            return -1;
        if (s->count != n * r->count) {
            coll_py_raise_fmt(collInvalidArgument, "%s: %s has %zu elements of %s, needs %zu "
                              "(%zu ranks x %zu elements of %s)", fn, sn, s->count,
                              buf_type_name(s), n * r->count, n, r->count, rn);
            return -1;
        }
        pl->sendp = s->v.buf;
        return 0;
    case COLL_PY_SEND:
        if (in->send == NULL)
            goto missing_send;
        if (get_buf(fn, sn, in->send, false, in->dtype, s) < 0)
            return -1;
        pl->sendp = s->v.buf;
        pl->count = s->count;
        pl->dtype = s->dtype;
        pl->result = NULL;
        return 0;
    case COLL_PY_RECV:
        if (in->recv == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, rn);
            return -1;
        }
        if (get_buf(fn, rn, in->recv, true, in->dtype, r) < 0)
            return -1;
        pl->recvp = r->v.buf;
        pl->count = r->count;
        pl->dtype = r->dtype;
        pl->result = in->recv;
        return 0;
    case COLL_PY_RECV_ANY: /* raw() only */
    case COLL_PY_NFUNCS:
        break;
    }
    PyErr_SetString(PyExc_SystemError, "collective._core: unknown call");
    return -1;
missing_send:
    PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, sn);
    return -1;
}

/* Moves the plan's views into l. */
static int plan_keep(struct call_plan *pl, struct buf_list *l)
{
    int rc = 0;
    if (pl->s.v.obj != NULL && coll_py_bufs_append(l, &pl->s.v) < 0)
        rc = -1;
    if (pl->r.v.obj != NULL && coll_py_bufs_append(l, &pl->r.v) < 0)
        rc = -1;
    return rc;
}

static PyObject *run_call(struct py_comm *c, const struct call_spec *sp,
                          const struct call_in *in)
{
    struct call_plan pl = {.s.v.obj = NULL, .r.v.obj = NULL};
    struct py_group *g = &coll_py_group;
    bool in_group = g->depth > 0;
    PyObject *pending = NULL; /* a reference, owned here */
    collStream_t stream = NULL;
    collComm_t comm;
    collResult_t res;
    if (coll_py_comm_enter(c, sp->fn) < 0)
        return NULL;
    if (plan_call(c, sp, in, &pl) < 0)
        goto fail;
    if (in->async) {
        if (in_group && g->pending != NULL) {
            pending = g->pending;
            Py_INCREF(pending);
        } else {
            pending = coll_py_pending_new(c);
            if (pending == NULL)
                goto fail;
            if (in_group) {
                Py_INCREF(pending);
                g->pending = pending;
            }
        }
        stream = ((struct py_pending *)pending)->stream;
    }
    comm = c->comm;
    c->in_call++;
    Py_BEGIN_ALLOW_THREADS
    res = coll_py_dispatch(sp->func, pl.sendp, pl.recvp, pl.count, pl.dtype, in->op, in->root,
                           comm, stream);
    Py_END_ALLOW_THREADS
    c->in_call--;
    if (res != collSuccess) {
        coll_py_raise_comm(c, res);
        Py_XDECREF(pending);
        goto fail;
    }
    PyObject *result = in->no_result ? NULL : pl.result;
    if (pending != NULL) {
        int rc = plan_keep(&pl, &((struct py_pending *)pending)->bufs);
        PyObject *h = rc < 0 ? NULL : coll_py_handle_new(pending, result, sp->fn);
        Py_DECREF(pending);
        return h;
    }
    if (in_group)
        return plan_keep(&pl, &g->held) < 0 ? NULL : Py_NewRef(result ? result : Py_None);
    buf_release(&pl.s);
    buf_release(&pl.r);
    return Py_NewRef(result ? result : Py_None);
fail:
    buf_release(&pl.s);
    buf_release(&pl.r);
    return NULL;
}

static PyObject *call(PyObject *self, const struct call_spec *sp, PyObject *const *args,
                      Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[A_N];
    if (parse_args(sp, args, nargs, kwnames, a) < 0)
        return NULL;
    struct call_in in = {.send = a[A_SEND], .recv = a[A_RECV], .send_name = "send",
                         .recv_name = "recv", .op = collSum, .root = 0, .dtype = -1};
    if (sp->func == COLL_PY_SEND) {
        in.send = a[A_BUF];
        in.send_name = "buf";
    } else if (sp->func == COLL_PY_RECV) {
        in.recv = a[A_BUF];
        in.recv_name = "buf";
    }
    if (in.send == Py_None)
        in.send = NULL;
    if (in.recv == Py_None)
        in.recv = NULL;
    if (sp->reduces && parse_op(sp->fn, a[A_OP], &in.op) < 0)
        return NULL;
    if (sp->kw & BIT(A_ROOT) && parse_int(sp->fn, "root", a[A_ROOT], 0, &in.root) < 0)
        return NULL;
    if (sp->kw & BIT(A_PEER) && parse_int(sp->fn, "peer", a[A_PEER], -1, &in.root) < 0)
        return NULL;
    if (parse_dtype(sp->fn, a[A_DTYPE], &in.dtype) < 0)
        return NULL;
    if (a[A_ASYNC] != NULL) {
        int t = PyObject_IsTrue(a[A_ASYNC]);
        if (t < 0)
            return NULL;
        in.async = t;
    }
    return run_call((struct py_comm *)self, sp, &in);
}

#define CALL_METHOD(name)                                                                \
    static PyObject *comm_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, \
                                 PyObject *kwnames)                                      \
    {                                                                                    \
        return call(self, &spec_##name, args, nargs, kwnames);                           \
    }
CALL_METHOD(allreduce)
CALL_METHOD(broadcast)
CALL_METHOD(reduce)
CALL_METHOD(allgather)
CALL_METHOD(reduce_scatter)
CALL_METHOD(alltoall)
CALL_METHOD(gather)
CALL_METHOD(scatter)
CALL_METHOD(send)
CALL_METHOD(recv)

static PyObject *comm_barrier(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    static const struct call_spec spec_barrier = {"barrier", COLL_PY_ALLREDUCE, 0, {A_SEND},
                                                  BIT(A_ASYNC), true};
    PyObject *a[A_N];
    if (parse_args(&spec_barrier, args, nargs, kwnames, a) < 0)
        return NULL;
    struct call_in in = {.send_name = "send", .recv_name = "recv", .op = collMax,
                         .dtype = -1, .no_result = true};
    if (a[A_ASYNC] != NULL) {
        int t = PyObject_IsTrue(a[A_ASYNC]);
        if (t < 0)
            return NULL;
        in.async = t;
    }
    /* One byte of its own, kept with the call's views for as long as they are. */
    in.send = PyByteArray_FromStringAndSize("", 1);
    if (in.send == NULL)
        return NULL;
    PyObject *r = run_call((struct py_comm *)self, &spec_barrier, &in);
    Py_DECREF(in.send);
    return r;
}

#define FAST (METH_FASTCALL | METH_KEYWORDS)
#define METHOD(name, doc) {#name, (PyCFunction)(void (*)(void))comm_##name, FAST, doc}

#define ASYNC_DOC                                                                          \
    "With async_=True it returns at once a Handle (wait(), done(), .result) and runs on a\n" \
    "library stream; the buffers stay exported until the handle is waited or collected.\n"
#define DTYPE_DOC                                                                          \
    "dtype= (a name of DTYPES, e.g. 'bfloat16') reinterprets buffers of items of that\n"   \
    "size, or of bytes.\n"
#define RAISES_DOC                                                                         \
    "Raises InvalidArgument (a ValueError) naming the bad argument before anything is\n"   \
    "sent, TypeError for a non-buffer, and the library's failures as Error subclasses.\n"

PyDoc_STRVAR(allreduce_doc,
"allreduce($self, send, recv=None, op='sum', *, async_=False, dtype=None)\n--\n\n"
"recv[i] = op over the ranks of send[i] (collAllReduce).  recv None: in place in\n"
"send.  op: 'sum', 'prod', 'max', 'min' or 'avg'.  recv must have send's element\n"
"type and count.  Returns recv (send when in place).\n" ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(broadcast_doc,
"broadcast($self, send, recv=None, root=0, *, async_=False, dtype=None)\n--\n\n"
"Copies root's send into every rank's recv (collBroadcast).  recv None: in place\n"
"(send is the data on the root and the output elsewhere).  With recv given, send\n"
"is read on the root only (None elsewhere).  Returns recv (send when in place).\n"
ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(reduce_doc,
"reduce($self, send, recv=None, op='sum', root=0, *, async_=False, dtype=None)\n--\n\n"
"Like allreduce with the result on root only (collReduce); recv is written on the\n"
"root only and may be None elsewhere.  recv None on the root: in place in send.\n"
"Returns recv (send when None).\n" ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(allgather_doc,
"allgather($self, send, recv, *, async_=False, dtype=None)\n--\n\n"
"recv (size x len(send) elements) gets rank r's send at offset r x len(send)\n"
"(collAllGather).  In place when send is that slice of recv.  Returns recv.\n"
ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(reduce_scatter_doc,
"reduce_scatter($self, send, recv, op='sum', *, async_=False, dtype=None)\n--\n\n"
"send holds size x len(recv) elements; rank r gets in recv the reduction of block\n"
"r (collReduceScatter).  In place when recv is block r of send.  Returns recv.\n"
ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(alltoall_doc,
"alltoall($self, send, recv=None, *, async_=False, dtype=None)\n--\n\n"
"send holds size equal blocks; block j goes to rank j, and block i of recv comes\n"
"from rank i (collAllToAll).  recv None: in place.  Returns recv (send when in\n"
"place).\n" ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(gather_doc,
"gather($self, send, recv=None, root=0, *, async_=False, dtype=None)\n--\n\n"
"root's recv (size x len(send) elements) gets rank r's send at offset r x\n"
"len(send) (collGather).  recv is needed on the root only.  Returns recv.\n"
ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(scatter_doc,
"scatter($self, send, recv, root=0, *, async_=False, dtype=None)\n--\n\n"
"Rank r's recv gets block r of root's send (size x len(recv) elements)\n"
"(collScatter).  send is needed on the root only (None elsewhere).  Returns recv.\n"
ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(send_doc,
"send($self, buf, peer, *, async_=False, dtype=None)\n--\n\n"
"Sends buf to rank peer (collSend); peer calls recv with as many bytes.  Outside\n"
"a group it blocks until the message is complete.\n" ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(recv_doc,
"recv($self, buf, peer, *, async_=False, dtype=None)\n--\n\n"
"Receives the next message from rank peer into buf (collRecv); its size must be\n"
"buf's.  Returns buf.\n" ASYNC_DOC DTYPE_DOC RAISES_DOC);
PyDoc_STRVAR(barrier_doc,
"barrier($self, *, async_=False)\n--\n\n"
"Returns once every rank has called it (a one-byte allreduce).\n" ASYNC_DOC);

PyMethodDef coll_py_call_methods[] = {
    METHOD(allreduce, allreduce_doc),
    METHOD(broadcast, broadcast_doc),
    METHOD(reduce, reduce_doc),
    METHOD(allgather, allgather_doc),
    METHOD(reduce_scatter, reduce_scatter_doc),
    METHOD(alltoall, alltoall_doc),
    METHOD(gather, gather_doc),
    METHOD(scatter, scatter_doc),
    METHOD(send, send_doc),
    METHOD(recv, recv_doc),
    METHOD(barrier, barrier_doc),
    {NULL, NULL, 0, NULL},
};

int coll_py_calls_init(PyObject *module)
{
    for (int i = 0; i < A_N; i++)
        if ((arg_strs[i] = PyUnicode_InternFromString(arg_names[i])) == NULL)
            return -1;
    for (int i = 0; i < collNumOps; i++)
        if ((op_strs[i] = PyUnicode_InternFromString(op_names[i])) == NULL)
            return -1;
    for (int i = 0; i < collNumTypes; i++)
        if ((dtype_strs[i] = PyUnicode_InternFromString(dtype_names[i])) == NULL)
            return -1;
    return 0;
}
