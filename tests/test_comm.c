/*
 * Communicator configuration and life cycle, on healthy ranks (test_shrink.c has
 * shrink after a failure):
 *
 *   1. collConfig_t refusals, each naming its field; a named communicator's
 *      errors carry its name;
 *   2. a non-blocking communicator: init returns collInProgress while a peer is
 *      late and calls are refused until it is done; then 20 allreduces, a
 *      send/recv group, a gather and a scatter return collInProgress and
 *      collCommGetAsyncError reports collInProgress, then collSuccess, with every
 *      result right; collCommFinalize, after which calls are refused;
 *   3. collCommAbort from another thread while a non-blocking init waits for a
 *      rank that never comes: it returns within one second;
 *   4. collCommSplit: two colors with keys that reverse the order, and one rank
 *      with COLL_SPLIT_NOCOLOR; the groups' collectives are right;
 *   5. collCommShrink without a failure (the last rank excluded and idle), then
 *      the parent communicator still works for every rank;
 *   6. collCommSplit and collCommShrink refusals;
 *   7. collCommRevoke: refused for a NULL comm and for revokeFlags other than 0
 *      (naming them, the comm still usable); on an idle communicator split
 *      from the test's, every rank revokes it: a call on it then fails at once
 *      saying it was revoked, a second revoke is a no-op, and a shrink with no
 *      exclusions and no flags gives a communicator that works (test_shrink
 *      --mode revoke has calls blocked on a stopped rank).
 *
 *   collrun -n N test_comm    or    test_comm --threads N
 */
#include "launch.h"

#include <stdatomic.h>

#define CHECK_OK LR_MUST

/* A fresh id made by rank 0 of comm and broadcast to the others. */
static void share_id(struct launch_rank *lr, collComm_t comm, collUniqueId *id)
{
    if (lr->rank == 0)
        CHECK_OK(lr, collGetUniqueId(id), NULL);
    CHECK_OK(lr, collBroadcast(id, id, sizeof(*id), collUint8, 0, comm, NULL), comm);
}

/* Polls collCommGetAsyncError until it is no longer collInProgress. */
static collResult_t wait_async(collComm_t comm)
{
    collResult_t st = collInProgress;
    for (int i = 0; i < 600000 && st == collInProgress; i++) {
        if (collCommGetAsyncError(comm, &st) != collSuccess)
            return collInternalError;
        if (st == collInProgress) {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    return st;
}

static bool contains(const char *s, const char *what)
{
    return s != NULL && strstr(s, what) != NULL;
}

static void part_config(struct launch_rank *lr)
{
    collComm_t c = NULL;
    collUniqueId id;
    share_id(lr, lr->comm, &id);
    static const char long_name[] = "a-name-that-is-much-longer-than-the-sixty-three-characters-"
                                    "a-communicator-name-may-have";
    struct {
        const char *field;
        collConfig_t cfg;
    } bad[4];
    for (int i = 0; i < 4; i++)
        bad[i].cfg = (collConfig_t)COLL_CONFIG_INITIALIZER;
    bad[0].field = "COLL_CONFIG_INITIALIZER";
    bad[0].cfg.magic = 0;
    bad[1].field = "blocking";
    bad[1].cfg.blocking = 2;
    bad[2].field = "timeoutMs";
    bad[2].cfg.timeoutMs = 0;
    bad[3].field = "commName";
    bad[3].cfg.commName = long_name;
    for (int i = 0; i < 4; i++) {
        LR_CHECK_RES(lr, collCommInitRankConfig(&c, lr->nranks, id, lr->rank, &bad[i].cfg),
                     collInvalidArgument, NULL);
        LR_CHECK(lr, contains(collGetLastError(NULL), bad[i].field), "refusal '%s' lacks '%s'",
                 collGetLastError(NULL), bad[i].field);
    }
    LR_CHECK(lr, c == NULL, "a refused init set *comm");

    /* A named, blocking communicator with its own timeout. */
    collConfig_t cfg = COLL_CONFIG_INITIALIZER;
    cfg.commName = "alpha";
    cfg.timeoutMs = 30000;
    cfg.blocking = 1;
    CHECK_OK(lr, collCommInitRankConfig(&c, lr->nranks, id, lr->rank, &cfg), NULL);
    int v = lr->rank + 1, sum = 0;
    CHECK_OK(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, c, NULL), c);
    LR_CHECK(lr, sum == lr->nranks * (lr->nranks + 1) / 2, "sum %d", sum);
    LR_CHECK_RES(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, c, (collStream_t)&v),
                 collInvalidArgument, c);
    LR_CHECK(lr, strncmp(collGetLastError(c), "comm \"alpha\": ", 14) == 0,
             "error of a named comm lacks its name: %s", collGetLastError(c));
    CHECK_OK(lr, collCommDestroy(c), NULL);
}

