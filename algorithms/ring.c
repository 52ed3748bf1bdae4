/* Ring algorithms.
 *
 * Ranks form a ring r -> r+1; each rank sends only to its next and receives only
 * from its previous neighbour.  Buffers are cut into n segments, and segments
 * into slices that are pipelined: while slice k is reduced, slice k+1 is on the
 * wire (see pipe.h).  A large allreduce takes the slices in groups, each group
 * through every step before the next (ring_piece), its middle sums in slots.
 *
 * AllReduce = reduce-scatter + allgather: 2(n-1) steps.  In step s of the
 * reduce-scatter rank r sends segment r-s and receives segment r-s-1, which it
 * reduces with its own contribution; after n-1 steps it holds the final segment
 * r+1, and n-1 allgather steps pass the final segments around.  Each rank sends
 * 2(n-1)/n of the buffer, whatever n: bandwidth-optimal; latency 2(n-1) hops.
 *
 *   n = 3, segments a b c         step 0        step 1        allgather x2
 *   rank 0: a0 b0 c0    sends a0 ->1      c0+c2 ->1     ...
 *   rank 1: a1 b1 c1    sends b1 ->2      a0+a1 ->2
 *   rank 2: a2 b2 c2    sends c2 ->0      b1+b2 ->0
 *   after step 1: rank 0 owns b (b1+b2+b0), rank 1 owns c, rank 2 owns a.
 *
 * Two ranks over shared memory: the allreduce is one exchange of the whole
 * buffer, each rank reducing the peer's slices with its own (ring_allreduce_pair).
 *
 * ReduceScatter: the reduce-scatter half, rotated so rank r ends with block r;
 * partial sums live in a double buffer of two blocks.  AllGather: the allgather
 * half, n-1 steps, (n-1)/n of the output sent per rank.
 * Broadcast: a pipelined chain root -> root+1 -> ... -> root-1; every link
 * carries the buffer once.  Reduce: a pipelined chain root+1 -> ... -> root, each
 * rank adding its contribution as the slices pass.
 *
 * Order of reduction is fixed by the ring, so results repeat run after run.
 * Limitations: latency grows linearly with n; for small messages on many ranks
 * the tree (tree.c) and recursive doubling (rd.c) take about log2 n rounds.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "algo.h"
#include "exec.h"
#include "pattern.h"
#include "pipe.h"
#include "prog.h"
#include "reduce.h"
#include "ring.h"

struct ring_ctx {
    struct coll_comm *comm;
    const struct coll_args *a;
    int n, r;            /* ranks in the ring, this rank's place in it */
    const int *members;  /* place -> rank (struct coll_ring_group) */
    int nsegs;           /* allreduce: segments 0..nsegs-1 hold data, the rest none */
    int step0;           /* the first step this run makes (a half of an allreduce) */
    int avg_div;         /* collAvg: the divisor at the last reduce-scatter step; 0 none */
    size_t esize;
    size_t K;            /* slices per segment */
    size_t G;            /* slices per group, a divisor of K (K: step by step, ring_piece) */
    int nsteps;          /* steps in this run */
    int nrs;             /* reduce-scatter steps: n-1, or 0 for allgather */
    int shift;           /* segment rotation: -1 for reduce_scatter */
    bool blocks;         /* segments are equal blocks of a->count (rs/ag) */
    bool rs_out_block;   /* reduce_scatter: the final block goes to out itself */
    const char *in;
    char *out;
    char *slots;         /* in-place allreduce: receive slots */
    size_t nslots, slot_bytes;
    char *partial[2];    /* reduce_scatter: double buffer of partial blocks */
    char *sums;          /* allreduce: slots for the partial sums of the middle steps */
    size_t nsums, sum_bytes;
};

/* Segment j: a block of the rank at place j (allgather, reduce_scatter: the
 * buffer is in rank order), else the j-th of nsegs balanced parts, empty from
 * nsegs on. */
static void ring_seg(const struct ring_ctx *x, int j, size_t *off_p, size_t *len_p)
{
    if (x->blocks) {
        *off_p = (size_t)x->members[j] * x->a->count;
        *len_p = x->a->count;
    } else {
        coll_ring_segment(x->a->count, x->nsegs, j, off_p, len_p);
    }
}

/* The step and slice of piece i.  Step by step (G == K) piece i is step i / K,
 * slice i % K.  In groups (G < K), slices g*G..g*G+G-1 go through every step of
 * the run before the next group starts:
 *   i = g * (nsteps * G) + (s - step0) * G + (k - g * G)
 * so the piece a step sends (the sum of the slice's step before) is always G pieces
 * behind, produced moments earlier and still in cache. */
static void ring_piece(const struct ring_ctx *x, size_t i, int *s_p, size_t *k_p)
{
    if (x->G == 0 || x->G >= x->K) {
        *s_p = x->step0 + (int)(i / x->K);
        *k_p = i % x->K;
        return;
    }
    size_t per = (size_t)x->nsteps * x->G, rem = i % per;
    *s_p = x->step0 + (int)(rem / x->G);
    *k_p = i / per * x->G + rem % x->G;
}

