/*
 * A program written against nccl.h alone (no collective.h), run on libnccl.so.2
 * (compat/nccl) with host buffers, as NCCL programs are written:
 *
 *   collrun -n N test_nccl_api        ranks are processes; every rank calls
 *                                     ncclGetUniqueId (collrun's COLL_COMM_ID
 *                                     names the root, as NCCL_COMM_ID does)
 *   test_nccl_api --threads N         ncclCommInitAll, one thread per rank
 *
 * Each rank checks: the version, ncclCommInitRankConfig with a config (and one
 * not made by NCCL_CONFIG_INITIALIZER refused), count, rank and device; every
 * collective with exact results (allreduce, broadcast and ncclBcast, reduce,
 * allgather, reduce-scatter with ncclAvg, ncclAlltoAll, gather, scatter), a ring
 * of ncclSend/ncclRecv in a group, ncclCommSplit and a collective on the new
 * communicator, ncclCommGetUniqueId and ncclCommGrow (the last rank split off,
 * then taken back as a new rank), ncclCommRevoke, and the refusals: an fp8 type, ncclRedOpCreatePreMulSum, a NULL
 * buffer, each with a message from ncclGetLastError naming what was wrong.
 * Exits 0 when every check passed.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

#define COUNT 1000

struct rank_ctx {
    ncclComm_t comm;
    int rank, n, failures;
};

#define CHECK(x, ...)                                                       \
    do {                                                                    \
        if (!(x)) {                                                         \
            fprintf(stderr, "[rank %d] %s:%d: %s: ", c->rank, __FILE__,     \
                    __LINE__, #x);                                          \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            c->failures++;                                                  \
        }                                                                   \
    } while (0)

#define OK(call)                                                                         \
    do {                                                                                 \
        ncclResult_t r_ = (call);                                                        \
        CHECK(r_ == ncclSuccess, "%s (%s)", ncclGetErrorString(r_),                      \
              ncclGetLastError(c->comm));                                                \
    } while (0)

static void check_collectives(struct rank_ctx *c)
{
    int r = c->rank, n = c->n;
    float *f = malloc(COUNT * sizeof(float)), *g = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++)
        f[i] = (float)((r + 1) * (i % 7));
    OK(ncclAllReduce(f, g, COUNT, ncclFloat, ncclSum, c->comm, NULL));
    int bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += g[i] != (float)(n * (n + 1) / 2 * (i % 7));
    CHECK(bad == 0, "allreduce: %d wrong", bad);

    /* Broadcast from the last rank, out of place, then ncclBcast in place. */
    for (int i = 0; i < COUNT; i++)
        f[i] = r == n - 1 ? (float)i : -1.0f;
    OK(ncclBroadcast(f, g, COUNT, ncclFloat, n - 1, c->comm, NULL));
    bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += g[i] != (float)i;
    CHECK(bad == 0, "broadcast: %d wrong", bad);
    for (int i = 0; i < COUNT; i++)
        f[i] = r == 0 ? (float)(2 * i) : 0.0f;
    OK(ncclBcast(f, COUNT, ncclFloat, 0, c->comm, NULL));
    bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += f[i] != (float)(2 * i);
    CHECK(bad == 0, "bcast: %d wrong", bad);

    /* Reduce with max to rank 0. */
    int32_t *a = malloc((size_t)n * COUNT * sizeof(int32_t));
    int32_t *b = malloc((size_t)n * COUNT * sizeof(int32_t));
    for (int i = 0; i < COUNT; i++)
        a[i] = r * 1000 + i;
    OK(ncclReduce(a, b, COUNT, ncclInt32, ncclMax, 0, c->comm, NULL));
    if (r == 0) {
        bad = 0;
        for (int i = 0; i < COUNT; i++)
            bad += b[i] != (n - 1) * 1000 + i;
        CHECK(bad == 0, "reduce: %d wrong", bad);
    }

    /* Allgather: block k is rank k's. */
    OK(ncclAllGather(a, b, COUNT, ncclInt32, c->comm, NULL));
    bad = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < COUNT; i++)
            bad += b[(size_t)k * COUNT + i] != k * 1000 + i;
    CHECK(bad == 0, "allgather: %d wrong", bad);

    /* Reduce-scatter with ncclAvg on doubles: (1 + ... + n) / n is exact. */
    double *d = malloc((size_t)n * COUNT * sizeof(double)), e[COUNT];
    for (size_t i = 0; i < (size_t)n * COUNT; i++)
        d[i] = (double)(r + 1) * (double)(i % 5);
    OK(ncclReduceScatter(d, e, COUNT, ncclDouble, ncclAvg, c->comm, NULL));
    bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += e[i] != (n + 1) / 2.0 * (double)(((size_t)r * COUNT + i) % 5);
    CHECK(bad == 0, "reduce_scatter avg: %d wrong", bad);

    /* ncclAlltoAll: block j goes to rank j. */
    int64_t *s = malloc((size_t)n * COUNT * sizeof(int64_t));
    int64_t *t = malloc((size_t)n * COUNT * sizeof(int64_t));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < COUNT; i++)
            s[(size_t)j * COUNT + i] = (int64_t)r * 1000000 + j * 1000 + i;
    OK(ncclAlltoAll(s, t, COUNT, ncclInt64, c->comm, NULL));
    bad = 0;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < COUNT; i++)
            bad += t[(size_t)k * COUNT + i] != (int64_t)k * 1000000 + r * 1000 + i;
    CHECK(bad == 0, "alltoall: %d wrong", bad);

    /* Gather to rank 0, scatter from it. */
    OK(ncclGather(a, r == 0 ? b : NULL, COUNT, ncclInt32, 0, c->comm, NULL));
    if (r == 0) {
        bad = 0;
        for (int k = 0; k < n; k++)
            for (int i = 0; i < COUNT; i++)
                bad += b[(size_t)k * COUNT + i] != k * 1000 + i;
        CHECK(bad == 0, "gather: %d wrong", bad);
    }
    OK(ncclScatter(r == 0 ? b : NULL, a, COUNT, ncclInt32, 0, c->comm, NULL));
    bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += a[i] != r * 1000 + i;
    CHECK(bad == 0, "scatter: %d wrong", bad);

    /* A ring of sends and receives in a group. */
    int32_t out[COUNT], in[COUNT];
    for (int i = 0; i < COUNT; i++)
        out[i] = r * 7 + i;
    OK(ncclGroupStart());
    OK(ncclSend(out, COUNT, ncclInt32, (r + 1) % n, c->comm, NULL));
    OK(ncclRecv(in, COUNT, ncclInt32, (r - 1 + n) % n, c->comm, NULL));
    OK(ncclGroupEnd());
    bad = 0;
    for (int i = 0; i < COUNT; i++)
        bad += in[i] != ((r - 1 + n) % n) * 7 + i;
    CHECK(bad == 0, "send/recv ring: %d wrong", bad);
    free(f), free(g), free(a), free(b), free(d), free(s), free(t);
}

