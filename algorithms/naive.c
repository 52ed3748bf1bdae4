/* The naive (master) algorithm: one rank, the root, talks to every other rank
 * and no other rank talks to anyone.  It is the simplest schedule that works for
 * any n, a reference for the others, and the fastest for tiny messages on a few
 * ranks, where two hops beat the ring's 2(n-1).
 *
 *              rank 1
 *                |            every arrow carries the whole buffer (or block)
 *   rank 4 --- root 0 --- rank 2
 *                |            the root's link carries (n-1) buffers each way
 *              rank 3
 *
 * The root is rank 0, or the root argument of broadcast and reduce.
 *   AllReduce: every rank sends its buffer to the root, which reduces them in
 *     rank order, ((x0 op x1) op x2) ... op x(n-1), divides once for avg, and
 *     sends the result to every rank.  2 steps; the root receives and sends
 *     (n-1) x S bytes and reduces (n-1) x S; the others send and receive S.
 *     Every rank ends with the root's bytes, so results are bitwise identical.
 *   Reduce: the first half of allreduce, towards the given root: 1 step.
 *   Broadcast: the root sends its buffer to every rank: 1 step, (n-1) x S out.
 *   AllGather (S = one block): every rank sends its block to the root, which
 *     sends each rank the n-1 blocks it lacks: 2 steps, the root receives
 *     (n-1) x S and sends (n-1)^2 x S.
 *   ReduceScatter (S = one block): every rank sends its n blocks to the root,
 *     which reduces them in rank order and sends block r to rank r: 2 steps, the
 *     root receives (n-1) x n x S, reduces as much, and sends (n-1) x S.
 *
 * Buffers are cut into slices of about COLL_CHUNKSIZE, pipelined: the root
 * keeps a window of comm->depth slices in flight from every rank at once, each
 * in its own receive slot, folds a slice in rank order as soon as its operands
 * have arrived, and starts sending the result of a slice as soon as it is
 * final.  The root's scratch is depth x n slices (capped at NAIVE_SCRATCH_MAX),
 * whatever the size of the buffers; the other ranks need none.  All streams of
 * the root are progressed together, receives posted before sends, so that no
 * rank waits on a rank that waits on it, whatever the message size.
 *
 * Predicted time (predict below), with alpha the latency of a message and beta
 * the bandwidth of the root's link, which every byte crosses:
 *   allreduce       2 alpha + 2 (n-1) S / beta + reduce((n-1) S)
 *   reduce          alpha + (n-1) S / beta + reduce((n-1) S)
 *   broadcast       alpha + (n-1) S / beta
 *   allgather       2 alpha + (n-1) n S / beta
 *   reduce_scatter  2 alpha + (n-1) (n+1) S / beta + reduce((n-1) n S)
 * The two directions of the root's link could overlap; the model charges both,
 * as the root's one core also copies both.
 *
 * Limitations: the root's link and core carry everything, so the time grows
 * linearly with n; use it for small messages or as a reference.
 *
 * Progress: one schedule (engine.h) of two lanes per link; the root's folds are
 * its progress step.
 */
#include <string.h>

#include "algo.h"
#include "engine.h"
#include "pattern.h"
#include "prog.h"
#include "reduce.h"

#define NAIVE_WINDOW 32                     /* requests in flight per stream; >= depth */
#define NAIVE_SCRATCH_MAX ((size_t)64 << 20) /* the root's slots, all peers together */
#define NAIVE_SLOT_ALIGN 64

/* The root's exchange with one peer, or a peer's with the root: two ordered
 * streams of pieces, the engine's lanes 2i (receive) and 2i+1 (send) for link i. */
struct naive_link {
    int peer;
};

struct naive_run {
    struct coll_comm *comm;
    const struct coll_args *a;
    enum coll_func f;
    int n, rank, root;
    bool is_root, folds;           /* folds: the root of a reducing collective */
    size_t esize;
    size_t kb;                     /* slices per block (count elements) */
    size_t nslices;                /* slices of the vector the root gathers or sends */
    struct naive_link *links;
    int nlinks;
    struct coll_lane *lanes;       /* 2 x nlinks */
    /* The root of a reduction: W window positions of n slots each, the slot of
     * peer i at index i and the accumulator at n-1. */
    char *slots;
    size_t W, slot_bytes;
    size_t finalized;              /* slices whose result is final */
    size_t released;               /* slices whose slots are free again */
    int next_rank[NAIVE_WINDOW];   /* per window position: next rank to fold in */
};

