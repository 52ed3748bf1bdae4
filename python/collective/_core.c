/* collective._core: the CPython extension under the collective package.
 *
 * This file holds the module (constants, get_unique_id, version), the Error
 * hierarchy, the dispatcher shared by every call, the communicator's life cycle
 * (init, from_env, split, shrink, grow, join, abort, destroy) and the pointer path raw() that
 * collective.torch uses.  _calls.c holds the buffer-protocol collectives and their
 * handles, _stream.c the Stream type, the stream pool and groups.
 *
 * Every call that may block releases the GIL.  The library allows one thread at a
 * time per communicator; a call made while another thread's call on the same
 * communicator is in progress is refused with InvalidUsage, except abort(), which
 * the library allows from any thread at any time.
 *
 *   Python thread 1                      Python thread 2
 *   comm.allreduce(x)   GIL released --> (runs other Python code)
 *     in_call = 1                         comm.abort(): aborting = 1, comm = NULL,
 *     collAllReduce ... fails             collCommAbort (waits for thread 1's call)
 *   error text: "aborted" (comm freed)
 */
#include "_core.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include <structmember.h>

/* ---------------------------------------------------------------- errors --- */

/* Index: collResult_t; [collSuccess] is the base class collective.Error. */
static PyObject *error_types[collNumResults];

static const char *const result_names[collNumResults] = {
    [collSuccess] = "collSuccess",
    [collUnhandledCudaError] = "collUnhandledCudaError",
    [collSystemError] = "collSystemError",
    [collInternalError] = "collInternalError",
    [collInvalidArgument] = "collInvalidArgument",
    [collInvalidUsage] = "collInvalidUsage",
    [collRemoteError] = "collRemoteError",
    [collInProgress] = "collInProgress",
    [collTimeout] = "collTimeout",
};

