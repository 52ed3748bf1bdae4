/*
 * Every public call with bad arguments: it returns collInvalidArgument (also for
 * a stream not from collStreamCreate), collGetLastError names the argument, and the
 * communicator still works afterwards (a real allreduce is run and checked after
 * each refused call).  Also the version, the error strings, and the NULL buffers
 * the API allows: any buffer with count 0, sendbuff off the root of a broadcast
 * or a scatter, recvbuff off the root of a reduce or a gather.
 *
 *   collrun -n 3 --timeout 120 test_args
 *   test_args --threads 2
 *
 * Every rank makes the same refused calls.  A refused call does not communicate,
 * so where a check is about the root (broadcast's and scatter's sendbuff, reduce's
 * and gather's recvbuff) each rank names itself as the root of its refused call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"

#define NELEM 4 /* count of the refused calls and of the allowed NULL-buffer calls */

struct args_rank {
    struct launch_rank *lr;
    float *sbuf; /* NELEM * nranks elements */
    float *rbuf; /* NELEM * nranks elements */
    int refused; /* refused calls checked */
};

/* After a refused call: a real allreduce must still give the right answer. */
static void check_comm_works(struct args_rank *ar, int line)
{
    struct launch_rank *lr = ar->lr;
    int32_t in[8], out[8];
    collResult_t r;

    for (int i = 0; i < 8; i++) {
        in[i] = lr->rank + 1 + i;
        out[i] = -1;
    }
    r = collAllReduce(in, out, 8, collInt32, collSum, lr->comm, NULL);
    if (r != collSuccess)
        launch_fatal(lr, "allreduce after the refused call of line %d returned %s: %s", line,
                     collGetErrorString(r), collGetLastError(lr->comm));
    for (int i = 0; i < 8; i++) {
        int32_t want = lr->nranks * (lr->nranks + 1) / 2 + lr->nranks * i;
        LR_CHECK(lr, out[i] == want, "after the refused call of line %d: out[%d] = %d, want %d",
                 line, i, out[i], want);
    }
}

/*
 * Checks that `got` is `want` and that the last error (of comm, or of this thread
 * when comm is NULL) mentions `word`; then, with a comm, that the comm still works.
 */
static void check_refused(struct args_rank *ar, collResult_t got, collResult_t want,
                          collComm_t comm, const char *word, const char *call, int line)
{
    struct launch_rank *lr = ar->lr;
    const char *msg = collGetLastError(comm);
    /* Look past "collFoo: ", since function names such as collCommCount contain
     * the words looked for. */
    const char *text = msg ? strstr(msg, ": ") : NULL;

    text = text ? text + 2 : msg;
    ar->refused++;
    if (got != want) {
        launch_report(lr, __FILE__, line, call, "returned %s, want %s (%s)",
                      collGetErrorString(got), collGetErrorString(want), msg ? msg : "(null)");
    } else if (!text || !strcasestr(text, word)) {
        launch_report(lr, __FILE__, line, call, "last error '%s' does not mention '%s'",
                      msg ? msg : "(null)", word);
    } else if (lr->rank == 0 && getenv("COLL_TEST_VERBOSE")) {
        printf("  line %d: %s -> %s: %s\n", line, call, collGetErrorString(got), msg);
    }
    if (lr->comm)
        check_comm_works(ar, line);
}