/* Slice k of the vector: block k / kb, part k % kb of it; offsets in elements. */
static void naive_slice(const struct naive_run *x, size_t k, size_t *off_p, size_t *len_p)
{
    size_t koff, klen;
    coll_ring_chunk(x->a->count, (int)x->kb, (int)(k % x->kb), &koff, &klen);
    *off_p = (k / x->kb) * x->a->count + koff;
    *len_p = klen;
}

/* Allgather: piece i of the blocks a rank lacks (all but its own block p). */
static size_t naive_ag_slice(const struct naive_run *x, size_t i, int p)
{
    size_t b = i / x->kb;
    if (b >= (size_t)p)
        b++;
    return b * x->kb + i % x->kb;
}

static int naive_link_index(const struct naive_run *x, int rank)
{
    return rank < x->root ? rank : rank - 1;
}

static char *naive_slot(const struct naive_run *x, size_t k, int i)
{
    return x->slots + ((k % x->W) * (size_t)x->n + (size_t)i) * x->slot_bytes;
}

/* Rank j's part of slice k at the root: its own input or a receive slot. */
static const char *naive_operand(const struct naive_run *x, int j, size_t k)
{
    if (j == x->root) {
        size_t off, len;
        naive_slice(x, k, &off, &len);
        return (const char *)x->a->sendbuf + off * x->esize;
    }
    return naive_slot(x, k, naive_link_index(x, j));
}

static bool naive_arrived(const struct naive_run *x, int j, size_t k)
{
    return j == x->root || x->lanes[2 * naive_link_index(x, j)].done > k;
}

/* Where the result of slice k goes: the output, or (reduce_scatter, blocks of
 * other ranks) the slot of the last operand, sent from there. */
static char *naive_final(const struct naive_run *x, size_t k)
{
    size_t off, len;
    naive_slice(x, k, &off, &len);
    if (x->f == COLL_FUNC_REDUCE_SCATTER) {
        if (k / x->kb != 0)
            return naive_slot(x, k, naive_link_index(x, x->n - 1));
        return (char *)x->a->recvbuf + off * x->esize;
    }
    return (char *)x->a->recvbuf + off * x->esize;
}

/* A final slice's slots may take the slice W later once nothing reads them. */
static bool naive_slot_free(const struct naive_run *x, size_t k)
{
    size_t b = k / x->kb;
    if (x->f != COLL_FUNC_REDUCE_SCATTER || b == 0)
        return true;
    return x->lanes[2 * naive_link_index(x, (int)b) + 1].done > k % x->kb;
}

/* Folds every slice of the window as far as its operands allow, always in rank
 * order: step j computes (x0 op ... op x(j-1)) op xj; the last step writes the
 * final place and divides for avg.  Returns whether anything moved. */
static bool naive_fold(struct naive_run *x)
{
    const struct coll_args *a = x->a;
    bool moved = false;
    size_t end = x->released + x->W < x->nslices ? x->released + x->W : x->nslices;
    for (size_t k = x->finalized; k < end; k++) {
        int *j = &x->next_rank[k % x->W];
        char *acc = naive_slot(x, k, x->n - 1);
        while (*j < x->n && naive_arrived(x, *j, k) && (*j > 1 || naive_arrived(x, 0, k))) {
            size_t off, len;
            naive_slice(x, k, &off, &len);
            const char *lhs = *j == 1 ? naive_operand(x, 0, k) : acc;
            char *dst = *j == x->n - 1 ? naive_final(x, k) : acc;
            coll_reduce(a->op, a->dtype, dst, lhs, naive_operand(x, *j, k), len);
            if (*j == x->n - 1 && a->op == collAvg)
                coll_reduce_div(a->dtype, dst, dst, len, x->n);
            (*j)++;
            moved = true;
        }
    }
    while (x->finalized < end && x->next_rank[x->finalized % x->W] == x->n)
        x->finalized++;
    while (x->released < x->finalized && naive_slot_free(x, x->released)) {
        x->next_rank[x->released % x->W] = 1;
        x->released++;
        moved = true;
    }
    return moved;
}

/* Whether the root of an allgather or reduce-scatter may send piece i to
 * l->peer (the other sends and every receive wait on lags: naive_lags). */
static bool naive_can_send(const struct naive_run *x, const struct naive_link *l, size_t i)
{
    if (!x->is_root)
        return true;
    switch (x->f) {
    case COLL_FUNC_REDUCE_SCATTER:
        return (size_t)l->peer * x->kb + i < x->finalized;
    case COLL_FUNC_ALLGATHER: {
        size_t k = naive_ag_slice(x, i, l->peer);
        int b = (int)(k / x->kb);
        return b == x->root || naive_arrived(x, b, k % x->kb);
    }
    default:
        return true;
    }
}

