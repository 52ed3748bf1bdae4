/*
 * Streams (collStreamCreate and calls given a stream):
 *
 *   1. arguments: NULL and foreign stream pointers are refused, naming the stream,
 *      and the comm stays usable;
 *   2. order: 120 calls of a seeded random program (allreduce sum/prod/max,
 *      broadcast, gather and scatter from any root, a ring shift as a group of
 *      send + recv) on one stream, some of them with a NULL stream in between;
 *      every rank replays the program on all ranks' data and checks the final
 *      buffers, which any reordering would change;
 *   3. two communicators and two streams at once: a stream orders a call on one
 *      communicator after its call on the other; the second stream runs
 *      unrelated calls on both in between;
 *   4. many calls in flight: 200 allreduces into separate slots, one synchronize;
 *   5. query: collInProgress while a peer has not joined yet, collSuccess after;
 *   6. destroying with work pending: collStreamDestroy and collCommDestroy wait
 *      for the queued calls, which complete correctly;
 *   7. groups on streams: a group naming two streams, and a group on a stream
 *      spanning two communicators, are refused (collInvalidUsage);
 *   8. a failing peer: the last rank aborts its communicator; the others' calls on
 *      a stream fail, and the failure shows in collStreamQuery,
 *      collStreamSynchronize (once) and collCommGetAsyncError;
 *   9. collCommAbort from another thread while a call waits behind the stream's
 *      queued work: both end with an error, in time, nothing used after free;
 *  10. a rank that aborts before a connection with its peer exists: the peer's
 *      receive ends by the failure notice over the out-of-band ring, its send by
 *      the refused connection, both at once rather than at the deadline;
 *  11. a queue past its bound: 3000 small calls (every size from 1 to 600
 *      elements, so ll's and the others) on one stream while the last rank
 *      starts 300 ms late: the others' issuing waits for room (it takes more
 *      than 150 ms, where 3000 calls queue in a few), and every result is right;
 *  12. a receive issued alone, then a send: every rank receives from its left
 *      neighbour on one stream, waits 50 ms, then sends to its right on another
 *      (a pipeline's irecv, then isend): the receive, queued first, must not
 *      keep the send behind it on the communicator (both would wait for ever).
 *
 *   collrun -n 3 test_stream      test_stream --threads 4
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

#define COUNT 1001
#define PROGRAM_LEN 120
#define INFLIGHT 200
#define DEEP 3000     /* more calls than a comm's queue holds (1024) */
#define DEEP_SPAN 600 /* elements: the largest call */

#define MUST LR_MUST

/* A second communicator over the same ranks: rank 0's id travels over comm. */
static collComm_t split_comm(struct launch_rank *lr)
{
    collUniqueId id;
    collComm_t c;
    memset(&id, 0, sizeof(id));
    if (lr->rank == 0)
        MUST(lr, collGetUniqueId(&id), NULL);
    MUST(lr, collBroadcast(&id, &id, sizeof(id), collUint8, 0, lr->comm, NULL), lr->comm);
    MUST(lr, collCommInitRank(&c, lr->nranks, id, lr->rank), NULL);
    return c;
}

static void check_refusals(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    uint64_t v = 1;
    collStream_t bogus = (collStream_t)&v;
    LR_CHECK_RES(lr, collStreamCreate(NULL), collInvalidArgument, NULL);
    LR_CHECK(lr, strstr(collGetLastError(NULL), "stream") != NULL, "error '%s'",
             collGetLastError(NULL));
    LR_CHECK_RES(lr, collStreamQuery(bogus), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collStreamQuery(NULL), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collStreamSynchronize(bogus), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collStreamDestroy(bogus), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collStreamDestroy(NULL), collSuccess, NULL);
    LR_CHECK_RES(lr, collAllReduce(&v, &v, 1, collUint64, collSum, comm, bogus),
                 collInvalidArgument, comm);
    LR_CHECK(lr, strstr(collGetLastError(comm), "stream") != NULL, "error '%s'",
             collGetLastError(comm));
    LR_CHECK_RES(lr, collSend(&v, 1, collUint64, 0, comm, bogus), collInvalidArgument, comm);

    /* A destroyed stream is refused too. */
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    MUST(lr, collStreamDestroy(s), NULL);
    LR_CHECK_RES(lr, collStreamQuery(s), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collBroadcast(&v, &v, 1, collUint64, 0, comm, s), collInvalidArgument,
                 comm);

    /* The comm still works. */
    v = (uint64_t)lr->rank + 1;
    MUST(lr, collAllReduce(&v, &v, 1, collUint64, collSum, comm, NULL), comm);
    LR_CHECK(lr, v == (uint64_t)lr->nranks * (uint64_t)(lr->nranks + 1) / 2, "sum %" PRIu64, v);
}

