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
 * Collectives of one communicator may run at once (COLL_STREAM_OVERLAP, 4 by
 * default), as programs in the engine's set of calls in flight
 * (lib/engine/inflight.h), advanced in one loop, when their buffers are apart:
 * DDP's buckets overlap, each call's tail with the next one's head.  The bytes
 * on every connection still go in the order of the calls, so peers need not
 * overlap alike.  A call starts beside others only if
 *   - it is one collective whose algorithm builds a program and shares nothing
 *     of the comm but its connections (not ll's or the direct allreduce's
 *     calls, nor any under COLL_CHECK_MISMATCH: those run alone), or a group of
 *     sends and receives on this comm with known peers,
 *   - it touches no byte that a call in flight reads or writes,
 *   - the stream's previous call is on this comm too or is done;
 * and calls finish, for their streams, in the order issued.  A collective that
 * the next queued call could not run beside runs alone, as when nothing
 * overlaps: back-to-back calls on one buffer pay nothing.  Sends and receives
 * enter the set even alone: a receive queued first must not keep a later send
 * behind it while its sender waits for that send (a pipeline's irecv, then
 * isend).
 *
 * A call without a stream first waits for its communicator's queue to drain
 * (coll_stream_quiesce), then runs in the calling thread as before.
 *
 * Handing a call over costs no system call while both sides are awake: a
 * progress thread whose queue is empty polls it for a while (the comm's spin
 * time) before it sleeps, and is woken only when it sleeps; a thread that waits
 * for a stream or a queue polls before it sleeps, and is woken only then.  Nothing
 * waits without a bound: every piece of work runs under the communicator's
 * deadline, and an aborted communicator fails its queue at once.
 *
 * A communicator holds at most STREAM_DEPTH_MAX calls; one issued beyond that
 * sleeps until half are done.  Finished tasks are kept and reused, so a loop of
 * calls allocates nothing, and a call that ll can run never enters the set.
 *
 * Streams are known by a registry, so a pointer that is not a live stream is
 * refused instead of being read.
 */
#include "stream.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "exec.h"
#include "collectives.h"
#include "engine.h"
#include "inflight.h"
#include "reduce.h"

/* How long a thread waiting for a stream polls before it sleeps. */
#define STREAM_SPIN_NS (50 * 1000)
/* Polls back to back before the first yield of the core. */
#define STREAM_SPIN_TIGHT 512
/* Finished tasks a communicator keeps for its next calls: a loop of small calls
 * allocates nothing, and frees nothing that another thread allocated. */
#define STREAM_SPARE_MAX (STREAM_DEPTH_MAX + STREAM_HANDOVER)
/* The most calls a communicator holds queued or running: a thread issuing more
 * waits until half have finished, as a CUDA stream's launch queue makes its
 * caller wait.  The queue's memory stays bounded and warm, and its tasks are
 * reused instead of allocated. */
#define STREAM_DEPTH_MAX 1024
/* The progress thread hands finished tasks over for reuse, and takes finished
 * calls off the count of pending ones, once per this many (and whenever its
 * queue is empty): each is a cache line the issuing thread then loses. */
#define STREAM_HANDOVER 32

/* Laid out by cache line (allocated with coll_calloc_lines): what issuing a call
 * writes, what finishing one writes, and the rest, so that the issuing thread
 * and a progress thread do not pass lines back and forth at every call. */
