/* COLL_CHECK_MISMATCH=1: each collective first agrees on what it is.
 *
 * Ranks that call different collectives, or the same one with another count,
 * datatype, op or root, otherwise hang until the timeout or, worse, exchange
 * bytes that the other side reads as something else.  With the check on, every
 * rank packs its call into a 32-byte descriptor and the ranks allgather the
 * descriptors over the data connections, with the allgather algorithm the
 * planner picks for 32 bytes per rank (the ring, or recursive doubling):
 *
 *   rank 0 {allreduce, 128, float32, sum}  --+
 *   rank 1 {allreduce, 128, float32, sum}  --+-- allgather -->  every rank holds all
 *   rank 2 {allreduce, 100, float32, sum}  --+                 three, compares them
 *
 * Every rank then holds the same descriptors, so every rank takes the same
 * decision and writes the same message: collInvalidUsage, "rank 2 called
 * collAllReduce with count 100, ranks 0,1 with count 128".  No byte of the
 * user's buffers has moved, the exchange itself completed in step, so the
 * communicator stays usable (it is not poisoned).
 *
 * The descriptors travel as the first message of the call, so a rank that
 * calls a send or receive where its peers call a collective is not caught, nor
 * a rank that skips a call entirely (its peers' exchange waits for it and times
 * out, as without the check).  COLL_CHECK_MISMATCH must be the same on every
 * rank.  The cost is one small allgather per collective (docs/performance.md).
 */
#include "mismatch.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"

#define MM_MAGIC 0x314d4d43u /* "CMM1" */

/* What one rank was called with; the same bytes on every rank for one call. */
struct mm_desc {
    uint32_t magic;
    uint8_t func;     /* enum coll_func, or a COLL_MISMATCH_ code of mismatch.h */
    uint8_t dtype;
    uint8_t op;       /* 0xff: the call has none */
    uint8_t pad0;
    int32_t root;     /* -1: the call has none */
    uint32_t pad1;
    uint64_t count;
    uint64_t pad2;
};
static_assert(sizeof(struct mm_desc) == 32, "the descriptor is 32 bytes on every rank");

static const char *const mm_names[COLL_MISMATCH_NFUNCS] = {
    [COLL_FUNC_ALLREDUCE] = "collAllReduce",         [COLL_FUNC_BROADCAST] = "collBroadcast",
    [COLL_FUNC_REDUCE] = "collReduce",               [COLL_FUNC_ALLGATHER] = "collAllGather",
    [COLL_FUNC_REDUCE_SCATTER] = "collReduceScatter", [COLL_MISMATCH_ALLTOALL] = "collAllToAll",
    [COLL_MISMATCH_GATHER] = "collGather",           [COLL_MISMATCH_SCATTER] = "collScatter",
};

static const char *mm_name(unsigned func)
{
    return func < COLL_MISMATCH_NFUNCS ? mm_names[func] : "an unknown call";
}

static bool mm_has_op(int func)
{
    return func == COLL_FUNC_ALLREDUCE || func == COLL_FUNC_REDUCE ||
           func == COLL_FUNC_REDUCE_SCATTER;
}

static bool mm_has_root(int func)
{
    return func == COLL_FUNC_BROADCAST || func == COLL_FUNC_REDUCE ||
           func == COLL_MISMATCH_GATHER || func == COLL_MISMATCH_SCATTER;
}

/* "rank 2" or "ranks 0,1,3": the ranks whose descriptor equals d. */
static void mm_put_ranks(char *buf, size_t cap, size_t *len, const struct mm_desc *all,
                         int nranks, const struct mm_desc *d)
{
    int n = 0, listed = 0;
    for (int k = 0; k < nranks; k++)
        n += memcmp(&all[k], d, sizeof(*d)) == 0;
    coll_buf_printf(buf, cap, len, "%s ", n == 1 ? "rank" : "ranks");
    for (int k = 0; k < nranks; k++) {
        if (memcmp(&all[k], d, sizeof(*d)) != 0)
            continue;
        if (listed == 8) {
            coll_buf_printf(buf, cap, len, ",... (%d ranks)", n);
            break;
        }
        coll_buf_printf(buf, cap, len, "%s%d", listed ? "," : "", k);
        listed++;
    }
}

/* The fields of d that differ from ref, " with count 100 and root 1", or the
 * whole call when the calls differ, "(count 128, datatype float32, root 0)". */