/* Piece i of the stream from l->peer: which slice, and where it lands. */
static void naive_recv_piece(const struct naive_run *x, const struct naive_link *l, size_t i,
                             void **p_p, size_t *bytes_p)
{
    size_t k = i, off, len, base = 0; /* base: first element of the output */
    if (x->f == COLL_FUNC_ALLGATHER)
        k = x->is_root ? (size_t)l->peer * x->kb + i : naive_ag_slice(x, i, x->rank);
    else if (x->f == COLL_FUNC_REDUCE_SCATTER && !x->is_root) {
        k = (size_t)x->rank * x->kb + i;
        base = (size_t)x->rank * x->a->count;
    }
    naive_slice(x, k, &off, &len);
    *bytes_p = len * x->esize;
    if (x->folds)
        *p_p = naive_slot(x, k, naive_link_index(x, l->peer));
    else
        *p_p = (char *)x->a->recvbuf + (off - base) * x->esize;
}

/* Piece i of the stream to l->peer: which slice, and where it is read. */
static void naive_send_piece(const struct naive_run *x, const struct naive_link *l, size_t i,
                             const void **p_p, size_t *bytes_p)
{
    size_t k = i, off, len;
    if (x->is_root && x->f == COLL_FUNC_REDUCE_SCATTER)
        k = (size_t)l->peer * x->kb + i;
    else if (x->is_root && x->f == COLL_FUNC_ALLGATHER)
        k = naive_ag_slice(x, i, l->peer);
    naive_slice(x, k, &off, &len);
    *bytes_p = len * x->esize;
    if (!x->is_root || x->f == COLL_FUNC_BROADCAST)
        /* The input: the whole vector, or for allgather the rank's block alone. */
        *p_p = (const char *)x->a->sendbuf + off * x->esize;
    else if (x->f == COLL_FUNC_REDUCE_SCATTER)
        *p_p = naive_final(x, k);
    else
        *p_p = (const char *)x->a->recvbuf + off * x->esize;
}

/* The engine's view: lane 2i receives from link i's peer, lane 2i+1 sends. */
static bool naive_lane_ready(void *ctx, const struct coll_lane *el, size_t i)
{
    const struct naive_run *x = ctx;
    return !el->is_send || naive_can_send(x, &x->links[el->tag / 2], i);
}

static void naive_lane_buf(void *ctx, const struct coll_lane *el, size_t i, void **p_p,
                           size_t *bytes_p)
{
    const struct naive_run *x = ctx;
    const struct naive_link *l = &x->links[el->tag / 2];
    if (el->is_send) {
        const void *p;
        naive_send_piece(x, l, i, &p, bytes_p);
        *p_p = (void *)p; /* only read: the lane sends from it */
    } else {
        naive_recv_piece(x, l, i, p_p, bytes_p);
    }
}

static bool naive_progress(void *ctx)
{
    struct naive_run *x = ctx;
    return x->folds && naive_fold(x);
}

/* At the root of a reduction the schedule ends once every slice is final. */
static bool naive_finished(void *ctx)
{
    const struct naive_run *x = ctx;
    return !x->folds || x->finalized >= x->nslices;
}

static const struct coll_sched_ops naive_ops = {
    .ready = naive_lane_ready, .buf = naive_lane_buf, .progress = naive_progress,
    .finished = naive_finished,
};
/* Allreduce, reduce and broadcast need no ready(): their rules are all lags
 * (naive_sched_ops); and a rank that folds nothing has no work of its own, so
 * that a small call there is a one-shot schedule (a piece each way). */
static const struct coll_sched_ops naive_ops_lags = {
    .buf = naive_lane_buf, .progress = naive_progress, .finished = naive_finished,
};
static const struct coll_sched_ops naive_ops_plain = {.buf = naive_lane_buf};

/* The lanes' lags, which the engine checks itself, and the ops for x's
 * schedule.  At the root of a reduction slice i is received once its slots are
 * free (i < released + W) and, for allreduce, sent once final
 * (i < finalized); the root of an allgather or reduce-scatter decides its
 * sends in naive_can_send; every other lane goes at once. */
static const struct coll_sched_ops *naive_sched_ops(struct naive_run *x)
{
    for (int li = 0; li < x->nlinks && x->folds; li++) {
        x->lanes[2 * li].after = &x->released;
        x->lanes[2 * li].lag = x->W;
        if (x->f == COLL_FUNC_ALLREDUCE) {
            x->lanes[2 * li + 1].after = &x->finalized;
            x->lanes[2 * li + 1].lag = 0;
        }
    }
    if (x->f == COLL_FUNC_ALLGATHER || x->f == COLL_FUNC_REDUCE_SCATTER)
        return &naive_ops;
    return x->folds ? &naive_ops_lags : &naive_ops_plain;
}

