/* The engine (lib/engine/engine.c) on its own: schedules with deferred steps, and the
 * communicator's persistent poll set.
 *
 *   pipeline   2 ranks as threads.  Rank 0 stages its data through a "device":
 *              a worker thread copies piece i into a small ring of staging slots
 *              (a lane of deferred steps, finished later by coll_step_complete),
 *              and the send of piece i waits for that copy while the copy of
 *              piece i + W waits for the send of piece i (the slot is reused).
 *              Rank 1 receives and hands each piece to the worker again to be
 *              checked.  Data, the order of done() calls and the counts are
 *              checked on both ranks.
 *   fail       a step that finishes with an error fails the schedule with it,
 *              poisons the comm, and its message is the comm's last error.
 *   timeout    a step that never finishes ends in collTimeout naming a deferred
 *              step; the engine keeps the steps until the worker lets go.
 *   abort      collCommAbort from another thread ends a wait blocked on a step
 *              (it wakes the poll set), after the step is let go.
 *   lags       2 ranks exchange 64 pieces each way as two lanes whose order is
 *              given by lags alone (coll_lane.after): a send runs at most 3
 *              pieces ahead of the receives, a receive at most 5 ahead of the
 *              sends; every piece is checked to start only when its lag allows,
 *              and to arrive whole, in order.
 *   round      coll_engine_round: an exchange both ways, one way only, nothing,
 *              four transfers on one connection (they keep their order), and
 *              one of 17 transfers, refused naming the count.
 *   pollset    the poll set: a wait on 100 descriptors wakes on the last one; a
 *              ready descriptor nobody waits for leaves the set; a descriptor
 *              number closed and reused is waited on correctly; a wait on one
 *              descriptor (poll()ed, not the set) wakes for it and for
 *              coll_engine_wake.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "exec.h"
#include "harness.h"
#include "launch.h"

#define PIECES 64
#define PIECE_BYTES 4096
#define SLOTS 4

/* The "device": a thread that runs queued copies, some after a pause, and
 * completes their steps. */
struct job {
    void *dst;
    const void *src;
    size_t len;
    struct coll_step *step;
    collResult_t res;
    int delay_us;
};

struct worker {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job q[64];
    int head, tail;
    bool stop;
    pthread_t thread;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (w->head == w->tail && !w->stop)
            pthread_cond_wait(&w->cond, &w->lock);
        if (w->head == w->tail)
            break;
        struct job j = w->q[w->head++ % 64];
        pthread_mutex_unlock(&w->lock);
        if (j.delay_us > 0)
            usleep((useconds_t)j.delay_us);
        if (j.dst != NULL)
            memcpy(j.dst, j.src, j.len);
        coll_step_complete(j.step, j.res);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static void worker_start(struct worker *w)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    REQUIRE(pthread_create(&w->thread, NULL, worker_main, w) == 0);
}