/* Which segment index i sends or receives, and the slice within it. */
static void ring_where(const struct ring_ctx *x, size_t i, bool send, int *step_p, int *seg_p,
                       size_t *off_p, size_t *len_p)
{
    int s;
    size_t k;
    ring_piece(x, i, &s, &k);
    int seg;
    if (s < x->nrs) {
        seg = coll_mod((long)x->r - s + x->shift - (send ? 0 : 1), x->n);
    } else {
        int t = s - x->nrs;
        int owned = x->nrs ? coll_mod((long)x->r + 1 + x->shift, x->n) : x->r;
        seg = coll_mod((long)owned - t - (send ? 0 : 1), x->n);
    }
    size_t soff, slen, koff, klen;
    ring_seg(x, seg, &soff, &slen);
    coll_ring_chunk(slen, (int)x->K, (int)k, &koff, &klen);
    *step_p = s;
    *seg_p = seg;
    *off_p = soff + koff;  /* elements from the start of the full vector */
    *len_p = klen;
    (void)koff;
}

/* Offset of a slice inside its segment (for the partial double buffer). */
static size_t ring_koff(const struct ring_ctx *x, size_t i, int seg)
{
    int s;
    size_t k, soff, slen, koff, klen;
    ring_piece(x, i, &s, &k);
    ring_seg(x, seg, &soff, &slen);
    coll_ring_chunk(slen, (int)x->K, (int)k, &koff, &klen);
    return koff;
}

/* Bytes of the largest slice: a segment of len0 elements cut into K. */
static size_t ring_slice_bytes(const struct ring_ctx *x, size_t len0)
{
    return (len0 + x->K - 1) / x->K * x->esize;
}

/* The slot of the partial sum that piece i's reduction makes (a middle
 * reduce-scatter step of an allreduce); the next step sends it G pieces later. */
static char *ring_sum_slot(const struct ring_ctx *x, size_t i)
{
    return x->sums + (i % x->nsums) * x->sum_bytes;
}

static void ring_send_buf(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct ring_ctx *x = vctx;
    int s, seg;
    size_t off, len;
    ring_where(x, i, true, &s, &seg, &off, &len);
    *bytes = len * x->esize;
    if (s == 0 && x->nrs > 0) {
        *p = x->in + off * x->esize;             /* own contribution */
    } else if (s < x->nrs) {
        if (x->rs_out_block)                     /* partial from step s-1 */
            *p = x->partial[(s - 1) & 1] + ring_koff(x, i, seg) * x->esize;
        else if (x->sums)                        /* the sum piece i - G made */
            *p = ring_sum_slot(x, i - x->G);
        else
            *p = x->out + off * x->esize;
    } else {
        /* Allgather steps; the own block of a plain allgather (step 0) too, from
         * its copy in the output made before the run, so that every piece goes
         * from the buffer a registration covers (pipe.h, send_reg). */
        *p = x->out + off * x->esize;
    }
}

static void ring_recv_buf(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct ring_ctx *x = vctx;
    int s, seg;
    size_t off, len;
    ring_where(x, i, false, &s, &seg, &off, &len);
    *bytes = len * x->esize;
    if (s < x->nrs) {
        if (x->rs_out_block)
            *p = x->partial[s & 1] + ring_koff(x, i, seg) * x->esize;
        else if (x->slots)
            *p = x->slots + (i % x->nslots) * x->slot_bytes;
        else
            *p = x->out + off * x->esize;
    } else {
        *p = x->out + off * x->esize;
    }
}

/* Reduce-scatter step s < nrs: reduces n elements of piece i, from byte boff of
 * the piece on, out of src (what arrived) with this rank's input into the
 * output, or into the partial block (reduce_scatter). */
static void ring_reduce_piece(struct ring_ctx *x, size_t i, int s, int seg, size_t off,
                              size_t boff, const void *src, size_t n)
{
    char *dst;
    if (x->sums && s < x->nrs - 1)
        dst = ring_sum_slot(x, i) + boff;
    else if (!x->rs_out_block)
        dst = x->out + off * x->esize + boff;
    else if (s == x->nrs - 1)
        dst = x->out + ring_koff(x, i, seg) * x->esize + boff;
    else /* where ring_recv_buf lands it */
        dst = x->partial[s & 1] + ring_koff(x, i, seg) * x->esize + boff;
    coll_reduce(x->a->op, x->a->dtype, dst, src, x->in + off * x->esize + boff, n);
    if (s == x->nrs - 1 && x->a->op == collAvg && x->avg_div > 0)
        coll_reduce_div(x->a->dtype, dst, dst, n, x->avg_div);
}

static void ring_process(void *vctx, size_t i, void *recvd)
{
    struct ring_ctx *x = vctx;
    int s, seg;
    size_t off, len;
    ring_where(x, i, false, &s, &seg, &off, &len);
    if (s < x->nrs && len > 0)
        ring_reduce_piece(x, i, s, seg, off, 0, recvd, len);
}

/* Zero copy (pipe.h): ring_process straight from the peer's bytes, or, in the
 * allgather steps, the copy into the output that a receive would have made. */
static void ring_consume(void *vctx, size_t i, size_t boff, const void *src, size_t len)
{
    struct ring_ctx *x = vctx;
    int s, seg;
    size_t off, elen;
    ring_where(x, i, false, &s, &seg, &off, &elen);
    if (s >= x->nrs)
        memcpy(x->out + off * x->esize + boff, src, len);
    else
        ring_reduce_piece(x, i, s, seg, off, boff, src, len / x->esize);
}