struct coll_stream {
    /* Issuing. */
    pthread_mutex_t lock;
    uint64_t issued;       /* pieces of work issued on the stream */
    const struct coll_comm *last_comm; /* of the piece issued last */
    collResult_t error;    /* the first failure not yet returned by synchronize */
    /* Finishing.  Pieces finish in issue order; done is written without the
     * lock: the finisher stores done, then looks at wake_at; a waiter stores
     * wake_at (under the lock), then looks at done (both sequentially
     * consistent), and the finisher takes the lock only to wake a waiter. */
    _Alignas(64) _Atomic uint64_t done;
    _Atomic uint64_t wake_at; /* the least done a waiter waits for; UINT64_MAX: none.
                            * Waking only then keeps a synchronize of many calls
                            * from taking a core at every call. */
    _Atomic uint64_t retired; /* pieces whose finisher no longer touches the stream
                            * (a count: two communicators' threads may finish
                            * one piece each and end in either order);
                            * collStreamDestroy frees it only once all have */
    _Alignas(64) pthread_cond_t cond; /* done reached wake_at */
    struct coll_stream *next;
};

struct coll_task {
    struct coll_task *next;
    struct coll_comm *comm;
    struct coll_stream *stream;
    uint64_t seq;          /* in the stream, from 1 */
    bool after_same_comm;  /* the stream's previous piece is on this comm */
    bool overlap;          /* one collective, or sends and receives: may run beside others */
    uintptr_t lo[2], hi[2]; /* the byte ranges it reads or writes */
    struct coll_work work;
    struct coll_work_coll one; /* work.colls of a single call (coll_stream_submit_coll) */
    /* The progress thread's. */
    struct coll_call_flight cf;     /* a collective in flight */
    struct coll_p2p_flight *p2p;    /* sends and receives in flight */
    collResult_t res;
    bool ended;
};

/* A communicator's progress thread and its queue. */
/* Laid out by cache line (coll_calloc_lines): what issuing a call and taking
 * it from the queue change under the lock share the lock's line; what only
 * issuing threads change at every call comes next; the progress thread's own
 * fields last. */
struct coll_async {
    pthread_mutex_t lock;
    struct coll_task *head, *tail;
    atomic_int queued;     /* tasks in the queue (changed under lock, polled without) */
    bool sleeping;         /* the thread waits on cond for work: a new call wakes it */

    _Alignas(64) atomic_int pending; /* calls queued or running */
    _Atomic uint64_t changes; /* calls queued or retired: the queue's head may fit now */
    struct coll_task *spare; /* finished tasks to reuse (under lock) */
    int nspare;
    /* Threads waiting (on cond) for pending to reach 0, and to fall to
     * STREAM_DEPTH_MAX / 2.  A waiter counts itself, then looks at pending;
     * the progress thread lowers it, then looks at the counts (all sequentially consistent), so no wake-up is lost
     * and none is made while nobody waits.  It lowers it at most every
     * STREAM_HANDOVER calls and whenever its queue is empty, so it is 0 exactly
     * when all are done, and an issuing thread keeps its line. */
    atomic_int drain_waiters;
    atomic_int room_waiters;
    pthread_cond_t cond;   /* queue grew, or pending fell to what a waiter waits for */
    pthread_t thread;
    atomic_bool stop;      /* end once the queue is empty */
    bool stopped;          /* the thread was joined */