#define REFUSED(call, want, comm, word) \
    check_refused(ar, (call), (want), (comm), (word), #call, __LINE__)
#define BAD_ARG(call, comm, word) REFUSED(call, collInvalidArgument, comm, word)

static void check_version_and_strings(struct args_rank *ar)
{
    struct launch_rank *lr = ar->lr;
    int v = -1;

    LR_CHECK_RES(lr, collGetVersion(NULL), collInvalidArgument, NULL);
    LR_CHECK_RES(lr, collGetVersion(&v), collSuccess, NULL);
    LR_CHECK(lr, v == 100, "collGetVersion gave %d, want 100 (0.1.0)", v);
    LR_CHECK(lr, v == COLL_VERSION_CODE, "library %d, header %d", v, COLL_VERSION_CODE);

    const char *s[collNumResults];
    for (int i = 0; i < collNumResults; i++) {
        s[i] = collGetErrorString((collResult_t)i);
        LR_CHECK(lr, s[i] && s[i][0], "collGetErrorString(%d) is empty", i);
        if (!s[i])
            return;
        for (int j = 0; j < i; j++)
            LR_CHECK(lr, strcmp(s[i], s[j]) != 0, "codes %d and %d share the string '%s'", j, i,
                     s[i]);
    }
    const int out_of_range[] = {collNumResults, -1, 1000};
    for (size_t i = 0; i < sizeof(out_of_range) / sizeof(out_of_range[0]); i++) {
        const char *u = collGetErrorString((collResult_t)out_of_range[i]);
        LR_CHECK(lr, u && u[0], "collGetErrorString(%d) is empty", out_of_range[i]);
        if (u)
            LR_CHECK(lr, strcmp(u, s[collSuccess]) != 0,
                     "collGetErrorString(%d) claims success: '%s'", out_of_range[i], u);
    }
    LR_CHECK(lr, collGetLastError(NULL) != NULL, "collGetLastError(NULL) is NULL");
}

/* Refused inits: they must not touch *comm, nor contact the root. */
static void check_init_args(struct args_rank *ar)
{
    struct launch_rank *lr = ar->lr;
    collUniqueId id = lr->id;
    collComm_t sentinel = (collComm_t)(uintptr_t)0x1234;
    collComm_t c = sentinel;
    int n = lr->nranks;

    /* In process mode the id comes from COLL_COMM_ID, as collGetUniqueId makes it there. */
    if (!lr->threads && getenv("COLL_COMM_ID"))
        LR_CHECK_RES(lr, collGetUniqueId(&id), collSuccess, NULL);
    BAD_ARG(collGetUniqueId(NULL), NULL, "id");
    BAD_ARG(collCommInitRank(NULL, n, id, lr->rank), NULL, "comm");
    BAD_ARG(collCommInitRank(&c, 0, id, 0), NULL, "nranks");
    BAD_ARG(collCommInitRank(&c, -1, id, 0), NULL, "nranks");
    BAD_ARG(collCommInitRank(&c, n, id, -1), NULL, "rank");
    BAD_ARG(collCommInitRank(&c, n, id, n), NULL, "rank");
    LR_CHECK(lr, c == sentinel, "a refused init changed *comm");
    BAD_ARG(collCommInitFromEnv(NULL), NULL, "comm");
}

static void check_comm_queries(struct args_rank *ar)
{
    struct launch_rank *lr = ar->lr;
    collComm_t comm = lr->comm;
    collResult_t async = collInternalError;
    int x;

    BAD_ARG(collCommCount(comm, NULL), comm, "count");
    BAD_ARG(collCommCount(NULL, &x), NULL, "comm");
    BAD_ARG(collCommUserRank(comm, NULL), comm, "rank");
    BAD_ARG(collCommUserRank(NULL, &x), NULL, "comm");
    uint64_t sent = 0, received = 0;
    BAD_ARG(collCommGetBytes(NULL, &sent, &received), NULL, "comm");
    LR_CHECK_RES(lr, collCommGetBytes(comm, NULL, NULL), collSuccess, comm);
    LR_CHECK_RES(lr, collCommGetBytes(comm, &sent, &received), collSuccess, comm);
    BAD_ARG(collCommGetAsyncError(comm, NULL), comm, "asyncError");
    BAD_ARG(collCommGetAsyncError(NULL, &async), NULL, "comm");
    LR_CHECK_RES(lr, collCommGetAsyncError(comm, &async), collSuccess, comm);
    LR_CHECK(lr, async == collSuccess, "a healthy comm reports %s", collGetErrorString(async));
    LR_CHECK_RES(lr, collCommDestroy(NULL), collSuccess, NULL);
    LR_CHECK_RES(lr, collCommAbort(NULL), collSuccess, NULL);

    /* collCommRegister / collCommDeregister; static: one registration stays
     * until the comm is destroyed. */
    static char buf[256];
    void *h = &x, *h2 = NULL;
    BAD_ARG(collCommRegister(NULL, buf, sizeof(buf), &h), NULL, "comm");
    BAD_ARG(collCommRegister(comm, NULL, sizeof(buf), &h), comm, "buff");
    LR_CHECK(lr, h == NULL, "a refused collCommRegister left *handle set");
    BAD_ARG(collCommRegister(comm, buf, 0, &h), comm, "size");
    BAD_ARG(collCommRegister(comm, buf, SIZE_MAX, &h), comm, "size");
    BAD_ARG(collCommRegister(comm, buf, sizeof(buf), NULL), comm, "handle");
    BAD_ARG(collCommDeregister(NULL, h), NULL, "comm");
    BAD_ARG(collCommDeregister(comm, NULL), comm, "handle");
    BAD_ARG(collCommDeregister(comm, &x), comm, "handle"); /* not a handle */
    LR_CHECK_RES(lr, collCommRegister(comm, buf, sizeof(buf), &h), collSuccess, comm);
    LR_CHECK_RES(lr, collCommRegister(comm, buf + 8, 16, &h2), collSuccess, comm); /* overlaps */
    LR_CHECK(lr, h != NULL && h2 != NULL && h != h2, "handles %p, %p", h, h2);
    LR_CHECK_RES(lr, collCommDeregister(comm, h), collSuccess, comm);
    BAD_ARG(collCommDeregister(comm, h), comm, "handle"); /* twice */
    LR_CHECK_RES(lr, collCommDeregister(comm, h2), collSuccess, comm);
    /* One left registered: destroying the comm releases it (valgrind, ASan). */
    LR_CHECK_RES(lr, collCommRegister(comm, buf, sizeof(buf), &h), collSuccess, comm);
}

static void check_collective_args(struct args_rank *ar)
{
    struct launch_rank *lr = ar->lr;
    collComm_t comm = lr->comm;
    const int n = lr->nranks, me = lr->rank;
    float *s = ar->sbuf, *r = ar->rbuf;
    collStream_t stream = (collStream_t)(uintptr_t)0x1;
    const collDataType_t bad_types[] = {(collDataType_t)-1, collNumTypes};
    const collRedOp_t bad_ops[] = {(collRedOp_t)-1, collNumOps};
    /* count * 4 bytes overflows; and one whose total over n ranks overflows. */
    const size_t huge = SIZE_MAX / 2;
    const size_t huge_total = SIZE_MAX / (4 * (size_t)n) + 1;

    /* NULL comm. */
    BAD_ARG(collAllReduce(s, r, NELEM, collFloat32, collSum, NULL, NULL), NULL, "comm");
    BAD_ARG(collBroadcast(s, r, NELEM, collFloat32, 0, NULL, NULL), NULL, "comm");
    BAD_ARG(collReduce(s, r, NELEM, collFloat32, collSum, 0, NULL, NULL), NULL, "comm");
    BAD_ARG(collAllGather(s, r, NELEM, collFloat32, NULL, NULL), NULL, "comm");
    BAD_ARG(collReduceScatter(s, r, NELEM, collFloat32, collSum, NULL, NULL), NULL, "comm");
    BAD_ARG(collGather(s, r, NELEM, collFloat32, 0, NULL, NULL), NULL, "comm");
    BAD_ARG(collScatter(s, r, NELEM, collFloat32, 0, NULL, NULL), NULL, "comm");

    /* NULL buffers with count > 0; for the root-only ones, each rank is its own root. */
    BAD_ARG(collAllReduce(NULL, r, NELEM, collFloat32, collSum, comm, NULL), comm, "sendbuff");
    BAD_ARG(collAllReduce(s, NULL, NELEM, collFloat32, collSum, comm, NULL), comm, "recvbuff");
    BAD_ARG(collBroadcast(NULL, r, NELEM, collFloat32, me, comm, NULL), comm, "sendbuff");
    BAD_ARG(collBroadcast(s, NULL, NELEM, collFloat32, 0, comm, NULL), comm, "recvbuff");
    BAD_ARG(collReduce(NULL, r, NELEM, collFloat32, collSum, 0, comm, NULL), comm, "sendbuff");
    BAD_ARG(collReduce(s, NULL, NELEM, collFloat32, collSum, me, comm, NULL), comm, "recvbuff");
    BAD_ARG(collAllGather(NULL, r, NELEM, collFloat32, comm, NULL), comm, "sendbuff");
    BAD_ARG(collAllGather(s, NULL, NELEM, collFloat32, comm, NULL), comm, "recvbuff");
    BAD_ARG(collReduceScatter(NULL, r, NELEM, collFloat32, collSum, comm, NULL), comm,
            "sendbuff");
    BAD_ARG(collReduceScatter(s, NULL, NELEM, collFloat32, collSum, comm, NULL), comm,
            "recvbuff");
    BAD_ARG(collGather(NULL, r, NELEM, collFloat32, 0, comm, NULL), comm, "sendbuff");
    BAD_ARG(collGather(s, NULL, NELEM, collFloat32, me, comm, NULL), comm, "recvbuff");
    BAD_ARG(collScatter(NULL, r, NELEM, collFloat32, me, comm, NULL), comm, "sendbuff");
    BAD_ARG(collScatter(s, NULL, NELEM, collFloat32, 0, comm, NULL), comm, "recvbuff");

    /* Data types. */
    for (size_t i = 0; i < 2; i++) {
        collDataType_t t = bad_types[i];
        BAD_ARG(collAllReduce(s, r, NELEM, t, collSum, comm, NULL), comm, "datatype");
        BAD_ARG(collBroadcast(s, r, NELEM, t, 0, comm, NULL), comm, "datatype");
        BAD_ARG(collReduce(s, r, NELEM, t, collSum, 0, comm, NULL), comm, "datatype");
        BAD_ARG(collAllGather(s, r, NELEM, t, comm, NULL), comm, "datatype");
        BAD_ARG(collReduceScatter(s, r, NELEM, t, collSum, comm, NULL), comm, "datatype");
        BAD_ARG(collGather(s, r, NELEM, t, 0, comm, NULL), comm, "datatype");
        BAD_ARG(collScatter(s, r, NELEM, t, 0, comm, NULL), comm, "datatype");
    }

    /* Ops. */
    for (size_t i = 0; i < 2; i++) {
        collRedOp_t op = bad_ops[i];
        BAD_ARG(collAllReduce(s, r, NELEM, collFloat32, op, comm, NULL), comm, "op");
        BAD_ARG(collReduce(s, r, NELEM, collFloat32, op, 0, comm, NULL), comm, "op");
        BAD_ARG(collReduceScatter(s, r, NELEM, collFloat32, op, comm, NULL), comm, "op");
    }

    /* Roots. */
    BAD_ARG(collBroadcast(s, r, NELEM, collFloat32, -1, comm, NULL), comm, "root");
    BAD_ARG(collBroadcast(s, r, NELEM, collFloat32, n, comm, NULL), comm, "root");
    BAD_ARG(collReduce(s, r, NELEM, collFloat32, collSum, -1, comm, NULL), comm, "root");
    BAD_ARG(collReduce(s, r, NELEM, collFloat32, collSum, n, comm, NULL), comm, "root");
    BAD_ARG(collGather(s, r, NELEM, collFloat32, -1, comm, NULL), comm, "root");
    BAD_ARG(collGather(s, r, NELEM, collFloat32, n, comm, NULL), comm, "root");
    BAD_ARG(collScatter(s, r, NELEM, collFloat32, -1, comm, NULL), comm, "root");
    BAD_ARG(collScatter(s, r, NELEM, collFloat32, n, comm, NULL), comm, "root");

    /* Counts whose byte size overflows size_t: refused before any memory is touched. */
    BAD_ARG(collAllReduce(s, r, huge, collFloat32, collSum, comm, NULL), comm, "count");
    BAD_ARG(collBroadcast(s, r, huge, collFloat32, 0, comm, NULL), comm, "count");
    BAD_ARG(collReduce(s, r, huge, collFloat32, collSum, 0, comm, NULL), comm, "count");
    BAD_ARG(collAllGather(s, r, huge, collFloat32, comm, NULL), comm, "count");
    BAD_ARG(collReduceScatter(s, r, huge, collFloat32, collSum, comm, NULL), comm, "count");
    BAD_ARG(collGather(s, r, huge, collFloat32, 0, comm, NULL), comm, "count");
    BAD_ARG(collScatter(s, r, huge, collFloat32, 0, comm, NULL), comm, "count");
    if (n > 1) {
        BAD_ARG(collAllGather(s, r, huge_total, collFloat32, comm, NULL), comm, "count");
        BAD_ARG(collReduceScatter(s, r, huge_total, collFloat32, collSum, comm, NULL), comm,
                "count");
        /* The root's n blocks overflow: refused on every rank alike. */
        BAD_ARG(collGather(s, r, huge_total, collFloat32, 0, comm, NULL), comm, "count");
        BAD_ARG(collScatter(s, r, huge_total, collFloat32, 0, comm, NULL), comm, "count");
    }

    /* Streams are not supported in this version. */
    REFUSED(collAllReduce(s, r, NELEM, collFloat32, collSum, comm, stream), collInvalidArgument,
            comm, "stream");
    REFUSED(collBroadcast(s, r, NELEM, collFloat32, 0, comm, stream), collInvalidArgument, comm,
            "stream");
    REFUSED(collReduce(s, r, NELEM, collFloat32, collSum, 0, comm, stream), collInvalidArgument,
            comm, "stream");
    REFUSED(collAllGather(s, r, NELEM, collFloat32, comm, stream), collInvalidArgument, comm,
            "stream");
    REFUSED(collReduceScatter(s, r, NELEM, collFloat32, collSum, comm, stream),
            collInvalidArgument, comm, "stream");
    REFUSED(collGather(s, r, NELEM, collFloat32, 0, comm, stream), collInvalidArgument, comm,
            "stream");
    REFUSED(collScatter(s, r, NELEM, collFloat32, 0, comm, stream), collInvalidArgument, comm,
            "stream");
}

/* The NULL buffers the API allows, as real collectives made by every rank. */
static void check_allowed_nulls(struct args_rank *ar)
{
    struct launch_rank *lr = ar->lr;
    collComm_t comm = lr->comm;
    const int n = lr->nranks, me = lr->rank;
    float *s = ar->sbuf, *r = ar->rbuf;

    LR_CHECK_RES(lr, collAllReduce(NULL, NULL, 0, collFloat32, collSum, comm, NULL), collSuccess,
                 comm);
    LR_CHECK_RES(lr, collBroadcast(NULL, NULL, 0, collFloat32, 0, comm, NULL), collSuccess, comm);
    LR_CHECK_RES(lr, collReduce(NULL, NULL, 0, collFloat32, collSum, 0, comm, NULL), collSuccess,
                 comm);
    LR_CHECK_RES(lr, collAllGather(NULL, NULL, 0, collFloat32, comm, NULL), collSuccess, comm);
    LR_CHECK_RES(lr, collReduceScatter(NULL, NULL, 0, collFloat32, collSum, comm, NULL),
                 collSuccess, comm);
    LR_CHECK_RES(lr, collGather(NULL, NULL, 0, collFloat32, 0, comm, NULL), collSuccess, comm);
    LR_CHECK_RES(lr, collScatter(NULL, NULL, 0, collFloat32, 0, comm, NULL), collSuccess, comm);
    check_comm_works(ar, __LINE__);

    /* Broadcast reads sendbuff on the root only: NULL elsewhere. */
    int root = n - 1;
    for (int i = 0; i < NELEM; i++) {
        s[i] = (float)(100 + i);
        r[i] = -1.0f;
    }
    LR_CHECK_RES(lr, collBroadcast(me == root ? s : NULL, r, NELEM, collFloat32, root, comm, NULL),
                 collSuccess, comm);
    for (int i = 0; i < NELEM; i++)
        LR_CHECK(lr, r[i] == (float)(100 + i), "broadcast r[%d] = %g", i, (double)r[i]);

    /* Reduce's recvbuff may be NULL off the root. */
    root = n / 2;
    for (int i = 0; i < NELEM; i++) {
        s[i] = (float)(me + i);
        r[i] = -1.0f;
    }
    LR_CHECK_RES(lr, collReduce(s, me == root ? r : NULL, NELEM, collFloat32, collSum, root, comm,
                                NULL),
                 collSuccess, comm);
    if (me == root)
        for (int i = 0; i < NELEM; i++) {
            float want = (float)(n * (n - 1) / 2 + n * i);
            LR_CHECK(lr, r[i] == want, "reduce r[%d] = %g, want %g", i, (double)r[i],
                     (double)want);
        }

    /* Gather's recvbuff may be NULL off the root. */
    root = n - 1;
    for (int i = 0; i < NELEM * n; i++) {
        s[i] = i < NELEM ? (float)(10 * me + i) : -2.0f;
        r[i] = -1.0f;
    }
    LR_CHECK_RES(lr, collGather(s, me == root ? r : NULL, NELEM, collFloat32, root, comm, NULL),
                 collSuccess, comm);
    if (me == root)
        for (int i = 0; i < NELEM * n; i++) {
            float want = (float)(10 * (i / NELEM) + i % NELEM);
            LR_CHECK(lr, r[i] == want, "gather r[%d] = %g, want %g", i, (double)r[i],
                     (double)want);
        }

    /* Scatter's sendbuff may be NULL off the root. */
    root = 0;
    for (int i = 0; i < NELEM * n; i++) {
        s[i] = (float)(100 + i);
        r[i] = -1.0f;
    }
    LR_CHECK_RES(lr, collScatter(me == root ? s : NULL, r, NELEM, collFloat32, root, comm, NULL),
                 collSuccess, comm);
    for (int i = 0; i < NELEM; i++)
        LR_CHECK(lr, r[i] == (float)(100 + me * NELEM + i), "scatter r[%d] = %g", i,
                 (double)r[i]);
    check_comm_works(ar, __LINE__);
}

static void args_body(struct launch_rank *lr)
{
    struct args_rank ar = {.lr = lr};

    ar.sbuf = calloc((size_t)NELEM * (size_t)lr->nranks, sizeof(float));
    ar.rbuf = calloc((size_t)NELEM * (size_t)lr->nranks, sizeof(float));
    if (!ar.sbuf || !ar.rbuf)
        launch_fatal(lr, "out of memory");

    check_version_and_strings(&ar);
    check_init_args(&ar);
    check_comm_queries(&ar);
    check_collective_args(&ar);
    check_allowed_nulls(&ar);

    if (lr->rank == 0) {
        printf("args n=%d: %d refused calls checked, %d failed checks on rank 0\n", lr->nranks,
               ar.refused, lr->failures);
        fflush(stdout);
    }
    free(ar.sbuf);
    free(ar.rbuf);
}

int main(int argc, char **argv)
{
    return launch_main(argc, argv, args_body, NULL);
}