static void worker_push(struct worker *w, struct job j)
{
    pthread_mutex_lock(&w->lock);
    REQUIRE(w->tail - w->head < 64);
    w->q[w->tail++ % 64] = j;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static void worker_stop(struct worker *w)
{
    pthread_mutex_lock(&w->lock);
    w->stop = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
}

/* --- pipeline --- */

enum { LANE_DEV, LANE_NET };

struct pipe_ctx {
    struct launch_rank *lr;
    struct worker *w;
    struct coll_lane lane[2];
    unsigned char *data;    /* rank 0: the source; rank 1: where pieces land */
    unsigned char *staging; /* rank 0: SLOTS pieces */
    size_t done_order[2];   /* next piece each lane's done() expects */
    int checked;            /* rank 1: pieces the worker checked */
    atomic_int bad;         /* rank 1: pieces with wrong bytes */
    struct job verify[PIECES];
};

static unsigned char pattern(size_t i, size_t k)
{
    return (unsigned char)(i * 31 + k * 7 + 1);
}

static bool pipe_ready(void *ctx, const struct coll_lane *l, size_t i)
{
    const struct pipe_ctx *x = ctx;
    if (x->lr->rank == 0) {
        if (l->tag == LANE_NET) /* sent once staged */
            return x->lane[LANE_DEV].done > i;
        return i < SLOTS || x->lane[LANE_NET].done > i - SLOTS; /* slot free */
    }
    if (l->tag == LANE_DEV) /* checked once received */
        return x->lane[LANE_NET].done > i;
    return true;
}

static void pipe_buf(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes)
{
    const struct pipe_ctx *x = ctx;
    *bytes = PIECE_BYTES;
    *p = x->lr->rank == 0 ? x->staging + (i % SLOTS) * PIECE_BYTES : x->data + i * PIECE_BYTES;
    (void)l;
}

static void verify_piece(void *ctx, size_t i)
{
    struct pipe_ctx *x = ctx;
    for (size_t k = 0; k < PIECE_BYTES; k++)
        if (x->data[i * PIECE_BYTES + k] != pattern(i, k)) {
            atomic_fetch_add(&x->bad, 1);
            return;
        }
}

static void pipe_start(void *ctx, struct coll_lane *l, size_t i, struct coll_step *s)
{
    struct pipe_ctx *x = ctx;
    (void)l;
    if (x->lr->rank == 0) {
        worker_push(x->w, (struct job){.dst = x->staging + (i % SLOTS) * PIECE_BYTES,
                                       .src = x->data + i * PIECE_BYTES, .len = PIECE_BYTES,
                                       .step = s, .delay_us = i % 8 == 0 ? 2000 : 0});
        return;
    }
    /* Rank 1: the check runs here; the worker only completes the step later. */
    verify_piece(x, i);
    worker_push(x->w, (struct job){.step = s, .delay_us = i % 16 == 0 ? 1000 : 0});
}

static collResult_t pipe_done(void *ctx, struct coll_lane *l, size_t i, void *p)
{
    struct pipe_ctx *x = ctx;
    (void)p;
    LR_CHECK(x->lr, i == x->done_order[l->tag], "lane %d: piece %zu done, expected %zu", l->tag,
             i, x->done_order[l->tag]);
    x->done_order[l->tag] = i + 1;
    if (x->lr->rank == 1 && l->tag == LANE_DEV)
        x->checked++;
    return collSuccess;
}

static const struct coll_sched_ops pipe_ops = {
    .ready = pipe_ready, .buf = pipe_buf, .done = pipe_done, .start = pipe_start,
};

static void body_pipeline(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    struct worker w;
    worker_start(&w);
    struct pipe_ctx x = {.lr = lr, .w = &w};
    REQUIRE((x.data = calloc(PIECES, PIECE_BYTES)) != NULL);
    REQUIRE((x.staging = calloc(SLOTS, PIECE_BYTES)) != NULL);
    if (lr->rank == 0)
        for (size_t i = 0; i < PIECES; i++)
            for (size_t k = 0; k < PIECE_BYTES; k++)
                x.data[i * PIECE_BYTES + k] = pattern(i, k);
    x.lane[LANE_DEV] = (struct coll_lane){.deferred = true, .total = PIECES, .window = SLOTS,
                                          .tag = LANE_DEV};
    x.lane[LANE_NET] = (struct coll_lane){.is_send = lr->rank == 0, .total = PIECES,
                                          .tag = LANE_NET, .window = 8};
    coll_exec_begin(comm, "engine pipeline");
    LR_CHECK_RES(lr, coll_transport_get_conn(comm, 1 - lr->rank, lr->rank == 0,
                                             &x.lane[LANE_NET].conn), collSuccess, comm);
    struct coll_sched s = {.comm = comm, .ops = &pipe_ops, .ctx = &x, .lanes = x.lane,
                           .nlanes = 2, .piece_bytes = PIECE_BYTES};
    LR_CHECK_RES(lr, coll_engine_run(&s), collSuccess, comm);
    for (int k = 0; k < 2; k++)
        LR_CHECK(lr, x.lane[k].done == PIECES && x.done_order[k] == PIECES,
                 "lane %d: %zu pieces done, %zu in order", k, x.lane[k].done, x.done_order[k]);
    if (lr->rank == 1) {
        LR_CHECK(lr, x.checked == PIECES, "%d pieces checked", x.checked);
        LR_CHECK(lr, atomic_load(&x.bad) == 0, "%d pieces arrived wrong", atomic_load(&x.bad));
    }
    worker_stop(&w);
    free(x.data);
    free(x.staging);
}

/* --- lags: two lanes ordered by counts alone --- */

enum { LAG_RECV, LAG_SEND };
#define SEND_LAG 3 /* send i once more than i - 3 pieces are received */
#define RECV_LAG 5 /* post receive i once more than i - 5 pieces are sent */

struct lag_ctx {
    struct launch_rank *lr;
    struct coll_lane lane[2];
    unsigned char *out, *in;
    int early; /* pieces that started before their lag allowed */
    size_t next[2];
};

static void lag_buf(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes)
{
    struct lag_ctx *x = ctx;
    const struct coll_lane *other = &x->lane[1 - l->tag];
    size_t lag = l->tag == LAG_SEND ? SEND_LAG : RECV_LAG;
    if (i >= lag && other->done + lag <= i) /* asked as the piece starts */
        x->early++;
    *bytes = PIECE_BYTES;
    *p = (l->tag == LAG_SEND ? x->out : x->in) + i * PIECE_BYTES;
}

static collResult_t lag_done(void *ctx, struct coll_lane *l, size_t i, void *p)
{
    struct lag_ctx *x = ctx;
    (void)p;
    LR_CHECK(x->lr, i == x->next[l->tag], "lane %d: piece %zu done, expected %zu", l->tag, i,
             x->next[l->tag]);
    x->next[l->tag] = i + 1;
    return collSuccess;
}

static const struct coll_sched_ops lag_ops = {.buf = lag_buf, .done = lag_done};

static void body_lags(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    struct lag_ctx x = {.lr = lr};
    REQUIRE((x.out = malloc(PIECES * PIECE_BYTES)) != NULL);
    REQUIRE((x.in = calloc(PIECES, PIECE_BYTES)) != NULL);
    for (size_t i = 0; i < PIECES; i++)
        for (size_t k = 0; k < PIECE_BYTES; k++)
            x.out[i * PIECE_BYTES + k] = pattern(i + (size_t)lr->rank * PIECES, k);
    x.lane[LAG_RECV] = (struct coll_lane){.total = PIECES, .tag = LAG_RECV, .window = 8,
                                          .after = &x.lane[LAG_SEND].done, .lag = RECV_LAG};
    x.lane[LAG_SEND] = (struct coll_lane){.is_send = true, .total = PIECES, .tag = LAG_SEND,
                                          .after = &x.lane[LAG_RECV].done, .lag = SEND_LAG};
    coll_exec_begin(comm, "engine lags");
    int peer = 1 - lr->rank;
    for (int pass = 0; pass < 2; pass++) /* rank 0 connects first, rank 1 accepts first */
        LR_CHECK_RES(lr, coll_transport_get_conn(comm, peer, (pass == 0) == (lr->rank == 0),
                                                 &x.lane[(pass == 0) == (lr->rank == 0)
                                                             ? LAG_SEND : LAG_RECV].conn),
                     collSuccess, comm);
    struct coll_sched s = {.comm = comm, .ops = &lag_ops, .ctx = &x, .lanes = x.lane,
                           .nlanes = 2, .piece_bytes = PIECE_BYTES};
    LR_CHECK_RES(lr, coll_engine_run(&s), collSuccess, comm);
    LR_CHECK(lr, x.early == 0, "%d pieces started before their lag allowed", x.early);
    LR_CHECK(lr, x.next[LAG_RECV] == PIECES && x.next[LAG_SEND] == PIECES,
             "pieces done: %zu received, %zu sent", x.next[LAG_RECV], x.next[LAG_SEND]);
    size_t wrong = 0;
    for (size_t i = 0; i < PIECES; i++)
        for (size_t k = 0; k < PIECE_BYTES; k++)
            wrong += x.in[i * PIECE_BYTES + k] != pattern(i + (size_t)peer * PIECES, k);
    LR_CHECK(lr, wrong == 0, "%zu bytes arrived wrong", wrong);
    free(x.out);
    free(x.in);
}

/* --- round --- */

/* Bytes of buf[0..len) that are not message m's pattern. */
static size_t round_wrong(const unsigned char *buf, size_t len, int m)
{
    size_t wrong = 0;
    for (size_t k = 0; k < len; k++)
        wrong += buf[k] != pattern((size_t)m, k);
    return wrong;
}

static void body_round(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    int peer = 1 - lr->rank;
    enum { B = 3000 };
    unsigned char out[4][B], in[4][B];
    for (int m = 0; m < 4; m++)
        for (size_t k = 0; k < B; k++)
            out[m][k] = pattern((size_t)(m + 4 * lr->rank), k);
    struct coll_conn *sc = NULL, *rc = NULL;
    coll_exec_begin(comm, "engine round");
    for (int pass = 0; pass < 2; pass++) /* rank 0 connects first, rank 1 accepts first */
        if ((pass == 0) == (lr->rank == 0))
            LR_CHECK_RES(lr, coll_transport_get_conn(comm, peer, true, &sc), collSuccess, comm);
        else
            LR_CHECK_RES(lr, coll_transport_get_conn(comm, peer, false, &rc), collSuccess, comm);

    /* Both ways, of different sizes (rank 0 sends B, rank 1 sends 100). */
    memset(in, 0, sizeof(in));
    size_t mine = lr->rank == 0 ? B : 100, theirs = lr->rank == 0 ? 100 : B;
    struct coll_xfer both[2] = {{.conn = rc, .buf = in[0], .bytes = theirs},
                                {.conn = sc, .buf = out[0], .bytes = mine, .is_send = true}};
    LR_CHECK_RES(lr, coll_engine_round(comm, both, 2), collSuccess, comm);
    LR_CHECK(lr, round_wrong(in[0], theirs, 4 * peer) == 0 && (theirs == B || in[0][theirs] == 0),
             "both ways: the message arrived wrong");

    /* One way: rank 0 sends, rank 1 receives; the other side of each is empty
     * and needs no connection. */
    memset(in, 0, sizeof(in));
    struct coll_xfer one[2] = {
        {.conn = lr->rank == 1 ? rc : NULL, .buf = in[1], .bytes = lr->rank == 1 ? B : 0},
        {.conn = lr->rank == 0 ? sc : NULL, .buf = out[1], .bytes = lr->rank == 0 ? B : 0,
         .is_send = true}};
    LR_CHECK_RES(lr, coll_engine_round(comm, one, 2), collSuccess, comm);
    if (lr->rank == 1)
        LR_CHECK(lr, round_wrong(in[1], B, 1) == 0, "one way: the message arrived wrong");

    /* Nothing at all: done at once. */
    struct coll_xfer none[1] = {{.conn = NULL, .buf = NULL, .bytes = 0, .is_send = true}};
    LR_CHECK_RES(lr, coll_engine_round(comm, none, 1), collSuccess, comm);
    LR_CHECK_RES(lr, coll_engine_round(comm, none, 0), collSuccess, comm);

    /* Four on one connection: two receives, then two sends; the messages keep
     * their order on it. */
    memset(in, 0, sizeof(in));
    struct coll_xfer four[4] = {{.conn = rc, .buf = in[2], .bytes = 500},
                                {.conn = rc, .buf = in[3], .bytes = B},
                                {.conn = sc, .buf = out[2], .bytes = 500, .is_send = true},
                                {.conn = sc, .buf = out[3], .bytes = B, .is_send = true}};
    LR_CHECK_RES(lr, coll_engine_round(comm, four, 4), collSuccess, comm);
    size_t wrong = round_wrong(in[2], 500, 2 + 4 * peer) + round_wrong(in[3], B, 3 + 4 * peer);
    LR_CHECK(lr, wrong == 0, "four transfers: %zu bytes wrong", wrong);

    /* More transfers than a round holds: refused, naming the count. */
    struct coll_xfer many[17] = {{0}};
    LR_CHECK_RES(lr, coll_engine_round(comm, many, 17), collInternalError, comm);
    LR_CHECK(lr, strstr(collGetLastError(comm), "17 transfers") != NULL, "last error: %s",
             collGetLastError(comm));
}

/* --- fail, timeout, abort: one rank, a lane of one deferred step --- */

struct one_ctx {
    struct worker *w;
    struct job job;
    _Atomic(struct coll_step *) started;
};

/* The step once the engine has started it. */
static struct coll_step *one_started(struct one_ctx *x)
{
    struct coll_step *s;
    while ((s = atomic_load(&x->started)) == NULL)
        usleep(1000);
    return s;
}

static void one_buf(void *ctx, const struct coll_lane *l, size_t i, void **p, size_t *bytes)
{
    (void)ctx, (void)l, (void)i;
    *p = NULL;
    *bytes = 0;
}

static void one_start(void *ctx, struct coll_lane *l, size_t i, struct coll_step *s)
{
    struct one_ctx *x = ctx;
    (void)l, (void)i;
    atomic_store(&x->started, s);
    if (x->w != NULL) {
        x->job.step = s;
        worker_push(x->w, x->job);
    }
}

static const struct coll_sched_ops one_ops = {.buf = one_buf, .start = one_start};

static collResult_t run_one(struct coll_comm *comm, struct one_ctx *x)
{
    struct coll_lane lane = {.deferred = true, .total = 1};
    struct coll_sched s = {.comm = comm, .ops = &one_ops, .ctx = x, .lanes = &lane, .nlanes = 1};
    coll_exec_begin(comm, "engine step");
    return coll_engine_run(&s);
}

static void body_fail(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    struct worker w;
    worker_start(&w);
    coll_set_error(comm, "a copy of the test failed on purpose");
    struct one_ctx x = {.w = &w, .job = {.res = collSystemError, .delay_us = 20000}};
    LR_CHECK_RES(lr, run_one(comm, &x), collSystemError, comm);
    collResult_t async = collSuccess;
    LR_CHECK_RES(lr, collCommGetAsyncError(comm, &async), collSuccess, comm);
    LR_CHECK(lr, async == collSystemError, "async error %s", collGetErrorString(async));
    LR_CHECK(lr, strstr(collGetLastError(comm), "failed on purpose") != NULL, "last error: %s",
             collGetLastError(comm));
    worker_stop(&w);
}

/* Lets the step go a while after the engine gave up on it. */
static void *late_complete(void *arg)
{
    struct one_ctx *x = arg;
    struct coll_step *s = one_started(x);
    usleep(400000); /* past the 300 ms deadline, inside the engine's grace after it */
    coll_step_complete(s, collSuccess);
    return NULL;
}

static void body_timeout(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    comm->timeout_ms = 300;
    struct one_ctx x = {.w = NULL}; /* nobody finishes it in time */
    /* The step starts in the engine's first pass, long before late_complete
     * reads it. */
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, late_complete, &x) == 0);
    double t0 = launch_now();
    LR_CHECK_RES(lr, run_one(comm, &x), collTimeout, comm);
    double dt = launch_now() - t0;
    LR_CHECK(lr, strstr(collGetLastError(comm), "deferred step") != NULL, "last error: %s",
             collGetLastError(comm));
    /* Bounds of correctness, not of speed: it waited for the deadline, and then
     * for the step to be let go rather than freeing it under its completer. */
    LR_CHECK(lr, dt >= 0.35, "returned after %.3f s, before the step was let go (0.4 s)", dt);
    pthread_join(t, NULL);
}

