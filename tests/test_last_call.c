/*
 * collCommGetLastCallInfo, on every rank of a launch:
 *
 *   collrun -n 3 test_last_call --transport shm|tcp      forced algorithms
 *   test_last_call --threads 4 --auto                    the planner's choices
 *
 * Before any call, the record is empty (seq 0, func and algo NULL).  The
 * refusals (NULL comm, NULL info, a wrong magic, a short size) name the argument
 * and leave info as it was.  With --transport T (COLL_TRANSPORTS=T,
 * COLL_CHUNKSIZE=64 KiB and COLL_ALGO=allreduce:ring;broadcast:tree;reduce:naive,
 * set here before the communicator is made), the calls report transport T and:
 *   - a small ring allreduce: its count, type, op, 2 peers (1 with 2 ranks), and
 *     one piece per segment;
 *   - a large ring allreduce of nranks x 4 slices of 64 KiB: pieces of exactly
 *     COLL_CHUNKSIZE, 4 x nranks of them; in place as well; an uneven count
 *     cuts more pieces per segment, balanced, none larger (what the ring's
 *     schedule cut, as the engine recorded it);
 *   - a tree broadcast and a naive reduce with their roots and pieces;
 *   - collSend / collRecv between ranks 0 and 1 (p2p, one peer, no pieces; the
 *     other ranks' records do not move), collAllToAll and collBarrier;
 *   - an allreduce on a stream, reported once the stream is synchronized;
 *   - seq counting up by one per call.
 * With --auto (no COLL_ALGO), a small and a large allreduce each report an
 * algorithm of the table, pieces only for the ones that cut the buffer, and
 * transports that match the communicator's.
 */
#include <stdint.h>

#include "launch.h"

#define CHUNK (64 * 1024)

struct opts {
    const char *transport; /* NULL: --auto */
};

static const char *const known_algos[] = {"ring", "tree", "naive", "rd", "direct", "hier", "ll"};

static collCallInfo_t last(struct launch_rank *lr)
{
    collCallInfo_t info = COLL_CALL_INFO_INITIALIZER;
    LR_MUST(lr, collCommGetLastCallInfo(lr->comm, &info), lr->comm);
    return info;
}

static bool str_is(const char *s, const char *want)
{
    return s != NULL && strcmp(s, want) == 0;
}

/* The record of a call that just ended on this rank: the next number, func and
 * algo, and success. */
static collCallInfo_t expect_call(struct launch_rank *lr, uint64_t *seq, const char *func,
                                  const char *algo)
{
    collCallInfo_t info = last(lr);
    LR_CHECK(lr, info.seq == *seq + 1, "seq %llu after %llu", (unsigned long long)info.seq,
             (unsigned long long)*seq);
    LR_CHECK(lr, str_is(info.func, func), "func %s, want %s", info.func ? info.func : "NULL",
             func);
    if (algo != NULL)
        LR_CHECK(lr, str_is(info.algo, algo), "%s: algo %s, want %s", func,
                 info.algo ? info.algo : "NULL", algo);
    LR_CHECK(lr, info.result == collSuccess, "%s: result %s", func,
             collGetErrorString(info.result));
    LR_CHECK(lr, info.size == sizeof(collCallInfo_t) && info.magic == COLL_CALL_INFO_MAGIC,
             "the header of info was rewritten: size %zu magic 0x%x", info.size, info.magic);
    *seq = info.seq;
    return info;
}

static void check_transports(struct launch_rank *lr, const collCallInfo_t *info,
                             const char *want, int peers)
{
    LR_CHECK(lr, strcmp(info->transports, want) == 0, "%s #%llu: transports \"%s\", want \"%s\"",
             info->func, (unsigned long long)info->seq, info->transports, want);
    if (peers >= 0)
        LR_CHECK(lr, info->peers == peers, "%s #%llu: %d peers, want %d", info->func,
                 (unsigned long long)info->seq, info->peers, peers);
}

