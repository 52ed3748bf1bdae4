/*
 * Device buffers on CUDA streams (lib/core/device.c), against the stand-in CUDA
 * driver (tests/device_fake.c on tests/fake_cuda.c: device memory the host
 * cannot touch, streams as threads, the tests' kernels as host functions on a
 * stream), or built with tests/gpu/device_cuda.c against a real GPU (suite gpu):
 *
 *   1. allreduce of every type x op from device buffers: bitwise the result of
 *      the same call on host buffers;
 *   2. every other call with device buffers: broadcast, reduce (a non-root's
 *      recvbuff is left as it was), allgather out of place and in place,
 *      reduce-scatter, all-to-all, gather, scatter, send/recv in a group;
 *   3. stream order, not host order: the call returns while the stream is held
 *      behind a gate, the kernel that writes its input runs after the call
 *      returned, and a kernel after it sees the result;
 *   4. 16 in-place allreduces chained on one buffer back to back, then one
 *      read; CUDA's default stream (NULL);
 *   5. ranks with device buffers beside ranks with host buffers;
 *   6. refusals: a collStream_t with device buffers, a buffer that runs past
 *      its allocation;
 *   7. after the communicators are destroyed, no pinned staging is left (the
 *      stand-in driver counts it); with COLL_DEVICE_STAGE_KEEP=0, staging of
 *      calls done is freed when a larger call needs more (as processes);
 *   8. (--kill, as 2 processes) rank 1 dies after init while rank 0 has device
 *      allreduces in flight on its stream: the stream still completes within
 *      the timeout, collCommGetAsyncError reports the failure and the last
 *      error names rank 1, and the communicator is destroyed.
 *
 *   9. (--abort, as 2 processes) both ranks' streams are held behind a gate
 *      with a device allreduce queued after it; rank 0 aborts its communicator:
 *      the abort returns at once, and once the gates open both streams
 *      complete (rank 1's call fails on hearing of the abort), neither hangs.
 *
 *   collrun -n 3 test_device      test_device --threads 4
 *   collrun -n 2 test_device --kill     collrun -n 2 test_device --abort
 * Exits 77 when the backend has no device (a real build without a GPU).
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device_backend.h"
#include "launch.h"

#define MUST LR_MUST

static const size_t type_size[collNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

static void fill_random(void *p, size_t bytes, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < bytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ((unsigned char *)p)[i] = (unsigned char)x;
    }
}

/* 1. */
static void every_type_op(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    const size_t count = 1031;
    void *din = tdev_malloc(count * 8), *dout = tdev_malloc(count * 8);
    unsigned char *in = malloc(count * 8), *got = malloc(count * 8), *ref = malloc(count * 8);
    LR_CHECK(lr, din && dout && in && got && ref, "allocations");
    for (int t = 0; t < collNumTypes; t++) {
        for (int op = 0; op < collNumOps; op++) {
            size_t bytes = count * type_size[t];
            fill_random(in, bytes, (uint64_t)(lr->rank * 100 + t * 10 + op));
            tdev_to_dev(s, din, in, bytes);
            MUST(lr, collAllReduce(din, dout, count, (collDataType_t)t, (collRedOp_t)op, comm, s),
                 comm);
            tdev_to_host(s, got, dout, bytes);
            tdev_stream_sync(s);
            MUST(lr, collAllReduce(in, ref, count, (collDataType_t)t, (collRedOp_t)op, comm, NULL),
                 comm);
            LR_CHECK(lr, memcmp(got, ref, bytes) == 0,
                     "allreduce type %d op %d: device result differs from the host's", t, op);
        }
    }
    free(in);
    free(got);
    free(ref);
}

/* Device buffer of n int32 set to f(i) through a kernel on s. */
static int32_t *dev_ints(void *s, size_t n, int32_t base)
{
    int32_t *d = tdev_malloc(n > 0 ? n * 4 : 4);
    int32_t *h = malloc(n > 0 ? n * 4 : 4);
    for (size_t i = 0; i < n; i++)
        h[i] = base + (int32_t)i;
    tdev_to_dev(s, d, h, n * 4);
    tdev_stream_sync(s); /* h is the kernel's source */
    free(h);
    return d;
}

