/* Collectives over a group of ranks: chain broadcast and reduce, ring allgather
 * and reduce-scatter of uneven regions (group.h).  The chains are ring.c's
 * broadcast and reduce over a group's places; the rings cut each region into
 * the same number of slices K (as many as the largest region needs), so that
 * every step has K pieces and the pipeline's lags hold (pipe.h); the slices of
 * a smaller region are smaller, and empty ones move nothing. */
#include <string.h>

#include "group.h"

#include "engine.h"
#include "exec.h"
#include "pattern.h"
#include "pipe.h"
#include "prog.h"
#include "reduce.h"

static size_t group_slice_bytes(const struct coll_comm *comm)
{
    return comm->chunk_bytes ? comm->chunk_bytes : 1;
}

/* p's connections to the next and from the previous place, as wanted (the
 * receive's accepted by the stage when it is not made yet). */
static collResult_t group_conns(struct coll_comm *comm, const struct coll_ring_group *g,
                                bool send, bool recv, struct coll_pipe *p)
{
    int prev, next;
    coll_ring_neighbors(g->pos, g->n, &prev, &next);
    return coll_pipe_link(comm, p, send ? g->members[next] : -1, recv ? g->members[prev] : -1);
}

/* --- chain broadcast --- */

struct bcast_ctx {
    const char *src;
    char *dst;
    size_t bytes, K;
    bool is_root;
};

static void bcast_send(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct bcast_ctx *x = vctx;
    size_t off, len;
    coll_ring_chunk(x->bytes, (int)x->K, (int)i, &off, &len);
    *p = (x->is_root ? x->src : x->dst) + off;
    *bytes = len;
}

static void bcast_recv(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct bcast_ctx *x = vctx;
    size_t off, len;
    coll_ring_chunk(x->bytes, (int)x->K, (int)i, &off, &len);
    *p = x->dst + off;
    *bytes = len;
}

collResult_t coll_group_bcast(struct coll_frame *fr, const struct coll_ring_group *g, int root,
                              const void *src, void *dst, size_t bytes, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    int n = g->n, at = coll_mod((long)g->pos - root, n);
    if (n == 1 || bytes == 0)
        return collSuccess;
    struct bcast_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct bcast_ctx){.src = src, .dst = dst, .bytes = bytes, .is_root = at == 0};
    x->K = coll_slices(bytes, group_slice_bytes(comm));
    struct coll_pipe p = {.last = last, .comm = comm, .total = x->K, .send_after_recv = at > 0,
                          .window = 8, .ctx = x, .send_buf = bcast_send, .recv_buf = bcast_recv,
                          .piece_bytes = (bytes + x->K - 1) / x->K,
                          /* Slices land in dst as they are. */
                          .send_reg = x->is_root ? src : dst, .send_reg_bytes = bytes,
                          .recv_reg = dst, .recv_reg_bytes = bytes};
    COLL_CHECK(group_conns(comm, g, at < n - 1, at > 0, &p));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

/* --- chain reduce --- */

struct reduce_ctx {
    const char *own;
    char *dst, *slots;
    size_t count, esize, K, nslots, slot_bytes;
    collDataType_t dtype;
    collRedOp_t op;
    int avg_div;
    bool is_root, is_first;
};

static void reduce_slice(const struct reduce_ctx *x, size_t i, size_t *off_p, size_t *len_p)
{
    coll_ring_chunk(x->count, (int)x->K, (int)i, off_p, len_p);
}

static void reduce_send(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct reduce_ctx *x = vctx;
    size_t off, len;
    reduce_slice(x, i, &off, &len);
    *bytes = len * x->esize;
    *p = x->is_first ? x->own + off * x->esize : x->slots + (i % x->nslots) * x->slot_bytes;
}

static void reduce_recv(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct reduce_ctx *x = vctx;
    size_t off, len;
    reduce_slice(x, i, &off, &len);
    *bytes = len * x->esize;
    *p = x->slots + (i % x->nslots) * x->slot_bytes;
}

static void reduce_process(void *vctx, size_t i, void *recvd)
{
    struct reduce_ctx *x = vctx;
    size_t off, len;
    reduce_slice(x, i, &off, &len);
    const char *own = x->own + off * x->esize;
    char *d = x->is_root ? x->dst + off * x->esize : recvd;
    coll_reduce(x->op, x->dtype, d, recvd, own, len);
    if (x->is_root && x->avg_div > 1)
        coll_reduce_div(x->dtype, d, d, len, x->avg_div);
}

size_t coll_group_reduce_slots(const struct coll_comm *comm, size_t count, collDataType_t dtype)
{
    size_t esize = coll_dtype_size(dtype);
    size_t K = coll_slices(count, group_slice_bytes(comm) / esize ? group_slice_bytes(comm) / esize
                                                                   : 1);
    return (size_t)comm->depth * ((count + K - 1) / K) * esize;
}