/* --- 2. order: a random program, replayed on every rank's data --- */

enum step_kind {
    STEP_SUM, STEP_PROD, STEP_MAX, STEP_BCAST, STEP_GATHER, STEP_SCATTER, STEP_SHIFT, STEP_KINDS
};

struct step {
    int kind;
    int root;
    bool blocking; /* NULL stream */
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t initial(int rank, size_t j)
{
    return 2 * ((uint64_t)rank * 100003 + j * 7) + 1;
}

/* Elements per rank of a gather or scatter: block r of the buffer is rank r's. */
static size_t gs_count(int n)
{
    return COUNT / (size_t)n;
}

/* Applies step st to the model of all ranks' buffers: model[r][cur[r]] is rank r's
 * current buffer (the shift moves it to the other one). */
static void model_step(uint64_t **model, int n, const struct step *st, int *cur)
{
    if (st->kind == STEP_GATHER) {
        /* The root's other buffer gets the first block of every rank's, and
         * becomes its current one. */
        size_t g = gs_count(n);
        uint64_t *to = &model[st->root][(size_t)(1 - cur[st->root]) * COUNT];
        for (int r = 0; r < n; r++)
            memcpy(to + (size_t)r * g, &model[r][(size_t)cur[r] * COUNT], g * sizeof(uint64_t));
        cur[st->root] = 1 - cur[st->root];
        return;
    }
    if (st->kind == STEP_SCATTER) {
        /* Block r of the root's buffer goes to the start of rank r's other buffer,
         * which becomes every rank's current one. */
        size_t g = gs_count(n);
        const uint64_t *from = &model[st->root][(size_t)cur[st->root] * COUNT];
        for (int r = 0; r < n; r++)
            memcpy(&model[r][(size_t)(1 - cur[r]) * COUNT], from + (size_t)r * g,
                   g * sizeof(uint64_t));
        for (int r = 0; r < n; r++)
            cur[r] = 1 - cur[r];
        return;
    }
    for (size_t j = 0; j < COUNT; j++) {
        uint64_t acc = st->kind == STEP_PROD ? 1 : 0;
        for (int r = 0; r < n; r++) {
            uint64_t x = model[r][(size_t)cur[r] * COUNT + j];
            if (st->kind == STEP_SUM)
                acc += x;
            else if (st->kind == STEP_PROD)
                acc *= x;
            else if (st->kind == STEP_MAX)
                acc = x > acc ? x : acc;
        }
        if (st->kind == STEP_BCAST)
            acc = model[st->root][(size_t)cur[st->root] * COUNT + j];
        if (st->kind != STEP_SHIFT)
            for (int r = 0; r < n; r++)
                model[r][(size_t)cur[r] * COUNT + j] = acc;
    }
    if (st->kind == STEP_SHIFT) {
        /* Rank r receives rank r-1's buffer into its other buffer. */
        for (int r = 0; r < n; r++) {
            int from = (r - 1 + n) % n;
            memcpy(&model[r][(size_t)(1 - cur[r]) * COUNT], &model[from][(size_t)cur[from] * COUNT],
                   COUNT * sizeof(uint64_t));
        }
        for (int r = 0; r < n; r++)
            cur[r] = 1 - cur[r];
    }
}

static void issue_step(struct launch_rank *lr, uint64_t *buf, const struct step *st, int *cur,
                       collStream_t s)
{
    collComm_t comm = lr->comm;
    collStream_t use = st->blocking ? NULL : s;
    uint64_t *x = buf + (size_t)*cur * COUNT, *y = buf + (size_t)(1 - *cur) * COUNT;
    static const collRedOp_t ops[] = {collSum, collProd, collMax};
    int n = lr->nranks, me = lr->rank;
    switch (st->kind) {
    case STEP_SUM:
    case STEP_PROD:
    case STEP_MAX:
        MUST(lr, collAllReduce(x, x, COUNT, collUint64, ops[st->kind], comm, use), comm);
        break;
    case STEP_BCAST:
        MUST(lr, collBroadcast(x, x, COUNT, collUint64, st->root, comm, use), comm);
        break;
    case STEP_GATHER:
        /* Off the root, the buffer of all blocks is NULL. */
        MUST(lr, collGather(x, me == st->root ? y : NULL, gs_count(n), collUint64, st->root,
                            comm, use), comm);
        if (me == st->root)
            *cur = 1 - *cur;
        break;
    case STEP_SCATTER:
        MUST(lr, collScatter(me == st->root ? x : NULL, y, gs_count(n), collUint64, st->root,
                             comm, use), comm);
        *cur = 1 - *cur;
        break;
    default:
        MUST(lr, collGroupStart(), comm);
        MUST(lr, collSend(x, COUNT, collUint64, (me + 1) % n, comm, use), comm);
        MUST(lr, collRecv(y, COUNT, collUint64, (me - 1 + n) % n, comm, use), comm);
        MUST(lr, collGroupEnd(), comm);
        *cur = 1 - *cur;
    }
}

static void check_order(struct launch_rank *lr)
{
    const int n = lr->nranks, me = lr->rank;
    uint64_t *buf = calloc(2 * COUNT, sizeof(uint64_t));
    uint64_t **model = calloc((size_t)n, sizeof(*model));
    int *cur = calloc((size_t)n, sizeof(int));
    if (!buf || !model || !cur)
        launch_fatal(lr, "out of memory");
    for (int r = 0; r < n; r++) {
        model[r] = calloc(2 * COUNT, sizeof(uint64_t));
        if (!model[r])
            launch_fatal(lr, "out of memory");
        for (size_t j = 0; j < COUNT; j++)
            model[r][j] = initial(r, j);
    }
    for (size_t j = 0; j < COUNT; j++)
        buf[j] = initial(me, j);

    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    uint64_t seed = 12345;
    int mycur = 0;
    for (int i = 0; i < PROGRAM_LEN; i++) {
        struct step st = {.kind = (int)(rng_next(&seed) % STEP_KINDS),
                          .root = (int)(rng_next(&seed) % (uint64_t)n),
                          .blocking = rng_next(&seed) % 10 == 0};
        issue_step(lr, buf, &st, &mycur, s);
        model_step(model, n, &st, cur);
    }
    MUST(lr, collStreamSynchronize(s), lr->comm);
    LR_CHECK_RES(lr, collStreamQuery(s), collSuccess, lr->comm);
    LR_CHECK(lr, mycur == cur[me], "buffer index %d, model %d", mycur, cur[me]);
    for (size_t j = 0; j < COUNT; j++) {
        uint64_t got = buf[(size_t)mycur * COUNT + j], want = model[me][(size_t)cur[me] * COUNT + j];
        if (got != want) {
            LR_CHECK(lr, got == want, "element %zu: %" PRIu64 ", want %" PRIu64, j, got, want);
            break;
        }
    }
    MUST(lr, collStreamDestroy(s), NULL);
    for (int r = 0; r < n; r++)
        free(model[r]);
    free(model);
    free(cur);
    free(buf);
}

/* --- 3. two communicators, two streams --- */

static void check_two_comms(struct launch_rank *lr, collComm_t c2)
{
    const int n = lr->nranks, me = lr->rank;
    collStream_t s1, s2;
    MUST(lr, collStreamCreate(&s1), NULL);
    MUST(lr, collStreamCreate(&s2), NULL);
    enum { ROUNDS = 30 };
    int64_t x[ROUNDS], y[ROUNDS], u[ROUNDS], w[ROUNDS];
    for (int k = 0; k < ROUNDS; k++) {
        x[k] = me + k;
        u[k] = me * k;
        w[k] = -me;
        /* s1: x summed on comm 1, then y = max over ranks of that sum, on comm 2:
         * right only when the second call sees the first's result. */
        MUST(lr, collAllReduce(&x[k], &x[k], 1, collInt64, collSum, lr->comm, s1), lr->comm);
        MUST(lr, collAllReduce(&x[k], &y[k], 1, collInt64, collMax, c2, s1), c2);
        /* s2: unrelated work on both communicators in between. */
        MUST(lr, collAllReduce(&u[k], &u[k], 1, collInt64, collSum, c2, s2), c2);
        MUST(lr, collAllReduce(&w[k], &w[k], 1, collInt64, collMin, lr->comm, s2), lr->comm);
    }
    MUST(lr, collStreamSynchronize(s2), lr->comm);
    MUST(lr, collStreamSynchronize(s1), lr->comm);
    int64_t tri = (int64_t)n * (n - 1) / 2;
    for (int k = 0; k < ROUNDS; k++) {
        LR_CHECK(lr, x[k] == tri + (int64_t)n * k, "round %d: x %" PRId64, k, x[k]);
        LR_CHECK(lr, y[k] == tri + (int64_t)n * k, "round %d: y %" PRId64 " (ran before x?)", k,
                 y[k]);
        LR_CHECK(lr, u[k] == tri * k, "round %d: u %" PRId64, k, u[k]);
        LR_CHECK(lr, w[k] == -(int64_t)(n - 1), "round %d: w %" PRId64, k, w[k]);
    }
    MUST(lr, collStreamDestroy(s1), NULL);
    MUST(lr, collStreamDestroy(s2), NULL);
}

/* --- 4. many calls in flight --- */

static void check_inflight(struct launch_rank *lr)
{
    const int n = lr->nranks, me = lr->rank;
    float *b = malloc((size_t)INFLIGHT * 257 * sizeof(float));
    if (!b)
        launch_fatal(lr, "out of memory");
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    for (int k = 0; k < INFLIGHT; k++) {
        size_t cnt = 1 + (size_t)(k % 257);
        float *p = b + (size_t)k * 257;
        for (size_t j = 0; j < cnt; j++)
            p[j] = (float)(me + k + (int)j);
        MUST(lr, collAllReduce(p, p, cnt, collFloat, collSum, lr->comm, s), lr->comm);
    }
    MUST(lr, collStreamSynchronize(s), lr->comm);
    int bad = 0;
    for (int k = 0; k < INFLIGHT && bad < 3; k++) {
        size_t cnt = 1 + (size_t)(k % 257);
        for (size_t j = 0; j < cnt; j++) {
            float want = (float)(n * (k + (int)j) + n * (n - 1) / 2);
            if (b[(size_t)k * 257 + j] != want) {
                LR_CHECK(lr, false, "call %d element %zu: %g, want %g", k, j,
                         (double)b[(size_t)k * 257 + j], (double)want);
                bad++;
                break;
            }
        }
    }
    MUST(lr, collStreamDestroy(s), NULL);
    free(b);
}

/* --- 12. a receive issued alone, then a send --- */

static void check_recv_then_send(struct launch_rank *lr)
{
    const int n = lr->nranks, me = lr->rank;
    if (n < 2)
        return;
    int left = (me + n - 1) % n, right = (me + 1) % n;
    enum { P2P_COUNT = 1000 };
    int32_t *in = calloc(P2P_COUNT, sizeof(int32_t)), *out = malloc(P2P_COUNT * sizeof(int32_t));
    if (!in || !out)
        launch_fatal(lr, "out of memory");
    for (int j = 0; j < P2P_COUNT; j++)
        out[j] = me * 100000 + j;
    collStream_t rs, ss;
    MUST(lr, collStreamCreate(&rs), NULL);
    MUST(lr, collStreamCreate(&ss), NULL);
    double t0 = launch_now();
    MUST(lr, collRecv(in, P2P_COUNT, collInt32, left, lr->comm, rs), lr->comm);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL); /* the receive is the progress thread's, alone, by now */
    MUST(lr, collSend(out, P2P_COUNT, collInt32, right, lr->comm, ss), lr->comm);
    MUST(lr, collStreamSynchronize(rs), lr->comm);
    MUST(lr, collStreamSynchronize(ss), lr->comm);
    LR_CHECK(lr, launch_now() - t0 < 10, "the receive and the send took %.1f s",
             launch_now() - t0);
    for (int j = 0; j < P2P_COUNT; j++)
        if (in[j] != left * 100000 + j) {
            LR_CHECK(lr, false, "element %d from rank %d: %d, want %d", j, left, (int)in[j],
                     left * 100000 + j);
            break;
        }
    MUST(lr, collStreamDestroy(rs), NULL);
    MUST(lr, collStreamDestroy(ss), NULL);
    free(in);
    free(out);
}

