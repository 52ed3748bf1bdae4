/*
 * collSend, collRecv, groups, collAllToAll, collGather and collScatter, on every
 * rank of a launch:
 *
 *   collrun -n 4 --timeout 120 test_p2p      or      test_p2p --threads 5
 *
 * Checks, bit for bit: a ring exchange in a group; an all-to-all written with
 * sends and receives in one group (deadlock-free for any n); collAllToAll for
 * every type at counts 0, 1, 1000 and 100003, out of place and in place;
 * collGather and collScatter from the first and the last root at the same
 * counts (every third type), and both inside an open group with a ring
 * exchange, a nested group and a collective; several messages to one peer
 * arriving in order; messages to the rank itself; a collective queued in a
 * group with sends and receives; a group spanning two communicators (and one
 * that times out on one of them, leaving the other usable); the
 * collCommGetBytes counters around sends, groups, collectives and a split
 * (test_bytes; exact for the ring allreduce, which COLL_ALGO=allreduce:ring
 * pins in the p2p-ring-* registrations); the refused calls (peer or root out
 * of range, NULL buffer, stream, unbalanced collGroupEnd, a refused call inside
 * a group) leaving the comm usable.  Last, because it poisons the comm: rank 0
 * sends 1000 floats that rank 1 receives as 500; both must fail within seconds,
 * with the receive buffer's guard bytes intact.
 */
#include <stdint.h>

#include "launch.h"

#define GUARD_BYTES 64
#define GUARD 0xA5

static const size_t type_size[collNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* The byte at index i of the message that src sends to dst with this tag. */
static uint8_t pattern(int src, int dst, size_t i, int tag)
{
    return (uint8_t)((size_t)src * 131u + (size_t)dst * 29u + i * 7u + (size_t)tag * 17u +
                     (i >> 8));
}

static void fill(uint8_t *p, size_t bytes, int src, int dst, int tag)
{
    for (size_t i = 0; i < bytes; i++)
        p[i] = pattern(src, dst, i, tag);
}

/* The first wrong byte, or -1. */
static long first_wrong(const uint8_t *p, size_t bytes, int src, int dst, int tag)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != pattern(src, dst, i, tag))
            return (long)i;
    return -1;
}

static uint8_t *alloc_guarded(struct launch_rank *lr, size_t bytes)
{
    uint8_t *p = malloc(bytes + GUARD_BYTES);
    if (p == NULL)
        launch_fatal(lr, "out of memory (%zu bytes)", bytes);
    memset(p, 0, bytes);
    memset(p + bytes, GUARD, GUARD_BYTES);
    return p;
}

static bool guard_intact(const uint8_t *p, size_t bytes)
{
    for (size_t i = 0; i < GUARD_BYTES; i++)
        if (p[bytes + i] != GUARD)
            return false;
    return true;
}

/* A call that must succeed for the ranks to stay in step. */
#define MUST(lr, call)                                                                 \
    do {                                                                               \
        collResult_t must_r_ = (call);                                                 \
        if (must_r_ != collSuccess)                                                    \
            launch_fatal((lr), "%s:%d: %s returned %s (%s)", __FILE__, __LINE__, #call, \
                         collGetErrorString(must_r_), collGetLastError((lr)->comm));   \
    } while (0)

/* Each rank sends count int32 to rank + 1 and receives from rank - 1, in a group. */
static void test_ring(struct launch_rank *lr, size_t count)
{
    int n = lr->nranks, r = lr->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    size_t bytes = count * 4;
    uint8_t *s = alloc_guarded(lr, bytes), *d = alloc_guarded(lr, bytes);
    fill(s, bytes, r, next, 1);
    MUST(lr, collGroupStart());
    MUST(lr, collSend(s, count, collInt32, next, lr->comm, NULL));
    MUST(lr, collRecv(d, count, collInt32, prev, lr->comm, NULL));
    MUST(lr, collGroupEnd());
    long w = first_wrong(d, bytes, prev, r, 1);
    LR_CHECK(lr, w < 0, "ring count %zu: byte %ld from rank %d is wrong", count, w, prev);
    LR_CHECK(lr, guard_intact(d, bytes), "ring count %zu: guard overwritten", count);
    free(s);
    free(d);
}

/* An all-to-all written as one group of sends and receives, to every rank and
 * from every rank in plain rank order (itself included). */
static void test_group_alltoall(struct launch_rank *lr, size_t bytes)
{
    int n = lr->nranks, r = lr->rank;
    uint8_t *s = alloc_guarded(lr, bytes * (size_t)n), *d = alloc_guarded(lr, bytes * (size_t)n);
    for (int j = 0; j < n; j++)
        fill(s + (size_t)j * bytes, bytes, r, j, 2);
    MUST(lr, collGroupStart());
    for (int j = 0; j < n; j++) {
        MUST(lr, collSend(s + (size_t)j * bytes, bytes, collUint8, j, lr->comm, NULL));
        MUST(lr, collRecv(d + (size_t)j * bytes, bytes, collUint8, j, lr->comm, NULL));
    }
    MUST(lr, collGroupEnd());
    for (int i = 0; i < n; i++) {
        long w = first_wrong(d + (size_t)i * bytes, bytes, i, r, 2);
        LR_CHECK(lr, w < 0, "group all-to-all %zu bytes: byte %ld from rank %d is wrong", bytes,
                 w, i);
    }
    LR_CHECK(lr, guard_intact(d, bytes * (size_t)n), "group all-to-all: guard overwritten");
    free(s);
    free(d);
}