/* Pieces each way between the root and any peer. */
static void naive_counts(const struct naive_run *x, size_t *to_root_p, size_t *from_root_p)
{
    size_t kb = x->kb, nk = x->nslices;
    switch (x->f) {
    case COLL_FUNC_ALLREDUCE:
        *to_root_p = nk;
        *from_root_p = nk;
        break;
    case COLL_FUNC_BROADCAST:
        *to_root_p = 0;
        *from_root_p = nk;
        break;
    case COLL_FUNC_REDUCE:
        *to_root_p = nk;
        *from_root_p = 0;
        break;
    case COLL_FUNC_ALLGATHER:
        *to_root_p = kb;
        *from_root_p = (size_t)(x->n - 1) * kb;
        break;
    default: /* reduce_scatter */
        *to_root_p = nk;
        *from_root_p = kb;
        break;
    }
}

/* Sets up the links (a send's connection now: a connect completes in the
 * peer's backlog; a receive's not made yet is accepted by the engine as the
 * stage runs) and hands the exchange over as the call's stage. */
static collResult_t naive_exchange(struct coll_frame *fr, struct naive_run *x)
{
    struct coll_comm *comm = x->comm;
    x->nlinks = x->is_root ? x->n - 1 : 1;
    COLL_CHECK(coll_frame_alloc(fr, (size_t)x->nlinks * sizeof(*x->links), (void **)&x->links));
    COLL_CHECK(coll_frame_alloc(fr, 2 * (size_t)x->nlinks * sizeof(*x->lanes),
                                (void **)&x->lanes));
    for (int li = 0; li < x->nlinks; li++) {
        size_t to_root, from_root;
        x->links[li].peer = x->is_root ? (li < x->root ? li : li + 1) : x->root;
        naive_counts(x, &to_root, &from_root);
        x->lanes[2 * li] = (struct coll_lane){.is_send = false, .tag = 2 * li,
                                              .window = NAIVE_WINDOW,
                                              .total = x->is_root ? to_root : from_root};
        x->lanes[2 * li + 1] = (struct coll_lane){.is_send = true, .tag = 2 * li + 1,
                                                  .window = NAIVE_WINDOW,
                                                  .total = x->is_root ? from_root : to_root};
    }
    for (int k = 0; k < 2 * x->nlinks; k++)
        if (x->lanes[k].total > 0)
            COLL_CHECK(coll_lane_link(comm, &x->lanes[k], x->links[k / 2].peer));
    struct coll_sched sched = {.comm = comm, .ops = naive_sched_ops(x), .ctx = x,
                               .lanes = x->lanes, .nlanes = 2 * x->nlinks,
                               .piece_bytes = x->slot_bytes, .last = true,
                               /* each block in kb slices */
                               .cut_bytes = x->kb ? (x->a->count + x->kb - 1) / x->kb * x->esize
                                                  : 0,
                               .cut_pieces = x->nslices};
    coll_frame_stage(fr, &sched);
    return collSuccess;
}

/* Bytes of one slice: COLL_CHUNKSIZE, smaller when the root's depth x n slots
 * would pass NAIVE_SCRATCH_MAX. */
static size_t naive_slice_elems(const struct coll_comm *comm, size_t esize)
{
    size_t bytes = comm->chunk_bytes;
    size_t cap = NAIVE_SCRATCH_MAX / ((size_t)comm->depth * (size_t)comm->nranks);
    if (bytes > cap)
        bytes = cap < 4096 ? 4096 : cap;
    size_t e = bytes / esize;
    return e ? e : 1;
}

static collResult_t naive_run(struct coll_frame *fr, enum coll_func f,
                              const struct coll_args *a, int root)
{
    struct coll_comm *comm = fr->prog.comm;
    struct naive_run *xp;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*xp), (void **)&xp));
    struct naive_run x = {.comm = comm, .a = a, .f = f, .n = comm->nranks, .rank = comm->rank,
                          .root = root, .is_root = comm->rank == root,
                          .esize = coll_dtype_size(a->dtype)};
    bool blocks = f == COLL_FUNC_ALLGATHER || f == COLL_FUNC_REDUCE_SCATTER;
    x.kb = coll_slices(a->count, naive_slice_elems(comm, x.esize));
    x.nslices = blocks ? (size_t)x.n * x.kb : x.kb;
    x.slot_bytes = (a->count + x.kb - 1) / x.kb * x.esize;
    bool reducing = f == COLL_FUNC_ALLREDUCE || f == COLL_FUNC_REDUCE ||
                    f == COLL_FUNC_REDUCE_SCATTER;
    x.folds = x.is_root && reducing;
    if (x.folds) {
        x.slot_bytes = (x.slot_bytes + NAIVE_SLOT_ALIGN - 1) / NAIVE_SLOT_ALIGN * NAIVE_SLOT_ALIGN;
        x.W = (size_t)comm->depth < NAIVE_WINDOW ? (size_t)comm->depth : NAIVE_WINDOW;
        COLL_CHECK(coll_comm_scratch(comm, x.W * (size_t)x.n * x.slot_bytes, (void **)&x.slots));
        for (size_t i = 0; i < x.W; i++)
            x.next_rank[i] = 1;
    }
    *xp = x;
    return naive_exchange(fr, xp);
}