static void *abort_later(void *arg)
{
    usleep(100000);
    (void)collCommAbort(arg);
    return NULL;
}

static void *complete_later(void *arg)
{
    struct one_ctx *x = arg;
    struct coll_step *s = one_started(x);
    usleep(300000);
    coll_step_complete(s, collSuccess);
    return NULL;
}

/* Its own comm: collCommAbort frees it once the call inside returns. */
static int run_abort(void)
{
    collUniqueId id;
    collComm_t comm;
    REQUIRE(collGetUniqueId(&id) == collSuccess);
    REQUIRE(collCommInitRank(&comm, 1, id, 0) == collSuccess);
    int failures = test_failures;
    struct one_ctx x = {.w = NULL};
    pthread_t ta, tc;
    atomic_fetch_add(&comm->busy, 1); /* as a call on the comm does */
    REQUIRE(pthread_create(&ta, NULL, abort_later, comm) == 0);
    REQUIRE(pthread_create(&tc, NULL, complete_later, &x) == 0);
    CHECK_RES(run_one(comm, &x), collRemoteError, comm);
    CHECK_MSG(strstr(collGetLastError(comm), "aborted") != NULL, "last error: %s",
              collGetLastError(comm));
    atomic_fetch_sub(&comm->busy, 1);
    pthread_join(ta, NULL); /* the comm is gone now */
    pthread_join(tc, NULL);
    return test_failures != failures;
}