static void test_alltoall(struct launch_rank *lr)
{
    static const size_t counts[] = {0, 1, 1000, 100003};
    int n = lr->nranks, r = lr->rank;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        for (int t = 0; t < collNumTypes; t++) {
            size_t block = counts[ci] * type_size[t], all = block * (size_t)n;
            uint8_t *s = alloc_guarded(lr, all), *d = alloc_guarded(lr, all);
            for (int j = 0; j < n; j++)
                fill(s + (size_t)j * block, block, r, j, 3 + t);
            MUST(lr, collAllToAll(s, d, counts[ci], (collDataType_t)t, lr->comm, NULL));
            for (int i = 0; i < n; i++) {
                long w = first_wrong(d + (size_t)i * block, block, i, r, 3 + t);
                LR_CHECK(lr, w < 0, "collAllToAll count %zu type %d: byte %ld from rank %d",
                         counts[ci], t, w, i);
            }
            LR_CHECK(lr, guard_intact(d, all), "collAllToAll count %zu type %d: guard",
                     counts[ci], t);
            /* In place: the same input in the receive buffer. */
            if (counts[ci] == 1000) {
                memcpy(d, s, all);
                MUST(lr, collAllToAll(d, d, counts[ci], (collDataType_t)t, lr->comm, NULL));
                for (int i = 0; i < n; i++) {
                    long w = first_wrong(d + (size_t)i * block, block, i, r, 3 + t);
                    LR_CHECK(lr, w < 0, "in-place collAllToAll type %d: byte %ld from rank %d",
                             t, w, i);
                }
            }
            free(s);
            free(d);
        }
    }
}

/* collGather and collScatter alone, from the first and the last rank as root: rank
 * r's block travels with tag 70 (gather) or 71 (scatter), and the buffers not
 * used off the root are NULL there. */
static void test_gather_scatter(struct launch_rank *lr)
{
    static const size_t counts[] = {0, 1, 1000, 100003};
    int n = lr->nranks, r = lr->rank;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        for (int t = 0; t < collNumTypes; t += 3) {
            size_t block = counts[ci] * type_size[t], all = block * (size_t)n;
            for (int root = 0; root < n; root += n > 1 ? n - 1 : 1) {
                bool is_root = r == root;
                uint8_t *s = alloc_guarded(lr, block), *d = alloc_guarded(lr, all);
                fill(s, block, r, root, 70);
                MUST(lr, collGather(s, is_root ? d : NULL, counts[ci], (collDataType_t)t, root,
                                    lr->comm, NULL));
                for (int i = 0; is_root && i < n; i++) {
                    long w = first_wrong(d + (size_t)i * block, block, i, root, 70);
                    LR_CHECK(lr, w < 0, "collGather count %zu type %d root %d: byte %ld from "
                             "rank %d", counts[ci], t, root, w, i);
                }
                LR_CHECK(lr, guard_intact(d, all), "collGather count %zu: guard", counts[ci]);
                for (int j = 0; is_root && j < n; j++)
                    fill(d + (size_t)j * block, block, root, j, 71);
                memset(s, 0, block);
                MUST(lr, collScatter(is_root ? d : NULL, s, counts[ci], (collDataType_t)t, root,
                                     lr->comm, NULL));
                long w = first_wrong(s, block, root, r, 71);
                LR_CHECK(lr, w < 0, "collScatter count %zu type %d root %d: byte %ld wrong",
                         counts[ci], t, root, w);
                LR_CHECK(lr, guard_intact(s, block), "collScatter count %zu: guard", counts[ci]);
                free(s);
                free(d);
            }
        }
    }
}

/* collGather and collScatter join an open group: with a ring exchange, inside a
 * nested group and next to a collective, nothing runs before the outer
 * collGroupEnd; then everything is right. */
static void test_grouped_gather_scatter(struct launch_rank *lr)
{
    enum { COUNT = 3000 };
    int n = lr->nranks, r = lr->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    int groot = n / 2, sroot = n - 1;
    size_t bytes = COUNT * 4;
    uint8_t *gs = alloc_guarded(lr, bytes), *gd = alloc_guarded(lr, bytes * (size_t)n);
    uint8_t *ss = alloc_guarded(lr, bytes * (size_t)n), *sd = alloc_guarded(lr, bytes);
    uint8_t *rs = alloc_guarded(lr, bytes), *rd = alloc_guarded(lr, bytes);
    fill(gs, bytes, r, groot, 72);
    for (int j = 0; j < n; j++)
        fill(ss + (size_t)j * bytes, bytes, sroot, j, 73);
    fill(rs, bytes, r, next, 74);
    int32_t x = r + 1, y = 0;
    /* Messages between two ranks pair up in the order issued, so every rank
     * issues the gather, the scatter and the ring in the same order. */
    MUST(lr, collGroupStart());
    MUST(lr, collGather(gs, gd, COUNT, collFloat, groot, lr->comm, NULL));
    MUST(lr, collGroupStart()); /* nested: only the outer end issues */
    MUST(lr, collScatter(ss, sd, COUNT, collUint32, sroot, lr->comm, NULL));
    MUST(lr, collAllReduce(&x, &y, 1, collInt32, collSum, lr->comm, NULL));
    MUST(lr, collGroupEnd());
    MUST(lr, collSend(rs, COUNT, collInt32, next, lr->comm, NULL));
    MUST(lr, collRecv(rd, COUNT, collInt32, prev, lr->comm, NULL));
    LR_CHECK(lr, sd[0] == 0 && rd[0] == 0 && y == 0, "calls ran before the outer collGroupEnd");
    MUST(lr, collGroupEnd());
    for (int i = 0; r == groot && i < n; i++) {
        long w = first_wrong(gd + (size_t)i * bytes, bytes, i, groot, 72);
        LR_CHECK(lr, w < 0, "grouped collGather: byte %ld from rank %d is wrong", w, i);
    }
    LR_CHECK(lr, first_wrong(sd, bytes, sroot, r, 73) < 0, "grouped collScatter wrong");
    LR_CHECK(lr, first_wrong(rd, bytes, prev, r, 74) < 0, "grouped ring receive wrong");
    LR_CHECK(lr, y == n * (n + 1) / 2, "grouped allreduce gave %d", y);
    LR_CHECK(lr, guard_intact(gd, bytes * (size_t)n) && guard_intact(sd, bytes),
             "grouped gather/scatter: guard overwritten");
    free(gs);
    free(gd);
    free(ss);
    free(sd);
    free(rs);
    free(rd);
}