collResult_t coll_group_reduce(struct coll_frame *fr, const struct coll_ring_group *g, int root,
                               const void *own, void *dst, size_t count, collDataType_t dtype,
                               collRedOp_t op, int avg_div, void *slots, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    int n = g->n, at = coll_mod((long)g->pos - root - 1, n); /* 0: the chain's first */
    size_t esize = coll_dtype_size(dtype);
    bool is_root = g->pos == root;
    if (n == 1 || count == 0) {
        if (is_root && count > 0) {
            if (dst != own)
                memcpy(dst, own, count * esize);
            if (avg_div > 1)
                coll_reduce_div(dtype, dst, dst, count, avg_div);
        }
        return collSuccess;
    }
    size_t slice = group_slice_bytes(comm) / esize;
    struct reduce_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct reduce_ctx){.own = own, .dst = dst, .slots = slots, .count = count,
                             .esize = esize, .dtype = dtype, .op = op, .avg_div = avg_div,
                             .is_root = is_root, .is_first = at == 0};
    x->K = coll_slices(count, slice ? slice : 1);
    x->nslots = (size_t)comm->depth;
    x->slot_bytes = ((count + x->K - 1) / x->K) * esize;
    /* A middle member forwards from the slot it reduced into, so a slot is
     * reused only once its forward send is done (recv_lag); the root frees it as
     * soon as it is reduced. */
    struct coll_pipe p = {.last = last, .comm = comm, .total = x->K,
                          .send_after_recv = !x->is_first, .recv_lag = is_root ? 0 : x->nslots,
                          .window = x->nslots, .ctx = x, .send_buf = reduce_send,
                          .recv_buf = reduce_recv, .process = reduce_process,
                          .piece_bytes = x->slot_bytes};
    COLL_CHECK(group_conns(comm, g, !is_root, !x->is_first, &p));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

/* --- binomial trees ---
 *
 * A program of one message per stage (prog.h: its next() written here): the
 * broadcast receives from its parent, then sends to its children; the reduce
 * receives from each child and adds it, then sends up. */

struct gtree {
    struct coll_frame *fr;
    const struct coll_ring_group *g;
    int n, root, vr, mask;
    bool reduce, got;          /* reduce: a child's partial waits in `in` to be added */
    const void *from;          /* broadcast: what goes to the children */
    void *dst;
    /* reduce */
    char *acc, *in;
    const char *partial;
    size_t count, bytes;
    collDataType_t dtype;
    collRedOp_t op;
    int avg_div;
    struct coll_xfer x;
    struct coll_lane lane;
    struct coll_sched sched;
};

/* The next stage: one message to or from the member at place p. */
static collResult_t gtree_xfer(struct gtree *t, int p, bool send, void *buf, size_t bytes)
{
    struct coll_comm *comm = t->fr->prog.comm;
    t->x = (struct coll_xfer){.buf = buf, .bytes = bytes, .is_send = send};
    coll_round_sched(comm, &t->x, 1, &t->lane, &t->sched);
    COLL_CHECK(coll_lane_link(comm, &t->lane, t->g->members[p]));
    t->fr->prog.sched = &t->sched;
    return collSuccess;
}

static collResult_t gtree_bcast_next(struct coll_prog *prog)
{
    struct gtree *t = ((struct coll_frame *)prog)->state;
    int n = t->n, vr = t->vr, root = t->root;
    prog->sched = NULL;
    if (t->mask < 0) { /* first: the parent, vr without its lowest set bit */
        int mask = 1;
        while (mask < n && !(vr & mask))
            mask <<= 1;
        t->mask = mask >> 1;
        if (vr != 0) {
            t->from = t->dst;
            return gtree_xfer(t, (vr - mask + root) % n, false, t->dst, t->bytes);
        }
    }
    /* Then the children vr + 2^k below that bit, farthest first. */
    for (; t->mask > 0; t->mask >>= 1)
        if (vr + t->mask < n) {
            int child = (vr + t->mask + root) % n;
            t->mask >>= 1;
            return gtree_xfer(t, child, true, (void *)t->from, t->bytes);
        }
    return collSuccess;
}

collResult_t coll_group_tree_bcast(struct coll_frame *fr, const struct coll_ring_group *g,
                                   int root, const void *src, void *dst, size_t bytes)
{
    int n = g->n;
    if (n == 1 || bytes == 0)
        return collSuccess;
    struct gtree *t;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*t), (void **)&t));
    *t = (struct gtree){.fr = fr, .g = g, .n = n, .root = root,
                        .vr = coll_mod((long)g->pos - root, n), .mask = -1, .from = src,
                        .dst = dst, .bytes = bytes};
    fr->state = t;
    fr->prog.next = gtree_bcast_next;
    return collSuccess;
}