static collResult_t ring_conns(const struct ring_ctx *x, struct coll_conn **send_p,
                               struct coll_conn **recv_p)
{
    int prev, next;
    coll_ring_neighbors(x->r, x->n, &prev, &next);
    /* Receive side first: the connect to next completes in its backlog. */
    COLL_CHECK(coll_transport_get_conn(x->comm, x->members[next], true, send_p));
    COLL_CHECK(coll_transport_get_conn(x->comm, x->members[prev], false, recv_p));
    return collSuccess;
}

static size_t ring_slice_elems(const struct coll_comm *comm, size_t esize)
{
    size_t e = comm->chunk_bytes / esize;
    return e ? e : 1;
}

/* Runs the ring pipeline described by x (nrs reduce-scatter steps, then
 * nsteps - nrs allgather steps); reg (reg_bytes), when not NULL, is the user
 * buffer that pieces are sent from and land in as they are (pipe.h). */
static collResult_t ring_run(struct coll_frame *fr, struct ring_ctx *x, int nsteps, void *reg,
                             size_t reg_bytes, bool last)
{
    if (x->G == 0)
        x->G = x->K;
    x->nsteps = nsteps;
    struct coll_pipe p = {.last = last, .comm = x->comm, .total = (size_t)nsteps * x->K,
                          .send_after_recv = true, .send_lag = x->G, .recv_lag = x->G,
                          .window = x->slots ? x->nslots : 8, .ctx = x,
                          .send_buf = ring_send_buf, .recv_buf = ring_recv_buf,
                          .process = ring_process, .consume = ring_consume, .defer = true,
                          .send_reg = reg, .send_reg_bytes = reg_bytes, .recv_reg = reg,
                          .recv_reg_bytes = reg_bytes};
    size_t off0, len0;
    ring_seg(x, 0, &off0, &len0);
    p.piece_bytes = ring_slice_bytes(x, len0);
    /* The cut: K slices of each segment (a segment shorter than K elements has
     * one per element). */
    p.cut_bytes = p.piece_bytes;
    for (int j = 0; j < (x->blocks ? x->n : x->nsegs); j++) {
        size_t off, len;
        ring_seg(x, j, &off, &len);
        p.cut_pieces += len < x->K ? len : x->K;
    }
    COLL_CHECK(ring_conns(x, &p.send_conn, &p.recv_conn));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

struct coll_ring_group coll_ring_flat(const struct coll_comm *comm)
{
    return (struct coll_ring_group){.n = comm->nranks, .pos = comm->hosts.pos[comm->rank],
                                    .members = comm->hosts.order};
}

static collResult_t ring_allgather(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    const void *in = a->sendbuf;
    void *out = a->recvbuf;
    size_t count = a->count;
    size_t esize = coll_dtype_size(a->dtype);
    int n = comm->nranks, r = comm->rank;
    char *own = (char *)out + (size_t)r * count * esize;
    if (own != in && count > 0)
        memcpy(own, in, count * esize);
    if (n == 1 || count == 0)
        return collSuccess;
    struct coll_ring_group g = coll_ring_flat(comm);
    struct ring_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct ring_ctx){.comm = comm, .a = a, .n = n, .r = g.pos, .members = g.members,
                           .esize = esize, .nrs = 0, .blocks = true, .in = in, .out = out};
    x->K = coll_slices(count, ring_slice_elems(comm, esize));
    /* Every piece is sent from the output and lands in it as it is. */
    size_t total = (size_t)n * count * esize;
    return ring_run(fr, x, n - 1, out, total, true);
}

/* A whole allreduce goes in groups of G slices (ring_piece) once a segment has
 * more slices than a group: about RING_GROUP_BYTES of slices, and at least the
 * connection's depth so that the pipe stays full; K is rounded up to a multiple
 * of G.  Measured (docs/performance.md, 2026-12-06): 4 ranks on 2 cores, 32 KiB
 * slices, groups of 2-4 slices with the sums in slots took the out-of-place
 * allreduce from 1.3x to 1.1-1.2x the in-place time; 16-32 gained less. */
#define RING_GROUP_BYTES (128u << 10)
/* The middle steps' sums go to 2G slots when those fit in this much. */
#define RING_SUMS_BYTES (2u << 20)

static void ring_groups(const struct coll_comm *comm, struct ring_ctx *x, size_t len0)
{
    size_t G = RING_GROUP_BYTES / ring_slice_bytes(x, len0);
    if (G < (size_t)comm->depth)
        G = (size_t)comm->depth;
    size_t K = (x->K + G - 1) / G * G;
    /* One group, or slices too small once K is rounded up: step by step.  (The
     * bound keeps some elements in every slice of every segment.) */
    if (G >= x->K || len0 / K < 16) {
        x->G = x->K;
        return;
    }
    x->K = K;
    x->G = G;
}

/* Steps [step0, step0 + nsteps) of an allreduce over g, its count cut into
 * nsegs segments; collAvg divides by avg_div at the last reduce-scatter step. */
