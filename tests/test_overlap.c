/*
 * Calls in flight at once on a stream (lib/core/stream.c, lib/engine/inflight.h):
 *
 *   1. buckets: 24 allreduces of distinct buffers (0 B to 1 MiB, int64 and
 *      float) issued back to back on one stream, as DDP issues its buckets,
 *      then one synchronize: every result is right, and on rank 0, whose peer
 *      is late, several calls were in flight at once;
 *   2. every collective: allreduce, broadcast and reduce from every root,
 *      allgather and reduce-scatter, on distinct buffers, on two streams;
 *   3. order where buffers meet: in-place allreduces on one buffer chained
 *      between independent calls (each one reads what the one before wrote),
 *      and a broadcast reading an allreduce's output: the chain's results
 *      show any reordering;
 *   4. ranks that overlap and ranks that do not (process mode: odd ranks run
 *      with COLL_STREAM_OVERLAP=1): the bytes on each connection are in the
 *      same order either way, so the results agree;
 *   5. a group and a send/receive between buckets: they run alone, in order.
 *
 * The algorithm is the planner's or COLL_ALGO's (the meson tests run it per
 * algorithm).
 *
 *   collrun -n 4 test_overlap      test_overlap --threads 3
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch.h"

/* The most calls comm's progress thread had in flight at once (lib/core/stream.h). */
int coll_stream_overlap_peak(const struct coll_comm *comm);

#define MUST LR_MUST

#define BUCKETS 24

static size_t bucket_count(int b)
{
    static const size_t counts[] = {0, 1, 3, 128, 1000, 8192, 65536, 131072};
    return counts[b % 8];
}

static int64_t ival(int rank, int b, size_t j)
{
    return (int64_t)((uint64_t)rank * 7919 + (uint64_t)b * 104729 + j * 31) % 100003 - 50000;
}

static float fval(int rank, int b, size_t j)
{
    return (float)((rank + 1) * ((int)(j % 97) + b)) * 0.5f; /* exact in float */
}

/* --- 1. buckets --- */
static void check_buckets(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    int n = lr->nranks, me = lr->rank;
    void *buf[BUCKETS];
    for (int b = 0; b < BUCKETS; b++) {
        size_t c = bucket_count(b);
        buf[b] = malloc(c * 8 + 8);
        if (buf[b] == NULL)
            launch_fatal(lr, "out of memory");
        for (size_t j = 0; j < c; j++) {
            if (b % 2 == 0)
                ((int64_t *)buf[b])[j] = ival(me, b, j);
            else
                ((float *)buf[b])[j] = fval(me, b, j);
        }
    }
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    /* Rank 1 comes late: rank 0's first call waits for it, and the rest queue up
     * behind it, so they are in flight together once it is done. */
    if (me == 1)
        usleep(100 * 1000);
    for (int b = 0; b < BUCKETS; b++) {
        size_t c = bucket_count(b);
        if (b % 2 == 0)
            MUST(lr, collAllReduce(buf[b], buf[b], c, collInt64, collSum, comm, s), comm);
        else
            MUST(lr, collAllReduce(buf[b], buf[b], c, collFloat, collSum, comm, s), comm);
    }
    MUST(lr, collStreamSynchronize(s), comm);
    for (int b = 0; b < BUCKETS; b++) {
        size_t c = bucket_count(b);
        for (size_t j = 0; j < c; j++) {
            bool ok;
            if (b % 2 == 0) {
                int64_t want = 0;
                for (int r = 0; r < n; r++)
                    want += ival(r, b, j);
                ok = ((int64_t *)buf[b])[j] == want;
                LR_CHECK(lr, ok, "bucket %d element %zu: %" PRId64 ", want %" PRId64, b, j,
                         ((int64_t *)buf[b])[j], want);
            } else {
                float want = 0;
                for (int r = 0; r < n; r++)
                    want += fval(r, b, j);
                ok = ((float *)buf[b])[j] == want;
                LR_CHECK(lr, ok, "bucket %d element %zu: %g, want %g", b, j,
                         (double)((float *)buf[b])[j], (double)want);
            }
            if (!ok)
                break;
        }
        free(buf[b]);
    }
    const char *ov = getenv("COLL_STREAM_OVERLAP");
    int peak = coll_stream_overlap_peak((const struct coll_comm *)comm);
    if (ov != NULL && atoi(ov) == 1)
        LR_CHECK(lr, peak == 0, "%d calls in flight at once with COLL_STREAM_OVERLAP=1", peak);
    else if (me == 0 && n > 1)
        LR_CHECK(lr, peak >= 2, "at most %d call in flight at once: the buckets did not overlap",
                 peak);
    MUST(lr, collStreamDestroy(s), NULL);
}