/* --- 11. a queue past its bound --- */

static void check_deep(struct launch_rank *lr)
{
    const int n = lr->nranks, me = lr->rank;
    int32_t *b = malloc((size_t)DEEP * DEEP_SPAN * sizeof(int32_t));
    if (!b)
        launch_fatal(lr, "out of memory");
    for (size_t j = 0; j < (size_t)DEEP * DEEP_SPAN; j++)
        b[j] = (int32_t)(j % 1000) + me;
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    /* Every rank starts the clock together (a count of 0 would not wait for the
     * others: its lateness would be the launch's skew, not 300 ms). */
    int32_t sync = 0;
    MUST(lr, collAllReduce(&sync, &sync, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    bool late = me == n - 1;
    if (late) {
        struct timespec ts = {0, 300 * 1000000};
        nanosleep(&ts, NULL);
    }
    double t0 = launch_now();
    for (int k = 0; k < DEEP; k++) {
        int32_t *p = b + (size_t)k * DEEP_SPAN;
        MUST(lr, collAllReduce(p, p, 1 + (size_t)k % DEEP_SPAN, collInt32, collSum, lr->comm, s),
             lr->comm);
    }
    double issued_s = launch_now() - t0;
    MUST(lr, collStreamSynchronize(s), lr->comm);
    if (!late && n > 1)
        LR_CHECK(lr, issued_s > 0.15,
                 "3000 calls were issued in %.3f s with a peer 300 ms late: the queue did "
                 "not make the issuing thread wait", issued_s);
    for (int k = 0; k < DEEP; k++) {
        size_t cnt = 1 + (size_t)k % DEEP_SPAN;
        for (size_t j = 0; j < DEEP_SPAN; j++) {
            size_t at = (size_t)k * DEEP_SPAN + j;
            int32_t base = (int32_t)(at % 1000);
            int32_t want = j < cnt ? n * base + n * (n - 1) / 2 : base + me;
            if (b[at] != want) {
                LR_CHECK(lr, false, "call %d element %zu: %d, want %d", k, j, (int)b[at],
                         (int)want);
                k = DEEP;
                break;
            }
        }
    }
    MUST(lr, collStreamDestroy(s), NULL);
    free(b);
}

/* --- 5. query while a peer is late --- */

static void check_query(struct launch_rank *lr)
{
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    int32_t v = 1;
    if (lr->rank != 0) {
        struct timespec ts = {0, 200 * 1000000};
        nanosleep(&ts, NULL);
    }
    MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, lr->comm, s), lr->comm);
    if (lr->rank == 0 && lr->nranks > 1)
        LR_CHECK_RES(lr, collStreamQuery(s), collInProgress, lr->comm);
    MUST(lr, collStreamSynchronize(s), lr->comm);
    LR_CHECK_RES(lr, collStreamQuery(s), collSuccess, lr->comm);
    LR_CHECK(lr, v == lr->nranks, "sum %d", (int)v);
    MUST(lr, collStreamDestroy(s), NULL);
}

