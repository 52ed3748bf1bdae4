/*
 * Registered buffers in the data path (lib/engine/regcache.c; the verbs rendezvous,
 * transports/verbs/verbs.c), on every rank of a launch:
 *
 *   COLL_TRANSPORTS=verbs collrun -n 3 test_rdv      (tests/test_verbs.sh, in the VM)
 *   collrun -n 2 test_rdv                             (any transport: no handles)
 *
 * Checks, bit for bit, a ring exchange of collSend / collRecv in a group at sizes
 * around and above COLL_IB_RDV_BYTES (one below, at, one above, odd ones, one
 * past the device's largest message of 8 MiB on Soft-RoCE), for every pair of
 * buffer kinds on the two sides: ordinary memory, collMemAlloc memory, memory
 * given to collCommRegister.  Then three messages to one peer in one group
 * (registered, ordinary, registered into an ordinary receive), so announced
 * and streamed messages interleave on one connection; buffers freed and
 * allocated again between calls (collMemFree + collMemAlloc, and
 * collCommDeregister + free + malloc + collCommRegister), whose new bytes must
 * arrive and land where the new buffer is; exchanges queued on a stream while
 * the thread registers more memory; and a ring allgather and broadcast
 * (COLL_ALGO=ring) into collMemAlloc and ordinary buffers.  With
 * COLL_TRANSPORTS=verbs the registration cache must have registered memory;
 * over other transports it must not have.
 */
#include <stdint.h>

#include "launch.h"
#include "regcache.h"

enum kind { K_PLAIN, K_MEM, K_USER, K_COUNT };
static const char *const kind_name[K_COUNT] = {"plain", "collMemAlloc", "collCommRegister"};

struct buf {
    enum kind kind;
    uint8_t *p;
    size_t bytes;
    void *handle;
};

static void buf_get(struct launch_rank *lr, struct buf *b, enum kind k, size_t bytes)
{
    *b = (struct buf){.kind = k, .bytes = bytes};
    if (k == K_MEM) {
        if (collMemAlloc((void **)&b->p, bytes) != collSuccess)
            launch_fatal(lr, "collMemAlloc(%zu): %s", bytes, collGetLastError(NULL));
        return;
    }
    b->p = malloc(bytes);
    if (b->p == NULL)
        launch_fatal(lr, "malloc(%zu) failed", bytes);
    if (k == K_USER && collCommRegister(lr->comm, b->p, bytes, &b->handle) != collSuccess)
        launch_fatal(lr, "collCommRegister: %s", collGetLastError(lr->comm));
}

static void buf_put(struct launch_rank *lr, struct buf *b)
{
    if (b->kind == K_MEM) {
        LR_CHECK_RES(lr, collMemFree(b->p), collSuccess, NULL);
        return;
    }
    if (b->kind == K_USER)
        LR_CHECK_RES(lr, collCommDeregister(lr->comm, b->handle), collSuccess, lr->comm);
    free(b->p);
}

static uint8_t pattern(int src, size_t i, int tag)
{
    return (uint8_t)((size_t)src * 131u + i * 7u + (size_t)tag * 17u + (i >> 9));
}

static void fill(uint8_t *p, size_t bytes, int src, int tag)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = pattern(src, i, tag);
}

/* The first wrong byte of what src sent with tag, or -1. */
static long first_wrong(const uint8_t *p, size_t bytes, int src, int tag)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != pattern(src, i, tag))
            return (long)i;
    return -1;
}

/* Rank r sends `bytes` to r+1 from a buffer of kind sk and receives from r-1
 * into one of kind rk, in one group. */
static void ring_exchange(struct launch_rank *lr, struct buf *s, struct buf *r, size_t bytes,
                          int tag, const char *what)
{
    int n = lr->nranks, me = lr->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    fill(s->p, bytes, me, tag);
    memset(r->p, 0, bytes);
    LR_CHECK_RES(lr, collGroupStart(), collSuccess, lr->comm);
    LR_CHECK_RES(lr, collSend(s->p, bytes, collUint8, next, lr->comm, NULL), collSuccess,
                 lr->comm);
    LR_CHECK_RES(lr, collRecv(r->p, bytes, collUint8, prev, lr->comm, NULL), collSuccess,
                 lr->comm);
    LR_CHECK_RES(lr, collGroupEnd(), collSuccess, lr->comm);
    long w = first_wrong(r->p, bytes, prev, tag);
    LR_CHECK(lr, w < 0, "%s, %zu bytes from %s into %s: byte %ld is %u, want %u", what, bytes,
             kind_name[s->kind], kind_name[r->kind], w, w < 0 ? 0 : r->p[w],
             w < 0 ? 0 : pattern(prev, (size_t)w, tag));
}