static collResult_t ring_allreduce_steps(struct coll_frame *fr, const struct coll_args *a,
                                         const struct coll_ring_group *g, int nsegs,
                                         int avg_div, int step0, int nsteps, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype);
    int n = g->n;
    struct ring_ctx *xp;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*xp), (void **)&xp));
    struct ring_ctx x = {.comm = comm, .a = a, .n = n, .r = g->pos, .members = g->members,
                         .nsegs = nsegs, .step0 = step0, .avg_div = avg_div, .esize = esize,
                         .nrs = n - 1, .in = a->sendbuf, .out = a->recvbuf};
    size_t off0, len0;
    coll_ring_chunk(a->count, nsegs, 0, &off0, &len0);
    x.K = coll_slices(len0, ring_slice_elems(comm, esize));
    bool whole = step0 == 0 && nsteps == 2 * (n - 1);
    if (whole)
        ring_groups(comm, &x, len0);
    else
        x.G = x.K;
    size_t slice_bytes = ring_slice_bytes(&x, len0);
    if (a->sendbuf == a->recvbuf && step0 < x.nrs) {
        /* In place: our own contribution sits where a received slice would land,
         * so slices land in slots and are reduced into the buffer from there. */
        x.nslots = (size_t)comm->depth;
        x.slot_bytes = slice_bytes;
    }
    if (whole && n >= 3 && 2 * x.G * slice_bytes <= RING_SUMS_BYTES) {
        /* The middle steps' sums go to a few slots, not to the output: sent a
         * moment later and never needed again (pipe.h: a slot is rewritten at
         * piece i + 2G, whose receive waits for the send of i + G). */
        x.nsums = 2 * x.G;
        x.sum_bytes = slice_bytes;
    }
    size_t room = x.nslots * x.slot_bytes + x.nsums * x.sum_bytes;
    if (room > 0) {
        char *scratch;
        COLL_CHECK(coll_comm_scratch(comm, room, (void **)&scratch));
        x.slots = x.nslots ? scratch : NULL;
        x.sums = x.nsums ? scratch + x.nslots * x.slot_bytes : NULL;
    }
    *xp = x;
    return ring_run(fr, xp, nsteps, NULL, 0, last);
}

/* Two ranks over transports that lend received bytes (shared memory): the ring's
 * reduce-scatter and allgather become one exchange.  Each rank sends its whole
 * input, slice by slice, and reduces each of the peer's slices with its own as it
 * arrives, the lower rank's operand first, so that both compute the same bytes.
 * Each rank sends and receives S, as in the ring's two halves, but the output is
 * written once, by the reductions, and none of it is read back to be sent on,
 * where the ring's allgather sends its sums from the output and copies the
 * peer's into it.  A rank reduces slice i only once its own send of slice i is
 * handed over (recv_after_send; see ring_pair_fits): in place the reduction
 * overwrites what the send reads, and out of place the input is then read twice
 * back to back, still in cache the second time (reductions allowed to run ahead
 * of the sends made the exchange 1.25x the ring's time on a 2 MiB-L2 Intel).
 * Measured in docs/performance.md ("Two ranks: one exchange"). */
struct pair_ctx {
    const struct coll_args *a;
    size_t esize, K;   /* K slices of the whole count */
    const char *in;
    char *out;
    bool mine_first;   /* this rank is the lower one */
    int avg_div;       /* collAvg: the divisor; 0 none */
};

static void pair_slice(const struct pair_ctx *x, size_t i, size_t *off_p, size_t *len_p)
{
    coll_ring_chunk(x->a->count, (int)x->K, (int)i, off_p, len_p);
}

static void pair_send_buf(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct pair_ctx *x = vctx;
    size_t off, len;
    pair_slice(x, i, &off, &len);
    *p = x->in + off * x->esize;
    *bytes = len * x->esize;
}

/* Asked for the size only: every piece is lent (pair_consume). */
static void pair_recv_buf(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct pair_ctx *x = vctx;
    size_t off, len;
    pair_slice(x, i, &off, &len);
    *p = x->out + off * x->esize;
    *bytes = len * x->esize;
}

/* len bytes of slice i from byte boff on: the peer's (src) with this rank's. */
static void pair_consume(void *vctx, size_t i, size_t boff, const void *src, size_t len)
{
    struct pair_ctx *x = vctx;
    size_t off, slice_len, n = len / x->esize;
    pair_slice(x, i, &off, &slice_len);
    size_t at = off * x->esize + boff;
    const void *mine = x->in + at;
    const void *lo = x->mine_first ? mine : src, *hi = x->mine_first ? src : mine;
    char *dst = x->out + at;
    coll_reduce(x->a->op, x->a->dtype, dst, lo, hi, n);
    if (x->avg_div > 0)
        coll_reduce_div(x->a->dtype, dst, dst, n, x->avg_div);
}

/* The exchange's slices: K of the whole count, the largest of slice_bytes. */
static void pair_slices(const struct coll_comm *comm, const struct coll_args *a, size_t *K_p,
                        size_t *slice_bytes_p)
{
    size_t esize = coll_dtype_size(a->dtype), off0, len0;
    *K_p = coll_slices(a->count, ring_slice_elems(comm, esize));
    coll_ring_chunk(a->count, (int)*K_p, 0, &off0, &len0);
    *slice_bytes_p = len0 * esize;
}