/* --- 6. destroy with work pending --- */

static void check_destroy_pending(struct launch_rank *lr)
{
    const int n = lr->nranks;
    enum { CALLS = 20, LEN = 4099 };
    int32_t *b = malloc((size_t)CALLS * LEN * sizeof(int32_t));
    if (!b)
        launch_fatal(lr, "out of memory");
    for (size_t j = 0; j < (size_t)CALLS * LEN; j++)
        b[j] = (int32_t)j;

    /* The stream first. */
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    for (int k = 0; k < CALLS; k++)
        MUST(lr, collAllReduce(b + (size_t)k * LEN, b + (size_t)k * LEN, LEN, collInt32,
                               collSum, lr->comm, s), lr->comm);
    LR_CHECK_RES(lr, collStreamDestroy(s), collSuccess, lr->comm);
    for (size_t j = 0; j < (size_t)CALLS * LEN; j++)
        if (b[j] != (int32_t)j * n) {
            LR_CHECK(lr, false, "after stream destroy: b[%zu] = %d, want %d", j, (int)b[j],
                     (int)j * n);
            break;
        }

    /* Then the communicator, with its calls still queued. */
    collComm_t c = split_comm(lr);
    MUST(lr, collStreamCreate(&s), NULL);
    for (int k = 0; k < CALLS; k++)
        MUST(lr, collAllReduce(b + (size_t)k * LEN, b + (size_t)k * LEN, LEN, collInt32,
                               collSum, c, s), c);
    LR_CHECK_RES(lr, collCommDestroy(c), collSuccess, NULL);
    LR_CHECK_RES(lr, collStreamQuery(s), collSuccess, NULL);
    for (size_t j = 0; j < (size_t)CALLS * LEN; j++)
        if (b[j] != (int32_t)j * n * n) {
            LR_CHECK(lr, false, "after comm destroy: b[%zu] = %d, want %d", j, (int)b[j],
                     (int)j * n * n);
            break;
        }
    MUST(lr, collStreamDestroy(s), NULL);
    free(b);
}