    /* The progress thread's. */
    _Alignas(64) struct coll_task *fly[COLL_INFLIGHT_MAX]; /* calls in flight, oldest
                                                            * first */
    int nfly;
    atomic_int peak;       /* the most in flight so far */
    struct coll_task *freed; /* tasks finished, not yet handed over for reuse */
    int nfreed;
    int unposted;          /* calls finished, not yet taken off pending */
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

/* Streams destroyed so far: a thread's last lookup holds while it is unchanged. */
static _Atomic uint64_t registry_gen;
static _Thread_local struct {
    collStream_t s;
    struct coll_stream *st;
    uint64_t gen;
} lookup_last;

/* Every stream call looks its stream up (the check, then the queueing): the
 * calling thread's last answer is kept until a stream is destroyed. */
static struct coll_stream *stream_lookup(collStream_t s)
{
    uint64_t gen = atomic_load_explicit(&registry_gen, memory_order_acquire);
    if (s != NULL && lookup_last.s == s && lookup_last.gen == gen)
        return lookup_last.st;
    pthread_mutex_lock(&registry_lock);
    gen = atomic_load_explicit(&registry_gen, memory_order_relaxed);
    struct coll_stream *st = *registry_link(s);
    pthread_mutex_unlock(&registry_lock);
    if (st != NULL) {
        lookup_last.s = s;
        lookup_last.st = st;
        lookup_last.gen = gen;
    }
    return st;
}

bool coll_stream_is_live(collStream_t stream)
{
    return stream != NULL && stream_lookup(stream) != NULL;
}

collResult_t coll_stream_check(struct coll_comm *comm, const char *fn, collStream_t stream)
{
    if (stream == NULL || stream_lookup(stream) != NULL)
        return collSuccess;
    coll_set_error(comm, "%s: stream %p is not a stream from collStreamCreate (or was destroyed)",
                   fn, stream);
    return collInvalidArgument;
}

/* Polls until pred(arg) holds, for budget_ns at most: STREAM_SPIN_TIGHT polls
 * back to back, then one per yield of the core (a thread we wait for may share
 * it).  True when pred came true. */
static bool stream_spin(bool (*pred)(const void *), const void *arg, int64_t budget_ns)
{
    for (int i = 0; i < STREAM_SPIN_TIGHT; i++) {
        if (pred(arg))
            return true;
        coll_exec_cpu_relax();
    }
    int64_t end = coll_now_ns() + budget_ns;
    for (unsigned i = 1;; i++) {
        if (pred(arg))
            return true;
        if (i % 16 == 0 && coll_now_ns() >= end)
            return false;
        sched_yield();
    }
}

struct done_at {
    const struct coll_stream *st;
    uint64_t target;
};

static bool stream_reached(const void *arg)
{
    const struct done_at *d = arg;
    return atomic_load_explicit(&d->st->done, memory_order_acquire) >= d->target;
}

/* Waits until st->done >= target; st->lock held. */
static void stream_wait_done(struct coll_stream *st, uint64_t target)
{
    if (atomic_load_explicit(&st->done, memory_order_acquire) < target) {
        struct done_at d = {st, target};
        pthread_mutex_unlock(&st->lock);
        (void)stream_spin(stream_reached, &d, STREAM_SPIN_NS);
        pthread_mutex_lock(&st->lock);
    }
    while (atomic_load_explicit(&st->done, memory_order_acquire) < target) {
        if (target < atomic_load_explicit(&st->wake_at, memory_order_relaxed))
            atomic_store(&st->wake_at, target);
        if (atomic_load(&st->done) >= target)
            break;
        pthread_cond_wait(&st->cond, &st->lock);
    }
}

/* Runs t's work alone. */
static collResult_t task_exec(struct coll_task *t)
{
    /* On a comm poisoned earlier the call fails without running (the cause was
     * logged when it happened); its flight record says so. */
    collResult_t res = (collResult_t)atomic_load(&t->comm->async_error);
    if (res == collSuccess)
        res = coll_work_run(&t->work);
    else
        coll_work_not_run(&t->work, res);
    return res;
}

/* t as a call in flight (inflight.h): the program of its one collective, or of
 * its sends and receives. */
static collResult_t task_begin(void *arg, struct coll_prog **p_p)
{
    struct coll_task *t = arg;
    struct coll_work *w = &t->work;
    t->cf.algo = NULL;
    t->p2p = NULL;
    /* On a comm poisoned earlier the call fails without running (the cause was
     * logged when it happened); its flight record says so. */
    collResult_t res = (collResult_t)atomic_load(&t->comm->async_error);
    if (res != collSuccess)
        return res;
    if (w->nops > 0)
        return coll_p2p_fly_begin(w->ops, w->nops, w->name, &w->coll, &t->p2p, p_p);
    struct coll_work_coll *c = &w->colls[0];
    return coll_call_fly_begin(c->comm, c->f, &c->a, &t->cf, p_p);
}

static void task_end(void *arg, collResult_t res)
{
    struct coll_task *t = arg;
    struct coll_work *w = &t->work;
    if (w->nops > 0) {
        if (t->p2p != NULL)
            coll_p2p_fly_end(t->p2p, res);
        t->p2p = NULL;
    } else {
        struct coll_work_coll *c = &w->colls[0];
        coll_call_fly_end(c->comm, c->f, &c->a, &t->cf, res);
    }
    t->res = res;
    t->ended = true;
}

static const struct coll_call_ops task_call_ops = {.begin = task_begin, .end = task_end};

/* Marks t done for its stream (its earlier pieces are) and keeps it for reuse
 * (async_lock hands it over).  Once `retired` says so, the stream may be
 * destroyed. */
static void task_retire(struct coll_task *t, collResult_t res)
{
    struct coll_stream *st = t->stream;
    struct coll_async *as = t->comm->async;
    if (t->work.colls == &t->one)
        t->work.colls = NULL;
    coll_work_free(&t->work);
    if (res != collSuccess) {
        pthread_mutex_lock(&st->lock);
        if (st->error == collSuccess)
            st->error = res;
        pthread_mutex_unlock(&st->lock);
    }
    atomic_store(&st->done, t->seq);
    if (t->seq >= atomic_load(&st->wake_at)) {
        pthread_mutex_lock(&st->lock);
        if (t->seq >= atomic_load_explicit(&st->wake_at, memory_order_relaxed)) {
            /* the waiters not yet satisfied set it again */
            atomic_store_explicit(&st->wake_at, UINT64_MAX, memory_order_relaxed);
            pthread_cond_broadcast(&st->cond);
        }
        pthread_mutex_unlock(&st->lock);
    }
    atomic_fetch_add_explicit(&st->retired, 1, memory_order_release);
    t->next = as->freed;
    as->freed = t;
    as->nfreed++;
}

/* Waits until t's stream's earlier pieces are done, when they are not on this
 * comm's queue ahead of it. */
static void task_wait_stream(struct coll_task *t)
{
    if (t->after_same_comm)
        return;
    struct coll_stream *st = t->stream;
    pthread_mutex_lock(&st->lock);
    stream_wait_done(st, t->seq - 1);
    pthread_mutex_unlock(&st->lock);
}

/* Runs one piece of work alone, on the progress thread's own stack. */
static void task_run(struct coll_task *t)
{
    task_wait_stream(t);
    task_retire(t, task_exec(t));
}

/* Whether the byte ranges of a and b meet. */
static bool task_touch(const struct coll_task *a, const struct coll_task *b)
{
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++)
            if (a->lo[i] < a->hi[i] && b->lo[k] < b->hi[k] && a->lo[i] < b->hi[k] &&
                b->lo[k] < a->hi[i])
                return true;
    return false;
}