static void check_split(struct rank_ctx *c)
{
    ncclComm_t sub = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.commName = "nccl-split";
    /* Even and odd ranks, in reverse order of rank. */
    OK(ncclCommSplit(c->comm, c->rank % 2, -c->rank, &sub, &cfg));
    if (sub == NULL) {
        CHECK(0, "ncclCommSplit gave no communicator");
        return;
    }
    int count = -1, me = -1;
    OK(ncclCommCount(sub, &count));
    OK(ncclCommUserRank(sub, &me));
    int want = (c->n - c->rank % 2 + 1) / 2;
    CHECK(count == want, "split count %d, want %d", count, want);
    int below = 0; /* ranks of my color with a higher rank come first */
    for (int k = c->rank + 2; k < c->n; k += 2)
        below++;
    CHECK(me == below, "split rank %d, want %d", me, below);
    int one = 1, sum = 0;
    OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, sub, NULL));
    CHECK(sum == count, "allreduce on the split: %d, want %d", sum, count);
    OK(ncclCommDestroy(sub));
}

/* ncclCommGetUniqueId and ncclCommGrow: ranks 0..n-2 split off a communicator,
 * its rank 0 makes a grow id and hands it to the last rank over the full
 * communicator, and all grow it back to n ranks, the last one as a new rank. */
