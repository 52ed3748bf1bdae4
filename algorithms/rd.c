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
#include "prog.h"
#include "reduce.h"

/* A call's rounds: the program's state (prog.h), in its frame. */
struct rd_run {
    struct coll_frame *fr;
    const struct coll_args *a;
    size_t bytes;        /* allreduce: the buffer; allgather: one block */
    int n, r, p, e, v, d;
    int peer;            /* allreduce: the partner of the round in flight */
    int pc;
    char *tmp;
    struct coll_xfer x[2];
    struct coll_lane lanes[2];
    struct coll_sched sched;
};

/* The next stage: sends sbytes of sbuf to rank `to` while receiving rbytes into
 * rbuf from rank `from`; either size may be 0 (that side is skipped).  The send
 * connection is made now (connecting waits for no one); a receive connection
 * not made yet is accepted by the engine while the round runs. */
static collResult_t rd_round(struct rd_run *x, int to, const void *sbuf, size_t sbytes, int from,
                             void *rbuf, size_t rbytes)
{
    struct coll_comm *comm = x->fr->prog.comm;
    x->x[0] = (struct coll_xfer){.buf = rbuf, .bytes = rbytes};
    x->x[1] = (struct coll_xfer){.buf = (void *)sbuf, .bytes = sbytes, .is_send = true};
    coll_round_sched(comm, x->x, 2, x->lanes, &x->sched);
    if (rbytes > 0)
        COLL_CHECK(coll_lane_link(comm, &x->lanes[0], from));
    if (sbytes > 0)
        COLL_CHECK(coll_lane_link(comm, &x->lanes[1], to));
    x->fr->prog.sched = &x->sched;
    return collSuccess;
}

/* The state of an allreduce between its stages. */
enum { RD_START, RD_FOLDED, RD_ROUND, RD_ROUND_DONE, RD_UNFOLD, RD_LAST, RD_END };

static collResult_t rd_allreduce_next(struct coll_prog *prog)
{
    struct rd_run *x = ((struct coll_frame *)prog)->state;
    const struct coll_args *a = x->a;
    char *out = a->recvbuf;
    int r = x->r, e = x->e;
    prog->sched = NULL;
    for (;;) {
        switch (x->pc) {
        case RD_START: /* fold: even ranks below 2e hand their buffer to the odd one above */
            x->d = 1;
            if (r < 2 * e && r % 2 == 0) {
                x->pc = RD_UNFOLD;
                return rd_round(x, r + 1, out, x->bytes, -1, NULL, 0);
            }
            x->pc = r < 2 * e ? RD_FOLDED : RD_ROUND;
            if (r < 2 * e)
                return rd_round(x, -1, NULL, 0, r - 1, x->tmp, x->bytes);
            break;
        case RD_FOLDED:
            coll_reduce(a->op, a->dtype, out, x->tmp, out, a->count); /* rank r-1 first */
            x->pc = RD_ROUND;
            break;
        case RD_ROUND:
            if (x->d >= x->p) {
                x->pc = RD_UNFOLD;
                break;
            }
            int pv = x->v ^ x->d;
            x->peer = pv;
            int peer = pv < e ? 2 * pv + 1 : pv + e;
            x->pc = RD_ROUND_DONE;
            return rd_round(x, peer, out, x->bytes, peer, x->tmp, x->bytes);
        case RD_ROUND_DONE: /* the lower-numbered rank's operand first */
            if (x->peer < x->v)
                coll_reduce(a->op, a->dtype, out, x->tmp, out, a->count);
            else
                coll_reduce(a->op, a->dtype, out, out, x->tmp, a->count);
            x->d *= 2;
            x->pc = RD_ROUND;
            break;
        case RD_UNFOLD: /* the odd ranks below 2e hand the result back */
            x->pc = RD_LAST;
            if (r < 2 * e)
                return r % 2 == 0 ? rd_round(x, -1, NULL, 0, r + 1, out, x->bytes)
                                  : rd_round(x, r - 1, out, x->bytes, -1, NULL, 0);
            break;
        case RD_LAST:
            if (a->op == collAvg)
                coll_reduce_div(a->dtype, out, out, a->count, x->n);
            x->pc = RD_END;
            return collSuccess;
        default:
            return collSuccess;
        }
    }
}

/* A frame's program with rounds of its own: x in the frame, its next() set. */
static collResult_t rd_start(struct coll_frame *fr, const struct coll_args *a, size_t tmp_bytes,
                             collResult_t (*next)(struct coll_prog *), struct rd_run **x_p)
{
    struct coll_comm *comm = fr->prog.comm;
    struct rd_run *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    x->fr = fr;
    x->a = a;
    x->n = comm->nranks;
    x->r = comm->rank;
    COLL_CHECK(coll_comm_scratch(comm, tmp_bytes, (void **)&x->tmp));
    fr->state = x;
    fr->prog.next = next;
    *x_p = x;
    return collSuccess;
}

static collResult_t rd_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = fr->prog.comm->nranks, r = fr->prog.comm->rank;
    if (a->sendbuf != a->recvbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return collSuccess;
    struct rd_run *x;
    COLL_CHECK(rd_start(fr, a, bytes, rd_allreduce_next, &x));
    x->bytes = bytes;
    x->p = coll_pow2_floor(n); /* p ranks take part in the rounds */
    x->e = n - x->p;
    x->v = r < 2 * x->e ? r / 2 : r - x->e;
    return collSuccess;
}

/* Bruck's allgather into tmp (rotated: position j holds rank r + j), then one
 * copy into rank order. */
static collResult_t rd_allgather_next(struct coll_prog *prog)
{
    struct rd_run *x = ((struct coll_frame *)prog)->state;
    int n = x->n, r = x->r, d = x->d;
    size_t bytes = x->bytes;
    prog->sched = NULL;
    if (x->pc == RD_END)
        return collSuccess;
    if (d < n) {
        size_t cnt = (size_t)(d < n - d ? d : n - d);
        x->d *= 2;
        return rd_round(x, coll_mod((long)r - d, n), x->tmp, cnt * bytes, (r + d) % n,
                        x->tmp + (size_t)d * bytes, cnt * bytes);
    }
    /* tmp[j] is rank r + j: ranks r..n-1 first, then 0..r-1. */
    char *out = x->a->recvbuf;
    memcpy(out + (size_t)r * bytes, x->tmp, (size_t)(n - r) * bytes);
    memcpy(out, x->tmp + (size_t)(n - r) * bytes, (size_t)r * bytes);
    x->pc = RD_END;
    return collSuccess;
}

static collResult_t rd_allgather(struct coll_frame *fr, const struct coll_args *a)
{
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    int n = fr->prog.comm->nranks;
    if (bytes == 0)
        return collSuccess;
    if (n == 1) {
        if (a->recvbuf != a->sendbuf)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    struct rd_run *x;
    COLL_CHECK(rd_start(fr, a, (size_t)n * bytes, rd_allgather_next, &x));
    x->bytes = bytes;
    x->d = 1;
    memcpy(x->tmp, a->sendbuf, bytes); /* in may be out's block r: read it before writing out */
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
    .build = {[COLL_FUNC_ALLREDUCE] = rd_allreduce, [COLL_FUNC_ALLGATHER] = rd_allgather},
    .predict = rd_predict,
};