/* Whether t can be a call in flight: asked on the progress thread just before
 * it would start (the algorithm's answer may change from call to call). */
static bool task_flies(const struct coll_task *t)
{
    const struct coll_work *w = &t->work;
    if (!t->overlap)
        return false;
    if (w->nops > 0)
        return coll_p2p_flies(w->ops, w->nops, &w->coll);
    return coll_call_flies(t->comm, w->colls[0].f, &w->colls[0].a);
}

/* Whether t may start now beside the calls in fly[0..nfly) (and `also`, when
 * not NULL). */
static bool task_fits(const struct coll_async *as, struct coll_task *t, struct coll_task *also)
{
    if (!task_flies(t) || (also != NULL && (!task_flies(also) || task_touch(t, also))))
        return false;
    for (int i = 0; i < as->nfly; i++)
        if (task_touch(t, as->fly[i]))
            return false;
    if (!t->after_same_comm) {
        if (atomic_load_explicit(&t->stream->done, memory_order_acquire) + 1 < t->seq)
            return false;
    }
    return true;
}

/* Starts t beside the calls in flight; false when the set has no room (t is
 * then run alone). */
static bool task_start_flight(struct coll_comm *comm, struct coll_task *t)
{
    struct coll_async *as = comm->async;
    if (coll_inflight_init(comm, comm->stream_overlap) != collSuccess)
        return false;
    t->ended = false;
    as->fly[as->nfly++] = t;
    if (!coll_inflight_add(comm, &task_call_ops, t)) {
        as->nfly--;
        return false;
    }
    if (as->nfly > atomic_load_explicit(&as->peak, memory_order_relaxed))
        atomic_store_explicit(&as->peak, as->nfly, memory_order_relaxed);
    return true;
}