/* The n int32 of device buffer d, read by a kernel on s after what is queued. */
static int32_t *dev_read(void *s, const int32_t *d, size_t n)
{
    int32_t *h = malloc(n > 0 ? n * 4 : 4);
    tdev_to_host(s, h, d, n * 4);
    tdev_stream_sync(s);
    return h;
}

static int count_bad(const int32_t *h, size_t n, int32_t (*want)(size_t i, const void *ctx),
                     const void *ctx)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += h[i] != want(i, ctx);
    return bad;
}

struct want_ctx {
    int rank, nranks, root;
    size_t count;
};

static int32_t want_sum(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    int32_t s = 0;
    for (int r = 0; r < c->nranks; r++)
        s += r * 1000 + (int32_t)i;
    return s;
}
static int32_t want_root(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    return c->root * 1000 + (int32_t)i;
}
static int32_t want_gathered(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    return (int32_t)(i / c->count) * 1000 + (int32_t)(i % c->count);
}
static int32_t want_sentinel(size_t i, const void *p)
{
    (void)p;
    return -7 - (int32_t)i;
}
static int32_t want_rs(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    int32_t s = 0;
    for (int r = 0; r < c->nranks; r++)
        s += r * 1000 + (int32_t)(c->rank * c->count + i);
    return s;
}
/* All-to-all: block j of rank r's input holds r * 1000 + j * count + k; rank r
 * receives block r of every rank j. */
static int32_t want_a2a(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    size_t j = i / c->count, k = i % c->count;
    return (int32_t)j * 1000 + (int32_t)(c->rank * c->count + k);
}
static int32_t want_scatter(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    return c->root * 1000 + (int32_t)(c->rank * c->count + i);
}
static int32_t want_left(size_t i, const void *p)
{
    const struct want_ctx *c = p;
    return ((c->rank + c->nranks - 1) % c->nranks) * 1000 + (int32_t)i;
}

/* 2. */
static void every_call(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    int r = lr->rank, n = lr->nranks;
    const size_t c = 777, nc = c * (size_t)n;
    struct want_ctx w = {r, n, n - 1, c};
    int32_t *in = dev_ints(s, c, r * 1000), *out = tdev_malloc(nc * 4), *h;

    MUST(lr, collAllReduce(in, out, c, collInt32, collSum, comm, s), comm);
    h = dev_read(s, out, c);
    LR_CHECK(lr, count_bad(h, c, want_sum, &w) == 0, "allreduce");
    free(h);
    /* No elements: nothing to stage, the stream is still CUDA's. */
    MUST(lr, collAllReduce(in, out, 0, collInt32, collSum, comm, s), comm);
    MUST(lr, collAllGather(in, out, 0, collInt32, comm, s), comm);

    int32_t *b = dev_ints(s, c, r * 1000);
    MUST(lr, collBroadcast(b, b, c, collInt32, n - 1, comm, s), comm);
    h = dev_read(s, b, c);
    LR_CHECK(lr, count_bad(h, c, want_root, &w) == 0, "broadcast in place from %d", n - 1);
    free(h);

    int32_t *red = dev_ints(s, c, -7), *sent = malloc(c * 4);
    for (size_t i = 0; i < c; i++)
        sent[i] = -7 - (int32_t)i;
    tdev_to_dev(s, red, sent, c * 4);
    MUST(lr, collReduce(in, red, c, collInt32, collSum, 0, comm, s), comm);
    h = dev_read(s, red, c);
    if (r == 0)
        LR_CHECK(lr, count_bad(h, c, want_sum, &w) == 0, "reduce at the root");
    else
        LR_CHECK(lr, count_bad(h, c, want_sentinel, &w) == 0,
                 "reduce: a non-root's recvbuff was written");
    free(h);

    MUST(lr, collAllGather(in, out, c, collInt32, comm, s), comm);
    h = dev_read(s, out, nc);
    LR_CHECK(lr, count_bad(h, nc, want_gathered, &w) == 0, "allgather");
    free(h);
    int32_t *ag = tdev_malloc(nc * 4);
    int32_t *mine = dev_read(s, in, c);
    tdev_to_dev(s, ag + (size_t)r * c, mine, c * 4);
    MUST(lr, collAllGather(ag + (size_t)r * c, ag, c, collInt32, comm, s), comm);
    h = dev_read(s, ag, nc);
    LR_CHECK(lr, count_bad(h, nc, want_gathered, &w) == 0, "allgather in place");
    free(h);
    free(mine);

    int32_t *rsin = dev_ints(s, nc, r * 1000);
    MUST(lr, collReduceScatter(rsin, out, c, collInt32, collSum, comm, s), comm);
    h = dev_read(s, out, c);
    LR_CHECK(lr, count_bad(h, c, want_rs, &w) == 0, "reduce-scatter");
    free(h);

    MUST(lr, collAlltoAll(rsin, out, c, collInt32, comm, s), comm);
    h = dev_read(s, out, nc);
    LR_CHECK(lr, count_bad(h, nc, want_a2a, &w) == 0, "all-to-all");
    free(h);

    int32_t *g = r == n - 1 ? tdev_malloc(nc * 4) : NULL;
    MUST(lr, collGather(in, g, c, collInt32, n - 1, comm, s), comm);
    if (r == n - 1) {
        h = dev_read(s, g, nc);
        LR_CHECK(lr, count_bad(h, nc, want_gathered, &w) == 0, "gather at the root");
        free(h);
    }
    MUST(lr, collScatter(rsin, out, c, collInt32, n - 1, comm, s), comm);
    h = dev_read(s, out, c);
    LR_CHECK(lr, count_bad(h, c, want_scatter, &w) == 0, "scatter");
    free(h);

    MUST(lr, collGroupStart(), comm);
    MUST(lr, collSend(in, c, collInt32, (r + 1) % n, comm, s), comm);
    MUST(lr, collRecv(out, c, collInt32, (r + n - 1) % n, comm, s), comm);
    MUST(lr, collGroupEnd(), comm);
    h = dev_read(s, out, c);
    LR_CHECK(lr, count_bad(h, c, want_left, &w) == 0, "send/recv ring in a group");
    free(h);
    free(sent);
}