/* Several messages to the same peer in one group arrive in the order sent. */
static void test_order(struct launch_rank *lr)
{
    static const size_t sizes[] = {1, 100, 70001, 0, 3, 300000, 17};
    enum { NMSG = sizeof(sizes) / sizeof(sizes[0]) };
    int n = lr->nranks, r = lr->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    uint8_t *s[NMSG], *d[NMSG];
    MUST(lr, collGroupStart());
    for (int k = 0; k < NMSG; k++) {
        s[k] = alloc_guarded(lr, sizes[k]);
        d[k] = alloc_guarded(lr, sizes[k]);
        fill(s[k], sizes[k], r, next, 40 + k);
        MUST(lr, collRecv(d[k], sizes[k], collUint8, prev, lr->comm, NULL));
        MUST(lr, collSend(s[k], sizes[k], collUint8, next, lr->comm, NULL));
    }
    MUST(lr, collGroupEnd());
    for (int k = 0; k < NMSG; k++) {
        long w = first_wrong(d[k], sizes[k], prev, r, 40 + k);
        LR_CHECK(lr, w < 0, "message %d (%zu bytes) from rank %d: byte %ld wrong", k, sizes[k],
                 prev, w);
        LR_CHECK(lr, guard_intact(d[k], sizes[k]), "message %d: guard overwritten", k);
        free(s[k]);
        free(d[k]);
    }
}

/* A pipeline's first pass over a fresh communicator: each stage receives from the
 * stage before it, then sends on and receives the answer back in one group, then
 * answers the stage before.  A stage's group receives from a neighbour that has
 * never sent to it and sends to it only after this group's send has arrived: the
 * group must post its send before the receive's connection exists (it once waited
 * for that connection first, and the pipeline stopped).  Stages run in rank order,
 * then in reverse, each on a communicator split off fresh. */
static void test_chain(struct launch_rank *lr, size_t bytes)
{
    int n = lr->nranks, r = lr->rank;
    for (int reverse = 0; reverse < 2; reverse++) {
        collComm_t c;
        MUST(lr, collCommSplit(lr->comm, 0, reverse ? n - 1 - r : r, &c, NULL));
        /* ranks in c are the stages */
        int stage = reverse ? n - 1 - r : r;
        int prev = stage > 0 ? stage - 1 : -1, next = stage < n - 1 ? stage + 1 : -1;
        uint8_t *in = alloc_guarded(lr, bytes), *out = alloc_guarded(lr, bytes);
        uint8_t *back = alloc_guarded(lr, bytes), *ans = alloc_guarded(lr, bytes);
        if (prev >= 0)
            MUST(lr, collRecv(in, bytes, collUint8, prev, c, NULL));
        fill(out, bytes, stage, next, 60);
        if (next >= 0) {
            MUST(lr, collGroupStart());
            MUST(lr, collSend(out, bytes, collUint8, next, c, NULL));
            MUST(lr, collRecv(back, bytes, collUint8, next, c, NULL));
            MUST(lr, collGroupEnd());
            long w = first_wrong(back, bytes, next, stage, 61);
            LR_CHECK(lr, w < 0, "chain%s, %zu bytes: the answer from stage %d: byte %ld wrong",
                     reverse ? " reversed" : "", bytes, next, w);
        }
        if (prev >= 0) {
            long w = first_wrong(in, bytes, prev, stage, 60);
            LR_CHECK(lr, w < 0, "chain%s, %zu bytes: from stage %d: byte %ld wrong",
                     reverse ? " reversed" : "", bytes, prev, w);
            fill(ans, bytes, stage, prev, 61);
            MUST(lr, collSend(ans, bytes, collUint8, prev, c, NULL));
        }
        free(in);
        free(out);
        free(back);
        free(ans);
        MUST(lr, collCommDestroy(c));
    }
}

/* Messages to the rank itself: matched in order inside a group; refused alone. */
static void test_self(struct launch_rank *lr)
{
    int r = lr->rank;
    uint8_t *a = alloc_guarded(lr, 1000), *b = alloc_guarded(lr, 10);
    uint8_t *da = alloc_guarded(lr, 1000), *db = alloc_guarded(lr, 10);
    fill(a, 1000, r, r, 60);
    fill(b, 10, r, r, 61);
    MUST(lr, collGroupStart());
    MUST(lr, collSend(a, 250, collFloat, r, lr->comm, NULL));
    MUST(lr, collRecv(da, 250, collFloat, r, lr->comm, NULL));
    MUST(lr, collRecv(db, 10, collInt8, r, lr->comm, NULL));
    MUST(lr, collSend(b, 10, collInt8, r, lr->comm, NULL));
    MUST(lr, collGroupEnd());
    LR_CHECK(lr, first_wrong(da, 1000, r, r, 60) < 0, "self message 1 wrong");
    LR_CHECK(lr, first_wrong(db, 10, r, r, 61) < 0, "self message 2 wrong");
    /* Alone, a send to itself has no receive to meet: refused, comm still usable. */
    LR_CHECK_RES(lr, collSend(a, 4, collFloat, r, lr->comm, NULL), collInvalidUsage, lr->comm);
    free(a);
    free(b);
    free(da);
    free(db);
}