static void mm_put_fields(char *buf, size_t cap, size_t *len, const struct mm_desc *d,
                          const struct mm_desc *ref)
{
    bool all = d->func != ref->func;
    const char *sep = all ? "(" : " with ", *next = all ? ", " : " and ";
    if (all || d->count != ref->count) {
        coll_buf_printf(buf, cap, len, "%scount %llu", sep, (unsigned long long)d->count);
        sep = next;
    }
    if (all || d->dtype != ref->dtype) {
        coll_buf_printf(buf, cap, len, "%sdatatype %s", sep, coll_dtype_name((collDataType_t)d->dtype));
        sep = next;
    }
    if (d->op != 0xff && (all || d->op != ref->op)) {
        coll_buf_printf(buf, cap, len, "%sop %s", sep, coll_op_name((collRedOp_t)d->op));
        sep = next;
    }
    if (d->root >= 0 && (all || d->root != ref->root))
        coll_buf_printf(buf, cap, len, "%sroot %d", sep, (int)d->root);
    if (all)
        coll_buf_printf(buf, cap, len, ")");
}

/* Describes how the descriptors differ: each group of ranks that called
 * otherwise than the largest group (ties: the one of the lowest rank) is named
 * with what it called, next to what the largest group called. */
static void mm_describe(struct coll_comm *comm, const struct mm_desc *all)
{
    int nranks = comm->nranks, ref = 0, best = 0;
    for (int k = 0; k < nranks; k++) {
        int same = 0;
        for (int j = 0; j < nranks; j++)
            same += memcmp(&all[j], &all[k], sizeof(all[k])) == 0;
        if (same > best) {
            best = same;
            ref = k;
        }
    }
    char msg[COLL_ERRMSG_BYTES];
    size_t len = 0;
    coll_buf_printf(msg, sizeof(msg), &len, "%s #%llu: the ranks' calls differ (COLL_CHECK_MISMATCH): ",
           mm_name(all[comm->rank].func), (unsigned long long)comm->seq);
    int groups = 0;
    for (int k = 0; k < nranks; k++) {
        if (memcmp(&all[k], &all[ref], sizeof(all[k])) == 0)
            continue;
        bool seen = false; /* a rank of this group was described already */
        for (int j = 0; j < k && !seen; j++)
            seen = memcmp(&all[j], &all[k], sizeof(all[k])) == 0;
        if (seen)
            continue;
        const struct mm_desc *d = &all[k], *r = &all[ref];
        if (groups++ > 0)
            coll_buf_printf(msg, sizeof(msg), &len, "; ");
        mm_put_ranks(msg, sizeof(msg), &len, all, nranks, d);
        coll_buf_printf(msg, sizeof(msg), &len, " called %s", mm_name(d->func));
        mm_put_fields(msg, sizeof(msg), &len, d, r);
        coll_buf_printf(msg, sizeof(msg), &len, ", ");
        mm_put_ranks(msg, sizeof(msg), &len, all, nranks, r);
        if (d->func != r->func)
            coll_buf_printf(msg, sizeof(msg), &len, " called %s", mm_name(r->func));
        mm_put_fields(msg, sizeof(msg), &len, r, d);
    }
    coll_set_error(comm, "%s", msg);
}

collResult_t coll_mismatch_check(struct coll_comm *comm, int func, const struct coll_args *a)
{
    if (comm->nranks == 1)
        return collSuccess;
    size_t bytes = (size_t)comm->nranks * sizeof(struct mm_desc);
    if (comm->mismatch_buf == NULL) {
        /* Allocated once: the check allocates nothing per call. */
        uint8_t *buf;
        if (coll_calloc(&buf, bytes) != collSuccess) {
            coll_set_error(comm, "%s #%llu: cannot allocate %zu bytes for COLL_CHECK_MISMATCH",
                           mm_name((unsigned)func), (unsigned long long)comm->seq, bytes);
            return collSystemError;
        }
        comm->mismatch_buf = buf;
    }
    struct mm_desc mine = {.magic = MM_MAGIC, .func = (uint8_t)func,
                           .dtype = (uint8_t)a->dtype,
                           .op = mm_has_op(func) ? (uint8_t)a->op : 0xff,
                           .root = mm_has_root(func) ? a->root : -1, .count = a->count};
    struct coll_args ga = {.sendbuf = &mine, .recvbuf = comm->mismatch_buf,
                           .count = sizeof(mine), .dtype = collUint8, .op = collSum};
    if (comm->mismatch_algo == NULL) {
        /* The choice depends on the size and the rank count alone: every rank
         * makes the same one, once. */
        COLL_CHECK(coll_algo_select(comm, COLL_FUNC_ALLGATHER, &ga, &comm->mismatch_algo));
    }
    COLL_CHECK(coll_algo_run(comm->mismatch_algo, COLL_FUNC_ALLGATHER, comm, &ga));
    const struct mm_desc *all = (const struct mm_desc *)(void *)comm->mismatch_buf;
    bool same = true;
    for (int k = 0; k < comm->nranks && same; k++)
        same = memcmp(&all[k], &mine, sizeof(mine)) == 0;
    if (same)
        return collSuccess;
    mm_describe(comm, all);
    return collInvalidUsage;
}

void coll_mismatch_fini(struct coll_comm *comm)
{
    free(comm->mismatch_buf);
    comm->mismatch_buf = NULL;
}