size_t coll_group_tree_reduce_work(size_t count, collDataType_t dtype)
{
    return 2 * count * coll_dtype_size(dtype);
}

static collResult_t gtree_reduce_next(struct coll_prog *prog)
{
    struct gtree *t = ((struct coll_frame *)prog)->state;
    int n = t->n, vr = t->vr, root = t->root;
    prog->sched = NULL;
    if (t->mask == 0) /* over */
        return collSuccess;
    if (t->got) { /* a child's partial arrived: added in the order of the children */
        coll_reduce(t->op, t->dtype, t->acc, t->partial, t->in, t->count);
        t->partial = t->acc;
        t->got = false;
        t->mask <<= 1;
    }
    /* Children vr + 1, vr + 2, vr + 4, ... below vr's lowest set bit. */
    for (; t->mask < n && !(vr & t->mask); t->mask <<= 1)
        if (vr + t->mask < n) {
            t->got = true;
            return gtree_xfer(t, (vr + t->mask + root) % n, false, t->in, t->bytes);
        }
    int mask = t->mask;
    t->mask = 0;
    if (vr != 0)
        return gtree_xfer(t, (vr - mask + root) % n, true, (void *)t->partial, t->bytes);
    if (t->partial != t->dst)
        memcpy(t->dst, t->partial, t->bytes);
    if (t->avg_div > 1)
        coll_reduce_div(t->dtype, t->dst, t->dst, t->count, t->avg_div);
    return collSuccess;
}

collResult_t coll_group_tree_reduce(struct coll_frame *fr, const struct coll_ring_group *g,
                                    int root, const void *own, void *dst, size_t count,
                                    collDataType_t dtype, collRedOp_t op, int avg_div,
                                    void *work)
{
    int n = g->n, vr = coll_mod((long)g->pos - root, n);
    size_t bytes = count * coll_dtype_size(dtype);
    if (n == 1 || count == 0)
        return coll_group_reduce(fr, g, root, own, dst, count, dtype, op, avg_div, NULL,
                                 false); /* the copy and division of one member */
    /* The partial sum: the root's output, else the first half of work; what
     * arrives lands in the second half. */
    struct gtree *t;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*t), (void **)&t));
    *t = (struct gtree){.fr = fr, .g = g, .n = n, .root = root, .vr = vr, .mask = 1,
                        .reduce = true, .dst = dst, .acc = vr == 0 ? dst : work,
                        .in = (char *)work + bytes, .partial = own, .count = count,
                        .bytes = bytes, .dtype = dtype, .op = op, .avg_div = avg_div};
    fr->state = t;
    fr->prog.next = gtree_reduce_next;
    return collSuccess;
}

/* --- ring allgather of uneven regions --- */

struct agv_ctx {
    char *buf;
    const size_t *off, *len;
    size_t K;
    int n, pos;
};

/* Slice k of region r. */
static void agv_piece(const struct agv_ctx *x, int r, size_t k, char **p, size_t *bytes)
{
    size_t o, l;
    coll_ring_chunk(x->len[r], (int)x->K, (int)k, &o, &l);
    *p = x->buf + x->off[r] + o;
    *bytes = l;
}

static void agv_send(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct agv_ctx *x = vctx;
    int s = (int)(i / x->K);
    char *q;
    agv_piece(x, coll_mod((long)x->pos - s, x->n), i % x->K, &q, bytes);
    *p = q;
}

static void agv_recv(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct agv_ctx *x = vctx;
    int s = (int)(i / x->K);
    agv_piece(x, coll_mod((long)x->pos - s - 1, x->n), i % x->K, (char **)p, bytes);
}

collResult_t coll_group_allgatherv(struct coll_frame *fr, const struct coll_ring_group *g,
                                   void *buf, const size_t *off, const size_t *len, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    int n = g->n;
    size_t most = 0, end = 0;
    for (int j = 0; j < n; j++) {
        most = len[j] > most ? len[j] : most;
        end = off[j] + len[j] > end ? off[j] + len[j] : end;
    }
    if (n == 1 || most == 0)
        return collSuccess;
    struct agv_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct agv_ctx){.buf = buf, .off = off, .len = len, .n = n, .pos = g->pos};
    x->K = coll_slices(most, group_slice_bytes(comm));
    /* Step s sends what step s - 1 received: the same slice, K pieces later. */
    struct coll_pipe p = {.last = last, .comm = comm, .total = (size_t)(n - 1) * x->K,
                          .send_after_recv = true, .send_lag = x->K, .window = 8, .ctx = x,
                          .send_buf = agv_send, .recv_buf = agv_recv,
                          .piece_bytes = (most + x->K - 1) / x->K, .send_reg = buf,
                          .send_reg_bytes = end, .recv_reg = buf, .recv_reg_bytes = end};
    COLL_CHECK(group_conns(comm, g, true, true, &p));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}