/* A collective queued in a group runs at collGroupEnd with the sends and receives. */
static void test_grouped_collective(struct launch_rank *lr)
{
    int n = lr->nranks, r = lr->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    int32_t x[3] = {r + 1, 2 * r, -r}, y[3] = {0, 0, 0};
    int32_t sv = 1000 + r, rv = -1;
    int32_t b = r == 0 ? 77 : 0;
    MUST(lr, collGroupStart());
    MUST(lr, collAllReduce(x, y, 3, collInt32, collSum, lr->comm, NULL));
    MUST(lr, collSend(&sv, 1, collInt32, next, lr->comm, NULL));
    MUST(lr, collGroupStart()); /* nested: only the outer end issues */
    MUST(lr, collRecv(&rv, 1, collInt32, prev, lr->comm, NULL));
    MUST(lr, collBroadcast(&b, &b, 1, collInt32, 0, lr->comm, NULL));
    MUST(lr, collGroupEnd());
    LR_CHECK(lr, rv == -1 && y[0] == 0, "calls ran before the outer collGroupEnd");
    MUST(lr, collGroupEnd());
    int32_t s0 = n * (n + 1) / 2, s1 = n * (n - 1), s2 = -n * (n - 1) / 2;
    LR_CHECK(lr, y[0] == s0 && y[1] == s1 && y[2] == s2,
             "grouped allreduce gave %d %d %d, want %d %d %d", y[0], y[1], y[2], s0, s1, s2);
    LR_CHECK(lr, rv == 1000 + prev, "grouped recv gave %d, want %d", rv, 1000 + prev);
    LR_CHECK(lr, b == 77, "grouped broadcast gave %d", b);
}

/* One group over two communicators: a ring forwards on one, backwards on the other. */
static void test_two_comms(struct launch_rank *lr)
{
    int n = lr->nranks, r = lr->rank, next = (r + 1) % n, prev = (r + n - 1) % n;
    collUniqueId id;
    memset(&id, 0, sizeof(id));
    if (r == 0)
        MUST(lr, collGetUniqueId(&id));
    MUST(lr, collBroadcast(&id, &id, sizeof(id), collUint8, 0, lr->comm, NULL));
    collComm_t c2;
    collResult_t res = collCommInitRank(&c2, n, id, r);
    if (res != collSuccess)
        launch_fatal(lr, "second communicator: %s (%s)", collGetErrorString(res),
                     collGetLastError(NULL));
    int32_t fw = 10 * r, bw = 20 * r, got_fw = -1, got_bw = -1;
    MUST(lr, collGroupStart());
    MUST(lr, collSend(&fw, 1, collInt32, next, lr->comm, NULL));
    MUST(lr, collSend(&bw, 1, collInt32, prev, c2, NULL));
    MUST(lr, collRecv(&got_bw, 1, collInt32, next, c2, NULL));
    MUST(lr, collRecv(&got_fw, 1, collInt32, prev, lr->comm, NULL));
    MUST(lr, collGroupEnd());
    LR_CHECK(lr, got_fw == 10 * prev && got_bw == 20 * next, "two comms: got %d %d", got_fw,
             got_bw);
    LR_CHECK_RES(lr, collCommDestroy(c2), collSuccess, NULL);
}

/* One group over a 2-rank communicator and a bigger one whose message never
 * comes: the group times out on the big one's deadline (1.5 s), naming its
 * silent peer, while the small one, whose messages all completed and whose own
 * deadline (0.5 s) passed first, stays usable.  Its rank numbers are not the
 * big one's: a timeout must not read one comm's peers with another's numbers. */
static void test_group_timeout(struct launch_rank *lr)
{
    int n = lr->nranks, r = lr->rank, silent = n - 1;
    if (n < 3)
        return;
    collUniqueId id;
    memset(&id, 0, sizeof(id));
    if (r == 0)
        MUST(lr, collGetUniqueId(&id));
    MUST(lr, collBroadcast(&id, &id, sizeof(id), collUint8, 0, lr->comm, NULL));
    collConfig_t big_cfg = COLL_CONFIG_INITIALIZER, small_cfg = COLL_CONFIG_INITIALIZER;
    big_cfg.timeoutMs = 1500;
    small_cfg.timeoutMs = 500;
    collComm_t big, small = NULL;
    collResult_t res = collCommInitRankConfig(&big, n, id, r, &big_cfg);
    if (res != collSuccess)
        launch_fatal(lr, "big communicator: %s (%s)", collGetErrorString(res),
                     collGetLastError(NULL));
    MUST(lr, collCommSplit(lr->comm, r < 2 ? 0 : COLL_SPLIT_NOCOLOR, r, &small, &small_cfg));
    /* One message from the silent rank makes the connection the group waits on. */
    int32_t v = 7, got = -1, never = -1, peer_v = 100 + r, peer_got = -1;
    if (r == silent)
        MUST(lr, collSend(&v, 1, collInt32, 0, big, NULL));
    if (r == 0) {
        MUST(lr, collRecv(&got, 1, collInt32, silent, big, NULL));
        LR_CHECK(lr, got == 7, "first message gave %d", got);
    }
    if (r < 2) {
        MUST(lr, collGroupStart());
        MUST(lr, collSend(&peer_v, 1, collInt32, 1 - r, small, NULL));
        MUST(lr, collRecv(&peer_got, 1, collInt32, 1 - r, small, NULL));
        if (r == 0)
            MUST(lr, collRecv(&never, 1, collInt32, silent, big, NULL));
        res = collGroupEnd();
        LR_CHECK(lr, peer_got == 101 - r, "small comm gave %d", peer_got);
        if (r == 0) {
            LR_CHECK(lr, res == collTimeout, "the group returned %s, want collTimeout (%s)",
                     collGetErrorString(res), collGetLastError(big));
            char want[32];
            snprintf(want, sizeof(want), "rank %d", silent);
            LR_CHECK(lr, strstr(collGetLastError(big), want) != NULL,
                     "the timeout does not name %s: %s", want, collGetLastError(big));
            collResult_t async = collSuccess;
            MUST(lr, collCommGetAsyncError(small, &async));
            LR_CHECK(lr, async == collSuccess, "the small comm was poisoned: %s (%s)",
                     collGetErrorString(async), collGetLastError(small));
        } else {
            LR_CHECK_RES(lr, res, collSuccess, small);
        }
    }
    /* Every rank waits for rank 0's timeout before letting go of the big comm. */
    int32_t one = 1, all = 0;
    MUST(lr, collAllReduce(&one, &all, 1, collInt32, collSum, lr->comm, NULL));
    if (small != NULL)
        LR_CHECK_RES(lr, collCommDestroy(small), collSuccess, NULL);
    (void)collCommDestroy(big);
}