PyObject *coll_py_raise_text(collResult_t res, PyObject *text)
{
    unsigned code = (unsigned)res;
    PyObject *type = code < collNumResults && code != collSuccess ? error_types[code]
                                                                   : error_types[collSuccess];
    const char *name = code < collNumResults ? result_names[code] : "unknown result";
    PyObject *full = PyUnicode_FromFormat("%U (%s, code %d)", text, name, (int)res);
    if (full == NULL)
        return NULL;
    PyObject *exc = PyObject_CallFunctionObjArgs(type, full, NULL);
    Py_DECREF(full);
    if (exc == NULL)
        return NULL;
    PyObject *code_obj = PyLong_FromLong((long)res);
    if (code_obj == NULL || PyObject_SetAttrString(exc, "code", code_obj) < 0 ||
        PyObject_SetAttrString(exc, "message", text) < 0) {
        Py_XDECREF(code_obj);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(code_obj);
    PyErr_SetObject(type, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *coll_py_raise(collResult_t res, const char *text)
{
    if (text == NULL || text[0] == '\0')
        text = collGetErrorString(res);
    PyObject *t = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    if (t == NULL)
        return NULL;
    coll_py_raise_text(res, t);
    Py_DECREF(t);
    return NULL;
}

PyObject *coll_py_raise_fmt(collResult_t res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *t = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (t == NULL)
        return NULL;
    coll_py_raise_text(res, t);
    Py_DECREF(t);
    return NULL;
}

PyObject *coll_py_type_name(PyObject *o)
{
    /* A static type's tp_name holds its module ("numpy.ndarray"), except for
     * builtins ("int"); a heap type's (a class) is its bare name. */
    PyTypeObject *t = Py_TYPE(o);
    PyObject *name = PyType_GetName(t);
    if (name == NULL || (PyType_GetFlags(t) & Py_TPFLAGS_HEAPTYPE))
        return name;
    PyObject *mod = PyObject_GetAttrString((PyObject *)t, "__module__");
    if (mod == NULL) {
        PyErr_Clear();
        return name;
    }
    PyObject *full = name;
    if (PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") != 0) {
        full = PyUnicode_FromFormat("%U.%U", mod, name);
        Py_DECREF(name);
    }
    Py_DECREF(mod);
    return full;
}

PyObject *coll_py_type_error(PyObject *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *head = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    PyObject *name = head != NULL ? coll_py_type_name(o) : NULL;
    if (name != NULL)
        PyErr_Format(PyExc_TypeError, "%U, not %.100U", head, name);
    Py_XDECREF(head);
    Py_XDECREF(name);
    return NULL;
}

void coll_py_free(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    freefunc tp_free = COLL_PY_FUNC(freefunc, PyType_GetSlot(type, Py_tp_free));
    tp_free(self);
    Py_DECREF(type);
}

PyObject *coll_py_comm_error_text(struct py_comm *c, collResult_t res)
{
    /* Its text went with it: say what happened to it. */
    if (c != NULL && c->aborting)
        return PyUnicode_FromString("the communicator was aborted");
    if (c != NULL && c->comm == NULL)
        return PyUnicode_FromString("the communicator was destroyed");
    const char *text = collGetLastError(c != NULL ? c->comm : NULL);
    if (text == NULL || text[0] == '\0')
        text = collGetErrorString(res);
    return PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
}

PyObject *coll_py_raise_comm(struct py_comm *c, collResult_t res)
{
    PyObject *t = coll_py_comm_error_text(c, res);
    if (t == NULL)
        return NULL;
    coll_py_raise_text(res, t);
    Py_DECREF(t);
    return NULL;
}

/* The classes: name, code, extra base (besides Error), docstring. */
static int errors_init(PyObject *m)
{
    PyObject *dict = Py_BuildValue("{s:O,s:s}", "code", Py_None, "message", "");
    if (dict == NULL)
        return -1;
    error_types[collSuccess] = PyErr_NewExceptionWithDoc(
        "collective.Error",
        "A failed libcollective call.\n\n"
        ".code is the collResult_t value, .message the library's text "
        "(collGetLastError): the bad argument, or the operation, its sequence number "
        "and the rank to blame.  Each result code has a subclass.",
        NULL, dict);
    Py_DECREF(dict);
    if (error_types[collSuccess] == NULL ||
        PyModule_AddObjectRef(m, "Error", error_types[collSuccess]) < 0)
        return -1;
    static const struct {
        const char *name;
        collResult_t code;
        PyObject **extra;
        const char *doc;
    } subs[] = {
        {"CudaError", collUnhandledCudaError, NULL, "collUnhandledCudaError."},
        {"SystemError_", collSystemError, NULL,
         "collSystemError: a system call failed (the message names it)."},
        {"InternalError", collInternalError, NULL, "collInternalError: a library bug."},
        {"InvalidArgument", collInvalidArgument, &PyExc_ValueError,
         "collInvalidArgument: a bad argument, named in the message; also a ValueError."},
        {"InvalidUsage", collInvalidUsage, NULL,
         "collInvalidUsage: a call not allowed now (destroyed communicator, mismatched "
         "sizes, a group on several streams)."},
        {"RemoteError", collRemoteError, NULL,
         "collRemoteError: a peer died, or its connection broke."},
        {"InProgress", collInProgress, NULL, "collInProgress."},
        {"Timeout", collTimeout, &PyExc_TimeoutError,
         "collTimeout: an operation passed its deadline; also a TimeoutError."},
    };
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        char qual[64];
        PyOS_snprintf(qual, sizeof(qual), "collective.%s", subs[i].name);
        PyObject *bases = subs[i].extra
                              ? PyTuple_Pack(2, error_types[collSuccess], *subs[i].extra)
                              : PyTuple_Pack(1, error_types[collSuccess]);
        PyObject *d = Py_BuildValue("{s:i}", "code", (int)subs[i].code);
        PyObject *t = bases && d ? PyErr_NewExceptionWithDoc(qual, subs[i].doc, bases, d) : NULL;
        Py_XDECREF(bases);
        Py_XDECREF(d);
        if (t == NULL || PyModule_AddObjectRef(m, subs[i].name, t) < 0) {
            Py_XDECREF(t);
            return -1;
        }
        error_types[subs[i].code] = t;
    }
    return 0;
}

/* ------------------------------------------------------- the dispatcher --- */

collResult_t coll_py_dispatch(enum coll_py_func f, const void *send, void *recv, size_t count,
                              collDataType_t dtype, collRedOp_t op, int root, collComm_t comm,
                              collStream_t stream)
{
    switch (f) {
    case COLL_PY_ALLREDUCE:
        return collAllReduce(send, recv, count, dtype, op, comm, stream);
    case COLL_PY_BROADCAST:
        return collBroadcast(send, recv, count, dtype, root, comm, stream);
    case COLL_PY_REDUCE:
        return collReduce(send, recv, count, dtype, op, root, comm, stream);
    case COLL_PY_ALLGATHER:
        return collAllGather(send, recv, count, dtype, comm, stream);
    case COLL_PY_REDUCE_SCATTER:
        return collReduceScatter(send, recv, count, dtype, op, comm, stream);
    case COLL_PY_ALLTOALL:
        return collAllToAll(send, recv, count, dtype, comm, stream);
    case COLL_PY_GATHER:
        return collGather(send, recv, count, dtype, root, comm, stream);
    case COLL_PY_SCATTER:
        return collScatter(send, recv, count, dtype, root, comm, stream);
    case COLL_PY_SEND:
        return collSend(send, count, dtype, root, comm, stream);
    case COLL_PY_RECV:
        return collRecv(recv, count, dtype, root, comm, stream);
    case COLL_PY_RECV_ANY:
        return collRecvAny(recv, count, dtype, (int *)(uintptr_t)send, comm, stream);
    case COLL_PY_NFUNCS:
        break;
    }
    return collInvalidArgument;
}

/* ---------------------------------------------------------------- Comm --- */

int coll_py_comm_enter(struct py_comm *c, const char *fn)
{
    if (c->comm == NULL) {
        coll_py_raise_fmt(collInvalidUsage, "%s: the communicator was %s", fn,
                          c->aborting ? "aborted" : "destroyed");
        return -1;
    }
    if (c->in_call > 0) {
        coll_py_raise_fmt(collInvalidUsage,
                          "%s: another thread is in a call on this communicator (one thread "
                          "at a time per communicator)", fn);
        return -1;
    }
    if (coll_py_group.depth > 0) {
        PyObject *old = coll_py_group.comm;
        Py_INCREF((PyObject *)c);
        coll_py_group.comm = (PyObject *)c;
        Py_XDECREF(old);
    }
    return 0;
}

static int comm_fill(struct py_comm *c)
{
    if (collCommUserRank(c->comm, &c->rank) != collSuccess ||
        collCommCount(c->comm, &c->size) != collSuccess) {
        coll_py_raise_comm(c, collInternalError);
        return -1;
    }
    return 0;
}

static int comm_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"nranks", "uid", "rank", "timeout_ms", "name", NULL};
    struct py_comm *c = (struct py_comm *)self;
    int nranks, rank;
    Py_buffer uid;
    PyObject *timeout = Py_None;
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iy*i|Oz:Comm", kwlist, &nranks, &uid, &rank,
                                     &timeout, &name))
        return -1;
    if (c->comm != NULL || c->aborting) {
        PyBuffer_Release(&uid);
        coll_py_raise(collInvalidUsage, "Comm: already initialized");
        return -1;
    }
    if (uid.len != COLL_UNIQUE_ID_BYTES) {
        PyBuffer_Release(&uid);
        coll_py_raise_fmt(collInvalidArgument, "Comm: uid has %zd bytes, needs %d (from "
                          "get_unique_id())", uid.len, COLL_UNIQUE_ID_BYTES);
        return -1;
    }
    collUniqueId id;
    memcpy(id.internal, uid.buf, sizeof(id.internal));
    PyBuffer_Release(&uid);
    collConfig_t config = COLL_CONFIG_INITIALIZER;
    if (timeout != Py_None) {
        long ms = PyLong_AsLong(timeout);
        if (ms == -1 && PyErr_Occurred())
            return -1;
        if (ms <= 0 || ms > 2147483647L) {
            coll_py_raise_fmt(collInvalidArgument, "Comm: timeout_ms %ld is not in [1, 2^31)",
                              ms);
            return -1;
        }
        config.timeoutMs = (int)ms;
    }
    config.commName = name;
    collComm_t comm = NULL;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommInitRankConfig(&comm, nranks, id, rank, &config);
    Py_END_ALLOW_THREADS
    if (res != collSuccess) {
        coll_py_raise(res, collGetLastError(NULL));
        return -1;
    }
    c->comm = comm;
    return comm_fill(c);
}