/* The exchange of a over g in K slices of at most slice_bytes (pair_slices). */
static collResult_t ring_allreduce_pair(struct coll_frame *fr, const struct coll_args *a,
                                        const struct coll_ring_group *g, int avg_div, bool last,
                                        struct coll_conn *send_conn, struct coll_conn *recv_conn,
                                        size_t K, size_t slice_bytes)
{
    struct coll_comm *comm = fr->prog.comm;
    struct pair_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct pair_ctx){.a = a, .esize = coll_dtype_size(a->dtype), .K = K,
                           .in = a->sendbuf, .out = a->recvbuf, .mine_first = g->pos == 0,
                           .avg_div = a->op == collAvg && avg_div > 1 ? avg_div : 0};
    /* Sends run up to the connection's depth ahead of the reductions. */
    struct coll_pipe p = {.last = last, .comm = comm, .send_conn = send_conn,
                          .recv_conn = recv_conn, .total = x->K, .send_after_recv = true,
                          .send_lag = (size_t)comm->depth,
                          .recv_after_send = true, .window = 8,
                          .piece_bytes = slice_bytes, .ctx = x, .send_buf = pair_send_buf,
                          .recv_buf = pair_recv_buf, .consume = pair_consume, .defer = true,
                          .cut_bytes = slice_bytes, .cut_pieces = K};
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

/* Whether connection c's ring holds two messages of `bytes` at once. */
static bool ring_holds_two(const struct coll_conn *c, size_t bytes)
{
    if (c->ring_slot_bytes == 0)
        return false;
    size_t per = (bytes + c->ring_slot_bytes - 1) / c->ring_slot_bytes;
    return per == 0 || c->ring_slots / per >= 2;
}

/* Whether a two-rank ring runs as the exchange: both connections lend received
 * bytes, and each can hold two slices in flight.  A rank reduces slice i only
 * once its send of slice i is handed over; with room for two slices that always
 * happens (the slices before are taken by the peer whatever it waits for), where
 * with rings smaller than a slice the two ranks would each wait for the other to
 * take its slice first.  The same answer on both ranks: they look at the same
 * two connections, and the choice must be alike. */
static bool ring_pair_fits(const struct coll_conn *send_conn, const struct coll_conn *recv_conn,
                           size_t slice_bytes)
{
    return send_conn->tp->recv_peek != NULL && recv_conn->tp->recv_peek != NULL &&
           ring_holds_two(send_conn, slice_bytes) && ring_holds_two(recv_conn, slice_bytes);
}