/* collCommGetBytes: a message carries a 16-byte header before its data (lib/core/p2p.c),
 * which the counters include, on both sides. */
#define P2P_HEADER_BYTES 16u

struct bytes_mark {
    uint64_t sent, received;
};

static struct bytes_mark bytes_now(struct launch_rank *lr)
{
    struct bytes_mark m = {0, 0};
    MUST(lr, collCommGetBytes(lr->comm, &m.sent, &m.received));
    return m;
}

/* Checks this rank's counters grew by exactly (sent, received) since `before`,
 * and that every byte some rank posted to send was posted to be received by
 * another (the sums over the ranks agree).  The sums are taken with an allreduce
 * after the second reading, so they do not count themselves. */
static void bytes_expect(struct launch_rank *lr, struct bytes_mark before, uint64_t sent,
                         uint64_t received, const char *what)
{
    struct bytes_mark after = bytes_now(lr);
    uint64_t ds = after.sent - before.sent, dr = after.received - before.received;
    LR_CHECK(lr, ds == sent && dr == received,
             "%s: sent %llu and received %llu bytes, want %llu and %llu", what,
             (unsigned long long)ds, (unsigned long long)dr, (unsigned long long)sent,
             (unsigned long long)received);
    uint64_t d[2] = {ds, dr}, sum[2] = {0, 0};
    MUST(lr, collAllReduce(d, sum, 2, collUint64, collSum, lr->comm, NULL));
    LR_CHECK(lr, sum[0] == sum[1], "%s: the ranks sent %llu bytes in all but received %llu",
             what, (unsigned long long)sum[0], (unsigned long long)sum[1]);
}

/* Bytes of segment j of count elements cut n ways, as the ring cuts them
 * (coll_ring_chunk: the first count % n segments one element longer). */
static uint64_t ring_seg_bytes(size_t count, int n, int j, size_t esize)
{
    size_t len = count / (size_t)n + ((size_t)j < count % (size_t)n ? 1 : 0);
    return (uint64_t)len * esize;
}

/* collCommGetBytes, as deltas (init and the earlier tests count too):
 *   - rank 0 sends N bytes to rank 1, blocking and then on a stream (counted on
 *     the progress thread): N + header on each side, nothing on the other ranks;
 *   - a group of a send and a receive to itself: nothing;
 *   - collAllToAll and collGather: a message per peer;
 *   - an allreduce of S bytes by the ring (COLL_ALGO=allreduce:ring, the
 *     registrations p2p-ring-*; checked whenever the ring ran it): rank r sends
 *     in the reduce-scatter every segment but r+1 and in the allgather every one
 *     but r+2, and receives every segment but r, then every one but r+1;
 *   - a communicator of one rank split off: starts at 0, and nothing moves;
 *   - a NULL comm is refused naming it; NULL outputs are accepted. */
