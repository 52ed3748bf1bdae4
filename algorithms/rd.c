/* Recursive doubling: allreduce and allgather in about log2(n) rounds, for the
 * small messages where rounds, not bytes, are the cost.
 *
 * AllReduce (recursive doubling).  Let p be the largest power of two <= n and
 * e = n - p.  Fold: each even rank r < 2e sends its buffer to r+1, which reduces
 * it into its own and stands for both; the even rank sits out.  The p ranks left
 * are renumbered 0..p-1 (r/2 below 2e, r-e above).  Round k (distance d = 2^k):
 * renumbered rank v exchanges its whole partial result with v XOR d and both
 * reduce the pair, the lower-numbered rank's operand first, so the two partners
 * compute the same bytes.  After log2 p rounds every one of the p ranks holds the
 * full result; unfold: each odd rank r < 2e sends it back to r-1.
 *
 *   n = 6 (p = 4, e = 2)   fold      round d=1      round d=2       unfold
 *   ranks 0 1 2 3 4 5      0->1 2->3 (1,3) (4,5)    (1,4) (3,5)     1->0 3->2
 *   renumbered  0 1 2 3              v0-v1 v2-v3    v0-v2 v1-v3
 *
 * Bytes per rank: S per round, S log2 p sent and as much received, plus S in the
 * fold and unfold when n is not a power of two; reduced: S per round.  Rounds:
 * log2 p, plus 2 when e > 0.  Against the ring's 2(n-1) rounds and 2(n-1)/n S it
 * wins while S is small; against Bruck's gather-then-reduce it sends S per round
 * where the gather sends (n-1) S in all.
 *
 * AllGather (Bruck).  Step k (distance d = 2^k) sends the first min(d, n - d)
 * blocks this rank holds to rank r - d and receives as many from rank r + d,
 * appended after its own.  After ceil(log2 n) steps every rank holds all n
 * blocks starting with its own; a last copy rotates them into rank order.
 *
 *   n = 5, rank 0 holds     step 0 (d=1)   step 1 (d=2)     step 2 (d=4)
 *                            0 1            0 1 2 3          0 1 2 3 4
 *
 * Each rank sends (n-1) blocks, like the ring's allgather, but in ceil(log2 n)
 * rounds instead of n-1.  Both work for any n.
 */
#include <string.h>

#include "algo.h"
#include "engine.h"
#include "pattern.h"
#include "reduce.h"

/* Sends sbytes of sbuf to rank `to` while receiving rbytes into rbuf from rank
 * `from` (one round of the engine); either size may be 0 (that side is
 * skipped). */
static collResult_t rd_sendrecv(struct coll_comm *comm, int to, const void *sbuf, size_t sbytes,
                                int from, void *rbuf, size_t rbytes)
{
    struct coll_xfer x[2] = {
        {.buf = rbuf, .bytes = rbytes},
        {.buf = (void *)sbuf, .bytes = sbytes, .is_send = true},
    };
    /* The send side first: connecting does not wait for the peer, accepting
     * does, and the peer may be accepting from us at the same moment. */
    if (sbytes > 0)
        COLL_CHECK(coll_transport_get_conn(comm, to, true, &x[1].conn));
    if (rbytes > 0)
        COLL_CHECK(coll_transport_get_conn(comm, from, false, &x[0].conn));
    return coll_engine_round(comm, x, 2, false);
}

