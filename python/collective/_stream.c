/* collective._core: library streams for Python, the pool of streams behind async_=True,
 * the lists of exported buffers, the pending sets and handles of async calls, and
 * groups (group_start / group_end).
 *
 * An async call outside a group takes a stream of the pool for itself, so that its
 * handle's done() is exact; the stream goes back to the pool once the call is
 * synchronized and its buffers released.
 *
 * A group in Python mirrors the library's, which is per thread: the buffers of the
 * group's blocking calls wait in coll_py_group.held until the outermost group_end
 * has run them (a temporary passed to comm.send inside the group stays alive), and
 * its calls with async_=True share one pending set, whose stream the library runs
 * the whole group on.  group_end(cancel=True) issues nothing: it makes a call the
 * library refuses, which fails the open group (collective.h, collGroupEnd).
 *
 *   group_start()        depth 1
 *     comm.send(a, 1)    queued; a's view -> held
 *     comm.recv(b, 2)    queued; b's view -> held
 *   group_end()          collGroupEnd (GIL released) runs both; held released
 */
#include "_core.h"

#include <string.h>
#include <time.h>

_Thread_local struct py_group coll_py_group;

/* ---------------------------------------------------------- stream pool --- */

/* Streams whose calls are all done, for the next call with async_=True.  The
 * GIL guards the pool. */
#define STREAM_POOL_MAX 32
static collStream_t stream_pool[STREAM_POOL_MAX];
static int stream_pool_n;

int coll_py_stream_get(collStream_t *stream_p)
{
    if (stream_pool_n > 0) {
        *stream_p = stream_pool[--stream_pool_n];
        return 0;
    }
    collResult_t res = collStreamCreate(stream_p);
    if (res != collSuccess) {
        coll_py_raise(res, collGetLastError(NULL));
        return -1;
    }
    return 0;
}