/* --- 7. groups on streams --- */

static void check_group_refusals(struct launch_rank *lr, collComm_t c2)
{
    collStream_t s1, s2;
    MUST(lr, collStreamCreate(&s1), NULL);
    MUST(lr, collStreamCreate(&s2), NULL);
    int32_t a = 1, b = 2;
    MUST(lr, collGroupStart(), lr->comm);
    LR_CHECK_RES(lr, collAllReduce(&a, &a, 1, collInt32, collSum, lr->comm, s1), collSuccess,
                 lr->comm);
    LR_CHECK_RES(lr, collAllReduce(&b, &b, 1, collInt32, collSum, lr->comm, s2),
                 collInvalidUsage, lr->comm);
    LR_CHECK(lr, strstr(collGetLastError(lr->comm), "stream") != NULL, "error '%s'",
             collGetLastError(lr->comm));
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidUsage, lr->comm);

    MUST(lr, collGroupStart(), lr->comm);
    LR_CHECK_RES(lr, collAllReduce(&a, &a, 1, collInt32, collSum, lr->comm, s1), collSuccess,
                 lr->comm);
    LR_CHECK_RES(lr, collAllReduce(&b, &b, 1, collInt32, collSum, c2, s1), collSuccess, c2);
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidUsage, lr->comm);
    LR_CHECK(lr, strstr(collGetLastError(lr->comm), "one communicator") != NULL, "error '%s'",
             collGetLastError(lr->comm));
    LR_CHECK(lr, a == 1 && b == 2, "a refused group ran: a %d b %d", (int)a, (int)b);
    MUST(lr, collStreamSynchronize(s1), lr->comm);

    /* A group on one stream and one comm runs there. */
    MUST(lr, collGroupStart(), lr->comm);
    MUST(lr, collAllReduce(&a, &a, 1, collInt32, collSum, lr->comm, s1), lr->comm);
    MUST(lr, collAllReduce(&b, &b, 1, collInt32, collSum, lr->comm, s1), lr->comm);
    MUST(lr, collGroupEnd(), lr->comm);
    MUST(lr, collStreamSynchronize(s1), lr->comm);
    LR_CHECK(lr, a == lr->nranks && b == 2 * lr->nranks, "group on a stream: a %d b %d",
             (int)a, (int)b);
    MUST(lr, collStreamDestroy(s1), NULL);
    MUST(lr, collStreamDestroy(s2), NULL);
}