/* --- the poll set --- */

/* Descriptors the poll set holds, from /proc/self/fdinfo of its epoll fd. */
static bool pollset_has(int epfd, int fd)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
    FILE *f = fopen(path, "r");
    REQUIRE(f != NULL);
    bool found = false;
    while (fgets(line, sizeof(line), f) != NULL) {
        int t;
        if (sscanf(line, "tfd: %d", &t) == 1 && t == fd)
            found = true;
    }
    fclose(f);
    return found;
}

static void *wake_later(void *arg)
{
    usleep(100000);
    coll_engine_wake(arg);
    return NULL;
}

static void body_pollset(struct launch_rank *lr)
{
    struct coll_comm *comm = lr->comm;
    enum { N = 100 };
    int p[N][2];
    struct pollfd want[N];
    for (int i = 0; i < N; i++) {
        REQUIRE(pipe(p[i]) == 0);
        want[i] = (struct pollfd){.fd = p[i][0], .events = POLLIN};
    }
    int epfd = coll_engine_poll_fd(comm);
    coll_exec_begin(comm, "engine poll set");
    /* Only the last of 100 becomes ready: the wait wakes for it (well inside
     * its 10 s limit) and every one is in the set. */
    REQUIRE(write(p[N - 1][1], "x", 1) == 1);
    LR_CHECK(lr, coll_engine_block(comm, want, N, NULL, 0, 10000) == 1,
             "a ready descriptor past 64 was not seen");
    for (int i = 0; i < N; i++)
        LR_CHECK(lr, pollset_has(epfd, p[i][0]), "descriptor %d of %d not in the set", i, N);
    /* Descriptor N-1 stays ready, and the next wait is for the first 10 only
     * (more than a few, so the set is used): the ready one leaves the set
     * instead of waking every later wait. */
    LR_CHECK(lr, coll_engine_block(comm, want, 10, NULL, 0, 50) == 0,
             "nothing waited for is ready");
    LR_CHECK(lr, !pollset_has(epfd, p[N - 1][0]), "a ready descriptor nobody waits for stayed");
    LR_CHECK(lr, pollset_has(epfd, p[0][0]), "the descriptor waited for left the set");
    /* Closed behind the set's back and its number reused by a new pipe: a wait
     * on the new one wakes when it is written. */
    int old = p[0][0];
    close(p[0][0]);
    close(p[0][1]);
    REQUIRE(pipe(p[0]) == 0);
    if (p[0][0] != old) { /* make the number the same */
        if (p[0][1] == old) { /* (a lower number was free): move the write end off it */
            int w = dup(p[0][1]);
            REQUIRE(w >= 0);
            close(p[0][1]);
            p[0][1] = w;
        }
        REQUIRE(dup2(p[0][0], old) == old);
        close(p[0][0]);
        p[0][0] = old;
    }
    REQUIRE(write(p[0][1], "y", 1) == 1);
    int seen = 0;
    for (int tick = 0; tick < 50 && seen == 0; tick++) /* 100 ms ticks, as waits use */
        seen = coll_engine_block(comm, want, 10, NULL, 0, 100);
    LR_CHECK(lr, seen == 1, "a reused descriptor number was not waited on");
    /* A wait on a few descriptors polls them: it wakes for a ready one, and for
     * coll_engine_wake from another thread. */
    REQUIRE(write(p[1][1], "z", 1) == 1);
    LR_CHECK(lr, coll_engine_block(comm, &want[1], 1, NULL, 0, 10000) == 1,
             "a wait on one descriptor did not see it ready");
    char c;
    REQUIRE(read(p[1][0], &c, 1) == 1);
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, wake_later, comm) == 0);
    double t0 = launch_now();
    LR_CHECK(lr, coll_engine_block(comm, &want[1], 1, NULL, 0, 10000) == 0,
             "a wake-up counted as a ready descriptor");
    LR_CHECK(lr, launch_now() - t0 < 5, "coll_engine_wake did not end a wait on one descriptor");
    pthread_join(t, NULL);
    for (int i = 0; i < N; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

int main(void)
{
    int rc = 0;
    rc |= launch_run(2, body_pipeline, NULL);
    rc |= launch_run(2, body_lags, NULL);
    rc |= launch_run(2, body_round, NULL);
    rc |= launch_run(1, body_fail, NULL);
    rc |= launch_run(1, body_timeout, NULL);
    rc |= run_abort();
    rc |= launch_run(1, body_pollset, NULL);
    return rc;
}