/* 3. */
static void stream_order(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    const size_t c = 4096;
    int32_t *d = tdev_malloc(c * 4), *src = malloc(c * 4);
    for (size_t i = 0; i < c; i++)
        src[i] = lr->rank * 1000 + (int32_t)i;
    struct want_ctx w = {lr->rank, lr->nranks, 0, c};
    atomic_int open = 0;
    /* The input is written by a copy held behind the gate: a call that read it
     * when issued instead of in stream order would sum zeros. */
    tdev_gate(s, &open);
    tdev_to_dev(s, d, src, c * 4);
    double t0 = launch_now();
    MUST(lr, collAllReduce(d, d, c, collInt32, collSum, comm, s), comm);
    double took = launch_now() - t0;
    LR_CHECK(lr, took < 10.0, "the call waited %.1f s for its CUDA stream", took);
    atomic_store(&open, 1);
    int32_t *h = dev_read(s, d, c);
    LR_CHECK(lr, count_bad(h, c, want_sum, &w) == 0, "allreduce issued behind a held stream");
    free(h);
    free(src);
}

/* 4. */
static void chain_and_default(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    const size_t c = 300;
    int64_t *d = tdev_malloc(c * 8), *h = malloc(c * 8);
    for (size_t i = 0; i < c; i++)
        h[i] = 1;
    tdev_to_dev(s, d, h, c * 8);
    for (int k = 0; k < 16; k++)
        MUST(lr, collAllReduce(d, d, c, collInt64, collSum, comm, s), comm);
    tdev_to_host(s, h, d, c * 8);
    tdev_stream_sync(s);
    int64_t want = 1;
    for (int k = 0; k < 16; k++)
        want *= lr->nranks;
    int bad = 0;
    for (size_t i = 0; i < c; i++)
        bad += h[i] != want;
    LR_CHECK(lr, bad == 0, "16 chained in-place allreduces: %d of %zu wrong (want %lld, got %lld)",
             bad, c, (long long)want, (long long)h[0]);
    free(h);

    /* Ranks that are threads of one process cannot all wait on the one default
     * stream (each one's call would hold the stream for the others', as on a
     * GPU): there, rank 0 alone takes it. */
    void *def = !lr->threads || lr->rank == 0 ? NULL : s;
    struct want_ctx w = {lr->rank, lr->nranks, 0, c};
    int32_t *in = dev_ints(def, c, lr->rank * 1000), *out = tdev_malloc(c * 4);
    MUST(lr, collAllReduce(in, out, c, collInt32, collSum, comm, def), comm);
    int32_t *hh = dev_read(def, out, c);
    LR_CHECK(lr, count_bad(hh, c, want_sum, &w) == 0, "allreduce on CUDA's default stream");
    free(hh);
}