/* --- 8. a failing peer --- */

static void check_failure(struct launch_rank *lr)
{
    const int n = lr->nranks, me = lr->rank;
    if (n < 2)
        return;
    collComm_t c = split_comm(lr);
    /* Everyone has the comm before the last rank aborts its own. */
    MUST(lr, collAllReduce(NULL, NULL, 0, collInt32, collSum, lr->comm, NULL), lr->comm);
    int32_t v = 0;
    MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    if (me == n - 1) {
        MUST(lr, collCommAbort(c), NULL);
    } else {
        collStream_t s;
        MUST(lr, collStreamCreate(&s), NULL);
        float *b = calloc(1 << 16, sizeof(float));
        if (!b)
            launch_fatal(lr, "out of memory");
        double t0 = launch_now();
        /* The first call is issued before the failure can be known (the peers
         * wait for this rank's data); a later one may find the comm already
         * poisoned by the progress thread, and is then refused at once. */
        MUST(lr, collAllReduce(b, b, 1 << 16, collFloat, collSum, c, s), c);
        for (int k = 1; k < 5; k++) {
            collResult_t ir = collAllReduce(b, b, 1 << 16, collFloat, collSum, c, s);
            if (ir == collRemoteError || ir == collSystemError)
                break;
            MUST(lr, ir, c);
        }
        collResult_t q;
        while ((q = collStreamQuery(s)) == collInProgress && launch_now() - t0 < 30) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        LR_CHECK(lr, q == collRemoteError || q == collSystemError,
                 "query after the peer left: %s", collGetErrorString(q));
        collResult_t r = collStreamSynchronize(s);
        LR_CHECK(lr, r == q, "synchronize: %s, query said %s", collGetErrorString(r),
                 collGetErrorString(q));
        LR_CHECK_RES(lr, collStreamSynchronize(s), collSuccess, c); /* reported once */
        collResult_t ae = collSuccess;
        MUST(lr, collCommGetAsyncError(c, &ae), c);
        LR_CHECK(lr, ae != collSuccess, "collCommGetAsyncError: %s", collGetErrorString(ae));
        /* Later calls on the poisoned comm are refused at once. */
        LR_CHECK(lr, collAllReduce(b, b, 1, collFloat, collSum, c, s) == ae,
                 "a call on the poisoned comm was not refused");
        LR_CHECK(lr, launch_now() - t0 < 20, "the failure took %.1f s to show",
                 launch_now() - t0);
        MUST(lr, collStreamDestroy(s), NULL);
        collCommDestroy(c);
        free(b);
    }
    MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
}