/* --- 2. every collective, two streams --- */
enum { K_ALLREDUCE, K_BCAST, K_REDUCE, K_ALLGATHER, K_RSCATTER, K_KINDS };

static void check_every_collective(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    int n = lr->nranks, me = lr->rank;
    const size_t c = 5000;
    enum { CALLS = 20 };
    int64_t *in[CALLS], *out[CALLS];
    collStream_t s[2];
    MUST(lr, collStreamCreate(&s[0]), NULL);
    MUST(lr, collStreamCreate(&s[1]), NULL);
    for (int i = 0; i < CALLS; i++) {
        in[i] = malloc(c * (size_t)n * sizeof(int64_t));
        out[i] = calloc(c * (size_t)n, sizeof(int64_t));
        if (in[i] == NULL || out[i] == NULL)
            launch_fatal(lr, "out of memory");
        for (size_t j = 0; j < c * (size_t)n; j++)
            in[i][j] = ival(me, i, j);
    }
    for (int i = 0; i < CALLS; i++) {
        collStream_t st = s[i % 2];
        int root = i % n;
        switch (i % K_KINDS) {
        case K_ALLREDUCE:
            MUST(lr, collAllReduce(in[i], out[i], c, collInt64, collSum, comm, st), comm);
            break;
        case K_BCAST:
            MUST(lr, collBroadcast(in[i], out[i], c, collInt64, root, comm, st), comm);
            break;
        case K_REDUCE:
            MUST(lr, collReduce(in[i], out[i], c, collInt64, collMax, root, comm, st), comm);
            break;
        case K_ALLGATHER:
            MUST(lr, collAllGather(in[i], out[i], c, collInt64, comm, st), comm);
            break;
        default:
            MUST(lr, collReduceScatter(in[i], out[i], c, collInt64, collSum, comm, st), comm);
        }
    }
    MUST(lr, collStreamSynchronize(s[0]), comm);
    MUST(lr, collStreamSynchronize(s[1]), comm);
    for (int i = 0; i < CALLS; i++) {
        int root = i % n;
        size_t m = i % K_KINDS == K_ALLGATHER ? c * (size_t)n : c;
        if (i % K_KINDS == K_REDUCE && me != root)
            m = 0;
        for (size_t j = 0; j < m; j++) {
            int64_t want = 0;
            switch (i % K_KINDS) {
            case K_ALLREDUCE:
                for (int r = 0; r < n; r++)
                    want += ival(r, i, j);
                break;
            case K_BCAST:
                want = ival(root, i, j);
                break;
            case K_REDUCE:
                want = INT64_MIN;
                for (int r = 0; r < n; r++)
                    want = ival(r, i, j) > want ? ival(r, i, j) : want;
                break;
            case K_ALLGATHER:
                want = ival((int)(j / c), i, j % c);
                break;
            default:
                for (int r = 0; r < n; r++)
                    want += ival(r, i, (size_t)me * c + j);
            }
            if (out[i][j] != want) {
                LR_CHECK(lr, out[i][j] == want, "call %d (kind %d) element %zu: %" PRId64
                         ", want %" PRId64, i, i % K_KINDS, j, out[i][j], want);
                break;
            }
        }
        free(in[i]);
        free(out[i]);
    }
    MUST(lr, collStreamDestroy(s[0]), NULL);
    MUST(lr, collStreamDestroy(s[1]), NULL);
}

