/*
 * COLL_CHECK_MISMATCH=1 (set by this test for itself): ranks that call a
 * collective (collAllToAll, collGather and collScatter among them) with another
 * count, datatype, op or root, or call another collective, all get
 * collInvalidUsage, with a message naming the differing rank(s) and how they
 * differ, before any byte of the user's buffers moves (the receive buffer keeps
 * its sentinel); and the communicator works after.
 *
 *   collrun -n 3 test_mismatch          test_mismatch --threads 4
 *
 * Needs 2 ranks or more (1: nothing can differ, the test only checks that
 * matching calls run).
 */
#include <stdint.h>

#include "launch.h"

#define COUNT 128
#define SHORT 100
#define SENTINEL (-7.0f)

struct mm_bufs {
    float *send, *recv;
    size_t elems;
};

static void fill(struct mm_bufs *b, int rank)
{
    for (size_t i = 0; i < b->elems; i++) {
        b->send[i] = (float)(rank + 1);
        b->recv[i] = SENTINEL;
    }
}

/* The call failed as a mismatch on this rank, named every piece of want (NULL
 * ends it), and left recv untouched. */
static void expect_mismatch(struct launch_rank *lr, const char *what, collResult_t r,
                            const struct mm_bufs *b, const char *const *want)
{
    const char *msg = collGetLastError(lr->comm);
    LR_CHECK(lr, r == collInvalidUsage, "%s: returned %s, want collInvalidUsage (%s)", what,
             collGetErrorString(r), msg);
    for (int i = 0; want[i] != NULL; i++)
        LR_CHECK(lr, strstr(msg, want[i]) != NULL, "%s: message lacks \"%s\": %s", what,
                 want[i], msg);
    size_t moved = 0;
    for (size_t i = 0; i < b->elems; i++)
        moved += b->recv[i] != SENTINEL;
    LR_CHECK(lr, moved == 0, "%s: %zu element(s) of recvbuff were written", what, moved);
    collResult_t async = collInternalError;
    collCommGetAsyncError(lr->comm, &async);
    LR_CHECK(lr, async == collSuccess, "%s: the comm is poisoned (%s)", what,
             collGetErrorString(async));
}

/* A matching allreduce after a caught mismatch gives the right sum. */
static void expect_works(struct launch_rank *lr, const char *after, struct mm_bufs *b)
{
    fill(b, lr->rank);
    collResult_t r = collAllReduce(b->send, b->recv, COUNT, collFloat32, collSum, lr->comm, NULL);
    if (r != collSuccess)
        launch_fatal(lr, "allreduce after the %s mismatch: %s (%s)", after,
                     collGetErrorString(r), collGetLastError(lr->comm));
    float want = (float)lr->nranks * (float)(lr->nranks + 1) / 2.0f;
    LR_CHECK(lr, b->recv[0] == want && b->recv[COUNT - 1] == want,
             "allreduce after the %s mismatch: %g, want %g", after, (double)b->recv[0],
             (double)want);
}