static void comm_dealloc(PyObject *self)
{
    struct py_comm *c = (struct py_comm *)self;
    collComm_t comm = c->comm;
    c->comm = NULL;
    if (comm != NULL) {
        Py_BEGIN_ALLOW_THREADS
        (void)collCommDestroy(comm);
        Py_END_ALLOW_THREADS
    }
    coll_py_free(self);
}

static PyObject *comm_repr(PyObject *self)
{
    struct py_comm *c = (struct py_comm *)self;
    PyObject *type = (PyObject *)Py_TYPE(self);
    PyObject *mod = PyObject_GetAttrString(type, "__module__");
    PyObject *name = mod ? PyObject_GetAttrString(type, "__qualname__") : NULL;
    PyObject *r = NULL;
    if (name != NULL && c->comm == NULL)
        r = PyUnicode_FromFormat("<%S.%S %s>", mod, name, c->aborting ? "aborted" : "destroyed");
    else if (name != NULL)
        r = PyUnicode_FromFormat("<%S.%S rank %d of %d>", mod, name, c->rank, c->size);
    Py_XDECREF(mod);
    Py_XDECREF(name);
    return r;
}

PyDoc_STRVAR(from_env_doc,
"from_env($type)\n--\n\n"
"Joins the communicator that the launcher describes in the environment\n"
"(collrun's COLL_RANK/COLL_NRANKS/COLL_COMM_ID, torchrun's RANK/WORLD_SIZE/\n"
"MASTER_ADDR/MASTER_PORT, Open MPI, Slurm or PMI): collCommInitFromEnv.\n"
"Blocks (without the GIL) until every rank has joined.  Raises InvalidArgument\n"
"naming a missing or malformed variable.");

/* A new object of type around comm (which it then owns; destroyed on failure). */
static PyObject *comm_new_of(PyTypeObject *type, collComm_t comm)
{
    allocfunc tp_alloc = COLL_PY_FUNC(allocfunc, PyType_GetSlot(type, Py_tp_alloc));
    struct py_comm *c = (struct py_comm *)tp_alloc(type, 0);
    if (c == NULL) {
        Py_BEGIN_ALLOW_THREADS
        (void)collCommDestroy(comm);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    c->comm = comm;
    if (comm_fill(c) < 0) {
        Py_DECREF(c);
        return NULL;
    }
    return (PyObject *)c;
}

static PyObject *comm_from_env(PyObject *cls, PyObject *unused)
{
    collComm_t comm = NULL;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommInitFromEnv(&comm);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise(res, collGetLastError(NULL));
    return comm_new_of((PyTypeObject *)cls, comm);
}

/* A new object of self's type around comm (which it then owns). */
static PyObject *comm_wrap(struct py_comm *self, collComm_t comm)
{
    return comm_new_of(Py_TYPE((PyObject *)self), comm);
}

PyDoc_STRVAR(split_doc,
"split($self, color, key=0)\n--\n\n"
"Like MPI_Comm_split (collCommSplit): every rank calls it; the ranks with the\n"
"same color form a new communicator, ordered by key, then by rank.  color None\n"
"(or SPLIT_NOCOLOR) joins none and returns None.  The new communicator has this\n"
"one's type and configuration; this one is unchanged.  Blocks without the GIL.");

static PyObject *comm_split(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"color", "key", NULL};
    struct py_comm *c = (struct py_comm *)self;
    PyObject *color_obj;
    int key = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|i:split", kwlist, &color_obj, &key))
        return NULL;
    int color = COLL_SPLIT_NOCOLOR;
    if (color_obj != Py_None) {
        long v = PyLong_AsLong(color_obj);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < COLL_SPLIT_NOCOLOR || v > 2147483647L)
            return coll_py_raise_fmt(collInvalidArgument,
                                     "split: color %ld is neither >= 0 nor SPLIT_NOCOLOR", v);
        color = (int)v;
    }
    if (coll_py_comm_enter(c, "split") < 0)
        return NULL;
    collComm_t newcomm = NULL;
    collComm_t comm = c->comm;
    collResult_t res;
    c->in_call++;
    Py_BEGIN_ALLOW_THREADS
    res = collCommSplit(comm, color, key, &newcomm, NULL);
    Py_END_ALLOW_THREADS
    c->in_call--;
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    if (newcomm == NULL)
        Py_RETURN_NONE;
    return comm_wrap(c, newcomm);
}