/* 5. */
static void mixed(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    const size_t c = 5000;
    struct want_ctx w = {lr->rank, lr->nranks, 0, c};
    if (lr->rank % 2 == 0) {
        int32_t *in = dev_ints(s, c, lr->rank * 1000);
        MUST(lr, collAllReduce(in, in, c, collInt32, collSum, comm, s), comm);
        int32_t *h = dev_read(s, in, c);
        LR_CHECK(lr, count_bad(h, c, want_sum, &w) == 0, "allreduce, device beside host");
        free(h);
    } else {
        int32_t *h = malloc(c * 4);
        for (size_t i = 0; i < c; i++)
            h[i] = lr->rank * 1000 + (int32_t)i;
        MUST(lr, collAllReduce(h, h, c, collInt32, collSum, comm, NULL), comm);
        LR_CHECK(lr, count_bad(h, c, want_sum, &w) == 0, "allreduce, host beside device");
        free(h);
    }
}

/* 6. */
static void refusals(struct launch_rank *lr, void *s)
{
    collComm_t comm = lr->comm;
    int32_t *d = tdev_malloc(100 * 4);
    collStream_t cs;
    MUST(lr, collStreamCreate(&cs), comm);
    LR_CHECK_RES(lr, collAllReduce(d, d, 100, collInt32, collSum, comm, cs), collInvalidArgument,
                 comm);
    LR_CHECK(lr, strstr(collGetLastError(comm), "stream") != NULL &&
             strstr(collGetLastError(comm), "cudaStream_t") != NULL,
             "the refusal of a collStream_t names the stream: '%s'", collGetLastError(comm));
    MUST(lr, collStreamDestroy(cs), comm);
    LR_CHECK_RES(lr, collAllReduce(d, d, 101, collInt32, collSum, comm, NULL), collInvalidArgument,
                 comm);
    LR_CHECK(lr, strstr(collGetLastError(comm), "sendbuff") != NULL,
             "the refusal of a short buffer names it: '%s'", collGetLastError(comm));
    LR_CHECK_RES(lr, collSend(d + 50, 51, collInt32, 0, comm, NULL), collInvalidArgument, comm);
    /* The refusals left comm usable. */
    MUST(lr, collAllReduce(d, d, 100, collInt32, collSum, comm, s), comm);
    tdev_stream_sync(s);
}

/* 7, with COLL_DEVICE_STAGE_KEEP=0 and one rank per process: 8 calls in flight
 * at once hold 36 MiB of staging; a 16 MiB call after them frees it. */
static void stage_keep(struct launch_rank *lr, void *s)
{
    const char *keep = getenv("COLL_DEVICE_STAGE_KEEP");
    if (lr->threads || keep == NULL || strcmp(keep, "0") != 0 || tdev_pinned_bytes() < 0)
        return;
    collComm_t comm = lr->comm;
    const size_t mib = 1 << 20;
    char *d = tdev_malloc(16 * mib);
    /* Behind a gate, so that all 8 are in flight at once, each with its staging. */
    atomic_int open = 0;
    tdev_gate(s, &open);
    for (int k = 1; k <= 8; k++)
        MUST(lr, collAllReduce(d, d + mib, (size_t)k * mib / 4, collFloat, collSum, comm, s),
             comm);
    atomic_store(&open, 1);
    tdev_stream_sync(s);
    long held = tdev_pinned_bytes();
    MUST(lr, collAllReduce(d, d, 16 * mib / 4, collFloat, collSum, comm, s), comm);
    tdev_stream_sync(s);
    long after = tdev_pinned_bytes();
    LR_CHECK(lr, held >= (long)(36 * mib) && after <= (long)(17 * mib),
             "staging: %ld bytes pinned after 8 calls in flight, %ld after a 16 MiB one (want "
             "at most 17 MiB with COLL_DEVICE_STAGE_KEEP=0)", held, after);
}