void coll_py_stream_put(collStream_t stream)
{
    if (stream_pool_n < STREAM_POOL_MAX) {
        stream_pool[stream_pool_n++] = stream;
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    (void)collStreamDestroy(stream);
    Py_END_ALLOW_THREADS
}

/* -------------------------------------------------------------- buffers --- */

int coll_py_bufs_append(struct buf_list *l, Py_buffer *view)
{
    if (l->n == l->cap) {
        int ncap = l->cap ? 2 * l->cap : 4;
        Py_buffer *v = PyMem_Realloc(l->views, (size_t)ncap * sizeof(*v));
        if (v == NULL) {
            PyBuffer_Release(view);
            PyErr_NoMemory();
            return -1;
        }
        l->views = v;
        l->cap = ncap;
    }
    l->views[l->n++] = *view;
    view->obj = NULL;
    return 0;
}

void coll_py_bufs_release(struct buf_list *l)
{
    for (int i = 0; i < l->n; i++)
        PyBuffer_Release(&l->views[i]);
    PyMem_Free(l->views);
    *l = (struct buf_list){0};
}

/* -------------------------------------------------------------- Stream --- */

static PyObject *stream_raise(collResult_t res)
{
    return coll_py_raise_fmt(res, "a call on the stream failed: %s (the communicator's "
                             "last_error() names the cause)", collGetErrorString(res));
}

static int stream_init(PyObject *self, PyObject *args, PyObject *kwds)
{
    struct py_stream *s = (struct py_stream *)self;
    if (!PyArg_ParseTuple(args, ":Stream") || (kwds != NULL && PyDict_Size(kwds) > 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "Stream() takes no arguments");
        return -1;
    }
    if (s->stream != NULL)
        return 0;
    collResult_t res = collStreamCreate(&s->stream);
    if (res != collSuccess) {
        coll_py_raise(res, collGetLastError(NULL));
        return -1;
    }
    return 0;
}

static void stream_dealloc(PyObject *self)
{
    struct py_stream *s = (struct py_stream *)self;
    if (s->stream != NULL) {
        collStream_t st = s->stream;
        s->stream = NULL;
        Py_BEGIN_ALLOW_THREADS
        (void)collStreamDestroy(st);
        Py_END_ALLOW_THREADS
    }
    coll_py_free(self);
}

static int stream_live(struct py_stream *s, const char *fn)
{
    if (s->stream != NULL)
        return 0;
    coll_py_raise_fmt(collInvalidUsage, "%s: the stream was destroyed", fn);
    return -1;
}

PyDoc_STRVAR(query_doc,
"query($self)\n--\n\n"
"True when every call issued on the stream is done, False while some run\n"
"(collStreamQuery).  Raises the first failure not yet returned by synchronize().");

static PyObject *stream_query(PyObject *self, PyObject *unused)
{
    struct py_stream *s = (struct py_stream *)self;
    if (stream_live(s, "query") < 0)
        return NULL;
    collResult_t res = collStreamQuery(s->stream);
    if (res == collInProgress)
        Py_RETURN_FALSE;
    if (res != collSuccess)
        return stream_raise(res);
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(synchronize_doc,
"synchronize($self)\n--\n\n"
"Waits (without the GIL) until every call issued on the stream is done, and\n"
"raises the first failure since the last synchronize (collStreamSynchronize).");

static PyObject *stream_synchronize(PyObject *self, PyObject *unused)
{
    struct py_stream *s = (struct py_stream *)self;
    if (stream_live(s, "synchronize") < 0)
        return NULL;
    collStream_t st = s->stream;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collStreamSynchronize(st);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return stream_raise(res);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stream_destroy_doc,
"destroy($self)\n--\n\n"
"Waits for the calls issued on the stream, then frees it (collStreamDestroy);\n"
"raises as synchronize().  Idempotent.");

static PyObject *stream_destroy(PyObject *self, PyObject *unused)
{
    struct py_stream *s = (struct py_stream *)self;
    if (s->stream == NULL)
        Py_RETURN_NONE;
    collStream_t st = s->stream;
    s->stream = NULL;
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collStreamDestroy(st);
    Py_END_ALLOW_THREADS
    if (res != collSuccess)
        return stream_raise(res);
    Py_RETURN_NONE;
}

static PyObject *stream_get_ptr(PyObject *self, void *closure)
{
    return PyLong_FromVoidPtr(((struct py_stream *)self)->stream);
}

static PyMethodDef stream_methods[] = {
    {"query", stream_query, METH_NOARGS, query_doc},
    {"synchronize", stream_synchronize, METH_NOARGS, synchronize_doc},
    {"destroy", stream_destroy, METH_NOARGS, stream_destroy_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef stream_getset[] = {
    {"ptr", stream_get_ptr, NULL, "The collStream_t as an int (0 once destroyed).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(stream_doc,
"Stream()\n\n"
"A library stream (collStreamCreate).  A call given it returns at once and runs\n"
"on the communicator's progress thread, in issue order; its buffers must stay\n"
"valid and untouched until synchronize().");

static PyType_Slot stream_slots[] = {
    {Py_tp_doc, (void *)stream_doc},
    {Py_tp_new, COLL_PY_SLOT(PyType_GenericNew)},
    {Py_tp_init, COLL_PY_SLOT(stream_init)},
    {Py_tp_dealloc, COLL_PY_SLOT(stream_dealloc)},
    {Py_tp_methods, stream_methods},
    {Py_tp_getset, stream_getset},
    {0, NULL},
};

PyType_Spec coll_py_stream_spec = {
    .name = "collective._core.Stream",
    .basicsize = sizeof(struct py_stream),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = stream_slots,
};

/* ---------------------------------------------------------- pending set --- */


PyObject *coll_py_pending_new(struct py_comm *comm)
{
    struct py_pending *p = PyObject_GC_New(struct py_pending, coll_py_pending_type);
    if (p == NULL)
        return NULL;
    p->stream = NULL;
    Py_INCREF((PyObject *)comm);
    p->comm = comm;
    p->issued = coll_py_group.depth == 0;
    p->syncing = p->synced = false;
    p->res = collSuccess;
    p->text = NULL;
    p->bufs = (struct buf_list){0};
    if (coll_py_stream_get(&p->stream) < 0) {
        p->stream = NULL;
        p->synced = true;
        Py_DECREF(p);
        return NULL;
    }
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

/* Waits for the set's calls; returns their result.  Releases the GIL. */
static collResult_t pending_sync(struct py_pending *p)
{
    while (p->syncing) {
        /* Another thread waits for this set: let it finish. */
        Py_BEGIN_ALLOW_THREADS
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        Py_END_ALLOW_THREADS
    }
    if (p->synced)
        return p->res;
    collStream_t s = p->stream;
    collResult_t res;
    p->syncing = true;
    Py_BEGIN_ALLOW_THREADS
    res = collStreamSynchronize(s);
    Py_END_ALLOW_THREADS
    p->syncing = false;
    p->synced = true;
    p->stream = NULL;
    if (res != collSuccess && p->res == collSuccess) {
        p->res = res;
        p->text = coll_py_comm_error_text(p->comm, res);
        if (p->text == NULL)
            PyErr_Clear();
    }
    coll_py_bufs_release(&p->bufs);
    coll_py_stream_put(s);
    return p->res;
}

void coll_py_pending_issued(PyObject *pending, collResult_t res, PyObject *text)
{
    struct py_pending *p = (struct py_pending *)pending;
    p->issued = true;
    if (res == collSuccess)
        return;
    /* Nothing of the group was queued: the stream is idle. */
    p->res = res;
    Py_XINCREF(text);
    p->text = text;
    (void)pending_sync(p);
}

int coll_py_pending_adopt(PyObject *pending, struct buf_list *l)
{
    struct py_pending *p = (struct py_pending *)pending;
    for (int i = 0; i < l->n; i++) {
        if (coll_py_bufs_append(&p->bufs, &l->views[i]) < 0) {
            for (int j = i + 1; j < l->n; j++)
                PyBuffer_Release(&l->views[j]);
            l->n = 0;
            return -1;
        }
    }
    l->n = 0;
    return 0;
}

static int pending_traverse(PyObject *self, visitproc visit, void *arg)
{
    struct py_pending *p = (struct py_pending *)self;
    Py_VISIT(Py_TYPE(self)); /* an object of a heap type holds its type */
    Py_VISIT(p->comm);
    Py_VISIT(p->text);
    return 0;
}

static void pending_dealloc(PyObject *self)
{
    struct py_pending *p = (struct py_pending *)self;
    PyObject_GC_UnTrack(self);
    if (!p->synced) {
        /* The library may still touch the views: wait for it first.  A failure
         * nobody waited for also poisoned the communicator, which reports it. */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        (void)pending_sync(p);
        PyErr_Restore(et, ev, tb);
    }
    coll_py_bufs_release(&p->bufs);
    Py_CLEAR(p->text);
    Py_CLEAR(p->comm);
    coll_py_free(self);
}

static PyType_Slot pending_slots[] = {
    {Py_tp_doc, (void *)"The calls on one stream that handles wait for (internal)."},
    {Py_tp_dealloc, COLL_PY_SLOT(pending_dealloc)},
    {Py_tp_traverse, COLL_PY_SLOT(pending_traverse)},
    {0, NULL},
};

/* Made by the module only, as the static type without tp_new was. */
PyType_Spec coll_py_pending_spec = {
    .name = "collective._core._Pending",
    .basicsize = sizeof(struct py_pending),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = pending_slots,
};

/* --------------------------------------------------------------- Handle --- */

struct py_handle {
    PyObject_HEAD
    PyObject *pending;
    PyObject *result;
    const char *fn;
};

PyObject *coll_py_handle_new(PyObject *pending, PyObject *result, const char *fn)
{
    struct py_handle *h = PyObject_GC_New(struct py_handle, coll_py_handle_type);
    if (h == NULL)
        return NULL;
    Py_INCREF(pending);
    h->pending = pending;
    Py_XINCREF(result);
    h->result = result;
    h->fn = fn;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

PyDoc_STRVAR(wait_doc,
"wait($self)\n--\n\n"
"Waits (without the GIL) until the call is done, releases its buffers and\n"
"returns .result.  Raises the call's failure as an Error subclass with the\n"
"library's text; every later wait() raises it again.");

static PyObject *handle_wait(PyObject *self, PyObject *unused)
{
    struct py_handle *h = (struct py_handle *)self;
    struct py_pending *p = (struct py_pending *)h->pending;
    if (p == NULL)
        return coll_py_raise(collInvalidUsage, "the handle was cleared");
    if (!p->issued)
        return coll_py_raise_fmt(collInvalidUsage, "wait: the group holding this %s is still "
                                 "open; wait after it ends", h->fn);
    collResult_t res = pending_sync(p);
    if (res != collSuccess) {
        if (p->text == NULL)
            return coll_py_raise(res, NULL);
        return coll_py_raise_text(res, p->text);
    }
    PyObject *r = h->result ? h->result : Py_None;
    Py_INCREF(r);
    return r;
}

PyDoc_STRVAR(done_doc,
"done($self)\n--\n\n"
"True once the call is done (successfully or not; wait() tells which), False\n"
"while it runs or while its group is still open.  Does not block.");

static PyObject *handle_done(PyObject *self, PyObject *unused)
{
    struct py_handle *h = (struct py_handle *)self;
    struct py_pending *p = (struct py_pending *)h->pending;
    if (p == NULL)
        return coll_py_raise(collInvalidUsage, "the handle was cleared");
    if (!p->issued)
        Py_RETURN_FALSE;
    if (p->synced)
        Py_RETURN_TRUE;
    if (p->syncing || collStreamQuery(p->stream) == collInProgress)
        Py_RETURN_FALSE;
    /* Idle: collect the result now, which also lets the buffers go. */
    (void)pending_sync(p);
    Py_RETURN_TRUE;
}

static PyObject *handle_get_result(PyObject *self, void *closure)
{
    struct py_handle *h = (struct py_handle *)self;
    PyObject *r = h->result ? h->result : Py_None;
    Py_INCREF(r);
    return r;
}

static PyObject *handle_repr(PyObject *self)
{
    struct py_handle *h = (struct py_handle *)self;
    struct py_pending *p = (struct py_pending *)h->pending;
    const char *state = p == NULL ? "cleared"
                        : !p->issued ? "in an open group"
                        : !p->synced ? "issued"
                        : p->res == collSuccess ? "done" : "failed";
    return PyUnicode_FromFormat("<collective.Handle %s %s>", h->fn, state);
}

static int handle_traverse(PyObject *self, visitproc visit, void *arg)
{
    struct py_handle *h = (struct py_handle *)self;
    Py_VISIT(Py_TYPE(self)); /* an object of a heap type holds its type */
    Py_VISIT(h->pending);
    Py_VISIT(h->result);
    return 0;
}

static int handle_clear(PyObject *self)
{
    struct py_handle *h = (struct py_handle *)self;
    Py_CLEAR(h->result);
    Py_CLEAR(h->pending);
    return 0;
}

static void handle_dealloc(PyObject *self)
{
    PyObject_GC_UnTrack(self);
    handle_clear(self);
    coll_py_free(self);
}

static PyMethodDef handle_methods[] = {
    {"wait", handle_wait, METH_NOARGS, wait_doc},
    {"done", handle_done, METH_NOARGS, done_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef handle_getset[] = {
    {"result", handle_get_result, NULL,
     "The call's output buffer (recv, or send when in place; None for barrier and send). "
     "Read it after wait().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(handle_doc,
"A call made with async_=True, running on a library stream.\n\n"
"Its buffers stay exported (alive, not resizable) until wait() or done() has\n"
"seen it finish, or the handle is collected (which waits for it first).  Do not\n"
"touch them meanwhile.");

static PyType_Slot handle_slots[] = {
    {Py_tp_doc, (void *)handle_doc},
    {Py_tp_dealloc, COLL_PY_SLOT(handle_dealloc)},
    {Py_tp_traverse, COLL_PY_SLOT(handle_traverse)},
    {Py_tp_clear, COLL_PY_SLOT(handle_clear)},
    {Py_tp_repr, COLL_PY_SLOT(handle_repr)},
    {Py_tp_methods, handle_methods},
    {Py_tp_getset, handle_getset},
    {0, NULL},
};

/* Made by the calls only (async_=True), as the static type without tp_new was. */
PyType_Spec coll_py_handle_spec = {
    .name = "collective.Handle",
    .basicsize = sizeof(struct py_handle),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = handle_slots,
};

/* --------------------------------------------------------------- groups --- */

const char coll_py_group_start_doc[] =
"group_start($module)\n--\n\n"
"Opens a group (collGroupStart) in this thread: the calls until the matching\n"
"group_end() are queued, then issued together.  Groups nest.  Use the\n"
"collective.group() context manager rather than this.";

PyObject *coll_py_group_start(PyObject *m, PyObject *unused)
{
    collResult_t res = collGroupStart();
    if (res != collSuccess)
        return coll_py_raise(res, collGetLastError(NULL));
    coll_py_group.depth++;
    Py_RETURN_NONE;
}

const char coll_py_group_end_doc[] =
"group_end($module, cancel=False)\n--\n\n"
"Closes a group (collGroupEnd); the outermost issues the group's calls, and\n"
"blocks (without the GIL) until the blocking ones are done.  cancel=True issues\n"
"none of them: the group fails as if one call had been refused, and the group's\n"
"handles raise that.  Raises the group's failure.";

/* Makes the open group fail, so that collGroupEnd issues nothing: a call the
 * library refuses inside a group marks the group failed (collective.h). */
static void group_cancel(void)
{
    (void)collAllReduce(NULL, NULL, 0, collUint8, collSum, NULL, NULL);
}

PyObject *coll_py_group_end(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    int cancel = 0;
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    if (nargs + nkw > 1 || (nkw == 1 && PyUnicode_CompareWithASCIIString(
                                            PyTuple_GetItem(kwnames, 0), "cancel") != 0))
        return PyErr_Format(PyExc_TypeError, "group_end() takes one argument, cancel");
    if (nargs + nkw == 1 && (cancel = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    struct py_group *g = &coll_py_group;
    if (g->depth == 0) {
        collResult_t res = collGroupEnd();
        return coll_py_raise(res != collSuccess ? res : collInternalError,
                             collGetLastError(NULL));
    }
    if (cancel) {
        group_cancel();
        g->cancelled = true;
    }
    if (g->depth > 1) {
        collResult_t res = collGroupEnd();
        g->depth--;
        if (res != collSuccess)
            return coll_py_raise(res, collGetLastError(NULL));
        Py_RETURN_NONE;
    }
    /* The outermost: take the group's state first, so that the calls made while
     * the GIL is released (other threads' groups are their own) find it empty. */
    struct buf_list held = g->held;
    PyObject *pending = g->pending;
    PyObject *comm = g->comm;
    bool cancelled = g->cancelled;
    *g = (struct py_group){0};
    collResult_t res;
    Py_BEGIN_ALLOW_THREADS
    res = collGroupEnd();
    Py_END_ALLOW_THREADS
    PyObject *text = NULL;
    if (res != collSuccess && cancelled)
        text = PyUnicode_FromString("group_end: the group was cancelled (the block of a "
                                    "group in it raised): none of its calls was issued");
    else if (res != collSuccess) {
        text = comm ? coll_py_comm_error_text((struct py_comm *)comm, res)
                    : coll_py_comm_error_text(NULL, res);
        if (text == NULL)
            PyErr_Clear();
    }
    if (pending != NULL) {
        /* The views of the group's blocking calls, if any, stay until its stream
         * calls are done too (with a stream, collGroupEnd only queued them). */
        if (res == collSuccess && held.n > 0 && coll_py_pending_adopt(pending, &held) < 0)
            PyErr_Clear();
        coll_py_pending_issued(pending, res, text);
        Py_DECREF(pending);
    }
    coll_py_bufs_release(&held);
    Py_XDECREF(comm);
    if (res != collSuccess) {
        if (text == NULL)
            return coll_py_raise(res, NULL);
        coll_py_raise_text(res, text);
        Py_DECREF(text);
        return NULL;
    }
    Py_RETURN_NONE;
}
