/* Streams: asynchronous calls.
 *
 * A call given a stream is checked at once, then queued as a piece of work (one
 * call, or a whole group) on its communicator's progress thread, which starts
 * with the communicator's first such call.  The thread runs its queue in the
 * order issued; before each piece it waits until the stream's earlier pieces,
 * which may be queued on other communicators' threads, are done.  So a stream
 * runs in issue order across communicators, and a communicator runs its calls
 * in issue order across streams, which is the order its peers see.
 *
 *   user thread           comm A's thread          comm B's thread
 *   allreduce(A, s) ---> [1: s#1] runs
 *   bcast(B, s)     ---------------------------->  [1: s#2] waits for s#1, runs
 *   allreduce(A, t) ---> [2: t#1] runs after A's #1
 *   sync(s)         waits until s#2 is done, returns the first failure
 *
 * A call without a stream first waits for its communicator's queue to drain
 * (coll_stream_quiesce), then runs in the calling thread as before.  Nothing
 * waits without a bound: every piece of work runs under the communicator's
 * deadline, and an aborted communicator fails its queue at once.
 *
 * Streams are known by a registry, so a pointer that is not a live stream is
 * refused instead of being read.
 */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

struct coll_stream {
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* done reached wake_at */
    uint64_t issued;       /* pieces of work issued on the stream */
    uint64_t done;         /* pieces finished: they finish in issue order */
    uint64_t wake_at;      /* the least done a waiter waits for; UINT64_MAX: none.
                            * Waking only then keeps a synchronize of many calls
                            * from taking a core at every call. */
    collResult_t error;    /* the first failure not yet returned by synchronize */
    struct coll_stream *next;
};

struct coll_task {
    struct coll_task *next;
    struct coll_stream *stream;
    uint64_t seq;          /* in the stream, from 1 */
    struct coll_work work;
};

/* A communicator's progress thread and its queue. */
struct coll_async {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;   /* queue grew, or pending fell */
    struct coll_task *head, *tail;
    int pending;           /* queued or running */
    bool stop;             /* end once the queue is empty */
    bool stopped;          /* the thread was joined */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct coll_stream *registry;

/* The link that points at live stream s (*link is NULL when s is not one);
 * registry_lock held. */
static struct coll_stream **registry_link(collStream_t s)
{
    struct coll_stream **pp = &registry;
    while (*pp != NULL && (collStream_t)*pp != s)
        pp = &(*pp)->next;
    return pp;
}

static struct coll_stream *stream_lookup(collStream_t s)
{
    pthread_mutex_lock(&registry_lock);
    struct coll_stream *st = *registry_link(s);
    pthread_mutex_unlock(&registry_lock);
    return st;
}

collResult_t coll_stream_check(struct coll_comm *comm, const char *fn, collStream_t stream)
{
    if (stream == NULL || stream_lookup(stream) != NULL)
        return collSuccess;
    coll_set_error(comm, "%s: stream %p is not a stream from collStreamCreate (or was destroyed)",
                   fn, stream);
    return collInvalidArgument;
}

/* Waits until st->done >= target; st->lock held. */
static void stream_wait_done(struct coll_stream *st, uint64_t target)
{
    while (st->done < target) {
        if (target < st->wake_at)
            st->wake_at = target;
        pthread_cond_wait(&st->cond, &st->lock);
    }
}

/* Runs one piece of work once its stream's earlier pieces are done, then marks
 * it done.  After the stream's lock is released the stream may be destroyed. */
static void task_run(struct coll_comm *comm, struct coll_task *t)
{
    struct coll_stream *st = t->stream;
    pthread_mutex_lock(&st->lock);
    stream_wait_done(st, t->seq - 1);
    pthread_mutex_unlock(&st->lock);

    /* On a comm poisoned earlier the call fails without running; the cause was
     * logged when it happened. */
    collResult_t res = (collResult_t)atomic_load(&comm->async_error);
    if (res == collSuccess)
        res = coll_work_run(&t->work);
    coll_work_free(&t->work);

    pthread_mutex_lock(&st->lock);
    if (res != collSuccess && st->error == collSuccess)
        st->error = res;
    st->done = t->seq;
    if (st->done >= st->wake_at) {
        st->wake_at = UINT64_MAX; /* the waiters not yet satisfied set it again */
        pthread_cond_broadcast(&st->cond);
    }
    pthread_mutex_unlock(&st->lock);
    free(t);
}

static void *progress_main(void *arg)
{
    struct coll_comm *comm = arg;
    struct coll_async *as = comm->async;
    coll_log_set_rank(comm->rank);
    pthread_mutex_lock(&as->lock);
    for (;;) {
        while (as->head == NULL && !as->stop)
            pthread_cond_wait(&as->cond, &as->lock);
        struct coll_task *t = as->head;
        if (t == NULL)
            break; /* stopping, and the queue is empty */
        as->head = t->next;
        if (as->head == NULL)
            as->tail = NULL;
        pthread_mutex_unlock(&as->lock);
        task_run(comm, t);
        pthread_mutex_lock(&as->lock);
        as->pending--;
        atomic_fetch_sub(&comm->async_pending, 1);
        pthread_cond_broadcast(&as->cond);
    }
    pthread_mutex_unlock(&as->lock);
    return NULL;
}

/* Starts comm's progress thread on its first call with a stream. */
static collResult_t async_start(struct coll_comm *comm)
{
    if (comm->async != NULL)
        return collSuccess;
    struct coll_async *as;
    COLL_CHECK(coll_calloc(&as, 1));
    pthread_mutex_init(&as->lock, NULL);
    pthread_cond_init(&as->cond, NULL);
    comm->async = as;
    int err = pthread_create(&as->thread, NULL, progress_main, comm);
    if (err != 0) {
        comm->async = NULL;
        pthread_cond_destroy(&as->cond);
        pthread_mutex_destroy(&as->lock);
        free(as);
        coll_set_error(comm, "stream: cannot start the communicator's progress thread: %s",
                       strerror(err));
        return collSystemError;
    }
    return collSuccess;
}

collResult_t coll_stream_submit(struct coll_comm *comm, collStream_t stream,
                                struct coll_work *w)
{
    struct coll_stream *st = stream_lookup(stream);
    struct coll_task *t = NULL;
    collResult_t res = collSuccess;
    if (st == NULL) {
        coll_set_error(comm, "%s: stream %p was destroyed before the call was issued", w->name,
                       stream);
        res = collInvalidArgument;
    } else if (coll_calloc(&t, 1) != collSuccess) {
        coll_set_error(comm, "%s: out of memory queueing the call on its stream", w->name);
        res = collSystemError;
    } else {
        res = async_start(comm);
    }
    if (res != collSuccess) {
        free(t);
        coll_work_free(w);
        return res;
    }
    t->stream = st;
    t->work = *w;
    *w = (struct coll_work){0};
    pthread_mutex_lock(&st->lock);
    t->seq = ++st->issued;
    pthread_mutex_unlock(&st->lock);