static void check_empty(struct launch_rank *lr)
{
    collCallInfo_t info = last(lr);
    LR_CHECK(lr, info.seq == 0, "seq %llu before any call", (unsigned long long)info.seq);
    LR_CHECK(lr, info.func == NULL && info.algo == NULL, "func %s algo %s before any call",
             info.func ? info.func : "NULL", info.algo ? info.algo : "NULL");
    LR_CHECK(lr, info.transports[0] == '\0' && info.peers == 0 && info.chunkBytes == 0 &&
                     info.chunks == 0 && info.count == 0 && info.datatype == -1 &&
                     info.op == -1 && info.root == -1 && info.result == collSuccess,
             "fields set before any call: \"%s\" %d peers, %zu x %zu B", info.transports,
             info.peers, info.chunks, info.chunkBytes);
}

/* Each refusal names the argument and leaves info alone. */
static void check_refusals(struct launch_rank *lr)
{
    collCallInfo_t info = COLL_CALL_INFO_INITIALIZER;
    LR_CHECK_RES(lr, collCommGetLastCallInfo(NULL, &info), collInvalidArgument, NULL);
    LR_CHECK(lr, strstr(collGetLastError(NULL), "collCommGetLastCallInfo: comm") != NULL,
             "message '%s'", collGetLastError(NULL));
    LR_CHECK_RES(lr, collCommGetLastCallInfo(lr->comm, NULL), collInvalidArgument, lr->comm);
    LR_CHECK(lr, strstr(collGetLastError(lr->comm), "info is NULL") != NULL, "message '%s'",
             collGetLastError(lr->comm));

    collCallInfo_t bad = COLL_CALL_INFO_INITIALIZER;
    bad.magic = 0x1234;
    bad.seq = 77;
    LR_CHECK_RES(lr, collCommGetLastCallInfo(lr->comm, &bad), collInvalidArgument, lr->comm);
    LR_CHECK(lr, strstr(collGetLastError(lr->comm), "info->magic") != NULL, "message '%s'",
             collGetLastError(lr->comm));
    LR_CHECK(lr, bad.seq == 77 && bad.magic == 0x1234, "a refused call wrote info");

    bad = (collCallInfo_t)COLL_CALL_INFO_INITIALIZER;
    bad.size = sizeof(collCallInfo_t) - 1;
    bad.seq = 77;
    LR_CHECK_RES(lr, collCommGetLastCallInfo(lr->comm, &bad), collInvalidArgument, lr->comm);
    LR_CHECK(lr, strstr(collGetLastError(lr->comm), "info->size") != NULL, "message '%s'",
             collGetLastError(lr->comm));
    LR_CHECK(lr, bad.seq == 77, "a refused call wrote info");

    /* A larger size (a later header's struct) is served: only ours is written. */
    struct {
        collCallInfo_t info;
        uint64_t more;
    } big = {.info = COLL_CALL_INFO_INITIALIZER, .more = 0x5a5a};
    big.info.size = sizeof(big);
    LR_CHECK_RES(lr, collCommGetLastCallInfo(lr->comm, &big.info), collSuccess, lr->comm);
    LR_CHECK(lr, big.more == 0x5a5a && big.info.size == sizeof(big),
             "wrote past collCallInfo_t or rewrote size");
}

static float *alloc_floats(struct launch_rank *lr, size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (p == NULL)
        launch_fatal(lr, "out of memory (%zu floats)", n);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(i % 7);
    return p;
}