/* --- 9. abort while another thread waits behind the stream's queue --- */

static void *abort_later(void *arg)
{
    struct timespec ts = {0, 100 * 1000000};
    nanosleep(&ts, NULL);
    collCommAbort((collComm_t)arg);
    return NULL;
}

static void check_abort_while_waiting(struct launch_rank *lr)
{
    collComm_t c = split_comm(lr);
    int32_t v = 1, w = 1;
    if (lr->rank == 0 && lr->nranks > 1) {
        /* The peers never join these calls: the queued one waits, the blocking one
         * waits behind it, until the abort from the other thread ends both. */
        collStream_t s;
        pthread_t t;
        MUST(lr, collStreamCreate(&s), NULL);
        MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, c, s), c);
        if (pthread_create(&t, NULL, abort_later, c) != 0)
            launch_fatal(lr, "pthread_create failed");
        double t0 = launch_now();
        collResult_t r = collAllReduce(&w, &w, 1, collInt32, collSum, c, NULL);
        LR_CHECK(lr, r != collSuccess, "blocking call on an aborted comm: %s",
                 collGetErrorString(r));
        pthread_join(t, NULL);
        r = collStreamSynchronize(s);
        LR_CHECK(lr, r != collSuccess, "queued call on an aborted comm: %s",
                 collGetErrorString(r));
        LR_CHECK(lr, launch_now() - t0 < 20, "the abort took %.1f s", launch_now() - t0);
        MUST(lr, collStreamDestroy(s), NULL);
    }
    MUST(lr, collAllReduce(&v, &w, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    if (lr->rank != 0 || lr->nranks == 1)
        collCommDestroy(c);
}

/* --- 10. a peer that fails before it ever connects --- */

/* A pair (waiter, victim) where the waiter has no connection with the victim yet
 * in the direction is_send, or -1s. */
static void find_unconnected(struct launch_rank *lr, collComm_t c, bool is_send, int *waiter_p,
                             int *victim_p)
{
    const int n = lr->nranks, me = lr->rank;
    int32_t *has = calloc((size_t)n * (size_t)n, sizeof(int32_t));
    if (!has)
        launch_fatal(lr, "out of memory");
    for (int p = 0; p < n; p++)
        has[(size_t)me * (size_t)n + (size_t)p] = p == me || coll_comm_has_conn(c, p, is_send);
    MUST(lr, collAllGather(has + (size_t)me * (size_t)n, has, (size_t)n, collInt32, lr->comm,
                           NULL), lr->comm);
    *waiter_p = *victim_p = -1;
    for (int w = 0; w < n && *waiter_p < 0; w++)
        for (int v = 0; v < n && *waiter_p < 0; v++)
            if (!has[(size_t)w * (size_t)n + (size_t)v]) {
                *waiter_p = w;
                *victim_p = v;
            }
    free(has);
}

/* The waiter receives from (or sends to) the victim over a connection that does
 * not exist yet, and the victim aborts instead of making (or accepting) it.  A
 * receive can only learn of it from the failure notice over the out-of-band
 * ring; a send finds the victim's listener gone.  Either way the call must fail
 * at once, not at the deadline. */
static void check_failure_before_connect(struct launch_rank *lr, bool is_send)
{
    const int me = lr->rank;
    collComm_t c = split_comm(lr);
    int waiter, victim;
    find_unconnected(lr, c, is_send, &waiter, &victim);
    if (waiter < 0) {
        if (me == 0)
            printf("test_stream: part 10 (%s) skipped: every such connection exists\n",
                   is_send ? "send" : "receive");
        collCommDestroy(c);
        return;
    }
    int32_t v = 0;
    if (me == victim) {
        MUST(lr, collCommAbort(c), NULL);
    }
    /* The sender must find the listener gone, so it starts after the abort. */
    MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    if (me == waiter) {
        double t0 = launch_now();
        collResult_t r = is_send ? collSend(&v, 1, collInt32, victim, c, NULL)
                                 : collRecv(&v, 1, collInt32, victim, c, NULL);
        LR_CHECK(lr, r == collRemoteError, "%s rank %d, which aborted: %s (%s)",
                 is_send ? "send to" : "receive from", victim, collGetErrorString(r),
                 collGetLastError(c));
        LR_CHECK(lr, launch_now() - t0 < 20, "the failure took %.1f s to show",
                 launch_now() - t0);
    }
    MUST(lr, collAllReduce(&v, &v, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    if (me != victim)
        collCommDestroy(c);
}

static void body(struct launch_rank *lr)
{
    check_refusals(lr);
    check_order(lr);
    collComm_t c2 = split_comm(lr);
    check_two_comms(lr, c2);
    check_group_refusals(lr, c2);
    MUST(lr, collCommDestroy(c2), NULL);
    check_inflight(lr);
    check_recv_then_send(lr);
    check_deep(lr);
    check_query(lr);
    check_destroy_pending(lr);
    check_failure(lr);
    check_abort_while_waiting(lr);
    check_failure_before_connect(lr, false);
    check_failure_before_connect(lr, true);
    if (lr->rank == 0)
        printf("test_stream: %d ranks: %s\n", lr->nranks, lr->failures ? "FAILED" : "ok");
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, body, NULL);
}