static collResult_t naive_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->nranks == 1 || bytes == 0) {
        if (a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    return naive_run(fr, COLL_FUNC_ALLREDUCE, a, 0);
}

static collResult_t naive_reduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->nranks == 1 || bytes == 0) {
        if (comm->rank == a->root && a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    return naive_run(fr, COLL_FUNC_REDUCE, a, a->root);
}

static collResult_t naive_broadcast(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->rank == a->root && a->recvbuf != a->sendbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    if (comm->nranks == 1 || bytes == 0)
        return collSuccess;
    return naive_run(fr, COLL_FUNC_BROADCAST, a, a->root);
}

static collResult_t naive_allgather(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    char *own = (char *)a->recvbuf + (size_t)comm->rank * bytes;
    if (own != a->sendbuf && bytes > 0)
        memcpy(own, a->sendbuf, bytes);
    if (comm->nranks == 1 || bytes == 0)
        return collSuccess;
    return naive_run(fr, COLL_FUNC_ALLGATHER, a, 0);
}

static collResult_t naive_reduce_scatter(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->nranks == 1 || bytes == 0) {
        const char *own = (const char *)a->sendbuf + (size_t)comm->rank * bytes;
        if ((const char *)a->recvbuf != own && bytes > 0)
            memcpy(a->recvbuf, own, bytes);
        return collSuccess;
    }
    return naive_run(fr, COLL_FUNC_REDUCE_SCATTER, a, 0);
}

static bool naive_can_run(const struct coll_comm *comm, enum coll_func f,
                          const struct coll_args *a)
{
    return true;
}

/* The formulas of the file-top comment: every byte crosses the root's link. */
static double naive_predict(const struct coll_comm *comm, enum coll_func f,
                            const struct coll_args *a, const struct coll_model *m)
{
    int ni = comm->nranks;
    double n = ni;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    if (ni == 1)
        return 0;
    /* The root is the busiest rank; every byte it sends or receives crosses a
     * link once, so the host moves twice the root's bytes. */
    double phases = 2; /* to the root, then from it */
    double rank_bytes, reduce_bytes = 0;
    switch (f) {
    case COLL_FUNC_ALLREDUCE:
        rank_bytes = 2 * (n - 1) * S;
        reduce_bytes = (n - 1) * S;
        break;
    case COLL_FUNC_REDUCE:
    case COLL_FUNC_BROADCAST:
        phases = 1;
        rank_bytes = (n - 1) * S;
        reduce_bytes = f == COLL_FUNC_REDUCE ? (n - 1) * S : 0;
        break;
    case COLL_FUNC_ALLGATHER: /* count is per rank: S is one block */
        rank_bytes = n * (n - 1) * S;
        break;
    case COLL_FUNC_REDUCE_SCATTER:
        rank_bytes = (n - 1) * (n + 1) * S;
        reduce_bytes = (n - 1) * n * S;
        break;
    default:
        return 1e300;
    }
    /* The root handles every message, one after the other. */
    return coll_model_cost(m, ni, &(struct coll_cost){
        .rounds = phases, .msgs = phases * (n - 1), .busiest_msgs = phases * (n - 1),
        .rank_bytes = rank_bytes, .total_bytes = 2 * rank_bytes, .reduce_bytes = reduce_bytes});
}

const struct coll_algo coll_algo_naive = {
    .name = "naive",
    .can_run = naive_can_run,
    .build = {[COLL_FUNC_ALLREDUCE] = naive_allreduce,
            [COLL_FUNC_BROADCAST] = naive_broadcast,
            [COLL_FUNC_REDUCE] = naive_reduce,
            [COLL_FUNC_ALLGATHER] = naive_allgather,
            [COLL_FUNC_REDUCE_SCATTER] = naive_reduce_scatter},
    .predict = naive_predict,
};