/* The forced algorithms over one transport. */
static void body_forced(struct launch_rank *lr, const char *tp)
{
    int n = lr->nranks, r = lr->rank;
    int ring_peers = n == 1 ? 0 : n == 2 ? 1 : 2;
    const char *tps = n == 1 ? "" : tp;
    uint64_t seq = 0;
    collComm_t comm = lr->comm;

    /* Small: 5 floats in nranks segments, one piece each (of up to 2 floats). */
    float small[5] = {1, 2, 3, 4, 5};
    LR_MUST(lr, collAllReduce(small, small, 5, collFloat, collSum, comm, NULL), comm);
    collCallInfo_t info = expect_call(lr, &seq, "allreduce", "ring");
    check_transports(lr, &info, tps, ring_peers);
    LR_CHECK(lr, info.count == 5 && info.datatype == collFloat && info.op == collSum &&
                     info.root == -1,
             "small: count %zu type %d op %d root %d", info.count, info.datatype, info.op,
             info.root);
    size_t seg = (5 + (size_t)n - 1) / (size_t)n;
    size_t want_chunks = n == 1 ? 0 : 5 < n ? 5 : (size_t)n;
    LR_CHECK(lr, info.chunkBytes == (n == 1 ? 0 : seg * sizeof(float)) &&
                     info.chunks == want_chunks,
             "small: %zu pieces of %zu bytes, want %zu of %zu", info.chunks, info.chunkBytes,
             want_chunks, seg * sizeof(float));

    /* Large: nranks segments of 4 slices of exactly COLL_CHUNKSIZE. */
    size_t count = (size_t)n * 4 * (CHUNK / sizeof(float));
    size_t cap = count + 3 > 100000 ? count + 3 : 100000; /* the reduce's 100000 ints */
    float *buf = alloc_floats(lr, cap);
    float *out = alloc_floats(lr, cap);
    for (int in_place = 0; in_place < 2; in_place++) {
        LR_MUST(lr, collAllReduce(buf, in_place ? buf : out, count, collFloat, collMax, comm,
                                  NULL),
                comm);
        info = expect_call(lr, &seq, "allreduce", "ring");
        check_transports(lr, &info, tps, ring_peers);
        LR_CHECK(lr, n == 1 || (info.chunkBytes == CHUNK && info.chunks == 4 * (size_t)n),
                 "large%s: %zu pieces of %zu bytes, want %d of %d", in_place ? " in place" : "",
                 info.chunks, info.chunkBytes, 4 * n, CHUNK);
        LR_CHECK(lr, info.count == count && info.op == collMax, "large: count %zu op %d",
                 info.count, info.op);
    }
    /* Uneven: more slices per segment (at least one more; the ring may cut
     * finer to run them in groups), none larger than COLL_CHUNKSIZE, each
     * segment cut into K balanced slices: the largest holds ceil(segment / K)
     * elements. */
    LR_MUST(lr, collAllReduce(buf, out, count + 3, collFloat, collSum, comm, NULL), comm);
    info = expect_call(lr, &seq, "allreduce", "ring");
    size_t seg0 = (count + 3 + (size_t)n - 1) / (size_t)n, per = info.chunks / (size_t)n;
    LR_CHECK(lr, n == 1 || (info.chunkBytes <= CHUNK && info.chunks % (size_t)n == 0 &&
                            per >= 5 && info.chunkBytes == (seg0 + per - 1) / per * sizeof(float)),
             "uneven: %zu pieces of %zu bytes", info.chunks, info.chunkBytes);

    /* A tree broadcast from the last rank: 4 slices of the buffer. */
    size_t bcount = 3 * (CHUNK / sizeof(float)) + 5;
    LR_MUST(lr, collBroadcast(buf, buf, bcount, collFloat, n - 1, comm, NULL), comm);
    info = expect_call(lr, &seq, "broadcast", "tree");
    check_transports(lr, &info, tps, -1);
    LR_CHECK(lr, info.root == n - 1 && info.op == -1 && info.count == bcount,
             "broadcast: root %d op %d count %zu", info.root, info.op, info.count);
    LR_CHECK(lr, n == 1 || (info.chunks == 4 && info.chunkBytes <= CHUNK &&
                            info.chunkBytes == (bcount + 3) / 4 * sizeof(float)),
             "broadcast: %zu pieces of %zu bytes", info.chunks, info.chunkBytes);
    LR_CHECK(lr, n == 1 || (info.peers >= 1 && info.peers <= 3), "broadcast: %d peers",
             info.peers);

    /* A naive reduce to rank 0: the root meets every rank, the others the root. */
    LR_MUST(lr, collReduce(buf, out, 100000, collInt32, collSum, 0, comm, NULL), comm);
    info = expect_call(lr, &seq, "reduce", "naive");
    check_transports(lr, &info, tps, n == 1 ? 0 : r == 0 ? n - 1 : 1);
    LR_CHECK(lr, info.root == 0 && info.op == collSum && info.datatype == collInt32,
             "reduce: root %d op %d type %d", info.root, info.op, info.datatype);
    LR_CHECK(lr, n == 1 || (info.chunks == 7 && info.chunkBytes == (100000 + 6) / 7 * 4),
             "reduce: %zu pieces of %zu bytes", info.chunks, info.chunkBytes);

    /* A send and its receive: p2p, one peer, no pieces; the others see nothing. */
    if (n >= 2) {
        if (r == 0)
            LR_MUST(lr, collSend(buf, 1000, collFloat, 1, comm, NULL), comm);
        else if (r == 1)
            LR_MUST(lr, collRecv(out, 1000, collFloat, 0, comm, NULL), comm);
        if (r <= 1) {
            info = expect_call(lr, &seq, r == 0 ? "collSend" : "collRecv", "p2p");
            check_transports(lr, &info, tp, 1);
            LR_CHECK(lr, info.count == 1000 && info.datatype == collFloat &&
                             info.chunkBytes == 0 && info.chunks == 0 && info.root == -1,
                     "%s: count %zu type %d, %zu pieces", info.func, info.count,
                     info.datatype, info.chunks);
        } else {
            info = last(lr);
            LR_CHECK(lr, info.seq == seq && str_is(info.func, "reduce"),
                     "a rank outside the send/recv moved to %s #%llu", info.func,
                     (unsigned long long)info.seq);
        }
        /* Keep the other ranks from racing ahead into the all-to-all. */
        LR_MUST(lr, collBarrier(comm, NULL), comm);
        info = expect_call(lr, &seq, "allreduce", NULL);
        LR_CHECK(lr, info.count == 1 && info.datatype == collUint8 && info.op == collMax,
                 "barrier: count %zu type %d op %d", info.count, info.datatype, info.op);
    }

    LR_MUST(lr, collAllToAll(buf, out, 100, collFloat, comm, NULL), comm);
    info = expect_call(lr, &seq, "collAllToAll", "p2p");
    check_transports(lr, &info, tps, n - 1);
    LR_CHECK(lr, info.count == 100 && info.datatype == collFloat, "all-to-all: count %zu",
             info.count);

    /* On a stream: reported once it has run, that is after the synchronize. */
    collStream_t s;
    LR_MUST(lr, collStreamCreate(&s), NULL);
    LR_MUST(lr, collAllReduce(buf, out, count, collFloat, collSum, comm, s), comm);
    LR_MUST(lr, collStreamSynchronize(s), comm);
    info = expect_call(lr, &seq, "allreduce", "ring");
    LR_CHECK(lr, n == 1 || (info.chunkBytes == CHUNK && info.count == count),
             "stream: %zu pieces of %zu bytes, count %zu", info.chunks, info.chunkBytes,
             info.count);
    /* Asked while calls run on the progress thread: one of them whole, or the
     * one before them. */
    for (int i = 0; i < 20; i++) {
        LR_MUST(lr, collAllReduce(small, small, 5, collFloat, collSum, comm, s), comm);
        info = last(lr);
        size_t want = info.seq == seq ? count : 5;
        LR_CHECK(lr, info.seq >= seq && info.seq <= seq + (uint64_t)i + 1 &&
                         str_is(info.func, "allreduce") && info.count == want,
                 "during stream call %d: %s #%llu of %zu", i, info.func,
                 (unsigned long long)info.seq, info.count);
    }
    LR_MUST(lr, collStreamSynchronize(s), comm);
    info = last(lr);
    LR_CHECK(lr, info.seq == seq + 20 && info.count == 5, "after the stream calls: #%llu of %zu",
             (unsigned long long)info.seq, info.count);
    LR_MUST(lr, collStreamDestroy(s), NULL);

    free(buf);
    free(out);
}