PyDoc_STRVAR(shrink_doc,
"shrink($self, exclude=(), flags=0)\n--\n\n"
"A new communicator of the ranks not in exclude (collCommShrink), renumbered in\n"
"their order here.  Only those ranks call it, with the same list; the excluded\n"
"ranks may be dead.  flags: SHRINK_DEFAULT (this communicator healthy and idle),\n"
"SHRINK_ABORT (it may have failed), SHRINK_DETECT (also leave out the ranks that\n"
"do not answer).  This communicator must still be destroyed or aborted.");

static PyObject *comm_shrink(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"exclude", "flags", NULL};
    struct py_comm *c = (struct py_comm *)self;
    PyObject *exclude = NULL;
    int flags = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Oi:shrink", kwlist, &exclude, &flags))
        return NULL;
    int *ranks = NULL;
    Py_ssize_t n = 0;
    if (exclude != NULL && exclude != Py_None) {
        PyObject *seq = PySequence_Fast(exclude, "shrink: exclude must be a sequence of ranks");
        if (seq == NULL)
            return NULL;
        n = PySequence_Size(seq);
        if (n < 0) {
            Py_DECREF(seq);
            return NULL;
        }
        ranks = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
        if (ranks == NULL) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_GetItem(seq, i);
            long v = item != NULL ? PyLong_AsLong(item) : -1;
            Py_XDECREF(item);
            if (v == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                PyMem_Free(ranks);
                return NULL;
            }
            if (v < -2147483647L - 1 || v > 2147483647L) {
                Py_DECREF(seq);
                PyMem_Free(ranks);
                return coll_py_raise_fmt(collInvalidArgument, "shrink: exclude[%zd] = %ld is "
                                         "not a rank", i, v);
            }
            ranks[i] = (int)v;
        }
        Py_DECREF(seq);
    }
    if (n > 2147483647L) {
        PyMem_Free(ranks);
        return coll_py_raise_fmt(collInvalidArgument, "shrink: exclude has %zd ranks", n);
    }
    if (coll_py_comm_enter(c, "shrink") < 0) {
        PyMem_Free(ranks);
        return NULL;
    }
    collComm_t newcomm = NULL;
    collComm_t comm = c->comm;
    collResult_t res;
    c->in_call++;
    Py_BEGIN_ALLOW_THREADS
    res = collCommShrink(comm, ranks, (int)n, &newcomm, NULL, flags);
    Py_END_ALLOW_THREADS
    c->in_call--;
    PyMem_Free(ranks);
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    return comm_wrap(c, newcomm);
}

PyDoc_STRVAR(grow_id_doc,
"grow_id($self)\n--\n\n"
"On rank 0: the 128-byte id of a grow of this communicator\n"
"(collCommGetUniqueId), for the processes that will join with Comm.join().\n"
"Each id works once.");

static PyObject *comm_grow_id(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (coll_py_comm_enter(c, "grow_id") < 0)
        return NULL;
    collUniqueId id;
    collResult_t res = collCommGetUniqueId(c->comm, &id);
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    return PyBytes_FromStringAndSize(id.internal, sizeof(id.internal));
}

/* A 128-byte id from a bytes-like object, or NULL (None); -1 on error. */
static int grow_uid(PyObject *obj, const char *fn, collUniqueId *id, bool *set)
{
    *set = false;
    if (obj == NULL || obj == Py_None)
        return 0;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0)
        return -1;
    if (b.len != COLL_UNIQUE_ID_BYTES) {
        PyBuffer_Release(&b);
        coll_py_raise_fmt(collInvalidArgument, "%s: uid has %zd bytes, needs %d (from "
                          "grow_id())", fn, b.len, COLL_UNIQUE_ID_BYTES);
        return -1;
    }
    memcpy(id->internal, b.buf, sizeof(id->internal));
    PyBuffer_Release(&b);
    *set = true;
    return 0;
}

PyDoc_STRVAR(grow_doc,
"grow($self, nranks, uid=None)\n--\n\n"
"A communicator of nranks ranks: this one's, which keep their ranks, and the\n"
"processes that call Comm.join() with the same uid (collCommGrow).  Every rank\n"
"of this communicator calls it, rank 0 with the uid from its grow_id(), the\n"
"others with None.  This communicator is unchanged.  Blocks without the GIL.");