static void test_bytes(struct launch_rank *lr)
{
    int n = lr->nranks, r = lr->rank;
    collComm_t c = lr->comm;

    if (n >= 2) {
        const size_t N = 4000;
        uint8_t *buf = alloc_guarded(lr, N);
        fill(buf, N, 0, 1, 80);
        collStream_t st;
        MUST(lr, collStreamCreate(&st));
        for (int on_stream = 0; on_stream < 2; on_stream++) {
            collStream_t s = on_stream ? st : NULL;
            struct bytes_mark b = bytes_now(lr);
            if (r == 0)
                MUST(lr, collSend(buf, N, collUint8, 1, c, s));
            else if (r == 1)
                MUST(lr, collRecv(buf, N, collUint8, 0, c, s));
            if (s != NULL)
                MUST(lr, collStreamSynchronize(s));
            uint64_t msg = N + P2P_HEADER_BYTES;
            bytes_expect(lr, b, r == 0 ? msg : 0, r == 1 ? msg : 0,
                         on_stream ? "a send of 4000 bytes on a stream" : "a send of 4000 bytes");
        }
        MUST(lr, collStreamDestroy(st));
        if (r == 1)
            LR_CHECK(lr, first_wrong(buf, N, 0, 1, 80) < 0, "the counted send arrived wrong");
        free(buf);
    }

    /* To itself only: a local copy. */
    {
        int32_t x[100], y[100];
        for (int i = 0; i < 100; i++)
            x[i] = r * 1000 + i;
        struct bytes_mark b = bytes_now(lr);
        MUST(lr, collGroupStart());
        MUST(lr, collSend(x, 100, collInt32, r, c, NULL));
        MUST(lr, collRecv(y, 100, collInt32, r, c, NULL));
        MUST(lr, collGroupEnd());
        bytes_expect(lr, b, 0, 0, "a group of a send and a receive to itself");
        LR_CHECK(lr, memcmp(x, y, sizeof(x)) == 0, "the send to itself arrived wrong");
    }

    /* An all-to-all of B-byte blocks, and a gather of B bytes to the last rank. */
    {
        const size_t B = 1000;
        uint8_t *s = alloc_guarded(lr, B * (size_t)n), *d = alloc_guarded(lr, B * (size_t)n);
        memset(s, r, B * (size_t)n);
        uint64_t msg = B + P2P_HEADER_BYTES, peers = (uint64_t)(n - 1);
        struct bytes_mark b = bytes_now(lr);
        MUST(lr, collAllToAll(s, d, B, collUint8, c, NULL));
        bytes_expect(lr, b, peers * msg, peers * msg, "collAllToAll");
        int root = n - 1;
        b = bytes_now(lr);
        MUST(lr, collGather(s, r == root ? d : NULL, B, collUint8, root, c, NULL));
        bytes_expect(lr, b, r == root ? 0 : msg, r == root ? peers * msg : 0, "collGather");
        free(s);
        free(d);
    }

    /* An allreduce of S = 4 x 50003 bytes: under COLL_SHM_DIRECT_BYTES (256 KiB),
     * so the direct path's agreement (which counts) does not run. */
    {
        const size_t count = 50003, esize = sizeof(float);
        float *x = malloc(count * esize), *y = malloc(count * esize);
        if (x == NULL || y == NULL)
            launch_fatal(lr, "out of memory");
        for (size_t i = 0; i < count; i++)
            x[i] = (float)(i % 7);
        struct bytes_mark b = bytes_now(lr);
        MUST(lr, collAllReduce(x, y, count, collFloat, collSum, c, NULL));
        const char *algo = coll_comm_last_algo(c);
        const char *pin = getenv("COLL_ALGO");
        bool pinned = pin != NULL && (strcmp(pin, "ring") == 0 ||
                                      strcmp(pin, "allreduce:ring") == 0);
        LR_CHECK(lr, !pinned || strcmp(algo, "ring") == 0,
                 "COLL_ALGO=%s, but the allreduce ran %s", pin ? pin : "", algo);
        if (strcmp(algo, "ring") == 0) {
            uint64_t S = (uint64_t)count * esize;
            uint64_t sent = n == 1 ? 0
                                   : 2 * S - ring_seg_bytes(count, n, (r + 1) % n, esize) -
                                         ring_seg_bytes(count, n, (r + 2) % n, esize);
            uint64_t recvd = n == 1 ? 0
                                    : 2 * S - ring_seg_bytes(count, n, r, esize) -
                                          ring_seg_bytes(count, n, (r + 1) % n, esize);
            bytes_expect(lr, b, sent, recvd, "a ring allreduce of 200012 bytes");
        } else {
            /* Another algorithm: the sums over the ranks must still agree. */
            struct bytes_mark a = bytes_now(lr);
            bytes_expect(lr, b, a.sent - b.sent, a.received - b.received,
                         "an allreduce of 200012 bytes");
        }
        LR_CHECK(lr, y[1] == (float)n && y[count - 1] == (float)(((count - 1) % 7) * n),
                 "the counted allreduce gave %g %g", (double)y[1], (double)y[count - 1]);
        free(x);
        free(y);
    }

    /* An allreduce of 400012 bytes of collMemAlloc memory, from the default
     * COLL_SHM_DIRECT_BYTES (256 KiB) on: with every rank on shared memory it
     * reads the peers' buffers (checked when it did).  Rank r reads segment r of
     * the n-1 other inputs and the n-1 other final segments, and the peers read as
     * much from its buffers: S + (n-2) x S_r each way, plus the few hundred bytes
     * of the path's agreements (recursive doubling, through the transports). */
    {
        const size_t count = 100003, esize = sizeof(float);
        float *x = NULL, *y = NULL;
        MUST(lr, collMemAlloc((void **)&x, count * esize));
        MUST(lr, collMemAlloc((void **)&y, count * esize));
        for (size_t i = 0; i < count; i++)
            x[i] = (float)(i % 5);
        struct bytes_mark b = bytes_now(lr);
        MUST(lr, collAllReduce(x, y, count, collFloat, collSum, c, NULL));
        struct bytes_mark a = bytes_now(lr);
        if (strcmp(coll_comm_last_algo(c), "direct") == 0) {
            uint64_t want = (uint64_t)count * esize +
                            (uint64_t)(n - 2) * ring_seg_bytes(count, n, r, esize);
            uint64_t ds = a.sent - b.sent, dr = a.received - b.received, slack = 16384;
            LR_CHECK(lr, ds >= want && ds <= want + slack && dr >= want && dr <= want + slack,
                     "the direct allreduce of 400012 bytes sent %llu and received %llu bytes, "
                     "want %llu (+ at most %llu) each", (unsigned long long)ds,
                     (unsigned long long)dr, (unsigned long long)want,
                     (unsigned long long)slack);
        }
        bytes_expect(lr, b, a.sent - b.sent, a.received - b.received, "a direct allreduce");
        LR_CHECK(lr, y[1] == (float)n && y[count - 1] == (float)(((count - 1) % 5) * n),
                 "the counted direct allreduce gave %g %g", (double)y[1], (double)y[count - 1]);
        MUST(lr, collMemFree(x));
        MUST(lr, collMemFree(y));
    }

    /* A communicator of one rank: its own counters, at 0, and none of its calls
     * leaves the rank. */
    {
        collComm_t solo = NULL;
        struct bytes_mark b = bytes_now(lr);
        MUST(lr, collCommSplit(c, r, 0, &solo, NULL));
        struct bytes_mark parent = bytes_now(lr);
        LR_CHECK(lr, n == 1 || parent.sent > b.sent,
                 "collCommSplit's allgathers did not count on the parent");
        uint64_t s = 1, rv = 1;
        LR_CHECK_RES(lr, collCommGetBytes(solo, &s, &rv), collSuccess, solo);
        LR_CHECK(lr, s == 0 && rv == 0, "a split-off communicator starts at %llu / %llu",
                 (unsigned long long)s, (unsigned long long)rv);
        float v = 1, w = 0;
        LR_CHECK_RES(lr, collAllReduce(&v, &w, 1, collFloat, collSum, solo, NULL), collSuccess,
                     solo);
        LR_CHECK_RES(lr, collCommGetBytes(solo, &s, &rv), collSuccess, solo);
        LR_CHECK(lr, s == 0 && rv == 0 && w == 1,
                 "one rank's allreduce counted %llu / %llu (result %g)",
                 (unsigned long long)s, (unsigned long long)rv, (double)w);
        LR_CHECK_RES(lr, collCommDestroy(solo), collSuccess, NULL);
    }

    /* Refused: a NULL comm.  Accepted: NULL outputs. */
    {
        uint64_t s = 7, rv = 7;
        LR_CHECK_RES(lr, collCommGetBytes(NULL, &s, &rv), collInvalidArgument, NULL);
        const char *msg = collGetLastError(NULL);
        LR_CHECK(lr, strstr(msg, "collCommGetBytes") != NULL && strstr(msg, "comm") != NULL,
                 "the refusal '%s' does not name collCommGetBytes and comm", msg);
        struct bytes_mark m = bytes_now(lr);
        LR_CHECK_RES(lr, collCommGetBytes(c, NULL, NULL), collSuccess, c);
        s = rv = 0;
        LR_CHECK_RES(lr, collCommGetBytes(c, &s, NULL), collSuccess, c);
        LR_CHECK_RES(lr, collCommGetBytes(c, NULL, &rv), collSuccess, c);
        LR_CHECK(lr, s == m.sent && rv == m.received,
                 "with one output NULL: %llu / %llu, want %llu / %llu", (unsigned long long)s,
                 (unsigned long long)rv, (unsigned long long)m.sent,
                 (unsigned long long)m.received);
    }
}