static void mismatch_body(struct launch_rank *lr)
{
    int n = lr->nranks, me = lr->rank, odd = n - 1;
    collComm_t comm = lr->comm;
    struct mm_bufs b = {.elems = (size_t)COUNT * (size_t)n};
    b.send = malloc(b.elems * sizeof(float));
    b.recv = malloc(b.elems * sizeof(float));
    if (!b.send || !b.recv)
        launch_fatal(lr, "out of memory");
    expect_works(lr, "no", &b);
    if (n == 1)
        goto out;
    char r_odd[64], r_rest[64], c_odd[256], c_rest[256];
    snprintf(r_odd, sizeof(r_odd), "rank %d called ", odd);
    /* The ranks that did not differ: "ranks 0,1" (or "rank 0" with 2 ranks). */
    size_t len = (size_t)snprintf(r_rest, sizeof(r_rest), "%s", n == 2 ? "rank " : "ranks ");
    for (int k = 0; k < odd; k++)
        len += (size_t)snprintf(r_rest + len, sizeof(r_rest) - len, "%s%d", k ? "," : "", k);

    /* count */
    fill(&b, me);
    collResult_t r = collAllReduce(b.send, b.recv, me == odd ? SHORT : COUNT, collFloat32,
                                   collSum, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollAllReduce with count %d", r_odd, SHORT);
    snprintf(c_rest, sizeof(c_rest), "%s with count %d", r_rest, COUNT);
    expect_mismatch(lr, "count", r, &b, (const char *[]){"collAllReduce #", c_odd, c_rest, NULL});
    expect_works(lr, "count", &b);

    /* datatype */
    fill(&b, me);
    r = collAllReduce(b.send, b.recv, COUNT, me == odd ? collInt32 : collFloat32, collSum, comm,
                      NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollAllReduce with datatype int32", r_odd);
    snprintf(c_rest, sizeof(c_rest), "%s with datatype float32", r_rest);
    expect_mismatch(lr, "datatype", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "datatype", &b);

    /* op */
    fill(&b, me);
    r = collReduceScatter(b.send, b.recv, COUNT, collFloat32, me == odd ? collMax : collSum,
                          comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollReduceScatter with op max", r_odd);
    snprintf(c_rest, sizeof(c_rest), "%s with op sum", r_rest);
    expect_mismatch(lr, "op", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "op", &b);

    /* root */
    fill(&b, me);
    r = collBroadcast(b.send, b.recv, COUNT, collFloat32, me == odd ? 1 : 0, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollBroadcast with root 1", r_odd);
    snprintf(c_rest, sizeof(c_rest), "%s with root 0", r_rest);
    expect_mismatch(lr, "root", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "root", &b);

    /* operation: a broadcast where the others reduce */
    fill(&b, me);
    if (me == odd)
        r = collBroadcast(b.send, b.recv, COUNT, collFloat32, 0, comm, NULL);
    else
        r = collReduce(b.send, b.recv, COUNT, collFloat32, collSum, 0, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollBroadcast(count %d, datatype float32, root 0)",
             r_odd, COUNT);
    snprintf(c_rest, sizeof(c_rest), "%s called collReduce(count %d, datatype float32, op sum, "
             "root 0)", r_rest, COUNT);
    expect_mismatch(lr, "operation", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "operation", &b);

    /* allgather and all-to-all counts */
    fill(&b, me);
    r = collAllGather(b.send, b.recv, me == odd ? SHORT : COUNT, collFloat32, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollAllGather with count %d", r_odd, SHORT);
    expect_mismatch(lr, "allgather count", r, &b, (const char *[]){c_odd, NULL});
    expect_works(lr, "allgather count", &b);
    fill(&b, me);
    r = collAllToAll(b.send, b.recv, me == odd ? SHORT : COUNT, collFloat32, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollAllToAll with count %d", r_odd, SHORT);
    expect_mismatch(lr, "all-to-all count", r, &b, (const char *[]){c_odd, NULL});
    expect_works(lr, "all-to-all count", &b);

    /* gather and scatter: the root, and one called where the others call the other */
    fill(&b, me);
    r = collGather(b.send, b.recv, COUNT, collFloat32, me == odd ? 1 : 0, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollGather with root 1", r_odd);
    snprintf(c_rest, sizeof(c_rest), "%s with root 0", r_rest);
    expect_mismatch(lr, "gather root", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "gather root", &b);
    fill(&b, me);
    if (me == odd)
        r = collScatter(b.send, b.recv, COUNT, collFloat32, 0, comm, NULL);
    else
        r = collGather(b.send, b.recv, COUNT, collFloat32, 0, comm, NULL);
    snprintf(c_odd, sizeof(c_odd), "%scollScatter(count %d, datatype float32, root 0)", r_odd,
             COUNT);
    snprintf(c_rest, sizeof(c_rest), "%s called collGather(count %d, datatype float32, root 0)",
             r_rest, COUNT);
    expect_mismatch(lr, "gather/scatter", r, &b, (const char *[]){c_odd, c_rest, NULL});
    expect_works(lr, "gather/scatter", &b);

    /* two ranks differ alike (4 ranks and more): both are named together */
    if (n >= 4) {
        fill(&b, me);
        r = collAllReduce(b.send, b.recv, me == 1 || me == 3 ? SHORT : COUNT, collFloat32,
                          collSum, comm, NULL);
        snprintf(c_odd, sizeof(c_odd), "ranks 1,3 called collAllReduce with count %d", SHORT);
        expect_mismatch(lr, "two ranks", r, &b, (const char *[]){c_odd, NULL});
        expect_works(lr, "two ranks", &b);
    }

    /* a collective inside a group: collGroupEnd returns the mismatch */
    fill(&b, me);
    collGroupStart();
    r = collAllReduce(b.send, b.recv, me == odd ? SHORT : COUNT, collFloat32, collSum, comm,
                      NULL);
    LR_CHECK(lr, r == collSuccess, "queueing in a group: %s", collGetErrorString(r));
    r = collGroupEnd();
    snprintf(c_odd, sizeof(c_odd), "%scollAllReduce with count %d", r_odd, SHORT);
    expect_mismatch(lr, "group", r, &b, (const char *[]){c_odd, NULL});
    expect_works(lr, "group", &b);

    /* matching calls of every kind still run and give the right data */
    fill(&b, me);
    r = collAllGather(b.send, b.recv, COUNT, collFloat32, comm, NULL);
    LR_CHECK(lr, r == collSuccess && b.recv[(size_t)odd * COUNT] == (float)(odd + 1),
             "allgather: %s, %g", collGetErrorString(r), (double)b.recv[(size_t)odd * COUNT]);
    fill(&b, me);
    r = collAllToAll(b.send, b.recv, COUNT, collFloat32, comm, NULL);
    LR_CHECK(lr, r == collSuccess && b.recv[(size_t)odd * COUNT] == (float)(odd + 1),
             "all-to-all: %s, %g", collGetErrorString(r), (double)b.recv[(size_t)odd * COUNT]);
    fill(&b, me);
    r = collGather(b.send, b.recv, COUNT, collFloat32, odd, comm, NULL);
    LR_CHECK(lr, r == collSuccess && (me != odd || b.recv[COUNT] == 2.0f),
             "gather: %s, %g", collGetErrorString(r), (double)b.recv[COUNT]);
    fill(&b, me);
    r = collScatter(b.send, b.recv, COUNT, collFloat32, odd, comm, NULL);
    LR_CHECK(lr, r == collSuccess && b.recv[0] == (float)(odd + 1), "scatter: %s, %g",
             collGetErrorString(r), (double)b.recv[0]);
    fill(&b, me);
    r = collBroadcast(b.send, b.recv, COUNT, collFloat32, odd, comm, NULL);
    LR_CHECK(lr, r == collSuccess && b.recv[0] == (float)(odd + 1), "broadcast: %s, %g",
             collGetErrorString(r), (double)b.recv[0]);
out:
    free(b.send);
    free(b.recv);
}

int main(int argc, char **argv)
{
    /* Before the library reads its parameters (once per process). */
    setenv("COLL_CHECK_MISMATCH", "1", 1);
    return launch_main(argc, argv, mismatch_body, NULL);
}