/* Tasks in list, beyond what the spare list takes, are freed; as->lock held. */
static void async_keep(struct coll_async *as, struct coll_task *list)
{
    while (list != NULL) {
        struct coll_task *t = list;
        list = t->next;
        if (as->nspare < STREAM_SPARE_MAX) {
            t->next = as->spare;
            as->spare = t;
            as->nspare++;
        } else {
            free(t);
        }
    }
}

/* The progress thread takes the queue's lock, and hands the tasks it finished
 * since over for reuse. */
static void async_lock(struct coll_async *as)
{
    pthread_mutex_lock(&as->lock);
    if (as->nfreed >= STREAM_HANDOVER || as->head == NULL) {
        async_keep(as, as->freed);
        as->freed = NULL;
        as->nfreed = 0;
    }
}

/* k queued calls finished: wakes coll_stream_quiesce and async_wait_room when
 * what they wait for came. */
static void async_done(struct coll_comm *comm, int k)
{
    struct coll_async *as = comm->async;
    as->unposted += k;
    if (as->unposted < STREAM_HANDOVER &&
        atomic_load_explicit(&as->queued, memory_order_relaxed) > 0)
        return;
    k = as->unposted;
    as->unposted = 0;
    int left = atomic_fetch_sub(&as->pending, k) - k;
    if ((left == 0 && atomic_load(&as->drain_waiters) > 0) ||
        (left <= STREAM_DEPTH_MAX / 2 && atomic_load(&as->room_waiters) > 0)) {
        pthread_mutex_lock(&as->lock);
        pthread_cond_broadcast(&as->cond);
        pthread_mutex_unlock(&as->lock);
    }
}

/* One round of the calls in flight, then retires those at the front that have
 * ended, in the order issued. */
static void async_round(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (coll_inflight_count(comm) > 0)
        (void)coll_inflight_advance(comm);
    int k = 0;
    while (k < as->nfly && as->fly[k]->ended) {
        task_retire(as->fly[k], as->fly[k]->res);
        k++;
    }
    if (k == 0)
        return;
    memmove(as->fly, as->fly + k, (size_t)(as->nfly - k) * sizeof(as->fly[0]));
    as->nfly -= k;
    atomic_fetch_add_explicit(&as->changes, 1, memory_order_release);
    async_done(comm, k);
}

/* Takes the queue's head; as->lock held. */
static struct coll_task *async_pop(struct coll_async *as)
{
    struct coll_task *t = as->head;
    atomic_fetch_sub_explicit(&as->queued, 1, memory_order_relaxed);
    as->head = t->next;
    if (as->head == NULL)
        as->tail = NULL;
    return t;
}


/* With calls in flight: starts the queue's head beside them when it fits.  The
 * queue is looked at (under its lock) only when it changed or a call retired
 * since the head last did not fit. */