static PyObject *comm_grow(PyObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"nranks", "uid", NULL};
    struct py_comm *c = (struct py_comm *)self;
    int nranks;
    PyObject *uid_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i|O:grow", kwlist, &nranks, &uid_obj))
        return NULL;
    collUniqueId id;
    bool set;
    if (grow_uid(uid_obj, "grow", &id, &set) < 0)
        return NULL;
    if (coll_py_comm_enter(c, "grow") < 0)
        return NULL;
    collComm_t newcomm = NULL, comm = c->comm;
    collResult_t res;
    c->in_call++;
    Py_BEGIN_ALLOW_THREADS
    res = collCommGrow(comm, nranks, set ? &id : NULL, -1, &newcomm, NULL);
    Py_END_ALLOW_THREADS
    c->in_call--;
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    return comm_wrap(c, newcomm);
}

PyDoc_STRVAR(join_doc,
"join(nranks, uid, rank)\n--\n\n"
"Class method, in a new process: joins the grow of a communicator as rank (one\n"
"of the ranks above the grown communicator's), with the uid its rank 0 made\n"
"with grow_id() (collCommGrow with no communicator).  Blocks without the GIL\n"
"until every rank has joined.");

static PyObject *comm_join(PyObject *cls, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"nranks", "uid", "rank", NULL};
    int nranks, rank;
    PyObject *uid_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOi:join", kwlist, &nranks, &uid_obj, &rank))
        return NULL;
    collUniqueId id;
    bool set;
    if (grow_uid(uid_obj, "join", &id, &set) < 0)
        return NULL;
    if (!set)
        return coll_py_raise_fmt(collInvalidArgument, "join: uid is None (pass the grow_id() "
                                 "of the communicator's rank 0)");
    collComm_t comm = NULL;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommGrow(NULL, nranks, &id, rank, &comm, NULL);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise(res, collGetLastError(NULL));
    return comm_new_of((PyTypeObject *)cls, comm);
}

PyDoc_STRVAR(destroy_doc,
"destroy($self)\n--\n\n"
"Frees the communicator (collCommDestroy) after the calls still queued on it\n"
"(async handles) are done.  Idempotent; every later call raises InvalidUsage.\n"
"Refused while another thread is in a call on it: use abort() then.");

static PyObject *comm_destroy(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        Py_RETURN_NONE;
    if (c->in_call > 0)
        return coll_py_raise(collInvalidUsage, "destroy: another thread is in a call on this "
                             "communicator; use abort()");
    collComm_t comm = c->comm;
    c->comm = NULL;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommDestroy(comm);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise(res, "destroy failed");
    Py_RETURN_NONE;
}

PyDoc_STRVAR(abort_doc,
"abort($self)\n--\n\n"
"Frees the communicator at once (collCommAbort): a call blocked on it in another\n"
"thread, and every call still queued on its streams, fail first.  May be called\n"
"from any thread at any time.  Idempotent.");

static PyObject *comm_abort(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        Py_RETURN_NONE;
    collComm_t comm = c->comm;
    c->comm = NULL;
    c->aborting = true;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommAbort(comm);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise(res, "abort: a call on the communicator did not return");
    Py_RETURN_NONE;
}

PyDoc_STRVAR(revoke_doc,
"revoke($self)\n--\n\n"
"Stops every operation in flight on the communicator, here and on the other ranks\n"
"(collCommRevoke): calls blocked on it in any thread raise RemoteError saying it\n"
"was revoked, and so does every later call, except shrink(), destroy() and\n"
"abort().  Returns once no call is left inside it.  May be called from any\n"
"thread at any time.  Idempotent.");

static PyObject *comm_revoke(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        return coll_py_raise_comm(c, collInvalidUsage);
    collComm_t comm = c->comm;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collCommRevoke(comm, 0);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(last_error_doc,
"last_error($self)\n--\n\n"
"The library's text for the last failure on this communicator\n"
"(collGetLastError).");

static PyObject *comm_last_error(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        return PyUnicode_FromString(c->aborting ? "the communicator was aborted"
                                                : "the communicator was destroyed");
    const char *t = collGetLastError(c->comm);
    return PyUnicode_DecodeUTF8(t ? t : "", t ? (Py_ssize_t)strlen(t) : 0, "replace");
}

PyDoc_STRVAR(async_error_doc,
"async_error($self)\n--\n\n"
"The result code that poisoned the communicator, or 0 (collCommGetAsyncError).");

static PyObject *comm_async_error(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        return coll_py_raise(collInvalidUsage, c->aborting ? "async_error: the communicator "
                             "was aborted" : "async_error: the communicator was destroyed");
    collResult_t err = collSuccess;
    collResult_t res = collCommGetAsyncError(c->comm, &err);
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    return PyLong_FromLong((long)err);
}

PyDoc_STRVAR(bytes_doc,
"bytes($self)\n--\n\n"
"(sent, received): the bytes this rank has posted to send to and to receive from\n"
"the other ranks since the communicator was made (collCommGetBytes; what counts\n"
"is listed there).  Take differences around a step.");

static PyObject *comm_bytes(PyObject *self, PyObject *unused)
{
    struct py_comm *c = (struct py_comm *)self;
    if (c->comm == NULL)
        return coll_py_raise(collInvalidUsage, c->aborting ? "bytes: the communicator was "
                             "aborted" : "bytes: the communicator was destroyed");
    uint64_t sent = 0, received = 0;
    collResult_t res = collCommGetBytes(c->comm, &sent, &received);
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    return Py_BuildValue("(KK)", (unsigned long long)sent, (unsigned long long)received);
}

/* An int argument of raw() into *out, raising TypeError naming it. */
static int raw_long(PyObject *o, const char *name, long long *out)
{
    *out = PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            coll_py_type_error(o, "raw: %s must be an int", name);
        }
        return -1;
    }
    return 0;
}

