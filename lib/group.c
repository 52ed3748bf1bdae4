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
 */
#include <stdlib.h>

#include "p2p.h"

struct group_coll {
    struct coll_comm *comm;
    enum coll_func f;
    struct coll_args a;
    coll_group_coll_fn fn;
};

struct group_state {
    int depth;
    collResult_t error;  /* the first refused call of the open group */
    struct coll_p2p_op *ops;
    int nops, ops_cap;
    struct group_coll *colls;
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
    group.colls[group.ncolls++] = (struct group_coll){comm, f, *a, fn};
    return collSuccess;
}

/* Forgets the queued calls.  The arrays are freed rather than kept for the next
 * group: thread-local storage is not freed when a thread exits. */
static void group_reset(void)
{
    free(group.ops);
    free(group.colls);
    group.ops = NULL;
    group.colls = NULL;
    group.nops = group.ops_cap = 0;
    group.ncolls = group.colls_cap = 0;
    group.error = collSuccess;
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
    if (res != collSuccess) {
        group_reset();
        return res;
    }
    /* The queued collectives run with the group closed, so they execute instead of
     * queueing again; nothing is queued meanwhile by this thread. */
    if (group.nops > 0)
        res = coll_p2p_run(group.ops, group.nops, "group");
    for (int i = 0; i < group.ncolls && res == collSuccess; i++) {
        struct group_coll *c = &group.colls[i];
        collResult_t poisoned = (collResult_t)atomic_load(&c->comm->async_error);
        res = poisoned != collSuccess ? poisoned : c->fn(c->comm, c->f, &c->a);
    }
    group_reset();
    return res;
}