static void check_grow(struct rank_ctx *c)
{
    if (c->n < 2)
        return;
    ncclComm_t part = NULL, grown = NULL;
    bool old = c->rank < c->n - 1;
    OK(ncclCommSplit(c->comm, old ? 0 : NCCL_SPLIT_NOCOLOR, c->rank, &part, NULL));
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (c->rank == 0)
        OK(ncclCommGetUniqueId(part, &id));
    OK(ncclBroadcast(&id, &id, sizeof(id), ncclUint8, 0, c->comm, NULL));
    if (old)
        OK(ncclCommGrow(part, c->n, c->rank == 0 ? &id : NULL, -1, &grown, NULL));
    else
        OK(ncclCommGrow(NULL, c->n, &id, c->rank, &grown, NULL));
    if (grown == NULL) {
        CHECK(0, "ncclCommGrow gave no communicator");
        return;
    }
    int count = -1, me = -1, one = 1, sum = 0;
    OK(ncclCommCount(grown, &count));
    OK(ncclCommUserRank(grown, &me));
    CHECK(count == c->n && me == c->rank, "grown: rank %d of %d", me, count);
    OK(ncclAllReduce(&one, &sum, 1, ncclInt32, ncclSum, grown, NULL));
    CHECK(sum == c->n, "allreduce on the grown communicator: %d, want %d", sum, c->n);
    /* A rank of a communicator passes rank -1. */
    if (old) {
        ncclComm_t x = NULL;
        ncclResult_t r = ncclCommGrow(part, c->n, NULL, 0, &x, NULL);
        CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(part), "pass -1") != NULL,
              "rank 0 on a rank of the communicator: %s (%s)", ncclGetErrorString(r),
              ncclGetLastError(part));
        OK(ncclCommDestroy(part));
    }
    OK(ncclCommDestroy(grown));
}

/* ncclCommRevoke on a communicator of this rank alone: later calls fail at
 * once with the reason, a second revoke is a no-op, and it is destroyed. */
static void check_revoke(struct rank_ctx *c)
{
    ncclComm_t one = NULL;
    OK(ncclCommSplit(c->comm, c->rank, 0, &one, NULL));
    if (one == NULL)
        return;
    ncclResult_t r = ncclCommRevoke(one, 1);
    CHECK(r == ncclInvalidArgument, "revokeFlags 1: %s", ncclGetErrorString(r));
    OK(ncclCommRevoke(one, 0));
    int x = 1, y = 0;
    r = ncclAllReduce(&x, &y, 1, ncclInt32, ncclSum, one, NULL);
    CHECK(r != ncclSuccess && strstr(ncclGetLastError(one), "revoked") != NULL,
          "allreduce after revoke: %s (%s)", ncclGetErrorString(r), ncclGetLastError(one));
    OK(ncclCommRevoke(one, 0));
    OK(ncclCommDestroy(one));
}

static void check_refusals(struct rank_ctx *c)
{
    float x = 1, y;
    ncclResult_t r = ncclAllReduce(&x, &y, 1, ncclFloat8e4m3, ncclSum, c->comm, NULL);
    CHECK(r == ncclInvalidArgument, "fp8: %s", ncclGetErrorString(r));
    CHECK(strstr(ncclGetLastError(c->comm), "ncclFloat8e4m3") != NULL, "fp8 message: %s",
          ncclGetLastError(c->comm));
    ncclRedOp_t op;
    r = ncclRedOpCreatePreMulSum(&op, &x, ncclFloat, ncclScalarHostImmediate, c->comm);
    CHECK(r == ncclInvalidUsage, "premulsum: %s", ncclGetErrorString(r));
    CHECK(strstr(ncclGetLastError(c->comm), "ncclRedOpCreatePreMulSum") != NULL,
          "premulsum message: %s", ncclGetLastError(c->comm));
    r = ncclAllReduce(NULL, &y, 1, ncclFloat, ncclSum, c->comm, NULL);
    CHECK(r == ncclInvalidArgument, "NULL sendbuff: %s", ncclGetErrorString(r));
    CHECK(strstr(ncclGetLastError(c->comm), "sendbuff") != NULL, "NULL message: %s",
          ncclGetLastError(c->comm));
    /* Refused calls leave the communicator usable. */
    OK(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, c->comm, NULL));
    CHECK(y == (float)c->n, "allreduce after refusals: %g", (double)y);
    ncclResult_t async = ncclInternalError;
    OK(ncclCommGetAsyncError(c->comm, &async));
    CHECK(async == ncclSuccess, "async error %d", (int)async);
}