/* Receives from any source: each rank in turn is the sink; every other rank sends it
 * three messages of `bytes` (its rank and the message's number in the bytes), and the
 * sink takes them all with collRecvAny, every other one on a stream: each sender's
 * messages arrive whole and in the order sent, and the rank it is told is the
 * sender's.  Then one from any source and one from a given rank in a row. */
static void test_any_source(struct launch_rank *lr, size_t bytes)
{
    int n = lr->nranks, r = lr->rank;
    collComm_t c = lr->comm;
    if (n == 1)
        return;
    enum { K = 3 };
    uint8_t *buf = alloc_guarded(lr, bytes);
    int *next = calloc((size_t)n, sizeof(int));
    collStream_t s = NULL;
    MUST(lr, collStreamCreate(&s));
    for (int sink = 0; sink < n && !lr->failures; sink++) {
        if (r != sink) {
            for (int k = 0; k < K; k++) {
                fill(buf, bytes, r, sink, 90 + k);
                MUST(lr, collSend(buf, bytes, collUint8, sink, c, NULL));
            }
        } else {
            memset(next, 0, (size_t)n * sizeof(int));
            for (int m = 0; m < (n - 1) * K && !lr->failures; m++) {
                int src = -5;
                collStream_t use = m % 2 ? s : NULL;
                MUST(lr, collRecvAny(buf, bytes, collUint8, &src, c, use));
                if (use != NULL)
                    MUST(lr, collStreamSynchronize(s));
                LR_CHECK(lr, src >= 0 && src < n && src != r && next[src] < K,
                         "collRecvAny #%d of %zu bytes said rank %d", m, bytes, src);
                if (lr->failures)
                    break;
                long w = first_wrong(buf, bytes, src, sink, 90 + next[src]);
                LR_CHECK(lr, w < 0, "collRecvAny #%d: message %d of rank %d (%zu bytes): byte "
                         "%ld wrong", m, next[src], src, bytes, w);
                next[src]++;
            }
            LR_CHECK(lr, guard_intact(buf, bytes), "collRecvAny: guard overwritten");
        }
        int32_t b = 0;
        MUST(lr, collAllReduce(&b, &b, 1, collInt32, collSum, c, NULL));
    }
    /* A receive from any source, then one from a given rank: rank 1 sends two
     * messages to rank 0, whose first receive takes the first. */
    if (r == 1) {
        fill(buf, bytes, 1, 0, 95);
        MUST(lr, collSend(buf, bytes, collUint8, 0, c, NULL));
        fill(buf, bytes, 1, 0, 96);
        MUST(lr, collSend(buf, bytes, collUint8, 0, c, NULL));
    } else if (r == 0) {
        int src = -5;
        MUST(lr, collRecvAny(buf, bytes, collUint8, &src, c, NULL));
        LR_CHECK(lr, src == 1 && first_wrong(buf, bytes, 1, 0, 95) < 0,
                 "collRecvAny then collRecv: the first gave rank %d", src);
        MUST(lr, collRecv(buf, bytes, collUint8, 1, c, NULL));
        LR_CHECK(lr, first_wrong(buf, bytes, 1, 0, 96) < 0,
                 "collRecvAny then collRecv: the second message is wrong");
    }
    int32_t b = 0;
    MUST(lr, collAllReduce(&b, &b, 1, collInt32, collSum, c, NULL));
    MUST(lr, collStreamDestroy(s));
    free(next);
    free(buf);
}

static void want_error(struct launch_rank *lr, collResult_t got, collResult_t want,
                       const char *what, const char *word)
{
    const char *msg = collGetLastError(lr->comm);
    LR_CHECK(lr, got == want, "%s returned %s, want %s (%s)", what, collGetErrorString(got),
             collGetErrorString(want), msg);
    LR_CHECK(lr, strstr(msg, word) != NULL, "%s: message '%s' does not name '%s'", what, msg,
             word);
}