static bool known(const char *algo)
{
    for (size_t i = 0; i < sizeof(known_algos) / sizeof(known_algos[0]); i++)
        if (str_is(algo, known_algos[i]))
            return true;
    return false;
}

/* The planner's choices: a known algorithm, pieces only where it cuts pieces. */
static void check_auto(struct launch_rank *lr, const collCallInfo_t *info, const char *what)
{
    LR_CHECK(lr, known(info->algo), "%s: algo %s", what, info->algo ? info->algo : "NULL");
    bool pipelined = str_is(info->algo, "ring") || str_is(info->algo, "tree") ||
                     str_is(info->algo, "naive");
    if (pipelined && lr->nranks > 1)
        LR_CHECK(lr, info->chunkBytes > 0 && info->chunkBytes <= CHUNK && info->chunks > 0,
                 "%s by %s: %zu pieces of %zu bytes", what, info->algo, info->chunks,
                 info->chunkBytes);
    else if (!pipelined)
        LR_CHECK(lr, info->chunkBytes == 0 && info->chunks == 0,
                 "%s by %s: %zu pieces of %zu bytes", what, info->algo, info->chunks,
                 info->chunkBytes);
    bool known_tp = strcmp(info->transports, "shm") == 0 || strcmp(info->transports, "tcp") == 0 ||
                    strcmp(info->transports, "shm+tcp") == 0;
    LR_CHECK(lr, lr->nranks == 1 || (known_tp && info->peers >= 1),
             "%s by %s: transports \"%s\", %d peers", what, info->algo, info->transports,
             info->peers);
    if (lr->rank == 0)
        printf("%s: %s over %s, %d peers, %zu pieces of %zu bytes\n", what, info->algo,
               info->transports, info->peers, info->chunks, info->chunkBytes);
}