/* --- 3. order where buffers meet --- */
static void check_chain(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    int n = lr->nranks, me = lr->rank;
    const size_t c = 20000, side = 30000;
    enum { LINKS = 6 };
    int64_t *x = malloc(c * sizeof(int64_t)), *y = malloc(c * sizeof(int64_t));
    int64_t *other[LINKS];
    if (x == NULL || y == NULL)
        launch_fatal(lr, "out of memory");
    for (size_t j = 0; j < c; j++)
        x[j] = (int64_t)(j % 5) + 1;
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    for (int k = 0; k < LINKS; k++) {
        other[k] = malloc(side * sizeof(int64_t));
        if (other[k] == NULL)
            launch_fatal(lr, "out of memory");
        for (size_t j = 0; j < side; j++)
            other[k][j] = me + k;
        /* x *= n each link (a sum of n equal copies), between independent calls
         * that may run beside it. */
        MUST(lr, collAllReduce(other[k], other[k], side, collInt64, collSum, comm, s), comm);
        MUST(lr, collAllReduce(x, x, c, collInt64, collSum, comm, s), comm);
    }
    /* y gets rank (LINKS % n)'s x: it reads what the last allreduce wrote. */
    MUST(lr, collBroadcast(x, y, c, collInt64, LINKS % n, comm, s), comm);
    MUST(lr, collStreamSynchronize(s), comm);
    int64_t scale = 1;
    for (int k = 0; k < LINKS; k++)
        scale *= n;
    for (size_t j = 0; j < c; j++) {
        int64_t want = ((int64_t)(j % 5) + 1) * scale;
        if (x[j] != want || y[j] != want) {
            LR_CHECK(lr, x[j] == want && y[j] == want, "element %zu: x %" PRId64 ", y %" PRId64
                     ", want %" PRId64, j, x[j], y[j], want);
            break;
        }
    }
    for (int k = 0; k < LINKS; k++) {
        int64_t want = (int64_t)n * (n - 1) / 2 + (int64_t)n * k;
        LR_CHECK(lr, other[k][side - 1] == want && other[k][0] == want,
                 "side call %d: %" PRId64 ", want %" PRId64, k, other[k][0], want);
        free(other[k]);
    }
    free(x);
    free(y);
    MUST(lr, collStreamDestroy(s), NULL);
}

/* --- 5. groups and sends between buckets --- */
static void check_alone(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    int n = lr->nranks, me = lr->rank;
    const size_t c = 4096;
    enum { ROUNDS = 4 };
    int64_t *a[ROUNDS], *b[ROUNDS], *shift[ROUNDS];
    collStream_t s;
    MUST(lr, collStreamCreate(&s), NULL);
    for (int k = 0; k < ROUNDS; k++) {
        a[k] = malloc(c * sizeof(int64_t));
        b[k] = malloc(c * sizeof(int64_t));
        shift[k] = malloc(c * sizeof(int64_t));
        if (a[k] == NULL || b[k] == NULL || shift[k] == NULL)
            launch_fatal(lr, "out of memory");
        for (size_t j = 0; j < c; j++)
            a[k][j] = b[k][j] = me * 10 + k;
        MUST(lr, collAllReduce(a[k], a[k], c, collInt64, collSum, comm, s), comm);
        MUST(lr, collGroupStart(), comm);
        MUST(lr, collSend(b[k], c, collInt64, (me + 1) % n, comm, s), comm);
        MUST(lr, collRecv(shift[k], c, collInt64, (me + n - 1) % n, comm, s), comm);
        MUST(lr, collGroupEnd(), comm);
        MUST(lr, collAllReduce(b[k], b[k], c, collInt64, collMax, comm, s), comm);
    }
    MUST(lr, collStreamSynchronize(s), comm);
    for (int k = 0; k < ROUNDS; k++) {
        int64_t sum = 10 * (int64_t)n * (n - 1) / 2 + (int64_t)n * k;
        int64_t from = ((me + n - 1) % n) * 10 + k, max = (n - 1) * 10 + k;
        LR_CHECK(lr, a[k][c - 1] == sum && shift[k][c - 1] == from && b[k][0] == max,
                 "round %d: sum %" PRId64 " (want %" PRId64 "), shifted %" PRId64 " (want %"
                 PRId64 "), max %" PRId64 " (want %" PRId64 ")", k, a[k][c - 1], sum,
                 shift[k][c - 1], from, b[k][0], max);
        free(a[k]);
        free(b[k]);
        free(shift[k]);
    }
    MUST(lr, collStreamDestroy(s), NULL);
}

static void body(struct launch_rank *lr)
{
    check_buckets(lr);
    check_every_collective(lr);
    check_chain(lr);
    check_alone(lr);
    if (lr->rank == 0)
        printf("test_overlap: %d ranks, %s: %s\n", lr->nranks,
               coll_comm_last_algo((const struct coll_comm *)lr->comm),
               lr->failures ? "FAILED" : "ok");
}

int main(int argc, char **argv)
{
    /* 4. As processes, odd ranks overlap nothing: their peers' overlap must not
     * show on the wire. */
    const char *rank = getenv("COLL_RANK");
    if (rank != NULL && atoi(rank) % 2 == 1 && getenv("COLL_STREAM_OVERLAP") == NULL)
        setenv("COLL_STREAM_OVERLAP", "1", 1);
    return launch_main(argc, argv, body, NULL);
}