static void body(struct rank_ctx *c)
{
    int count = -1, rank = -1, dev = 0;
    OK(ncclCommCount(c->comm, &count));
    OK(ncclCommUserRank(c->comm, &rank));
    OK(ncclCommCuDevice(c->comm, &dev));
    CHECK(count == c->n && rank == c->rank, "count %d rank %d, want %d and %d", count, rank,
          c->n, c->rank);
    CHECK(dev == -1, "device %d without CUDA, want -1", dev);
    check_collectives(c);
    check_split(c);
    check_grow(c);
    check_revoke(c);
    check_refusals(c);
    OK(ncclCommFinalize(c->comm));
    OK(ncclCommDestroy(c->comm));
}

static void *thread_body(void *p)
{
    body(p);
    return NULL;
}

int main(int argc, char **argv)
{
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) {
        fprintf(stderr, "ncclGetVersion: %d, want %d\n", version, NCCL_VERSION_CODE);
        return 1;
    }
    int failures = 0;
    if (argc == 3 && strcmp(argv[1], "--threads") == 0) {
        int n = atoi(argv[2]);
        if (n < 1 || n > 64) {
            fprintf(stderr, "--threads: 1 to 64, not %s\n", argv[2]);
            return 2;
        }
        ncclComm_t comms[64];
        if (ncclCommInitAll(comms, n, NULL) != ncclSuccess) {
            fprintf(stderr, "ncclCommInitAll: %s\n", ncclGetLastError(NULL));
            return 1;
        }
        struct rank_ctx ctx[64];
        pthread_t th[64];
        for (int r = 0; r < n; r++) {
            ctx[r] = (struct rank_ctx){.comm = comms[r], .rank = r, .n = n};
            pthread_create(&th[r], NULL, thread_body, &ctx[r]);
        }
        for (int r = 0; r < n; r++) {
            pthread_join(th[r], NULL);
            failures += ctx[r].failures;
        }
        printf("test_nccl_api: %d threads, %d failure(s)\n", n, failures);
        return failures ? 1 : 0;
    }
    const char *rs = getenv("COLL_RANK"), *ns = getenv("COLL_NRANKS");
    if (rs == NULL || ns == NULL) {
        fprintf(stderr, "usage: collrun -n N test_nccl_api | test_nccl_api --threads N\n");
        return 2;
    }
    struct rank_ctx c0 = {.rank = atoi(rs), .n = atoi(ns)}, *c = &c0;
    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    /* A config not made by NCCL_CONFIG_INITIALIZER is refused, naming it. */
    ncclConfig_t bad;
    memset(&bad, 0, sizeof(bad));
    ncclComm_t none = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&none, c->n, id, c->rank, &bad);
    CHECK(r == ncclInvalidArgument && strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER"),
          "bad config: %s, %s", ncclGetErrorString(r), ncclGetLastError(NULL));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    cfg.commName = "nccl-test";
    OK(ncclCommInitRankConfig(&c->comm, c->n, id, c->rank, &cfg));
    if (c->comm != NULL)
        body(c);
    printf("test_nccl_api: rank %d of %d, %d failure(s)\n", c->rank, c->n, c->failures);
    return c->failures ? 1 : 0;
}