static void async_admit(struct coll_comm *comm, int max, uint64_t *seen_p)
{
    struct coll_async *as = comm->async;
    uint64_t now = atomic_load_explicit(&as->changes, memory_order_acquire);
    if (as->nfly >= max || now == *seen_p)
        return;
    async_lock(as);
    struct coll_task *t = NULL;
    if (as->head != NULL && task_fits(as, as->head, NULL))
        t = async_pop(as);
    else
        *seen_p = now;
    pthread_mutex_unlock(&as->lock);
    if (t == NULL || task_start_flight(comm, t))
        return;
    /* Not beside them: it runs once those in flight are done. */
    while (as->nfly > 0)
        async_round(comm);
    task_run(t);
    async_done(comm, 1);
}

static bool async_has_work(const void *arg)
{
    const struct coll_async *as = arg;
    return atomic_load_explicit(&as->queued, memory_order_acquire) > 0 ||
           atomic_load_explicit(&as->stop, memory_order_acquire);
}

static void *progress_main(void *arg)
{
    struct coll_comm *comm = arg;
    struct coll_async *as = comm->async;
    coll_log_set_rank(comm->rank);
    int max = comm->stream_overlap < 1 ? 1 : comm->stream_overlap;
    uint64_t seen = UINT64_MAX;
    for (;;) {
        if (as->nfly > 0) {
            async_admit(comm, max, &seen);
            async_round(comm);
            continue;
        }
        if (atomic_load_explicit(&as->queued, memory_order_acquire) == 0)
            (void)stream_spin(async_has_work, as, comm->spin_ns);
        async_lock(as);
        while (as->head == NULL && !as->stop) {
            as->sleeping = true;
            pthread_cond_wait(&as->cond, &as->lock);
            as->sleeping = false;
        }
        if (as->head == NULL) {
            pthread_mutex_unlock(&as->lock);
            break; /* stopping, and the queue is empty */
        }
        struct coll_task *t = async_pop(as);
        /* In flight only when the next call could run beside it, or, for sends
         * and receives, whatever comes next: a receive issued alone, whose
         * sender waits for this rank's send issued after it (a pipeline's
         * irecv then isend), must not keep that send queued behind it. */
        bool fly = max > 1 && ((as->head != NULL && task_fits(as, as->head, t)) ||
                               (t->work.nops > 0 && task_flies(t)));
        pthread_mutex_unlock(&as->lock);
        if (fly) {
            task_wait_stream(t);
            fly = task_start_flight(comm, t);
        }
        if (fly) {
            seen = UINT64_MAX;
            continue;
        }
        task_run(t);
        async_done(comm, 1);
    }
    return NULL;
}