/* Whether an allreduce of a over g has nothing to move; then the output is set. */
static bool ring_allreduce_trivial(const struct coll_args *a, int n)
{
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (n > 1 && a->count > 0)
        return false;
    if (a->recvbuf != a->sendbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    return true;
}

static collResult_t ring_allreduce_group(struct coll_frame *fr, const struct coll_args *a,
                                         const struct coll_ring_group *g, int avg_div,
                                         bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    if (ring_allreduce_trivial(a, g->n)) {
        if (a->op == collAvg && avg_div > 1 && a->count > 0)
            coll_reduce_div(a->dtype, a->recvbuf, a->recvbuf, a->count, avg_div);
        return collSuccess;
    }
    if (g->n == 2) {
        struct ring_ctx rc = {.comm = comm, .n = 2, .r = g->pos, .members = g->members};
        struct coll_conn *send_conn, *recv_conn;
        COLL_CHECK(ring_conns(&rc, &send_conn, &recv_conn));
        size_t K, slice_bytes;
        pair_slices(comm, a, &K, &slice_bytes);
        if (ring_pair_fits(send_conn, recv_conn, slice_bytes))
            return ring_allreduce_pair(fr, a, g, avg_div, last, send_conn, recv_conn, K,
                                       slice_bytes);
    }
    return ring_allreduce_steps(fr, a, g, g->n, avg_div, 0, 2 * (g->n - 1), last);
}

/* Runs the stage that frame fr, set up for comm and a, was built into (alone). */
static collResult_t ring_frame_run(struct coll_frame *fr, collResult_t built)
{
    if (built != collSuccess) {
        fr->prog.fini(&fr->prog);
        return built;
    }
    return coll_prog_run(&fr->prog);
}

collResult_t coll_ring_allreduce_group(struct coll_comm *comm, const struct coll_args *a,
                                       const struct coll_ring_group *g, int avg_div, bool last)
{
    struct coll_frame fr;
    coll_frame_init(&fr, comm, a);
    return ring_frame_run(&fr, ring_allreduce_group(&fr, &fr.a, g, avg_div, last));
}

collResult_t coll_ring_build_allreduce(struct coll_frame *fr, const struct coll_args *a,
                                       const struct coll_ring_group *g, int avg_div, bool last)
{
    return ring_allreduce_group(fr, a, g, avg_div, last);
}

collResult_t coll_ring_build_rs(struct coll_frame *fr, const struct coll_args *a,
                                const struct coll_ring_group *g, int nsegs, bool last)
{
    if (ring_allreduce_trivial(a, g->n))
        return collSuccess;
    return ring_allreduce_steps(fr, a, g, nsegs, 0, 0, g->n - 1, last);
}

collResult_t coll_ring_build_ag(struct coll_frame *fr, const struct coll_args *a,
                                const struct coll_ring_group *g, int nsegs, bool last)
{
    if (g->n == 1 || a->count == 0)
        return collSuccess;
    return ring_allreduce_steps(fr, a, g, nsegs, 0, g->n - 1, g->n - 1, last);
}

collResult_t coll_ring_allreduce_ag(struct coll_comm *comm, const struct coll_args *a,
                                    const struct coll_ring_group *g, int nsegs, bool last)
{
    struct coll_frame fr;
    coll_frame_init(&fr, comm, a);
    return ring_frame_run(&fr, coll_ring_build_ag(&fr, &fr.a, g, nsegs, last));
}

/* --- lines: sets of ring steps run one after another on one pipe, beside
 * other lines (ring.h) --- */

struct line_ctx {
    struct ring_ctx x[COLL_RING_LINE_MAX];
    size_t start[COLL_RING_LINE_MAX + 1]; /* piece index where part p starts */
    int n;
};

static struct ring_ctx *line_part(struct line_ctx *l, size_t *i)
{
    int p = 0;
    while (p + 1 < l->n && *i >= l->start[p + 1])
        p++;
    *i -= l->start[p];
    return &l->x[p];
}

static void line_send_buf(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct ring_ctx *x = line_part(vctx, &i);
    ring_send_buf(x, i, p, bytes);
}

static void line_recv_buf(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct ring_ctx *x = line_part(vctx, &i);
    ring_recv_buf(x, i, p, bytes);
}

static void line_process(void *vctx, size_t i, void *recvd)
{
    struct ring_ctx *x = line_part(vctx, &i);
    ring_process(x, i, recvd);
}

static void line_consume(void *vctx, size_t i, size_t boff, const void *src, size_t len)
{
    struct ring_ctx *x = line_part(vctx, &i);
    ring_consume(x, i, boff, src, len);
}

/* The pieces per step of set st, and its slot bytes when in place. */
static void line_shape(const struct coll_comm *comm, const struct coll_ring_steps *st,
                       size_t *K_p, size_t *slot_bytes_p)
{
    size_t esize = coll_dtype_size(st->a.dtype), off0, len0;
    coll_ring_chunk(st->a.count, st->nsegs, 0, &off0, &len0);
    *K_p = coll_slices(len0, ring_slice_elems(comm, esize));
    bool in_place = st->a.sendbuf == st->a.recvbuf && st->step0 < st->g.n - 1;
    *slot_bytes_p = in_place ? (len0 + *K_p - 1) / *K_p * esize : 0;
}

static bool line_set_moves(const struct coll_ring_steps *st)
{
    return st->g.n > 1 && st->a.count > 0 && st->nsteps > 0;
}

size_t coll_ring_lines_slots(const struct coll_comm *comm, const struct coll_ring_line *lines,
                             int nlines)
{
    size_t total = 0, K, slot;
    for (int k = 0; k < nlines; k++)
        for (int p = 0; p < lines[k].nsets; p++) {
            if (!line_set_moves(&lines[k].set[p]))
                continue;
            line_shape(comm, &lines[k].set[p], &K, &slot);
            total += (size_t)comm->depth * slot;
        }
    return total;
}

collResult_t coll_ring_build_lines(struct coll_frame *fr, const struct coll_ring_line *lines,
                                   int nlines, void *slots, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    struct line_ctx *lc;
    struct coll_pipe pipes[COLL_PIPES_MAX];
    int np = 0;
    char *room = slots;
    if (nlines > COLL_PIPES_MAX)
        return collInternalError;
    COLL_CHECK(coll_frame_alloc(fr, COLL_PIPES_MAX * sizeof(*lc), (void **)&lc));
    for (int k = 0; k < nlines; k++) {
        struct line_ctx *l = &lc[np];
        l->n = 0;
        size_t total = 0, lag = SIZE_MAX, window = COLL_PIPE_MAX_WINDOW, piece = 0;
        const struct coll_ring_group *g = NULL;
        for (int p = 0; p < lines[k].nsets && p < COLL_RING_LINE_MAX; p++) {
            const struct coll_ring_steps *st = &lines[k].set[p];
            if (!line_set_moves(st))
                continue;
            size_t K, slot_bytes;
            line_shape(comm, st, &K, &slot_bytes);
            struct ring_ctx *x = &l->x[l->n];
            *x = (struct ring_ctx){.comm = comm, .a = &st->a, .n = st->g.n, .r = st->g.pos,
                                   .members = st->g.members, .nsegs = st->nsegs,
                                   .step0 = st->step0, .avg_div = st->avg_div,
                                   .esize = coll_dtype_size(st->a.dtype), .K = K,
                                   .nrs = st->g.n - 1, .in = st->a.sendbuf,
                                   .out = st->a.recvbuf};
            if (slot_bytes > 0) {
                x->nslots = (size_t)comm->depth;
                x->slot_bytes = slot_bytes;
                x->slots = room;
                room += x->nslots * slot_bytes;
                window = x->nslots < window ? x->nslots : window;
            } else {
                window = window < 8 ? window : 8;
            }
            l->start[l->n] = total;
            total += (size_t)st->nsteps * K;
            lag = K < lag ? K : lag;
            size_t off0, len0;
            ring_seg(x, 0, &off0, &len0);
            size_t pb = ring_slice_bytes(x, len0);
            piece = pb > piece ? pb : piece;
            g = &st->g;
            l->n++;
        }
        if (l->n == 0)
            continue;
        l->start[l->n] = total;
        /* The sets of a line share the group, hence the connections, and pass
         * on one pipe one after another; a set's first sends wait for the one
         * before to be processed as far as the lag says (the smallest K). */
        pipes[np] = (struct coll_pipe){.last = last, .comm = comm, .total = total,
                                       .send_after_recv = true, .send_lag = lag,
                                       .window = window, .ctx = l, .send_buf = line_send_buf,
                                       .recv_buf = line_recv_buf, .process = line_process,
                                       .consume = line_consume, .piece_bytes = piece};
        int prev, next;
        coll_ring_neighbors(g->pos, g->n, &prev, &next);
        COLL_CHECK(coll_transport_get_conn(comm, g->members[next], true, &pipes[np].send_conn));
        COLL_CHECK(coll_transport_get_conn(comm, g->members[prev], false, &pipes[np].recv_conn));
        np++;
    }
    if (np > 0)
        coll_frame_pipes(fr, pipes, np);
    return collSuccess;
}

void coll_ring_segment(size_t count, int nsegs, int j, size_t *off_p, size_t *len_p)
{
    if (j < nsegs) {
        coll_ring_chunk(count, nsegs, j, off_p, len_p);
    } else {
        *off_p = 0;
        *len_p = 0;
    }
}

static collResult_t ring_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_ring_group g = coll_ring_flat(fr->prog.comm);
    return ring_allreduce_group(fr, a, &g, g.n, true);
}

