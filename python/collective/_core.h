/* collective._core: what _core.c (module, errors, communicator life cycle, raw calls,
 * streams, groups) and _calls.c (the buffer-protocol collectives and their handles)
 * share.  Everything here runs with the GIL held unless a comment says otherwise.
 *
 * The extension is written against CPython's limited API of 3.11, so that one build
 * (_core.abi3.so, the stable ABI) loads in every CPython from 3.11 on: its types are
 * heap types made from specs at module init, and it reads no object's fields
 * directly (no PyTuple_GET_ITEM, no Py_TYPE(o)->tp_name). */
#ifndef COLL_PY_CORE_H
#define COLL_PY_CORE_H

#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include <collective.h>

/* The codes of _core.FUNCS, one per call that raw() and the buffer methods make. */
enum coll_py_func {
    COLL_PY_ALLREDUCE,
    COLL_PY_BROADCAST,
    COLL_PY_REDUCE,
    COLL_PY_ALLGATHER,
    COLL_PY_REDUCE_SCATTER,
    COLL_PY_ALLTOALL,
    COLL_PY_GATHER,
    COLL_PY_SCATTER,
    COLL_PY_SEND,
    COLL_PY_RECV,
    COLL_PY_RECV_ANY, /* raw() only: send_addr is the int32 that gets the sender's rank */
    COLL_PY_NFUNCS
};

/* _core.Comm.  comm is NULL once destroyed or aborted.  in_call counts the calls
 * running with the GIL released (the library allows one thread at a time per
 * communicator, so a second is refused); aborting tells such a call that abort()
 * freed the communicator under it, so its error text cannot be read any more. */
struct py_comm {
    PyObject_HEAD
    collComm_t comm;
    int rank;
    int size;
    int in_call;
    bool aborting;
};

/* _core.Stream. */
struct py_stream {
    PyObject_HEAD
    collStream_t stream; /* NULL once destroyed */
};

/* The buffers of calls the library may still read or write, kept exported (each
 * view holds a reference to its object) until the calls are known to be done. */
struct buf_list {
    Py_buffer *views;
    int n;
    int cap;
};

/* The calls of a group in the calling thread (the library's group is per thread
 * too).  held: the buffers of blocking calls, run by the outermost group_end.
 * pending: the group's calls with async_=True, which share one stream. */
struct py_group {
    int depth;
    struct buf_list held;
    PyObject *pending; /* struct py_pending, or NULL */
    PyObject *comm;    /* the last struct py_comm used in the group, for error text */
    bool cancelled;    /* group_end(cancel=True) ended an inner group */
};
extern _Thread_local struct py_group coll_py_group;

/* The types, made from their specs by the module's init (one module per process:
 * single-phase init), and held by it for the life of the process. */
extern PyTypeObject *coll_py_comm_type;
extern PyTypeObject *coll_py_stream_type;
extern PyTypeObject *coll_py_handle_type;
extern PyTypeObject *coll_py_pending_type;
extern PyType_Spec coll_py_stream_spec;
extern PyType_Spec coll_py_handle_spec;
extern PyType_Spec coll_py_pending_spec;

/* A function as a PyType_Slot's pointer, and a slot's pointer as a function: ISO C
 * has no conversion between function and object pointers, which the slots API
 * needs and POSIX guarantees; __extension__ keeps -Wpedantic quiet about it. */
#define COLL_PY_SLOT(f) (__extension__(void *)(f))
#define COLL_PY_FUNC(type, p) (__extension__(type)(p))

/* The name of o's type as its tp_name spells it ("int", "numpy.ndarray"), for
 * messages; a new reference, or NULL with an exception set. */
PyObject *coll_py_type_name(PyObject *o);
/* Raises TypeError with the text of fmt followed by ", not " and the name of o's
 * type; returns NULL. */
PyObject *coll_py_type_error(PyObject *o, const char *fmt, ...);
/* The end of a dealloc of an object of a heap type: its type's tp_free, then the
 * reference to the type that each object of a heap type holds. */
void coll_py_free(PyObject *self);

/* Raise the Error subclass of res with text (or the library's message for res when
 * text is NULL or empty); they return NULL. */
PyObject *coll_py_raise(collResult_t res, const char *text);
PyObject *coll_py_raise_fmt(collResult_t res, const char *fmt, ...);
/* The same with text a str, taken as it is. */
PyObject *coll_py_raise_text(collResult_t res, PyObject *text);
/* The failure of a call on c: the text of collGetLastError(c->comm). */
PyObject *coll_py_raise_comm(struct py_comm *c, collResult_t res);
/* The error text of a failure on c as a str (new reference). */
PyObject *coll_py_comm_error_text(struct py_comm *c, collResult_t res);

/* Checks that c can take a call (not destroyed, no call of another thread in
 * progress) and raises InvalidUsage naming fn when not: returns -1. */
int coll_py_comm_enter(struct py_comm *c, const char *fn);

/* Runs one library call; safe without the GIL. */
collResult_t coll_py_dispatch(enum coll_py_func f, const void *send, void *recv, size_t count,
                              collDataType_t dtype, collRedOp_t op, int root, collComm_t comm,
                              collStream_t stream);

/* The stream pool: a free stream (created when none is free) and its return. */
int coll_py_stream_get(collStream_t *stream_p);
void coll_py_stream_put(collStream_t stream);

/* buf_list: append moves the view in (on failure it is released); release
 * releases and empties the list. */
int coll_py_bufs_append(struct buf_list *l, Py_buffer *view);
void coll_py_bufs_release(struct buf_list *l);

/* A pending set: one stream of the pool, the views of the calls issued on it, and
 * once synchronized their result.  Handles refer to it; it is synchronized
 * (without the GIL) by wait(), by done() once the stream is idle, or when the last
 * reference goes, and only then are the views released and the stream returned
 * to the pool. */
struct py_pending {
    PyObject_HEAD
    collStream_t stream;   /* from the pool; NULL once synchronized */
    struct py_comm *comm;  /* for the error text */
    bool issued;           /* false while the group holding its calls is open */
    bool syncing;          /* a thread waits for the stream without the GIL */
    bool synced;
    collResult_t res;
    PyObject *text;        /* the failure's text, once synced */
    struct buf_list bufs;
};

/* A new pending set on a stream of the pool, for comm. */
PyObject *coll_py_pending_new(struct py_comm *comm);
/* After the outermost group_end: the group's stream calls were issued (res
 * success) or dropped (res the failure; text its cause). */
void coll_py_pending_issued(PyObject *pending, collResult_t res, PyObject *text);
/* Moves the views of l into the pending set, which releases them once done. */
int coll_py_pending_adopt(PyObject *pending, struct buf_list *l);
/* A Handle of a call in the pending set; result is what wait() returns (NULL:
 * None); fn names the call in messages. */
PyObject *coll_py_handle_new(PyObject *pending, PyObject *result, const char *fn);

/* _core.group_start and _core.group_end (_stream.c). */
PyObject *coll_py_group_start(PyObject *m, PyObject *unused);
PyObject *coll_py_group_end(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
extern const char coll_py_group_start_doc[];
extern const char coll_py_group_end_doc[];

/* Interned names of keyword arguments and ops, made at module init. */
int coll_py_calls_init(PyObject *module);

/* The methods of Comm that _calls.c defines, appended to Comm's method table. */
extern PyMethodDef coll_py_call_methods[];

#endif /* COLL_PY_CORE_H */