/* Starts comm's progress thread on its first call with a stream. */
static collResult_t async_start(struct coll_comm *comm)
{
    if (comm->async != NULL)
        return collSuccess;
    struct coll_async *as;
    COLL_CHECK(coll_calloc_lines(&as));
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

/* Whether t is one collective, and the bytes it reads and writes. */
static void task_ranges(const struct coll_comm *comm, struct coll_task *t)
{
    const struct coll_work *w = &t->work;
    /* A staged device call (device.c) runs alone: it first waits for its CUDA
     * stream, outside the engine's loop, and the stream lets it start only
     * after the call before it on that stream has ended anyway. */
    if (w->ncolls == 0 && w->nops > 0 && w->staged == NULL && !w->device) {
        /* Sends and receives: the span of the sends' buffers and of the
         * receives'. */
        t->overlap = true;
        for (int k = 0; k < 2; k++) {
            t->lo[k] = UINTPTR_MAX;
            t->hi[k] = 0;
        }
        for (int i = 0; i < w->nops; i++) {
            const struct coll_p2p_op *op = &w->ops[i];
            int k = op->is_send ? 0 : 1;
            uintptr_t lo = (uintptr_t)op->buf, hi = lo + op->bytes;
            if (op->bytes == 0)
                continue;
            t->lo[k] = lo < t->lo[k] ? lo : t->lo[k];
            t->hi[k] = hi > t->hi[k] ? hi : t->hi[k];
        }
        for (int k = 0; k < 2; k++)
            if (t->hi[k] == 0)
                t->lo[k] = 0;
        return;
    }
    t->overlap = w->nops == 0 && w->ncolls == 1 && !comm->check_mismatch && w->staged == NULL &&
                 !coll_algo_quick(comm, w->colls[0].f, &w->colls[0].a);
    if (!t->overlap)
        return;
    const struct coll_work_coll *c = &w->colls[0];
    size_t bytes = c->a.count * coll_dtype_size(c->a.dtype), n = (size_t)comm->nranks;
    size_t in = bytes, out = bytes;
    if (c->f == COLL_FUNC_ALLGATHER)
        out = bytes * n;
    else if (c->f == COLL_FUNC_REDUCE_SCATTER)
        in = bytes * n;
    t->lo[0] = (uintptr_t)c->a.sendbuf;
    t->hi[0] = c->a.sendbuf != NULL ? t->lo[0] + in : t->lo[0];
    t->lo[1] = (uintptr_t)c->a.recvbuf;
    t->hi[1] = c->a.recvbuf != NULL ? t->lo[1] + out : t->lo[1];
}

/* With STREAM_DEPTH_MAX calls queued, waits until half have finished.  It
 * sleeps at once: room comes after hundreds of calls, and a thread polling
 * for it would take a core from them. */
static void async_wait_room(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (atomic_load_explicit(&as->pending, memory_order_relaxed) < STREAM_DEPTH_MAX)
        return;
    pthread_mutex_lock(&as->lock);
    atomic_fetch_add(&as->room_waiters, 1);
    while (atomic_load(&as->pending) > STREAM_DEPTH_MAX / 2)
        pthread_cond_wait(&as->cond, &as->lock);
    atomic_fetch_sub(&as->room_waiters, 1);
    pthread_mutex_unlock(&as->lock);
}

/* Before a call is queued on stream: the stream still live, comm's progress
 * thread started, room in its queue. */
static collResult_t submit_begin(struct coll_comm *comm, collStream_t stream, const char *name,
                                 struct coll_stream **st_p)
{
    *st_p = stream_lookup(stream);
    if (*st_p == NULL) {
        coll_set_error(comm, "%s: stream %p was destroyed before the call was issued", name,
                       stream);
        return collInvalidArgument;
    }
    COLL_CHECK(async_start(comm));
    async_wait_room(comm);
    return collSuccess;
}

/* Queues the call that tmp describes, in a task reused or allocated; on a
 * failure the caller still owns tmp's work. */
static collResult_t submit_queue(struct coll_comm *comm, const struct coll_task *tmp)
{
    struct coll_async *as = comm->async;
    struct coll_stream *st = tmp->stream;
    pthread_mutex_lock(&as->lock);
    struct coll_task *t = as->spare;
    if (t != NULL) {
        as->spare = t->next;
        as->nspare--;
    } else {
        pthread_mutex_unlock(&as->lock);
        if (coll_calloc(&t, 1) != collSuccess) {
            coll_set_error(comm, "%s: out of memory queueing the call on its stream",
                           tmp->work.name);
            return collSystemError;
        }
        pthread_mutex_lock(&as->lock);
    }
    *t = *tmp;
    if (tmp->work.colls == &tmp->one)
        t->work.colls = &t->one;
    task_ranges(comm, t);
    /* The stream's order and the comm's queue agree: both are taken under the
     * queue's lock. */
    pthread_mutex_lock(&st->lock);
    t->seq = ++st->issued;
    t->after_same_comm = st->last_comm == comm;
    st->last_comm = comm;
    pthread_mutex_unlock(&st->lock);
    if (as->tail)
        as->tail->next = t;
    else
        as->head = t;
    as->tail = t;
    atomic_fetch_add_explicit(&as->queued, 1, memory_order_release);
    atomic_fetch_add(&as->pending, 1);
    atomic_fetch_add_explicit(&as->changes, 1, memory_order_release);
    if (as->sleeping)
        pthread_cond_broadcast(&as->cond);
    pthread_mutex_unlock(&as->lock);
    coll_inflight_arrived(comm); /* a wait of the calls in flight lets the new one start */
    return collSuccess;
}

collResult_t coll_stream_submit(struct coll_comm *comm, collStream_t stream,
                                struct coll_work *w)
{
    struct coll_stream *st;
    collResult_t res = submit_begin(comm, stream, w->name, &st);
    if (res == collSuccess) {
        res = submit_queue(comm, &(struct coll_task){.comm = comm, .stream = st, .work = *w});
        if (res == collSuccess) {
            *w = (struct coll_work){0};
            return collSuccess;
        }
    }
    coll_work_free(w);
    return res;
}

collResult_t coll_stream_submit_coll(struct coll_comm *comm, collStream_t stream,
                                     const struct coll_work_coll *c)
{
    const char *name = coll_func_name(c->f);
    struct coll_stream *st;
    COLL_CHECK(submit_begin(comm, stream, name, &st));
    struct coll_task tmp = {.comm = comm, .stream = st, .one = *c,
                            .work = {.ncolls = 1, .name = name}};
    tmp.work.colls = &tmp.one;
    return submit_queue(comm, &tmp);
}

static bool async_drained(const void *arg)
{
    const struct coll_async *as = arg;
    return atomic_load_explicit(&as->pending, memory_order_acquire) == 0;
}

void coll_stream_quiesce(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (as == NULL || atomic_load(&as->pending) == 0 ||
        stream_spin(async_drained, as, comm->spin_ns))
        return;
    pthread_mutex_lock(&as->lock);
    atomic_fetch_add(&as->drain_waiters, 1);
    while (atomic_load(&as->pending) > 0)
        pthread_cond_wait(&as->cond, &as->lock);
    atomic_fetch_sub(&as->drain_waiters, 1);
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
    atomic_store(&as->stop, true);
    pthread_cond_broadcast(&as->cond);
    pthread_mutex_unlock(&as->lock);
    pthread_join(as->thread, NULL);
    as->stopped = true;
}

int coll_stream_overlap_peak(const struct coll_comm *comm)
{
    return comm->async != NULL ? atomic_load_explicit(&comm->async->peak, memory_order_relaxed)
                               : 0;
}

void coll_stream_comm_fini(struct coll_comm *comm)
{
    struct coll_async *as = comm->async;
    if (as == NULL)
        return;
    coll_stream_comm_stop(comm);
    coll_inflight_fini(comm);
    async_keep(as, as->freed); /* the last round's, not yet handed over */
    for (struct coll_task *t = as->spare, *next; t != NULL; t = next) {
        next = t->next;
        free(t);
    }
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
    if (coll_calloc_lines(&st) != collSuccess) {
        coll_set_error(NULL, "collStreamCreate: out of memory");
        return collSystemError;
    }
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->cond, NULL);
    atomic_init(&st->wake_at, UINT64_MAX);
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
    collResult_t res = atomic_load_explicit(&st->done, memory_order_acquire) < st->issued
                           ? collInProgress
                           : st->error;
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
    if (st != NULL) {
        *pp = st->next;
        atomic_fetch_add_explicit(&registry_gen, 1, memory_order_release);
    }
    pthread_mutex_unlock(&registry_lock);
    if (st == NULL) {
        coll_set_error(NULL, "collStreamDestroy: stream %p is not a stream from "
                       "collStreamCreate (or was destroyed)", stream);
        return collInvalidArgument;
    }
    /* Work already issued still runs: its peers expect it. */
    collResult_t res = stream_wait(st);
    /* The last finisher may still be looking at wake_at. */
    while (atomic_load_explicit(&st->retired, memory_order_acquire) < st->issued)
        sched_yield();
    pthread_cond_destroy(&st->cond);
    pthread_mutex_destroy(&st->lock);
    free(st);
    return res;
}