static collResult_t ring_reduce_scatter(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks, r = comm->rank;
    const char *own = (const char *)a->sendbuf + (size_t)r * bytes;
    if (n == 1 || a->count == 0) {
        if ((const char *)a->recvbuf != own && bytes > 0)
            memcpy(a->recvbuf, own, bytes);
        return collSuccess;
    }
    struct coll_ring_group g = coll_ring_flat(comm);
    struct ring_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct ring_ctx){.comm = comm, .a = a, .n = n, .r = g.pos, .members = g.members,
                           .avg_div = n, .esize = esize, .nrs = n - 1, .shift = -1,
                           .blocks = true, .rs_out_block = true, .in = a->sendbuf,
                           .out = a->recvbuf};
    char *buf;
    COLL_CHECK(coll_comm_scratch(comm, 2 * bytes, (void **)&buf));
    x->partial[0] = buf;
    x->partial[1] = buf + bytes;
    x->K = coll_slices(a->count, ring_slice_elems(comm, esize));
    return ring_run(fr, x, n - 1, NULL, 0, true);
}

/* Broadcast and reduce: a chain along the ring, pipelined in slices. */
struct chain_ctx {
    const struct coll_args *a;
    size_t esize, K;
    bool is_root, is_first;
    char *slots;
    size_t nslots, slot_bytes;
    int n;
};

static void chain_slice(const struct chain_ctx *x, size_t i, size_t *off_p, size_t *len_p)
{
    coll_ring_chunk(x->a->count, (int)x->K, (int)i, off_p, len_p);
}

static void bcast_send_buf(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct chain_ctx *x = vctx;
    size_t off, len;
    chain_slice(x, i, &off, &len);
    const char *base = x->is_root ? x->a->sendbuf : x->a->recvbuf;
    *p = base + off * x->esize;
    *bytes = len * x->esize;
}

static void bcast_recv_buf(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct chain_ctx *x = vctx;
    size_t off, len;
    chain_slice(x, i, &off, &len);
    *p = (char *)x->a->recvbuf + off * x->esize;
    *bytes = len * x->esize;
}