static void part_nonblocking(struct launch_rank *lr)
{
    collUniqueId id;
    share_id(lr, lr->comm, &id);
    collConfig_t cfg = COLL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    collComm_t c = NULL;
    /* Rank 0 starts 500 ms before the others: its init is surely in progress
     * when it tries a call. */
    if (lr->rank != 0) {
        struct timespec ts = {0, 500000000};
        nanosleep(&ts, NULL);
    }
    collResult_t r = collCommInitRankConfig(&c, lr->nranks, id, lr->rank, &cfg);
    LR_CHECK(lr, r == collInProgress || r == collSuccess, "non-blocking init returned %s",
             collGetErrorString(r));
    if (c == NULL)
        launch_fatal(lr, "non-blocking init did not set *comm: %s", collGetLastError(NULL));
    int v = 1, out = 0;
    if (lr->rank == 0 && lr->nranks > 1) {
        collResult_t st;
        CHECK_OK(lr, collCommGetAsyncError(c, &st), c);
        LR_CHECK(lr, st == collInProgress, "init of rank 0 done before the peers came: %s",
                 collGetErrorString(st));
        LR_CHECK_RES(lr, collAllReduce(&v, &out, 1, collInt32, collSum, c, NULL),
                     collInvalidUsage, c);
        LR_CHECK(lr, contains(collGetLastError(c), "in progress"), "refusal: %s",
                 collGetLastError(c));
    }
    LR_CHECK_RES(lr, wait_async(c), collSuccess, c);

    enum { CALLS = 20, COUNT = 1000 };
    int *in = malloc(sizeof(int) * COUNT * CALLS), *res = malloc(sizeof(int) * COUNT * CALLS);
    if (in == NULL || res == NULL)
        launch_fatal(lr, "out of memory");
    for (int k = 0; k < COUNT * CALLS; k++) {
        in[k] = (lr->rank + 1) * (k % 97);
        res[k] = -1;
    }
    int inprogress = 0;
    for (int i = 0; i < CALLS; i++) {
        r = collAllReduce(in + i * COUNT, res + i * COUNT, COUNT, collInt32, collSum, c, NULL);
        LR_CHECK(lr, r == collInProgress || r == collSuccess, "call %d returned %s (%s)", i,
                 collGetErrorString(r), collGetLastError(c));
        inprogress += r == collInProgress;
    }
    LR_CHECK(lr, inprogress == CALLS, "%d of %d calls returned collInProgress", inprogress,
             CALLS);
    LR_CHECK_RES(lr, wait_async(c), collSuccess, c);
    int tri = lr->nranks * (lr->nranks + 1) / 2, wrong = 0;
    for (int k = 0; k < COUNT * CALLS; k++)
        wrong += res[k] != tri * (k % 97);
    LR_CHECK(lr, wrong == 0, "%d wrong elements after the non-blocking calls", wrong);
    /* Send/receive around the ring, also queued. */
    if (lr->nranks > 1) {
        int next = (lr->rank + 1) % lr->nranks, prev = (lr->rank + lr->nranks - 1) % lr->nranks;
        int got = -1;
        CHECK_OK(lr, collGroupStart(), c);
        (void)collSend(&lr->rank, 1, collInt32, next, c, NULL);
        (void)collRecv(&got, 1, collInt32, prev, c, NULL);
        LR_CHECK_RES(lr, collGroupEnd(), collInProgress, c);
        LR_CHECK_RES(lr, wait_async(c), collSuccess, c);
        LR_CHECK(lr, got == prev, "received %d from rank %d", got, prev);
    }
    /* A gather to rank 0 and a scatter back, queued too: the scatter reads what
     * the gather wrote, since a comm's calls run in the order issued. */
    int *all = calloc((size_t)lr->nranks, sizeof(int));
    int mine = 100 + lr->rank, back = -1;
    if (all == NULL)
        launch_fatal(lr, "out of memory");
    LR_CHECK_RES(lr, collGather(&mine, lr->rank == 0 ? all : NULL, 1, collInt32, 0, c, NULL),
                 collInProgress, c);
    LR_CHECK_RES(lr, collScatter(lr->rank == 0 ? all : NULL, &back, 1, collInt32, 0, c, NULL),
                 collInProgress, c);
    LR_CHECK_RES(lr, wait_async(c), collSuccess, c);
    LR_CHECK(lr, back == mine, "gather then scatter gave %d, want %d", back, mine);
    free(all);
    LR_CHECK_RES(lr, collCommFinalize(c), collSuccess, c);
    LR_CHECK_RES(lr, collAllReduce(&v, &out, 1, collInt32, collSum, c, NULL), collInvalidUsage,
                 c);
    LR_CHECK(lr, contains(collGetLastError(c), "finalized"), "refusal: %s", collGetLastError(c));
    CHECK_OK(lr, collCommDestroy(c), NULL);
    free(in);
    free(res);
}