static int raw_addr(PyObject *o, const char *name, void **out)
{
    if (o == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyLong_Check(o)) {
        coll_py_type_error(o, "raw: %s must be an int address", name);
        return -1;
    }
    *out = PyLong_AsVoidPtr(o);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* raw()'s stream: None (NULL), a Stream, or an int, taken as the C call takes its
 * stream argument: a CUDA stream handle (cudaStream_t) with device buffers, or a
 * collStream_t's address (Stream.ptr).  Negative ints and bools are refused. */
static int raw_stream(PyObject *o, collStream_t *out)
{
    *out = NULL;
    if (o == Py_None)
        return 0;
    if (PyObject_TypeCheck(o, coll_py_stream_type)) {
        *out = ((struct py_stream *)o)->stream;
        if (*out != NULL)
            return 0;
        coll_py_raise(collInvalidUsage, "raw: the stream was destroyed");
        return -1;
    }
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        coll_py_type_error(o, "raw: stream must be a Stream, an int (a CUDA stream handle, "
                           "cudaStream_t) or None");
        return -1;
    }
    PyObject *v = PyNumber_Index(o);
    if (v == NULL)
        return -1;
    long long sv = PyLong_AsLongLong(v);
    if (sv == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            Py_DECREF(v);
            return -1;
        }
        PyErr_Clear();
        sv = 0; /* beyond long long: the check below tells its sign */
    }
    if (sv < 0) {
        Py_DECREF(v);
        coll_py_raise_fmt(collInvalidArgument, "raw: stream %lld is negative: an int stream "
                          "is a CUDA stream handle (cudaStream_t, an address: 0 or more)", sv);
        return -1;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(v);
    if ((u == (unsigned long long)-1 && PyErr_Occurred()) || u > (unsigned long long)UINTPTR_MAX) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError)) {
            Py_DECREF(v);
            return -1;
        }
        PyErr_Clear();
        coll_py_raise_fmt(collInvalidArgument, "raw: stream %R is out of range: an int stream "
                          "is a CUDA stream handle (cudaStream_t, an address: 0 or more)", v);
        Py_DECREF(v);
        return -1;
    }
    Py_DECREF(v);
    *out = (collStream_t)(uintptr_t)u;
    return 0;
}

PyDoc_STRVAR(raw_doc,
"raw($self, func, send_addr, recv_addr, count, dtype, op, root_or_peer, stream=None)\n--\n\n"
"The pointer path: one library call on addresses.  func, dtype and op are the\n"
"codes of FUNCS, DTYPES and OPS; addresses are ints (0 = NULL); count is in\n"
"elements as the C call takes it; root_or_peer is the root of broadcast, reduce,\n"
"gather and scatter, the peer of send and recv, ignored otherwise.  recv_any\n"
"(collRecvAny, a receive from any source) takes in send_addr the address of an int32\n"
"that gets the sender's rank once the call is done.  Raises Error subclasses with\n"
"the C text.\n\n"
"stream is the C call's stream argument: None (NULL: host buffers block; device\n"
"buffers go on CUDA's legacy default stream), a Stream (returns at once; the\n"
"caller keeps the memory alive and untouched until the stream is synchronized), or\n"
"an int: for buffers in CUDA device memory a CUDA stream handle (cudaStream_t, as\n"
"torch.cuda.current_stream().cuda_stream gives it; 0 is the legacy default\n"
"stream): the call returns once its work is enqueued on that stream, and the\n"
"memory must stay alive until the stream has passed it.  With host buffers an int\n"
"is 0 (blocks) or a Stream's ptr; another raises InvalidArgument from the library.\n"
"A negative int raises InvalidArgument naming stream; a bool, TypeError.");