static collResult_t ring_broadcast(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks;
    const int *order = comm->hosts.order, *place = comm->hosts.pos;
    int pos = coll_mod((long)place[comm->rank] - place[a->root], n);
    if (pos == 0 && a->recvbuf != a->sendbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return collSuccess;
    struct chain_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct chain_ctx){.a = a, .esize = esize, .is_root = pos == 0, .n = n};
    x->K = coll_slices(a->count, ring_slice_elems(comm, esize));
    struct coll_pipe p = {.last = true, .comm = comm, .total = x->K,
                          .send_after_recv = pos > 0, .send_lag = 0,
                          .window = 8, .ctx = x, .send_buf = bcast_send_buf,
                          .recv_buf = bcast_recv_buf,
                          .piece_bytes = (a->count + x->K - 1) / x->K * esize,
                          .cut_bytes = (a->count + x->K - 1) / x->K * esize,
                          .cut_pieces = x->K,
                          /* Pieces land in the output as they are. */
                          .send_reg = x->is_root ? a->sendbuf : a->recvbuf,
                          .send_reg_bytes = bytes, .recv_reg = a->recvbuf,
                          .recv_reg_bytes = bytes};
    int prev, next;
    coll_ring_neighbors(place[comm->rank], n, &prev, &next);
    if (pos < n - 1)
        COLL_CHECK(coll_transport_get_conn(comm, order[next], true, &p.send_conn));
    if (pos > 0)
        COLL_CHECK(coll_transport_get_conn(comm, order[prev], false, &p.recv_conn));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

static void reduce_send_buf(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct chain_ctx *x = vctx;
    size_t off, len;
    chain_slice(x, i, &off, &len);
    *bytes = len * x->esize;
    *p = x->is_first ? (const char *)x->a->sendbuf + off * x->esize
                     : x->slots + (i % x->nslots) * x->slot_bytes;
}

static void reduce_recv_buf(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct chain_ctx *x = vctx;
    size_t off, len;
    chain_slice(x, i, &off, &len);
    *bytes = len * x->esize;
    *p = x->slots + (i % x->nslots) * x->slot_bytes;
}

static void reduce_process(void *vctx, size_t i, void *recvd)
{
    struct chain_ctx *x = vctx;
    size_t off, len;
    chain_slice(x, i, &off, &len);
    const char *own = (const char *)x->a->sendbuf + off * x->esize;
    char *dst = x->is_root ? (char *)x->a->recvbuf + off * x->esize : recvd;
    coll_reduce(x->a->op, x->a->dtype, dst, recvd, own, len);
    if (x->is_root && x->a->op == collAvg)
        coll_reduce_div(x->a->dtype, dst, dst, len, x->n);
}

static collResult_t ring_reduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks;
    const int *order = comm->hosts.order, *place = comm->hosts.pos;
    int pos = coll_mod((long)place[comm->rank] - place[a->root] - 1, n);
    bool is_root = comm->rank == a->root;
    if (n == 1 || bytes == 0) {
        if (is_root && a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    struct chain_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct chain_ctx){.a = a, .esize = esize, .is_root = is_root, .is_first = pos == 0,
                            .n = n};
    x->K = coll_slices(a->count, ring_slice_elems(comm, esize));
    x->nslots = (size_t)comm->depth;
    x->slot_bytes = ((a->count + x->K - 1) / x->K) * esize;
    if (!x->is_first)
        COLL_CHECK(coll_comm_scratch(comm, x->nslots * x->slot_bytes, (void **)&x->slots));
    /* A middle rank forwards from the slot it reduced into, so a slot is reused
     * only once its forward send is done (recv_lag); the root frees it as soon
     * as it is reduced. */
    struct coll_pipe p = {.last = true, .comm = comm, .total = x->K,
                          .send_after_recv = !x->is_first,
                          .send_lag = 0, .recv_lag = is_root ? 0 : x->nslots,
                          .window = x->nslots, .ctx = x, .send_buf = reduce_send_buf,
                          .recv_buf = reduce_recv_buf, .process = reduce_process,
                          .piece_bytes = x->slot_bytes, .cut_bytes = x->slot_bytes,
                          .cut_pieces = x->K};
    int prev, next;
    coll_ring_neighbors(place[comm->rank], n, &prev, &next);
    if (!is_root)
        COLL_CHECK(coll_transport_get_conn(comm, order[next], true, &p.send_conn));
    if (!x->is_first)
        COLL_CHECK(coll_transport_get_conn(comm, order[prev], false, &p.recv_conn));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

static bool ring_can_run(const struct coll_comm *comm, enum coll_func f,
                         const struct coll_args *a)
{
    return true;
}

/* Every rank of a ring moves the same bytes, so the host moves n times a rank's. */
static double ring_predict(const struct coll_comm *comm, enum coll_func f,
                           const struct coll_args *a, const struct coll_model *m)
{
    int n = comm->nranks;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    double frac = (double)(n - 1) / n;
    if (n == 1)
        return 0;
    switch (f) {
    case COLL_FUNC_ALLREDUCE: {
        /* Over transports that lend received bytes in place the reduce-scatter
         * reduces from the peer's slot: two passes over its bytes, not three. */
        double rs = m->lend ? 2.0 / 3.0 : 1.0;
        return coll_model_cost(m, n, &(struct coll_cost){
            .rounds = 2 * (n - 1), .msgs = 2.0 * n * (n - 1), .busiest_msgs = 4.0 * (n - 1),
            .rank_bytes = (2 + 2 * rs) * frac * S, .total_bytes = (2 + 2 * rs) * (n - 1) * S,
            .reduce_bytes = frac * S});
    }
    case COLL_FUNC_BROADCAST:
    case COLL_FUNC_REDUCE: {
        /* A pipelined chain: n-1 rounds to fill it, then the buffer at link speed. */
        double slice = fmin(S, (double)comm->chunk_bytes);
        return coll_model_cost(m, n, &(struct coll_cost){
            .rounds = n - 1, .msgs = n - 1, .busiest_msgs = 2,
            .rank_bytes = 2 * S + 2 * (n - 2) * slice, .total_bytes = 2.0 * (n - 1) * S,
            .reduce_bytes = f == COLL_FUNC_REDUCE ? S : 0});
    }
    case COLL_FUNC_ALLGATHER:      /* count is per rank: the buffer is n x count */
    case COLL_FUNC_REDUCE_SCATTER:
        return coll_model_cost(m, n, &(struct coll_cost){
            .rounds = n - 1, .msgs = (double)n * (n - 1), .busiest_msgs = 2.0 * (n - 1),
            .rank_bytes = 2 * (n - 1) * S, .total_bytes = 2.0 * n * (n - 1) * S,
            .reduce_bytes = f == COLL_FUNC_REDUCE_SCATTER ? (n - 1) * S : 0});
    default:
        return 1e300;
    }
}

const struct coll_algo coll_algo_ring = {
    .name = "ring",
    .can_run = ring_can_run,
    .build = {[COLL_FUNC_ALLREDUCE] = ring_allreduce,
              [COLL_FUNC_BROADCAST] = ring_broadcast,
              [COLL_FUNC_REDUCE] = ring_reduce,
              [COLL_FUNC_ALLGATHER] = ring_allgather,
              [COLL_FUNC_REDUCE_SCATTER] = ring_reduce_scatter},
    .predict = ring_predict,
};