static size_t rdv_bytes(void)
{
    const char *v = getenv("COLL_IB_RDV_BYTES");
    long t = v ? atol(v) : 131072;
    return t > 64 ? (size_t)t : 131072;
}

static void test_sizes(struct launch_rank *lr)
{
    size_t t = rdv_bytes();
    const size_t sizes[] = {t - 1, t, t + 1, t + 4093, 3 * t + 7, (1u << 20) + 3,
                            (9u << 20) + 5};
    int tag = 0;
    for (int sk = 0; sk < K_COUNT; sk++)
        for (int rk = 0; rk < K_COUNT; rk++)
            for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                /* The largest size once per pair of kinds is enough. */
                if (sizes[i] > (2u << 20) && !(sk == rk || sk == K_PLAIN || rk == K_PLAIN))
                    continue;
                struct buf s, r;
                buf_get(lr, &s, (enum kind)sk, sizes[i]);
                buf_get(lr, &r, (enum kind)rk, sizes[i]);
                ring_exchange(lr, &s, &r, sizes[i], ++tag, "ring exchange");
                buf_put(lr, &s);
                buf_put(lr, &r);
            }
}

/* Three messages to one peer in one group: announced, streamed, announced into
 * a receive that declines it. */
static void test_interleave(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t big = 3 * rdv_bytes() + 11, small = 1000;
    struct buf s[3], r[3];
    buf_get(lr, &s[0], K_MEM, big);
    buf_get(lr, &s[1], K_PLAIN, small);
    buf_get(lr, &s[2], K_USER, big);
    buf_get(lr, &r[0], K_USER, big);
    buf_get(lr, &r[1], K_MEM, small);
    buf_get(lr, &r[2], K_PLAIN, big);
    size_t len[3] = {big, small, big};
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 3; k++) {
            fill(s[k].p, len[k], me, 100 + 3 * round + k);
            memset(r[k].p, 0, len[k]);
        }
        LR_CHECK_RES(lr, collGroupStart(), collSuccess, lr->comm);
        for (int k = 0; k < 3; k++) {
            LR_CHECK_RES(lr, collSend(s[k].p, len[k], collUint8, next, lr->comm, NULL),
                         collSuccess, lr->comm);
            LR_CHECK_RES(lr, collRecv(r[k].p, len[k], collUint8, prev, lr->comm, NULL),
                         collSuccess, lr->comm);
        }
        LR_CHECK_RES(lr, collGroupEnd(), collSuccess, lr->comm);
        for (int k = 0; k < 3; k++) {
            long w = first_wrong(r[k].p, len[k], prev, 100 + 3 * round + k);
            LR_CHECK(lr, w < 0, "interleaved message %d of round %d: byte %ld wrong", k, round,
                     w);
        }
    }
    for (int k = 0; k < 3; k++) {
        buf_put(lr, &s[k]);
        buf_put(lr, &r[k]);
    }
}

/* Buffers freed and allocated again between calls, on both sides: the new
 * buffer's bytes go, and land in the new buffer, whatever the address. */
static void test_realloc(struct launch_rank *lr)
{
    size_t bytes = (1u << 20) + 77;
    for (int k = K_MEM; k <= K_USER; k++) {
        struct buf s, r;
        buf_get(lr, &s, (enum kind)k, bytes);
        buf_get(lr, &r, (enum kind)k, bytes);
        int same = 0;
        for (int round = 0; round < 4; round++) {
            ring_exchange(lr, &s, &r, bytes, 200 + 4 * k + round, "after reallocation");
            uint8_t *sp = s.p, *rp = r.p;
            buf_put(lr, &s);
            buf_put(lr, &r);
            buf_get(lr, &s, (enum kind)k, bytes);
            buf_get(lr, &r, (enum kind)k, bytes);
            same += s.p == sp || r.p == rp;
        }
        if (lr->rank == 0)
            printf("  %s: reallocated buffers at the same address in %d of 4 rounds\n",
                   kind_name[k], same);
        buf_put(lr, &s);
        buf_put(lr, &r);
    }
}