static void test_refused(struct launch_rank *lr)
{
    int n = lr->nranks;
    float f[4] = {0};
    collComm_t c = lr->comm;
    want_error(lr, collSend(f, 4, collFloat, n, c, NULL), collInvalidArgument, "send to nranks",
               "peer");
    want_error(lr, collSend(f, 4, collFloat, -1, c, NULL), collInvalidArgument, "send to -1",
               "peer");
    want_error(lr, collRecv(f, 4, collFloat, n, c, NULL), collInvalidArgument, "recv from n",
               "peer");
    want_error(lr, collRecv(NULL, 4, collFloat, 0, c, NULL), collInvalidArgument,
               "recv into NULL", "recvbuff");
    want_error(lr, collSend(NULL, 4, collFloat, 0, c, NULL), collInvalidArgument,
               "send from NULL", "sendbuff");
    want_error(lr, collSend(f, 4, (collDataType_t)collNumTypes, 0, c, NULL),
               collInvalidArgument, "bad datatype", "datatype");
    want_error(lr, collSend(f, 4, collFloat, 0, c, (collStream_t)f), collInvalidArgument, "stream",
               "stream");
    want_error(lr, collAllToAll(NULL, f, 1, collFloat, c, NULL), collInvalidArgument,
               "alltoall NULL", "sendbuff");
    want_error(lr, collGather(f, f, 1, collFloat, n, c, NULL), collInvalidArgument,
               "gather root n", "root");
    want_error(lr, collScatter(f, f, 1, collFloat, -1, c, NULL), collInvalidArgument,
               "scatter root -1", "root");
    LR_CHECK_RES(lr, collSend(f, 4, collFloat, 0, NULL, NULL), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidUsage, NULL);
    want_error(lr, collRecvAny(f, 4, collFloat, NULL, c, NULL), collInvalidArgument,
               "collRecvAny with peer NULL", "peer");
    int from = -1;
    MUST(lr, collGroupStart());
    want_error(lr, collRecvAny(f, 4, collFloat, &from, c, NULL), collInvalidUsage,
               "collRecvAny in a group", "group");
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidUsage, c);
    /* A refused call inside a group: collGroupEnd reports it and issues nothing. */
    int32_t v = 5, w = -1;
    MUST(lr, collGroupStart());
    MUST(lr, collSend(&v, 1, collInt32, (lr->rank + 1) % n, c, NULL));
    LR_CHECK_RES(lr, collRecv(&w, 1, collInt32, n + 3, c, NULL), collInvalidArgument, c);
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidArgument, c);
    LR_CHECK(lr, w == -1, "a refused group ran");
    /* The same for a collective refused inside a group: the group's send and its
     * valid allreduce are not issued either. */
    int32_t x = 7, y = -1;
    w = -1;
    MUST(lr, collGroupStart());
    MUST(lr, collSend(&v, 1, collInt32, (lr->rank + 1) % n, c, NULL));
    MUST(lr, collRecv(&w, 1, collInt32, (lr->rank + n - 1) % n, c, NULL));
    MUST(lr, collAllReduce(&x, &y, 1, collInt32, collSum, c, NULL));
    LR_CHECK_RES(lr, collAllReduce(&x, &y, 1, collInt32, (collRedOp_t)collNumOps, c, NULL),
                 collInvalidArgument, c);
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidArgument, c);
    LR_CHECK(lr, w == -1 && y == -1, "a group with a refused collective ran");
    /* And for a gather refused inside a group (its root is out of range). */
    w = -1;
    MUST(lr, collGroupStart());
    MUST(lr, collSend(&v, 1, collInt32, (lr->rank + 1) % n, c, NULL));
    MUST(lr, collRecv(&w, 1, collInt32, (lr->rank + n - 1) % n, c, NULL));
    LR_CHECK_RES(lr, collGather(&x, &y, 1, collInt32, n, c, NULL), collInvalidArgument, c);
    LR_CHECK_RES(lr, collGroupEnd(), collInvalidArgument, c);
    LR_CHECK(lr, w == -1, "a group with a refused gather ran");
    /* The comm is still usable. */
    test_ring(lr, 3);
}

/* Rank 0 sends 1000 floats, rank 1 receives 500: rank 1's receive fails naming
 * both sizes and the peer; every rank's next call fails within seconds. */
static void test_mismatch(struct launch_rank *lr)
{
    int r = lr->rank;
    double t0 = launch_now();
    if (lr->nranks == 1) {
        float a[10] = {0}, b[5];
        MUST(lr, collGroupStart());
        (void)collSend(a, 10, collFloat, 0, lr->comm, NULL);
        (void)collRecv(b, 5, collFloat, 0, lr->comm, NULL);
        want_error(lr, collGroupEnd(), collInvalidUsage, "self size mismatch", "40 bytes");
        return;
    }
    /* Every rank finishes the earlier tests first.  Once rank 1 poisons the comm,
     * its failure notice fails any call still in progress on any rank, so this
     * barrier may itself fail on a rank that is slower to finish it than ranks 0
     * and 1: then that failure is the error this test wants. */
    int32_t b = 0;
    collResult_t barrier = collAllReduce(&b, &b, 1, collInt32, collSum, lr->comm, NULL);
    collResult_t first = barrier;
    if (barrier != collSuccess) {
        LR_CHECK(lr, r > 1 && barrier == collRemoteError,
                 "barrier before the mismatch failed on rank %d: %s", r,
                 collGetErrorString(barrier));
    } else if (r == 0) {
        float *s = calloc(1000, sizeof(float));
        first = collSend(s, 1000, collFloat, 1, lr->comm, NULL);
        free(s);
    } else if (r == 1) {
        uint8_t *d = alloc_guarded(lr, 500 * sizeof(float));
        first = collRecv(d, 500, collFloat, 0, lr->comm, NULL);
        const char *msg = collGetLastError(lr->comm);
        LR_CHECK(lr, first == collInvalidUsage, "mismatched recv returned %s (%s)",
                 collGetErrorString(first), msg);
        LR_CHECK(lr, strstr(msg, "4000") && strstr(msg, "2000") && strstr(msg, "rank 0"),
                 "message '%s' does not name both sizes and the peer", msg);
        LR_CHECK(lr, guard_intact(d, 500 * sizeof(float)), "receive guard overwritten");
        free(d);
    }
    /* Every rank then calls a collective: it must fail, not hang. */
    int32_t x = 1, y = 0;
    collResult_t next = collAllReduce(&x, &y, 1, collInt32, collSum, lr->comm, NULL);
    double dt = launch_now() - t0;
    LR_CHECK(lr, first != collSuccess || next != collSuccess,
             "no error on rank %d after the mismatched sizes", r);
    LR_CHECK(lr, dt < 10.0, "the mismatch took %.1f s to be reported", dt);
}

static void p2p_body(struct launch_rank *lr)
{
    test_ring(lr, 0);
    test_ring(lr, 1);
    test_ring(lr, 100003);
    test_group_alltoall(lr, 1);
    test_group_alltoall(lr, 40000);
    test_alltoall(lr);
    test_gather_scatter(lr);
    test_grouped_gather_scatter(lr);
    test_order(lr);
    test_chain(lr, 65536);
    test_chain(lr, 3u << 20);
    test_self(lr);
    test_grouped_collective(lr);
    test_two_comms(lr);
    test_group_timeout(lr);
    test_bytes(lr);
    test_any_source(lr, 64);
    test_any_source(lr, 1u << 20);
    test_refused(lr);
    test_mismatch(lr); /* last: it poisons the comm */
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, p2p_body, NULL);
}