static void body(struct launch_rank *lr)
{
    void *s = tdev_stream_create();
    every_type_op(lr, s);
    every_call(lr, s);
    stream_order(lr, s);
    chain_and_default(lr, s);
    mixed(lr, s);
    refusals(lr, s);
    stage_keep(lr, s);
}

/* 8. */
static int kill_main(void)
{
    const char *rs = getenv("COLL_RANK");
    collComm_t comm;
    if (rs == NULL || collCommInitFromEnv(&comm) != collSuccess) {
        fprintf(stderr, "--kill: run as 2 processes under collrun\n");
        return 2;
    }
    if (atoi(rs) == 1)
        _exit(0); /* dies without a word: its connections close */
    void *s = tdev_stream_create();
    const size_t c = 1 << 16;
    int32_t *d = tdev_malloc(c * 4);
    double t0 = launch_now();
    for (int k = 0; k < 4; k++)
        if (collAllReduce(d, d, c, collInt32, collSum, comm, s) != collSuccess)
            break; /* a later call may be refused at once on the poisoned comm */
    tdev_stream_sync(s);
    double took = launch_now() - t0;
    collResult_t async = collSuccess;
    int bad = 0;
    if (collCommGetAsyncError(comm, &async) != collSuccess || async == collSuccess) {
        fprintf(stderr, "FAIL: no asynchronous error after the peer died\n");
        bad++;
    }
    const char *msg = collGetLastError(comm);
    if (strstr(msg, "rank 1") == NULL) {
        fprintf(stderr, "FAIL: the error does not name rank 1: '%s'\n", msg);
        bad++;
    }
    if (took > 20.0) {
        fprintf(stderr, "FAIL: the stream took %.1f s to complete after the death\n", took);
        bad++;
    }
    printf("rank 0: the stream completed %.2f s after the peer's death: %s\n", took, msg);
    if (collCommDestroy(comm) != collSuccess) {
        fprintf(stderr, "FAIL: collCommDestroy after the failure\n");
        bad++;
    }
    return bad ? 1 : 0;
}

/* 9. */
static int abort_main(void)
{
    const char *rs = getenv("COLL_RANK");
    collComm_t comm;
    if (rs == NULL || collCommInitFromEnv(&comm) != collSuccess) {
        fprintf(stderr, "--abort: run as 2 processes under collrun\n");
        return 2;
    }
    int rank = atoi(rs), bad = 0;
    void *s = tdev_stream_create();
    const size_t c = 1 << 14;
    int32_t *d = tdev_malloc(c * 4);
    atomic_int open = 0;
    tdev_gate(s, &open);
    if (collAllReduce(d, d, c, collInt32, collSum, comm, s) != collSuccess) {
        fprintf(stderr, "FAIL: rank %d: the device allreduce was refused\n", rank);
        return 1;
    }
    double t0 = launch_now();
    if (rank == 0) {
        usleep(300000);
        collCommAbort(comm);
        double took = launch_now() - t0 - 0.3;
        if (took > 2.0) {
            fprintf(stderr, "FAIL: collCommAbort took %.1f s with a call waiting on its "
                    "stream\n", took);
            bad++;
        }
    } else {
        usleep(1000000);
    }
    atomic_store(&open, 1);
    tdev_stream_sync(s);
    double took = launch_now() - t0;
    if (took > 15.0) {
        fprintf(stderr, "FAIL: rank %d: the stream completed %.1f s after the gate opened\n",
                rank, took);
        bad++;
    }
    if (rank == 1) {
        collResult_t async = collSuccess;
        if (collCommGetAsyncError(comm, &async) != collSuccess || async == collSuccess) {
            fprintf(stderr, "FAIL: rank 1: no asynchronous error after rank 0 aborted\n");
            bad++;
        }
        printf("rank 1: %s\n", collGetLastError(comm));
        collCommDestroy(comm);
    }
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    int res = tdev_init();
    if (res != 0)
        return res;
    if (argc == 2 && strcmp(argv[1], "--kill") == 0)
        return kill_main();
    if (argc == 2 && strcmp(argv[1], "--abort") == 0)
        return abort_main();
    res = launch_main(argc, argv, body, NULL);
    long live = tdev_pinned_live();
    if (live > 0) {
        fprintf(stderr, "FAIL: %ld pinned staging blocks left after the communicators were "
                "destroyed\n", live);
        res = 1;
    }
    return res;
}
