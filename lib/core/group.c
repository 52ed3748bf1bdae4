/* Groups: collGroupStart / collGroupEnd.
 *
 * Between the two calls, sends, receives and collectives are queued in the
 * calling thread's group (thread-local, so threads that drive different
 * communicators never share one).  collGroupEnd issues them all at once: the
 * sends and receives progress together in coll_p2p_run, so a rank may exchange
 * with any number of peers without ordering its calls to avoid a deadlock, and
 * then the collectives run one after the other in the order they were issued.
 * Groups nest; only the outermost collGroupEnd issues anything.
 *
 *   collGroupStart();                 queue: [recv 3] [send 1] [allreduce]
 *   collRecv(.., 3, ..);              collGroupEnd: recv 3 + send 1 progress
 *   collSend(.., 1, ..);                            together, then the allreduce
 *   collAllReduce(..);
 *   collGroupEnd();
 *
 * A call refused while the group is open (bad argument, poisoned comm) returns
 * its error at once and marks the group failed: collGroupEnd then issues nothing
 * and returns that error, so a rank never runs part of a group its peers expect
 * whole.  A failure while the group runs ends it: the collectives not yet run are
 * dropped and collGroupEnd returns the failure.
 *
 * A group's calls name one stream.  With NULL, collGroupEnd runs the group as
 * above; with a stream, it queues the whole group there as one piece of work
 * (stream.c), which then must hold the calls of one communicator.
 */
#include <stdlib.h>

#include "device.h"
#include "p2p.h"
#include "stream.h"

struct group_state {
    int depth;
    collResult_t error;  /* the first refused call of the open group */
    collStream_t stream; /* of the group's calls (all alike) */
    bool has_call;
    bool device;         /* some call has device buffers: the stream is CUDA's */
    struct coll_p2p_op *ops;
    int nops, ops_cap;
    struct coll_work_coll *colls;
    int ncolls, colls_cap;
};

static _Thread_local struct group_state group;

bool coll_group_active(void)
{
    return group.depth > 0;
}

void coll_group_fail(collResult_t res)
{
    if (group.error == collSuccess)
        group.error = res;
}

collResult_t coll_group_stream(struct coll_comm *comm, const char *fn, collStream_t stream)
{
    if (!group.has_call) {
        group.has_call = true;
        group.stream = stream;
        return collSuccess;
    }
    if (stream == group.stream)
        return collSuccess;
    coll_set_error(comm, "%s: stream %p differs from stream %p of the group's earlier calls: "
                   "a group runs on one stream", fn, stream, group.stream);
    coll_group_fail(collInvalidUsage);
    return collInvalidUsage;
}

void coll_group_device(void)
{
    group.device = true;
}

/* Grows *arr (of elem bytes each) so one more fits. */
static collResult_t group_grow(void **arr, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return collSuccess;
    int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (p == NULL) {
        COLL_WARN("group: cannot queue more than %d calls", n);
        return collSystemError;
    }
    *arr = p;
    *cap = ncap;
    return collSuccess;
}

collResult_t coll_group_queue_p2p(const struct coll_p2p_op *op)
{
    collResult_t res = group_grow((void **)&group.ops, group.nops, &group.ops_cap,
                                  sizeof(*group.ops));
    if (res != collSuccess) {
        coll_set_error(op->comm, "group: out of memory queueing a %s",
                       op->is_send ? "send" : "receive");
        coll_group_fail(res);
        return res;
    }
    group.ops[group.nops++] = *op;
    return collSuccess;
}

collResult_t coll_group_queue_coll(struct coll_comm *comm, enum coll_func f,
                                   const struct coll_args *a, coll_group_coll_fn fn)
{
    collResult_t res = group_grow((void **)&group.colls, group.ncolls, &group.colls_cap,
                                  sizeof(*group.colls));
    if (res != collSuccess) {
        coll_set_error(comm, "group: out of memory queueing %s", coll_func_name(f));
        coll_group_fail(res);
        return res;
    }
    group.colls[group.ncolls++] = (struct coll_work_coll){comm, f, *a, fn};
    return collSuccess;
}

/* Hands the queued calls to a work (or frees them) and empties the group.  The
 * arrays are not kept for the next group: thread-local storage is not freed
 * when a thread exits. */