static void body_auto(struct launch_rank *lr)
{
    uint64_t seq = 0;
    float small[2] = {1, 2};
    LR_MUST(lr, collAllReduce(small, small, 2, collFloat, collSum, lr->comm, NULL), lr->comm);
    collCallInfo_t a = expect_call(lr, &seq, "allreduce", NULL);
    check_auto(lr, &a, "allreduce of 8 bytes");
    size_t count = (size_t)4 << 20 >> 2;
    float *buf = alloc_floats(lr, count);
    LR_MUST(lr, collAllReduce(buf, buf, count, collFloat, collSum, lr->comm, NULL), lr->comm);
    collCallInfo_t b = expect_call(lr, &seq, "allreduce", NULL);
    check_auto(lr, &b, "allreduce of 4 MiB");
    free(buf);
}

static void body(struct launch_rank *lr)
{
    const struct opts *o = lr->arg;
    check_empty(lr);
    check_refusals(lr);
    check_empty(lr); /* the queries and refusals are no calls */
    if (o->transport != NULL)
        body_forced(lr, o->transport);
    else
        body_auto(lr);
}

int main(int argc, char **argv)
{
    struct opts o = {.transport = NULL};
    int nthreads = 0;
    bool auto_mode = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--transport") == 0 && i + 1 < argc) {
            o.transport = argv[++i];
        } else if (strcmp(argv[i], "--auto") == 0) {
            auto_mode = true;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = launch_parse_threads(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s (--transport shm|tcp | --auto) [--threads N]\n", argv[0]);
            return 2;
        }
    }
    if ((o.transport == NULL) == !auto_mode) {
        fprintf(stderr, "%s: give one of --transport T and --auto\n", argv[0]);
        return 2;
    }
    /* Read once, at the first call into the library: set before any. */
    setenv("COLL_CHUNKSIZE", "65536", 1);
    if (o.transport != NULL) {
        setenv("COLL_TRANSPORTS", o.transport, 1);
        setenv("COLL_ALGO", "allreduce:ring;broadcast:tree;reduce:naive", 1);
    }
    return launch_run(nthreads, body, &o);
}
