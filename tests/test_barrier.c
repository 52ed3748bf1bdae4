/*
 * collBarrier: no rank leaves it before every rank has entered it.
 *
 *   1. rounds in which one rank (a different one each round) is late: before
 *      its barrier each rank leaves a mark (a file in a folder rank 0 made and
 *      broadcast), and after it each rank finds every rank's mark of the round;
 *   2. the same with the barrier queued on a stream, then the stream
 *      synchronized;
 *   3. barriers between small collectives (the shared-memory slots' calls are
 *      numbered: a barrier among them must keep every rank's count in step),
 *      whose results are checked;
 *   4. refused: a NULL comm, a stream that is not one; the comm stays usable.
 *
 *   collrun -n 3 test_barrier      test_barrier --threads 4
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launch.h"

#define ROUNDS 12
#define LATE_US 20000

struct marks {
    char dir[64];
};

static void mark_path(char *p, size_t cap, const char *dir, int round, int rank)
{
    snprintf(p, cap, "%s/%d.%d", dir, round, rank);
}

static void leave_mark(struct launch_rank *lr, const char *dir, int round)
{
    char p[128];
    mark_path(p, sizeof(p), dir, round, lr->rank);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        launch_fatal(lr, "cannot create %s: %s", p, strerror(errno));
    fclose(f);
}

static void find_marks(struct launch_rank *lr, const char *dir, int round, const char *how)
{
    for (int r = 0; r < lr->nranks; r++) {
        char p[128];
        mark_path(p, sizeof(p), dir, round, r);
        LR_CHECK(lr, access(p, F_OK) == 0,
                 "%s round %d: left the barrier before rank %d entered it", how, round, r);
    }
}

static void body(struct launch_rank *lr)
{
    collComm_t comm = lr->comm;
    int n = lr->nranks, me = lr->rank;

    /* The folder of the marks: rank 0's, named to every rank. */
    struct marks m = {{0}};
    if (me == 0) {
        snprintf(m.dir, sizeof(m.dir), "/tmp/coll-barrier-XXXXXX");
        if (mkdtemp(m.dir) == NULL)
            launch_fatal(lr, "mkdtemp: %s", strerror(errno));
    }
    LR_MUST(lr, collBroadcast(&m, &m, sizeof(m), collUint8, 0, comm, NULL), comm);

    /* 1. blocking */
    for (int k = 0; k < ROUNDS; k++) {
        if (k % n == me)
            usleep(LATE_US);
        leave_mark(lr, m.dir, k);
        LR_MUST(lr, collBarrier(comm, NULL), comm);
        find_marks(lr, m.dir, k, "blocking");
    }

    /* 2. on a stream */
    collStream_t s;
    LR_MUST(lr, collStreamCreate(&s), NULL);
    for (int k = ROUNDS; k < 2 * ROUNDS; k++) {
        if (k % n == me)
            usleep(LATE_US);
        leave_mark(lr, m.dir, k);
        LR_MUST(lr, collBarrier(comm, s), comm);
        LR_MUST(lr, collStreamSynchronize(s), comm);
        find_marks(lr, m.dir, k, "stream");
    }
    LR_MUST(lr, collStreamDestroy(s), NULL);

    /* 3. between small collectives, whose results must stay right */
    for (int k = 0; k < 50; k++) {
        int32_t v[3] = {me + k, 1, -me}, sum[3];
        LR_MUST(lr, collAllReduce(v, sum, 3, collInt32, collSum, comm, NULL), comm);
        LR_CHECK(lr, sum[0] == n * (n - 1) / 2 + n * k && sum[1] == n &&
                         sum[2] == -n * (n - 1) / 2,
                 "call %d: allreduce after barriers gave %d %d %d", k, sum[0], sum[1], sum[2]);
        if (k % 3 == 0)
            LR_MUST(lr, collBarrier(comm, NULL), comm);
        int64_t b = me == k % n ? 1000 + k : -1;
        LR_MUST(lr, collBroadcast(&b, &b, 1, collInt64, k % n, comm, NULL), comm);
        LR_CHECK(lr, b == 1000 + k, "call %d: broadcast after barriers gave %lld", k,
                 (long long)b);
        LR_MUST(lr, collBarrier(comm, NULL), comm);
    }

    /* 4. refused */
    collResult_t r = collBarrier(NULL, NULL);
    LR_CHECK(lr, r == collInvalidArgument, "collBarrier(NULL comm) returned %s",
             collGetErrorString(r));
    LR_CHECK(lr, strstr(collGetLastError(NULL), "comm") != NULL,
             "collBarrier(NULL comm) said '%s', not naming comm", collGetLastError(NULL));
    int not_a_stream;
    r = collBarrier(comm, (collStream_t)&not_a_stream);
    LR_CHECK(lr, r == collInvalidArgument, "collBarrier with a bad stream returned %s",
             collGetErrorString(r));
    LR_CHECK(lr, strstr(collGetLastError(comm), "stream") != NULL,
             "collBarrier with a bad stream said '%s', not naming the stream",
             collGetLastError(comm));
    LR_MUST(lr, collBarrier(comm, NULL), comm); /* still usable */

    if (me == 0) {
        for (int k = 0; k < 2 * ROUNDS; k++)
            for (int q = 0; q < n; q++) {
                char p[128];
                mark_path(p, sizeof(p), m.dir, k, q);
                unlink(p);
            }
        rmdir(m.dir);
    }
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, body, NULL);
}