static collResult_t rd_allreduce(struct coll_comm *comm, const struct coll_args *a)
{
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks, r = comm->rank;
    char *out = a->recvbuf;
    if (a->sendbuf != a->recvbuf && bytes > 0)
        memcpy(out, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return collSuccess;
    int p = coll_pow2_floor(n), e = n - p; /* p ranks take part in the rounds */
    char *tmp;
    COLL_CHECK(coll_comm_scratch(comm, bytes, (void **)&tmp));

    /* Fold: even ranks below 2e hand their buffer to the odd rank above. */
    if (r < 2 * e && r % 2 == 0) {
        COLL_CHECK(rd_sendrecv(comm, r + 1, out, bytes, -1, NULL, 0));
    } else {
        if (r < 2 * e) {
            COLL_CHECK(rd_sendrecv(comm, -1, NULL, 0, r - 1, tmp, bytes));
            coll_reduce(a->op, a->dtype, out, tmp, out, a->count); /* rank r-1 first */
        }
        int v = r < 2 * e ? r / 2 : r - e;
        for (int d = 1; d < p; d *= 2) {
            int pv = v ^ d;
            int peer = pv < e ? 2 * pv + 1 : pv + e;
            COLL_CHECK(rd_sendrecv(comm, peer, out, bytes, peer, tmp, bytes));
            if (pv < v)
                coll_reduce(a->op, a->dtype, out, tmp, out, a->count);
            else
                coll_reduce(a->op, a->dtype, out, out, tmp, a->count);
        }
    }
    /* Unfold: the odd ranks below 2e hand the result back. */
    if (r < 2 * e)
        COLL_CHECK(r % 2 == 0 ? rd_sendrecv(comm, -1, NULL, 0, r + 1, out, bytes)
                              : rd_sendrecv(comm, r - 1, out, bytes, -1, NULL, 0));
    if (a->op == collAvg)
        coll_reduce_div(a->dtype, out, out, a->count, n);
    return collSuccess;
}

/* Bruck's allgather into tmp (rotated: position j holds rank r + j), then one
 * copy into rank order. */
static collResult_t rd_allgather(struct coll_comm *comm, const struct coll_args *a)
{
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    int n = comm->nranks, r = comm->rank;
    char *out = a->recvbuf;
    const char *in = a->sendbuf;
    if (bytes == 0)
        return collSuccess;
    if (n == 1) {
        if (out != in)
            memcpy(out, in, bytes);
        return collSuccess;
    }
    char *tmp;
    COLL_CHECK(coll_comm_scratch(comm, (size_t)n * bytes, (void **)&tmp));
    memcpy(tmp, in, bytes); /* in may be out's block r: read it before writing out */
    for (int d = 1; d < n; d *= 2) {
        size_t cnt = (size_t)(d < n - d ? d : n - d);
        COLL_CHECK(rd_sendrecv(comm, coll_mod((long)r - d, n), tmp, cnt * bytes,
                               (r + d) % n, tmp + (size_t)d * bytes, cnt * bytes));
    }
    /* tmp[j] is rank r + j: ranks r..n-1 first, then 0..r-1. */
    memcpy(out + (size_t)r * bytes, tmp, (size_t)(n - r) * bytes);
    memcpy(out, tmp + (size_t)(n - r) * bytes, (size_t)r * bytes);
    return collSuccess;
}

static bool rd_can_run(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a)
{
    return true;
}

static double rd_predict(const struct coll_comm *comm, enum coll_func f,
                         const struct coll_args *a, const struct coll_model *m)
{
    int n = comm->nranks;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    if (n == 1)
        return 0;
    switch (f) {
    case COLL_FUNC_ALLREDUCE: {
        int p = coll_pow2_floor(n), e = n - p, k = coll_log2_ceil(p);
        double fold = e > 0 ? 1 : 0;
        return coll_model_cost(m, n, &(struct coll_cost){
            .rounds = coll_rd_rounds(n), .msgs = (double)p * k + 2.0 * e,
            .busiest_msgs = 2.0 * k + 2 * fold, .rank_bytes = (2.0 * k + 2 * fold) * S,
            .total_bytes = 2.0 * S * ((double)p * k + 2.0 * e),
            .reduce_bytes = (k + fold) * S});
    }
    case COLL_FUNC_ALLGATHER: { /* count is per rank; plus the final copy of n blocks */
        int R = coll_log2_ceil(n);
        return coll_model_cost(m, n, &(struct coll_cost){
            .rounds = R, .msgs = (double)n * R, .busiest_msgs = 2.0 * R,
            .rank_bytes = (2.0 * (n - 1) + 2.0 * n) * S,
            .total_bytes = (2.0 * (n - 1) + 2.0 * n) * n * S});
    }
    default:
        return 1e300;
    }
}

const struct coll_algo coll_algo_rd = {
    .name = "rd",
    .can_run = rd_can_run,
    .run = {[COLL_FUNC_ALLREDUCE] = rd_allreduce, [COLL_FUNC_ALLGATHER] = rd_allgather},
    .predict = rd_predict,
};