static void test_collectives(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank;
    size_t counts[] = {rdv_bytes() / 4 + 1, (1u << 20) / 4 + 3, 3u << 18};
    for (int k = K_PLAIN; k <= K_MEM; k++)
        for (size_t c = 0; c < 3; c++) {
            size_t count = counts[c], bytes = count * 4 * (size_t)n;
            struct buf in, out;
            buf_get(lr, &in, K_PLAIN, count * 4);
            buf_get(lr, &out, (enum kind)k, bytes);
            int32_t *iv = (int32_t *)in.p, *ov = (int32_t *)out.p;
            for (size_t i = 0; i < count; i++)
                iv[i] = (int32_t)(me * 1000003 + (int)i);
            memset(out.p, 0xff, bytes);
            LR_CHECK_RES(lr, collAllGather(in.p, out.p, count, collInt32, lr->comm, NULL),
                         collSuccess, lr->comm);
            long bad = -1;
            for (size_t i = 0; i < count * (size_t)n && bad < 0; i++)
                if (ov[i] != (int32_t)((int)(i / count) * 1000003 + (int)(i % count)))
                    bad = (long)i;
            LR_CHECK(lr, bad < 0, "allgather of %zu into %s: element %ld wrong", count,
                     kind_name[k], bad);
            /* Broadcast from the last rank into the whole output. */
            size_t bc = count * (size_t)n;
            if (me == n - 1)
                for (size_t i = 0; i < bc; i++)
                    ov[i] = (int32_t)(i * 3 + 1);
            else
                memset(out.p, 0, bytes);
            LR_CHECK_RES(lr, collBroadcast(out.p, out.p, bc, collInt32, n - 1, lr->comm, NULL),
                         collSuccess, lr->comm);
            bad = -1;
            for (size_t i = 0; i < bc && bad < 0; i++)
                if (ov[i] != (int32_t)(i * 3 + 1))
                    bad = (long)i;
            LR_CHECK(lr, bad < 0, "broadcast of %zu into %s: element %ld wrong", bc,
                     kind_name[k], bad);
            buf_put(lr, &in);
            buf_put(lr, &out);
        }
}

/* Exchanges queued on a stream use the cache on the comm's progress thread
 * while this thread registers and deregisters: the registration calls wait
 * for the queue (a data race otherwise: the ThreadSanitizer pass sees it). */
static void test_stream(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t bytes = 2 * rdv_bytes() + 5;
    struct buf s, r, extra;
    buf_get(lr, &s, K_MEM, bytes);
    buf_get(lr, &r, K_USER, bytes);
    collStream_t st;
    LR_CHECK_RES(lr, collStreamCreate(&st), collSuccess, NULL);
    for (int round = 0; round < 3; round++) {
        fill(s.p, bytes, me, 300 + round);
        memset(r.p, 0, bytes);
        LR_CHECK_RES(lr, collGroupStart(), collSuccess, lr->comm);
        LR_CHECK_RES(lr, collSend(s.p, bytes, collUint8, next, lr->comm, st), collSuccess,
                     lr->comm);
        LR_CHECK_RES(lr, collRecv(r.p, bytes, collUint8, prev, lr->comm, st), collSuccess,
                     lr->comm);
        LR_CHECK_RES(lr, collGroupEnd(), collSuccess, lr->comm);
        buf_get(lr, &extra, K_USER, 4096); /* while the exchange may be queued */
        buf_put(lr, &extra);
        LR_CHECK_RES(lr, collStreamSynchronize(st), collSuccess, lr->comm);
        long w = first_wrong(r.p, bytes, prev, 300 + round);
        LR_CHECK(lr, w < 0, "exchange on a stream, round %d: byte %ld wrong", round, w);
    }
    LR_CHECK_RES(lr, collStreamDestroy(st), collSuccess, NULL);
    buf_put(lr, &s);
    buf_put(lr, &r);
}

static void body(struct launch_rank *lr)
{
    test_sizes(lr);
    test_stream(lr);
    test_interleave(lr);
    test_realloc(lr);
    test_collectives(lr);
    struct coll_regcache *rc;
    struct coll_regcache_stats st = {0};
    if (coll_comm_regcache(lr->comm, &rc) == collSuccess)
        coll_regcache_stats(rc, &st);
    const char *tps = getenv("COLL_TRANSPORTS");
    bool verbs = tps != NULL && strcmp(tps, "verbs") == 0;
    if (lr->nranks > 1)
        LR_CHECK(lr, verbs ? st.regs > 0 : st.regs == 0,
                 "%llu registrations over %s", (unsigned long long)st.regs,
                 tps ? tps : "the default transports");
    /* Every registration still held is an entry (entries without one are
     * failed registrations). */
    LR_CHECK(lr, st.regs - st.deregs <= st.entries,
             "registrations held: %llu made, %llu released, %zu entries",
             (unsigned long long)st.regs, (unsigned long long)st.deregs, st.entries);
    if (lr->rank == 0)
        printf("rank 0: cache: %llu hits, %llu misses, %llu unknown, %llu registrations, %llu "
               "released (%llu evicted, %llu invalidated), %zu held\n",
               (unsigned long long)st.hits, (unsigned long long)st.misses,
               (unsigned long long)st.unknown, (unsigned long long)st.regs,
               (unsigned long long)st.deregs, (unsigned long long)st.evictions,
               (unsigned long long)st.invalidations, st.entries);
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, body, NULL);
}