static PyObject *comm_raw(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    struct py_comm *c = (struct py_comm *)self;
    static const char *const names[] = {"func", "send_addr", "recv_addr", "count", "dtype",
                                        "op", "root_or_peer", "stream"};
    PyObject *a[8] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, Py_None};
    if (nargs > 8)
        return PyErr_Format(PyExc_TypeError, "raw() takes at most 8 arguments (%zd given)",
                            nargs);
    for (Py_ssize_t i = 0; i < nargs; i++)
        a[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *kw = PyTuple_GetItem(kwnames, k);
        if (kw == NULL)
            return NULL;
        int i = 0;
        while (i < 8 && PyUnicode_CompareWithASCIIString(kw, names[i]) != 0)
            i++;
        if (i == 8)
            return PyErr_Format(PyExc_TypeError, "raw() got an unexpected keyword argument "
                                "'%U'", kw);
        if (i < nargs)
            return PyErr_Format(PyExc_TypeError, "raw() got multiple values for argument "
                                "'%s'", names[i]);
        a[i] = args[nargs + k];
    }
    for (int i = 0; i < 7; i++)
        if (a[i] == NULL)
            return PyErr_Format(PyExc_TypeError, "raw() missing argument '%s'", names[i]);
    long long func, count, dtype, op, root;
    void *send, *recv;
    if (raw_long(a[0], "func", &func) < 0 || raw_addr(a[1], "send_addr", &send) < 0 ||
        raw_addr(a[2], "recv_addr", &recv) < 0 || raw_long(a[3], "count", &count) < 0 ||
        raw_long(a[4], "dtype", &dtype) < 0 || raw_long(a[5], "op", &op) < 0 ||
        raw_long(a[6], "root_or_peer", &root) < 0)
        return NULL;
    if (func < 0 || func >= COLL_PY_NFUNCS)
        return coll_py_raise_fmt(collInvalidArgument, "raw: func %lld is not a code of FUNCS",
                                 func);
    if (count < 0)
        return coll_py_raise_fmt(collInvalidArgument, "raw: count %lld is negative", count);
    /* Out-of-range dtype, op and root go to the library, which names them. */
    if (dtype < -1 || dtype > 1000 || op < -1 || op > 1000 || root < -2147483647LL - 1 ||
        root > 2147483647LL)
        return coll_py_raise_fmt(collInvalidArgument, "raw: dtype %lld, op %lld or "
                                 "root_or_peer %lld is out of range", dtype, op, root);
    collStream_t stream;
    if (raw_stream(a[7], &stream) < 0)
        return NULL;
    if (coll_py_comm_enter(c, "raw") < 0)
        return NULL;
    collComm_t comm = c->comm;
    collResult_t res;
    c->in_call++;
    Py_BEGIN_ALLOW_THREADS
    res = coll_py_dispatch((enum coll_py_func)func, send, recv, (size_t)count,
                           (collDataType_t)dtype, (collRedOp_t)op, (int)root, comm, stream);
    Py_END_ALLOW_THREADS
    c->in_call--;
    if (res != collSuccess)
        return coll_py_raise_comm(c, res);
    Py_RETURN_NONE;
}

static PyMemberDef comm_members[] = {
    {"rank", T_INT, offsetof(struct py_comm, rank), READONLY, "This rank, in [0, size)."},
    {"size", T_INT, offsetof(struct py_comm, size), READONLY, "The number of ranks."},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef comm_life_methods[] = {
    {"from_env", comm_from_env, METH_NOARGS | METH_CLASS, from_env_doc},
    {"split", (PyCFunction)(void (*)(void))comm_split, METH_VARARGS | METH_KEYWORDS, split_doc},
    {"shrink", (PyCFunction)(void (*)(void))comm_shrink, METH_VARARGS | METH_KEYWORDS,
     shrink_doc},
    {"grow_id", comm_grow_id, METH_NOARGS, grow_id_doc},
    {"grow", (PyCFunction)(void (*)(void))comm_grow, METH_VARARGS | METH_KEYWORDS, grow_doc},
    {"join", (PyCFunction)(void (*)(void))comm_join, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     join_doc},
    {"destroy", comm_destroy, METH_NOARGS, destroy_doc},
    {"abort", comm_abort, METH_NOARGS, abort_doc},
    {"revoke", comm_revoke, METH_NOARGS, revoke_doc},
    {"last_error", comm_last_error, METH_NOARGS, last_error_doc},
    {"async_error", comm_async_error, METH_NOARGS, async_error_doc},
    {"bytes", comm_bytes, METH_NOARGS, bytes_doc},
    {"raw", (PyCFunction)(void (*)(void))comm_raw, METH_FASTCALL | METH_KEYWORDS, raw_doc},
    {NULL, NULL, 0, NULL},
};

/* comm_life_methods, then coll_py_call_methods: filled at module init. */
static PyMethodDef comm_methods[64];

PyDoc_STRVAR(comm_doc,
"Comm(nranks, uid, rank, timeout_ms=None, name=None)\n\n"
"A libcollective communicator: this rank's member of nranks ranks that pass the\n"
"same uid (128 bytes from get_unique_id()), made by collCommInitRankConfig.\n"
"Blocks (without the GIL) until every rank has joined.  timeout_ms bounds every\n"
"operation (default COLL_TIMEOUT_MS); name appears in log and error messages.\n"
"collective.Communicator is the class to use; it adds seconds for the timeout\n"
"and the context manager.");

static PyType_Slot comm_slots[] = {
    {Py_tp_doc, (void *)comm_doc},
    {Py_tp_new, COLL_PY_SLOT(PyType_GenericNew)},
    {Py_tp_init, COLL_PY_SLOT(comm_init)},
    {Py_tp_dealloc, COLL_PY_SLOT(comm_dealloc)},
    {Py_tp_repr, COLL_PY_SLOT(comm_repr)},
    {Py_tp_methods, comm_methods},
    {Py_tp_members, comm_members},
    {0, NULL},
};

/* A base class: collective.Communicator subclasses it. */
static PyType_Spec comm_spec = {
    .name = "collective._core.Comm",
    .basicsize = sizeof(struct py_comm),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = comm_slots,
};

PyTypeObject *coll_py_comm_type;
PyTypeObject *coll_py_stream_type;
PyTypeObject *coll_py_handle_type;
PyTypeObject *coll_py_pending_type;

/* -------------------------------------------------------------- module --- */

PyDoc_STRVAR(get_unique_id_doc,
"get_unique_id($module)\n--\n\n"
"The 128-byte identity of a new communicator (collGetUniqueId): make it on one\n"
"rank, pass it to the others, and give it to Comm() everywhere.");

static PyObject *mod_get_unique_id(PyObject *m, PyObject *unused)
{
    collUniqueId id;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collGetUniqueId(&id);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return coll_py_raise(res, collGetLastError(NULL));
    return PyBytes_FromStringAndSize(id.internal, sizeof(id.internal));
}

PyDoc_STRVAR(version_doc,
"version($module)\n--\n\n"
"The library's version code: major * 10000 + minor * 100 + patch.");

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
    int v = 0;
    collResult_t res = collGetVersion(&v);
    if (res != collSuccess)
        return coll_py_raise(res, NULL);
    return PyLong_FromLong(v);
}