struct aborter {
    collComm_t comm;
    double called, returned;
    collResult_t res;
};

static void *abort_main(void *arg)
{
    struct aborter *a = arg;
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    a->called = launch_now();
    a->res = collCommAbort(a->comm);
    a->returned = launch_now();
    return NULL;
}

static void part_abort_init(struct launch_rank *lr)
{
    /* A communicator of two ranks of which only rank 0 ever comes. */
    collUniqueId id;
    CHECK_OK(lr, collGetUniqueId(&id), NULL);
    collConfig_t cfg = COLL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    collComm_t c = NULL;
    LR_CHECK_RES(lr, collCommInitRankConfig(&c, 2, id, 0, &cfg), collInProgress, NULL);
    if (c == NULL)
        return;
    struct aborter a = {.comm = c};
    pthread_t t;
    if (pthread_create(&t, NULL, abort_main, &a) != 0)
        launch_fatal(lr, "pthread_create failed");
    pthread_join(t, NULL);
    LR_CHECK_RES(lr, a.res, collSuccess, NULL);
    LR_CHECK(lr, a.returned - a.called < 1.0, "collCommAbort during init took %.3f s",
             a.returned - a.called);
}

static void part_split(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank;
    /* With 3+ ranks the last one joins no group. */
    int color = n >= 3 && me == n - 1 ? COLL_SPLIT_NOCOLOR : me % 2;
    collComm_t c = (collComm_t)&color; /* must be overwritten */
    CHECK_OK(lr, collCommSplit(lr->comm, color, -me, &c, NULL), lr->comm);
    if (color == COLL_SPLIT_NOCOLOR) {
        LR_CHECK(lr, c == NULL, "COLL_SPLIT_NOCOLOR gave a communicator");
    } else {
        int members[64], size = 0;
        for (int r = n - 1; r >= 0; r--) /* key -r: descending old rank */
            if (r % 2 == color && !(n >= 3 && r == n - 1) && size < 64)
                members[size++] = r;
        int cn = -1, cr = -1;
        CHECK_OK(lr, collCommCount(c, &cn), c);
        CHECK_OK(lr, collCommUserRank(c, &cr), c);
        LR_CHECK(lr, cn == size, "split group of color %d has %d ranks, want %d", color, cn,
                 size);
        LR_CHECK(lr, cr >= 0 && cr < size && members[cr] == me, "new rank %d for old rank %d",
                 cr, me);
        /* Gather the old ranks in new-rank order. */
        int *all = calloc((size_t)(cn > 0 ? cn : 1), sizeof(int));
        if (all == NULL)
            launch_fatal(lr, "out of memory");
        CHECK_OK(lr, collAllGather(&me, all, 1, collInt32, c, NULL), c);
        for (int k = 0; k < cn && k < size; k++)
            LR_CHECK(lr, all[k] == members[k], "new rank %d is old rank %d, want %d", k, all[k],
                     members[k]);
        free(all);
        CHECK_OK(lr, collCommDestroy(c), NULL);
    }
    /* The parent is unchanged. */
    int v = 1, sum = 0;
    CHECK_OK(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    LR_CHECK(lr, sum == n, "parent allreduce after split: %d", sum);
}

static void part_shrink(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank;
    if (n < 2)
        return;
    int excl = n - 1;
    if (me != excl) {
        collComm_t c = NULL;
        collConfig_t cfg = COLL_CONFIG_INITIALIZER;
        cfg.commName = "shrunk";
        CHECK_OK(lr, collCommShrink(lr->comm, &excl, 1, &c, &cfg, COLL_SHRINK_DEFAULT),
                 lr->comm);
        int cn = -1, cr = -1;
        CHECK_OK(lr, collCommCount(c, &cn), c);
        CHECK_OK(lr, collCommUserRank(c, &cr), c);
        LR_CHECK(lr, cn == n - 1 && cr == me, "shrunk: rank %d of %d, want %d of %d", cr, cn,
                 me, n - 1);
        double v = me + 0.5, sum = 0;
        CHECK_OK(lr, collAllReduce(&v, &sum, 1, collDouble, collSum, c, NULL), c);
        LR_CHECK(lr, sum == (double)(n - 1) * (n - 2) / 2 + 0.5 * (n - 1), "sum %g", sum);
        CHECK_OK(lr, collCommDestroy(c), NULL);
    }
    int v = 1, sum = 0;
    CHECK_OK(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    LR_CHECK(lr, sum == n, "parent allreduce after shrink: %d", sum);
}

static void part_refusals(struct launch_rank *lr)
{
    collComm_t c = NULL;
    int n = lr->nranks, me = lr->rank;
    LR_CHECK_RES(lr, collCommSplit(lr->comm, -5, 0, &c, NULL), collInvalidArgument, lr->comm);
    LR_CHECK(lr, contains(collGetLastError(lr->comm), "color"), "%s", collGetLastError(lr->comm));
    LR_CHECK_RES(lr, collCommSplit(lr->comm, 0, 0, NULL, NULL), collInvalidArgument, lr->comm);
    LR_CHECK(lr, contains(collGetLastError(lr->comm), "newcomm"), "%s",
             collGetLastError(lr->comm));
    int list[2] = {me, me};
    struct {
        int *list, count, flags;
        const char *names;
    } bad[] = {
        {list, -1, 0, "excludeRanksCount"},
        {list, n, 0, "excludeRanksCount"},
        {NULL, 1, 0, "excludeRanksList"},
        {list, 1, 0, "this rank"},
        {list, 1, 0x100, "shrinkFlags"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (bad[i].count >= n && n == 1)
            continue;
        LR_CHECK_RES(lr, collCommShrink(lr->comm, bad[i].list, bad[i].count, &c, NULL,
                                        bad[i].flags), collInvalidArgument, lr->comm);
        LR_CHECK(lr, contains(collGetLastError(lr->comm), bad[i].names), "refusal %zu: %s", i,
                 collGetLastError(lr->comm));
    }
    if (n >= 3) {
        int rep[2] = {(me + 1) % n, (me + 1) % n};
        LR_CHECK_RES(lr, collCommShrink(lr->comm, rep, 2, &c, NULL, 0), collInvalidArgument,
                     lr->comm);
        LR_CHECK(lr, contains(collGetLastError(lr->comm), "repeated"), "%s",
                 collGetLastError(lr->comm));
    }
    LR_CHECK(lr, c == NULL, "a refused call set *newcomm");
}

static void part_revoke(struct launch_rank *lr)
{
    int n = lr->nranks;
    LR_CHECK_RES(lr, collCommRevoke(NULL, 0), collInvalidArgument, NULL);
    LR_CHECK(lr, contains(collGetLastError(NULL), "comm"), "%s", collGetLastError(NULL));
    LR_CHECK_RES(lr, collCommRevoke(lr->comm, 3), collInvalidArgument, lr->comm);
    LR_CHECK(lr, contains(collGetLastError(lr->comm), "revokeFlags"), "%s",
             collGetLastError(lr->comm));
    int v = 1, sum = 0;
    CHECK_OK(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, lr->comm, NULL), lr->comm);
    LR_CHECK(lr, sum == n, "allreduce after a refused revoke: %d", sum);

    collComm_t c = NULL;
    CHECK_OK(lr, collCommSplit(lr->comm, 0, lr->rank, &c, NULL), lr->comm);
    CHECK_OK(lr, collCommRevoke(c, 0), c);
    double t0 = launch_now();
    LR_CHECK_RES(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, c, NULL), collRemoteError,
                 c);
    LR_CHECK(lr, launch_now() - t0 < 0.5, "a call on a revoked communicator took %.3f s",
             launch_now() - t0);
    LR_CHECK(lr, contains(collGetLastError(c), "revoked"), "%s", collGetLastError(c));
    CHECK_OK(lr, collCommRevoke(c, 0), c);
    collComm_t s = NULL;
    CHECK_OK(lr, collCommShrink(c, NULL, 0, &s, NULL, COLL_SHRINK_DEFAULT), c);
    int sn = -1;
    CHECK_OK(lr, collCommCount(s, &sn), s);
    LR_CHECK(lr, sn == n, "shrink of a revoked communicator: %d ranks, want %d", sn, n);
    sum = 0;
    CHECK_OK(lr, collAllReduce(&v, &sum, 1, collInt32, collSum, s, NULL), s);
    LR_CHECK(lr, sum == n, "allreduce after the shrink of a revoked communicator: %d", sum);
    CHECK_OK(lr, collCommDestroy(s), NULL);
    CHECK_OK(lr, collCommDestroy(c), NULL);
}

static void body(struct launch_rank *lr)
{
    part_config(lr);
    part_nonblocking(lr);
    part_abort_init(lr);
    part_split(lr);
    part_shrink(lr);
    part_refusals(lr);
    part_revoke(lr);
    CHECK_OK(lr, collAllReduce(&lr->rank, &lr->rank, 0, collInt32, collSum, lr->comm, NULL),
             lr->comm);
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, body, NULL);
}