static struct coll_work group_take(void)
{
    struct coll_work w = {.ops = group.ops, .nops = group.nops, .colls = group.colls,
                          .ncolls = group.ncolls, .name = "group", .device = group.device};
    group = (struct group_state){0};
    return w;
}

void coll_work_free(struct coll_work *w)
{
    coll_device_work_end(w, collInternalError); /* never ran: the CUDA stream goes on */
    free(w->ops);
    free(w->colls);
    w->ops = NULL;
    w->colls = NULL;
    w->nops = w->ncolls = 0;
}

/* The collectives of w from the from-th on do not run: each recorded failed
 * with res. */
static void work_drop(struct coll_work *w, int from, collResult_t res)
{
    for (int i = from; i < w->ncolls; i++)
        coll_call_not_run(w->colls[i].comm, w->colls[i].f, &w->colls[i].a, res);
}

void coll_work_not_run(struct coll_work *w, collResult_t res)
{
    work_drop(w, 0, res);
}

collResult_t coll_work_run(struct coll_work *w)
{
    collResult_t res = coll_device_work_ready(w);
    if (res == collSuccess && w->nops > 0)
        res = coll_p2p_run(w->ops, w->nops, w->name, &w->coll);
    int i = 0;
    for (; i < w->ncolls && res == collSuccess; i++) {
        struct coll_work_coll *c = &w->colls[i];
        collResult_t poisoned = (collResult_t)atomic_load(&c->comm->async_error);
        if (poisoned != collSuccess)
            break;
        res = c->fn(c->comm, c->f, &c->a);
    }
    if (res == collSuccess && i < w->ncolls)
        res = (collResult_t)atomic_load(&w->colls[i].comm->async_error);
    work_drop(w, i, res);
    coll_device_work_end(w, res);
    return res;
}

/* The communicator of every call of w, or NULL when they are several. */
static struct coll_comm *work_single_comm(const struct coll_work *w)
{
    struct coll_comm *comm = w->nops > 0 ? w->ops[0].comm : w->colls[0].comm;
    for (int i = 0; i < w->nops; i++)
        if (w->ops[i].comm != comm)
            return NULL;
    for (int i = 0; i < w->ncolls; i++)
        if (w->colls[i].comm != comm)
            return NULL;
    return comm;
}

collResult_t coll_work_issue(struct coll_work *w, collStream_t stream)
{
    if (w->nops == 0 && w->ncolls == 0)
        return collSuccess;
    if (w->device)
        return coll_device_issue(w, stream);
    collResult_t res;
    /* A non-blocking communicator's calls without a stream queue on its own. */
    struct coll_comm *single = work_single_comm(w);
    if (stream == NULL && single != NULL && !single->blocking) {
        res = coll_stream_submit(single, single->nb_stream, w);
        return res == collSuccess ? collInProgress : res;
    }
    if (stream != NULL) {
        struct coll_comm *comm = single;
        if (comm == NULL) {
            coll_set_error(w->nops > 0 ? w->ops[0].comm : w->colls[0].comm,
                           "%s: a group on a stream must hold the calls of one communicator",
                           w->name);
            coll_work_free(w);
            return collInvalidUsage;
        }
        return coll_stream_submit(comm, stream, w);
    }
    for (int i = 0; i < w->nops; i++)
        coll_comm_enter(w->ops[i].comm);
    for (int i = 0; i < w->ncolls; i++)
        coll_comm_enter(w->colls[i].comm);
    res = coll_work_run(w);
    for (int i = 0; i < w->nops; i++)
        coll_comm_leave(w->ops[i].comm);
    for (int i = 0; i < w->ncolls; i++)
        coll_comm_leave(w->colls[i].comm);
    coll_work_free(w);
    return res;
}

COLL_API collResult_t collGroupStart(void)
{
    group.depth++;
    return collSuccess;
}

COLL_API collResult_t collGroupEnd(void)
{
    if (group.depth == 0) {
        coll_set_error(NULL, "collGroupEnd: no group is open (collGroupStart was not called)");
        return collInvalidUsage;
    }
    if (--group.depth > 0)
        return collSuccess;
    collResult_t res = group.error;
    collStream_t stream = group.stream;
    struct coll_work w = group_take();
    if (res != collSuccess) {
        coll_work_free(&w);
        return res;
    }
    /* The queued collectives run with the group closed, so they execute instead
     * of queueing again. */
    return coll_work_issue(&w, stream);
}