static PyMethodDef module_methods[] = {
    {"get_unique_id", mod_get_unique_id, METH_NOARGS, get_unique_id_doc},
    {"version", mod_version, METH_NOARGS, version_doc},
    {"group_start", coll_py_group_start, METH_NOARGS, coll_py_group_start_doc},
    {"group_end", (PyCFunction)(void (*)(void))coll_py_group_end, METH_FASTCALL | METH_KEYWORDS,
     coll_py_group_end_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"collective._core: the CPython binding of libcollective.  Use the collective\n"
"package; this module is its low level (see docs/python.md).");

/* The module's types; each made once per process (the module has no per-module
 * state: m_size -1). */
static int types_init(void)
{
    static const struct {
        PyTypeObject **type;
        PyType_Spec *spec;
    } types[] = {
        {&coll_py_comm_type, &comm_spec},
        {&coll_py_stream_type, &coll_py_stream_spec},
        {&coll_py_handle_type, &coll_py_handle_spec},
        {&coll_py_pending_type, &coll_py_pending_spec},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        if (*types[i].type != NULL)
            continue;
        *types[i].type = (PyTypeObject *)PyType_FromSpec(types[i].spec);
        if (*types[i].type == NULL)
            return -1;
    }
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "collective._core", module_doc, -1, module_methods,
    NULL, NULL, NULL, NULL,
};

static int add_dict(PyObject *m, const char *name, const char *const *keys, const int *vals,
                    int n)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
    for (int i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(vals[i]);
        if (v == NULL || PyDict_SetItemString(d, keys[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return -1;
        }
        Py_DECREF(v);
    }
    int rc = PyModule_AddObjectRef(m, name, d);
    Py_DECREF(d);
    return rc;
}

static int constants_init(PyObject *m)
{
    static const char *const dtype_names[] = {"int8", "uint8", "int32", "uint32", "int64",
                                              "uint64", "float16", "float32", "float64",
                                              "bfloat16"};
    static const int dtype_codes[] = {collInt8, collUint8, collInt32, collUint32, collInt64,
                                      collUint64, collFloat16, collFloat32, collFloat64,
                                      collBfloat16};
    static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};
    static const int op_codes[] = {collSum, collProd, collMax, collMin, collAvg};
    static const char *const func_names[] = {"allreduce", "broadcast", "reduce", "allgather",
                                             "reduce_scatter", "alltoall", "gather", "scatter",
                                             "send", "recv", "recv_any"};
    static const int func_codes[] = {COLL_PY_ALLREDUCE, COLL_PY_BROADCAST, COLL_PY_REDUCE,
                                     COLL_PY_ALLGATHER, COLL_PY_REDUCE_SCATTER,
                                     COLL_PY_ALLTOALL, COLL_PY_GATHER, COLL_PY_SCATTER,
                                     COLL_PY_SEND, COLL_PY_RECV, COLL_PY_RECV_ANY};
    if (add_dict(m, "DTYPES", dtype_names, dtype_codes, 10) < 0 ||
        add_dict(m, "OPS", op_names, op_codes, 5) < 0 ||
        add_dict(m, "FUNCS", func_names, func_codes, COLL_PY_NFUNCS) < 0)
        return -1;
    if (PyModule_AddIntConstant(m, "SHRINK_DEFAULT", COLL_SHRINK_DEFAULT) < 0 ||
        PyModule_AddIntConstant(m, "SHRINK_ABORT", COLL_SHRINK_ABORT) < 0 ||
        PyModule_AddIntConstant(m, "SHRINK_DETECT", COLL_SHRINK_DETECT) < 0 ||
        PyModule_AddIntConstant(m, "SPLIT_NOCOLOR", COLL_SPLIT_NOCOLOR) < 0 ||
        PyModule_AddIntConstant(m, "UNIQUE_ID_BYTES", COLL_UNIQUE_ID_BYTES) < 0)
        return -1;
    return 0;
}

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    int n = 0;
    for (const PyMethodDef *d = comm_life_methods; d->ml_name; d++)
        comm_methods[n++] = *d;
    for (const PyMethodDef *d = coll_py_call_methods; d->ml_name; d++) {
        if (n + 1 >= (int)(sizeof(comm_methods) / sizeof(comm_methods[0]))) {
            PyErr_SetString(PyExc_SystemError, "collective._core: Comm has too many methods");
            return NULL;
        }
        comm_methods[n++] = *d;
    }
    comm_methods[n] = (PyMethodDef){NULL, NULL, 0, NULL};
    if (types_init() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (errors_init(m) < 0 || constants_init(m) < 0 || coll_py_calls_init(m) < 0 ||
        PyModule_AddObjectRef(m, "Comm", (PyObject *)coll_py_comm_type) < 0 ||
        PyModule_AddObjectRef(m, "Stream", (PyObject *)coll_py_stream_type) < 0 ||
        PyModule_AddObjectRef(m, "Handle", (PyObject *)coll_py_handle_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