/* --- ring reduce-scatter of uneven regions --- */

struct rsv_ctx {
    const char *in;
    char *out, *partial[2];
    const size_t *off, *len;
    size_t K, esize;
    collDataType_t dtype;
    collRedOp_t op;
    int n, pos, avg_div;
};

/* Step s sends region pos - s - 1 (its own contribution at step 0, else the
 * partial sum step s - 1 made) and receives region pos - s - 2 into
 * partial[s % 2], adding its own; the last step's region is pos itself, whose
 * sum goes to out. */
static int rsv_region(const struct rsv_ctx *x, int s, bool send)
{
    return coll_mod((long)x->pos - s - (send ? 1 : 2), x->n);
}

static void rsv_slice(const struct rsv_ctx *x, int r, size_t k, size_t *o_p, size_t *l_p)
{
    coll_ring_chunk(x->len[r], (int)x->K, (int)k, o_p, l_p);
}

static void rsv_send(void *vctx, size_t i, const void **p, size_t *bytes)
{
    struct rsv_ctx *x = vctx;
    int s = (int)(i / x->K), r = rsv_region(x, s, true);
    size_t o, l;
    rsv_slice(x, r, i % x->K, &o, &l);
    *p = s == 0 ? x->in + (x->off[r] + o) * x->esize : x->partial[(s - 1) % 2] + o * x->esize;
    *bytes = l * x->esize;
}

static void rsv_recv(void *vctx, size_t i, void **p, size_t *bytes)
{
    struct rsv_ctx *x = vctx;
    int s = (int)(i / x->K), r = rsv_region(x, s, false);
    size_t o, l;
    rsv_slice(x, r, i % x->K, &o, &l);
    *p = x->partial[s % 2] + o * x->esize;
    *bytes = l * x->esize;
}

static void rsv_process(void *vctx, size_t i, void *recvd)
{
    struct rsv_ctx *x = vctx;
    int s = (int)(i / x->K), r = rsv_region(x, s, false);
    size_t o, l;
    rsv_slice(x, r, i % x->K, &o, &l);
    const char *own = x->in + (x->off[r] + o) * x->esize;
    if (s < x->n - 2) {
        coll_reduce(x->op, x->dtype, recvd, recvd, own, l);
        return;
    }
    char *d = x->out + o * x->esize;
    coll_reduce(x->op, x->dtype, d, recvd, own, l);
    if (x->avg_div > 1)
        coll_reduce_div(x->dtype, d, d, l, x->avg_div);
}

collResult_t coll_group_reduce_scatterv(struct coll_frame *fr, const struct coll_ring_group *g,
                                        const void *in, void *out, const size_t *off,
                                        const size_t *len, collDataType_t dtype, collRedOp_t op,
                                        int avg_div, void *work, bool last)
{
    struct coll_comm *comm = fr->prog.comm;
    int n = g->n, pos = g->pos;
    size_t esize = coll_dtype_size(dtype), most = 0;
    for (int j = 0; j < n; j++)
        most = len[j] > most ? len[j] : most;
    if (n == 1 || most == 0) {
        const char *mine = (const char *)in + off[pos] * esize;
        if (len[pos] > 0 && (const char *)out != mine)
            memmove(out, mine, len[pos] * esize);
        if (len[pos] > 0 && avg_div > 1)
            coll_reduce_div(dtype, out, out, len[pos], avg_div);
        return collSuccess;
    }
    size_t slice = group_slice_bytes(comm) / esize;
    struct rsv_ctx *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = (struct rsv_ctx){.in = in, .out = out, .off = off, .len = len, .esize = esize,
                          .dtype = dtype, .op = op, .n = n, .pos = pos, .avg_div = avg_div};
    x->partial[0] = work;
    x->partial[1] = (char *)work + most * esize;
    x->K = coll_slices(most, slice ? slice : 1);
    /* A partial is sent one step after it is made (send_lag), and its buffer
     * takes the receives of two steps later only once that send is done
     * (recv_lag). */
    struct coll_pipe p = {.last = last, .comm = comm, .total = (size_t)(n - 1) * x->K,
                          .send_after_recv = true, .send_lag = x->K, .recv_lag = x->K,
                          .window = 8, .ctx = x, .send_buf = rsv_send, .recv_buf = rsv_recv,
                          .process = rsv_process,
                          .piece_bytes = (most + x->K - 1) / x->K * esize};
    COLL_CHECK(group_conns(comm, g, true, true, &p));
    coll_frame_pipes(fr, &p, 1);
    return collSuccess;
}