    struct coll_async *as = comm->async;
    pthread_mutex_lock(&as->lock);
    if (as->tail)
        as->tail->next = t;
    else
        as->head = t;
    as->tail = t;
    as->pending++;
    atomic_fetch_add(&comm->async_pending, 1);
    pthread_cond_broadcast(&as->cond);
    pthread_mutex_unlock(&as->lock);
    return collSuccess;
}

void coll_stream_quiesce(struct coll_comm *comm)
{
    if (atomic_load(&comm->async_pending) == 0)
        return;
    struct coll_async *as = comm->async;
    pthread_mutex_lock(&as->lock);
    while (as->pending > 0)
        pthread_cond_wait(&as->cond, &as->lock);
    pthread_mutex_unlock(&as->lock);
}

void coll_comm_enter(struct coll_comm *comm)
{
    atomic_fetch_add(&comm->busy, 1);
    coll_stream_quiesce(comm);
}

void coll_comm_leave(struct coll_comm *comm)
{
    atomic_fetch_sub(&comm->busy, 1);
}

void coll_stream_comm_stop(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (as == NULL || as->stopped)
        return;
    pthread_mutex_lock(&as->lock);
    as->stop = true;
    pthread_cond_broadcast(&as->cond);
    pthread_mutex_unlock(&as->lock);
    pthread_join(as->thread, NULL);
    as->stopped = true;
}

void coll_stream_comm_fini(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (as == NULL)
        return;
    coll_stream_comm_stop(comm);
    pthread_cond_destroy(&as->cond);
    pthread_mutex_destroy(&as->lock);
    free(as);
    comm->async = NULL;
}

COLL_API collResult_t collStreamCreate(collStream_t *stream)
{
    if (stream == NULL) {
        coll_set_error(NULL, "collStreamCreate: stream is NULL");
        return collInvalidArgument;
    }
    struct coll_stream *st;
    if (coll_calloc(&st, 1) != collSuccess) {
        coll_set_error(NULL, "collStreamCreate: out of memory");
        return collSystemError;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    st->wake_at = UINT64_MAX;
    pthread_mutex_lock(&registry_lock);
    st->next = registry;
    registry = st;
    pthread_mutex_unlock(&registry_lock);
    *stream = st;
    return collSuccess;
}

/* The live stream s for a stream call, or NULL after describing why not. */
static struct coll_stream *stream_arg(const char *fn, collStream_t s)
{
    struct coll_stream *st = s ? stream_lookup(s) : NULL;
    if (st == NULL)
        coll_set_error(NULL, "%s: stream %p is %s", fn, s,
                       s ? "not a stream from collStreamCreate (or was destroyed)" : "NULL");
    return st;
}

COLL_API collResult_t collStreamQuery(collStream_t stream)
{
    struct coll_stream *st = stream_arg("collStreamQuery", stream);
    if (st == NULL)
        return collInvalidArgument;
    pthread_mutex_lock(&st->lock);
    collResult_t res = st->done < st->issued ? collInProgress : st->error;
    pthread_mutex_unlock(&st->lock);
    return res;
}

/* Waits until everything issued on st so far is done; returns and forgets the
 * first failure among the stream's work since the last such wait. */
static collResult_t stream_wait(struct coll_stream *st)
{
    pthread_mutex_lock(&st->lock);
    stream_wait_done(st, st->issued);
    collResult_t res = st->error;
    st->error = collSuccess;
    pthread_mutex_unlock(&st->lock);
    return res;
}

COLL_API collResult_t collStreamSynchronize(collStream_t stream)
{
    struct coll_stream *st = stream_arg("collStreamSynchronize", stream);
    if (st == NULL)
        return collInvalidArgument;
    return stream_wait(st);
}

COLL_API collResult_t collStreamDestroy(collStream_t stream)
{
    if (stream == NULL)
        return collSuccess;
    pthread_mutex_lock(&registry_lock);
    struct coll_stream **pp = registry_link(stream);
    struct coll_stream *st = *pp;
    if (st != NULL)
        *pp = st->next;
    pthread_mutex_unlock(&registry_lock);
    if (st == NULL) {
        coll_set_error(NULL, "collStreamDestroy: stream %p is not a stream from "
                       "collStreamCreate (or was destroyed)", stream);
        return collInvalidArgument;
    }
    /* Work already issued still runs: its peers expect it. */
    collResult_t res = stream_wait(st);
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st);
    return res;
}
