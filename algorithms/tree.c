/* Tree algorithms: reduce and broadcast on a pipelined binary tree, allreduce on a
 * pipelined double binary tree.
 *
 * The trees come from coll_btree and coll_btree_mirror (pattern.c).  Their height
 * is at most ceil(log2 n) hops, against n-1 hops for the ring's chain, so for
 * small and medium messages on many ranks the tree's latency term is
 * ceil(log2 n) alpha per direction where the ring pays (n-1) or 2(n-1) alpha.
 *
 * Reduce (root R): the tree is built over ranks relabelled r -> r - R mod n, so R
 * is its root.  The buffer is cut into slices of about comm->chunk_bytes.  Slice
 * by slice, a leaf sends its input to its parent; an inner rank receives the
 * partial sums of its children into receive slots and reduces them in a fixed
 * order, (child0 op child1) op own, then forwards the result to its parent; the
 * root reduces into its receive buffer and divides once for avg.  Steps: height
 * + slices - 1.  An inner rank receives 2S and sends S (S: the buffer's bytes).
 *
 * Broadcast (root R): the same tree, downwards: every rank receives each slice
 * into recvbuf and forwards it to its children from there.  An inner rank
 * receives S and sends 2S.
 *
 * AllReduce: the buffer is split into two halves.  Half 0 is reduced up tree A
 * (coll_btree, root 0) and broadcast back down it; half 1 does the same on tree
 * B (coll_btree_mirror, root n-1).  The two halves progress concurrently, both
 * pipelined in slices, and a slice starts down the tree as soon as the root has
 * reduced it.  For even n every rank is a leaf in one tree, so each rank sends
 * and receives 2S in all (S/2 up and 2 x S/2 down where it is inner, S/2 up and
 * S/2 down where it is a leaf) and reduces S; a single tree would put 3S on
 * every inner rank and leave the leaves' links half idle.  Latency: 2 x height
 * hops.  The result of each slice is computed once, at a root, and broadcast, so
 * every rank ends with the same bytes.  Buffers under TREE_SPLIT_MIN_BYTES go
 * whole on tree A: the second tree doubles the messages each rank handles for
 * no fewer hops, and on a host with fewer cores than ranks it was measured
 * slower (8 ranks, 2 cores: 32 KiB took 154 us split, 69 us whole).
 *
 *   n = 8   tree A (root 0)          tree B (mirror: rank r plays 7-r, root 7)
 *                 0                               7
 *                 |                               |
 *                 4                               3
 *              /     \                         /     \
 *             2       6                       5       1
 *            / \     / \                     / \     / \
 *           1   3   5   7                   6   4   2   0
 *   Inner ranks of A (0 2 4 6) are the leaves of B and the other way round.
 *   For odd n one rank, n-1, is inner in both trees.
 *
 * Progress: one schedule (engine.h) carries every stream (tree x direction x
 * peer) of the call, a lane per connection; the reductions are its progress
 * step, run as the children's slices arrive.  A pair of ranks can be linked in
 * both trees (always for n = 2), and there is one connection per peer and
 * direction, so the messages of both trees on one connection go in a fixed
 * order, (slice 0 of A, slice 0 of B, slice 1 of A, ...), that both ends follow.
 * Every message waits only on messages earlier in that order or on the same
 * slice lower in the tree, so no rank waits on a rank that waits on it.
 *
 * Limitations: reduce_scatter and allgather are not provided (the ring does
 * them).  An inner rank's links carry twice the bytes of a ring's, so for large
 * messages the ring's bandwidth wins on a single switch; the tree wins on the
 * latency of small messages on many ranks.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "algo.h"
#include "engine.h"
#include "pattern.h"
#include "prog.h"
#include "reduce.h"

#define TREE_MAX_WINDOW 16  /* slices in flight per stream and child */
#define TREE_LANE_WINDOW 32 /* requests in flight per connection: two streams' worth */
#define TREE_MAX_LANES 12   /* 2 trees x (parent + 2 children) x 2 directions */
#define TREE_SPLIT_MIN_BYTES (64 * 1024) /* allreduce: smaller buffers use tree A only */

enum tree_kind { TREE_UP_RECV, TREE_UP_SEND, TREE_DOWN_RECV, TREE_DOWN_SEND };

/* One tree's share of the call: a range of elements and this rank's place. */
struct tree_stream {
    int parent, child[2], nc;
    bool up, down;          /* reduce towards the root, then broadcast from it */
    size_t off, len, K;     /* elements [off, off + len) in K slices */
    char *slot[2];          /* up: window of receive slots per child */
    size_t reduced;         /* slices reduced (a leaf counts all as reduced) */
    size_t up_recvd[2], up_sent, down_recvd, down_sent[2];
};

/* The messages on one connection: one or two streams' slices, interleaved.
 * The engine's lane of the same index carries them. */
struct tree_lane {
    int peer;
    bool is_send;
    int nent;
    struct {
        int s;
        enum tree_kind kind;
        int j; /* child index for UP_RECV and DOWN_SEND */
    } ent[2];
};

struct tree_run {
    struct coll_comm *comm;
    const struct coll_args *a;
    const char *in;
    char *out;
    size_t esize, slot_bytes, W;
    int ns;
    struct tree_stream st[2];
    int nlanes;
    struct tree_lane lane[TREE_MAX_LANES];
    struct coll_lane elane[TREE_MAX_LANES];
};

/* coll_btree over ranks relabelled so that root is the tree's root. */
static void tree_rooted(int rank, int n, int root, struct tree_stream *st)
{
    coll_btree(coll_mod((long)rank - root, n), n, &st->parent, st->child, &st->nc);
    if (st->parent >= 0)
        st->parent = coll_mod((long)st->parent + root, n);
    for (int j = 0; j < st->nc; j++)
        st->child[j] = coll_mod((long)st->child[j] + root, n);
}

static void tree_slice(const struct tree_stream *st, size_t i, size_t *off_p, size_t *len_p)
{
    size_t o, l;
    coll_ring_chunk(st->len, (int)st->K, (int)i, &o, &l);
    *off_p = st->off + o;
    *len_p = l;
}

/* Message m of a lane: which entry (stream) and which slice. */
static void tree_lane_msg(const struct tree_run *x, const struct tree_lane *l, size_t m, int *e_p,
                          size_t *i_p)
{
    if (l->nent == 1) {
        *e_p = 0;
        *i_p = m;
        return;
    }
    size_t k0 = x->st[l->ent[0].s].K, k1 = x->st[l->ent[1].s].K;
    size_t kmin = k0 < k1 ? k0 : k1;
    if (m < 2 * kmin) {
        *e_p = (int)(m % 2);
        *i_p = m / 2;
    } else {
        *e_p = k0 > k1 ? 0 : 1;
        *i_p = kmin + (m - 2 * kmin);
    }
}

static void tree_add(struct tree_run *x, int peer, bool is_send, int s, enum tree_kind kind,
                     int j)
{
    int k = 0;
    while (k < x->nlanes && !(x->lane[k].peer == peer && x->lane[k].is_send == is_send))
        k++;
    struct tree_lane *l = &x->lane[k];
    if (k == x->nlanes) {
        assert(x->nlanes < TREE_MAX_LANES);
        x->nlanes++;
        *l = (struct tree_lane){.peer = peer, .is_send = is_send};
        x->elane[k] = (struct coll_lane){.is_send = is_send, .tag = k,
                                         .window = TREE_LANE_WINDOW};
    }
    assert(l->nent < 2);
    l->ent[l->nent].s = s;
    l->ent[l->nent].kind = kind;
    l->ent[l->nent].j = j;
    l->nent++;
    x->elane[k].total += x->st[s].K;
}

/* Whether slice i of stream s may be posted in the given role. */
static bool tree_ready(const struct tree_run *x, int s, enum tree_kind kind, size_t i)
{
    const struct tree_stream *st = &x->st[s];
    switch (kind) {
    case TREE_UP_RECV:
        /* Slot i % W is free once slice i - W is reduced and, where slot 0 is
         * what goes up, sent. */
        return i < st->reduced + x->W && (st->parent < 0 || i < st->up_sent + x->W);
    case TREE_UP_SEND:
        return i < st->reduced;
    case TREE_DOWN_RECV:
        /* In place, the result lands on this rank's input: only once it went up. */
        return !st->up || i < st->up_sent;
    case TREE_DOWN_SEND:
        if (st->parent < 0)
            return !st->up || i < st->reduced;
        return i < st->down_recvd;
    }
    return false;
}

static void tree_buf(const struct tree_run *x, int s, enum tree_kind kind, int j, size_t i,
                     void **p_p, size_t *bytes_p)
{
    const struct tree_stream *st = &x->st[s];
    size_t off, len;
    tree_slice(st, i, &off, &len);
    *bytes_p = len * x->esize;
    switch (kind) {
    case TREE_UP_RECV:
        *p_p = st->slot[j] + (i % x->W) * x->slot_bytes;
        break;
    case TREE_UP_SEND:
        *p_p = st->nc == 0 ? (char *)x->in + off * x->esize
                           : st->slot[0] + (i % x->W) * x->slot_bytes;
        break;
    case TREE_DOWN_RECV:
        *p_p = x->out + off * x->esize;
        break;
    case TREE_DOWN_SEND:
        /* The broadcast root sends its input; everyone else what it received
         * or, at an allreduce root, reduced. */
        *p_p = st->parent < 0 && !st->up ? (char *)x->in + off * x->esize
                                         : x->out + off * x->esize;
        break;
    }
}

static void tree_count(struct tree_run *x, int s, enum tree_kind kind, int j)
{
    struct tree_stream *st = &x->st[s];
    switch (kind) {
    case TREE_UP_RECV:
        st->up_recvd[j]++;
        break;
    case TREE_UP_SEND:
        st->up_sent++;
        break;
    case TREE_DOWN_RECV:
        st->down_recvd++;
        break;
    case TREE_DOWN_SEND:
        st->down_sent[j]++;
        break;
    }
}

/* Reduces every slice whose children's partial sums have all arrived:
 * (child0 op child1) op own, into slot 0, or into recvbuf at the root. */
static bool tree_reduce_ready(struct tree_run *x, struct tree_stream *st)
{
    const struct coll_args *a = x->a;
    bool moved = false;
    while (st->reduced < st->K) {
        size_t i = st->reduced;
        for (int j = 0; j < st->nc; j++)
            if (st->up_recvd[j] <= i)
                return moved;
        size_t off, len;
        tree_slice(st, i, &off, &len);
        char *s0 = st->slot[0] + (i % x->W) * x->slot_bytes;
        if (st->nc == 2)
            coll_reduce(a->op, a->dtype, s0, s0, st->slot[1] + (i % x->W) * x->slot_bytes, len);
        char *dst = st->parent < 0 ? x->out + off * x->esize : s0;
        coll_reduce(a->op, a->dtype, dst, s0, x->in + off * x->esize, len);
        if (st->parent < 0 && a->op == collAvg)
            coll_reduce_div(a->dtype, dst, dst, len, x->comm->nranks);
        st->reduced++;
        moved = true;
    }
    return moved;
}

/* The engine's view of the lanes: message m of lane l is slice i of one of its
 * streams (tree_lane_msg). */
static bool tree_lane_ready(void *ctx, const struct coll_lane *el, size_t m)
{
    const struct tree_run *x = ctx;
    const struct tree_lane *l = &x->lane[el->tag];
    int e;
    size_t i;
    tree_lane_msg(x, l, m, &e, &i);
    return tree_ready(x, l->ent[e].s, l->ent[e].kind, i);
}

static void tree_lane_buf(void *ctx, const struct coll_lane *el, size_t m, void **p_p,
                          size_t *bytes_p)
{
    const struct tree_run *x = ctx;
    const struct tree_lane *l = &x->lane[el->tag];
    int e;
    size_t i;
    tree_lane_msg(x, l, m, &e, &i);
    tree_buf(x, l->ent[e].s, l->ent[e].kind, l->ent[e].j, i, p_p, bytes_p);
}

static collResult_t tree_lane_done(void *ctx, struct coll_lane *el, size_t m, void *p)
{
    struct tree_run *x = ctx;
    const struct tree_lane *l = &x->lane[el->tag];
    int e;
    size_t i;
    (void)p;
    tree_lane_msg(x, l, m, &e, &i);
    tree_count(x, l->ent[e].s, l->ent[e].kind, l->ent[e].j);
    return collSuccess;
}

static bool tree_progress(void *ctx)
{
    struct tree_run *x = ctx;
    bool moved = false;
    for (int s = 0; s < x->ns; s++)
        if (x->st[s].up && tree_reduce_ready(x, &x->st[s]))
            moved = true;
    return moved;
}

static bool tree_finished(void *ctx)
{
    const struct tree_run *x = ctx;
    for (int s = 0; s < x->ns; s++)
        if (x->st[s].up && x->st[s].reduced < x->st[s].K)
            return false;
    return true;
}

static const struct coll_sched_ops tree_ops = {
    .ready = tree_lane_ready, .buf = tree_lane_buf, .done = tree_lane_done,
    .progress = tree_progress, .finished = tree_finished,
};

/* Sets up lanes, slots and connections for the streams in x0 (copied into the
 * frame), and hands them over as the call's stage. */
static collResult_t tree_execute(struct coll_frame *fr, const struct tree_run *x0)
{
    struct coll_comm *comm = x0->comm;
    struct tree_run *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    *x = *x0;
    size_t slice_elems = comm->chunk_bytes / x->esize;
    x->W = comm->depth < 1 ? 1 : comm->depth > TREE_MAX_WINDOW ? TREE_MAX_WINDOW
                                                                : (size_t)comm->depth;
    x->slot_bytes = 0;
    for (int s = 0; s < x->ns; s++) {
        struct tree_stream *st = &x->st[s];
        st->K = st->len ? coll_slices(st->len, slice_elems) : 0;
        size_t sb = st->K ? (st->len + st->K - 1) / st->K * x->esize : 0;
        if (sb > x->slot_bytes)
            x->slot_bytes = sb;
    }
    /* One scratch allocation carved into every stream's child slots. */
    size_t nslots = 0;
    for (int s = 0; s < x->ns; s++)
        if (x->st[s].up && x->st[s].K > 0)
            nslots += (size_t)x->st[s].nc * x->W;
    char *scratch = NULL;
    if (nslots > 0)
        COLL_CHECK(coll_comm_scratch(comm, nslots * x->slot_bytes, (void **)&scratch));
    for (int s = 0; s < x->ns; s++) {
        struct tree_stream *st = &x->st[s];
        if (st->K == 0)
            continue;
        if (st->up) {
            for (int j = 0; j < st->nc; j++) {
                st->slot[j] = scratch;
                scratch += x->W * x->slot_bytes;
            }
            if (st->nc == 0)
                st->reduced = st->K; /* a leaf forwards its input as it is */
            if (st->parent >= 0)
                tree_add(x, st->parent, true, s, TREE_UP_SEND, 0);
            for (int j = 0; j < st->nc; j++)
                tree_add(x, st->child[j], false, s, TREE_UP_RECV, j);
        }
        if (st->down) {
            if (st->parent >= 0)
                tree_add(x, st->parent, false, s, TREE_DOWN_RECV, 0);
            for (int j = 0; j < st->nc; j++)
                tree_add(x, st->child[j], true, s, TREE_DOWN_SEND, j);
        }
    }
    /* Send connections now (a connect completes in the peer's backlog); a
     * receive's not made yet is accepted by the engine as the stage runs. */
    for (int k = 0; k < x->nlanes; k++)
        COLL_CHECK(coll_lane_link(comm, &x->elane[k], x->lane[k].peer));
    struct coll_sched sched = {.comm = comm, .ops = &tree_ops, .ctx = x, .lanes = x->elane,
                               .nlanes = x->nlanes, .piece_bytes = x->slot_bytes,
                               .last = true, .cut_bytes = x->slot_bytes};
    for (int s = 0; s < x->ns; s++) /* each stream's part in K slices */
        sched.cut_pieces += x->st[s].K;
    coll_frame_stage(fr, &sched);
    return collSuccess;
}

static collResult_t tree_reduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks;
    bool is_root = comm->rank == a->root;
    if (n == 1 || bytes == 0) {
        if (is_root && a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    struct tree_run x = {.comm = comm, .a = a, .in = a->sendbuf, .out = a->recvbuf,
                         .esize = esize, .ns = 1};
    tree_rooted(comm->rank, n, a->root, &x.st[0]);
    x.st[0].up = true;
    x.st[0].len = a->count;
    return tree_execute(fr, &x);
}

static collResult_t tree_broadcast(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks;
    if (comm->rank == a->root && a->recvbuf != a->sendbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    if (n == 1 || bytes == 0)
        return collSuccess;
    struct tree_run x = {.comm = comm, .a = a, .in = a->sendbuf, .out = a->recvbuf,
                         .esize = esize, .ns = 1};
    tree_rooted(comm->rank, n, a->root, &x.st[0]);
    x.st[0].down = true;
    x.st[0].len = a->count;
    return tree_execute(fr, &x);
}

static collResult_t tree_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int n = comm->nranks;
    if (n == 1 || bytes == 0) {
        if (a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    /* Small buffers go whole on tree A: the second tree would double the messages
     * each rank handles for no gain in hops. */
    int ns = bytes < TREE_SPLIT_MIN_BYTES ? 1 : 2;
    struct tree_run x = {.comm = comm, .a = a, .in = a->sendbuf, .out = a->recvbuf,
                         .esize = esize, .ns = ns};
    coll_btree(comm->rank, n, &x.st[0].parent, x.st[0].child, &x.st[0].nc);
    coll_btree_mirror(comm->rank, n, &x.st[1].parent, x.st[1].child, &x.st[1].nc);
    for (int s = 0; s < ns; s++) {
        x.st[s].up = x.st[s].down = true;
        coll_ring_chunk(a->count, ns, s, &x.st[s].off, &x.st[s].len);
    }
    return tree_execute(fr, &x);
}

static bool tree_can_run(const struct coll_comm *comm, enum coll_func f, const struct coll_args *a)
{
    return f == COLL_FUNC_ALLREDUCE || f == COLL_FUNC_BROADCAST || f == COLL_FUNC_REDUCE;
}

/* One rank's place in tree A (coll_btree) or B (coll_btree_mirror). */
static void tree_place(int r, int n, bool mirror, int *parent_p, int *nc_p)
{
    int child[2];
    if (mirror)
        coll_btree_mirror(r, n, parent_p, child, nc_p);
    else
        coll_btree(r, n, parent_p, child, nc_p);
}

/* Predicted time: height hops of latency per direction, the busiest rank's bytes
 * at link speed (in its busier direction) plus the pipeline's fill (one slice per
 * further hop), and the busiest rank's reductions.  O(n) arithmetic. */
static double tree_predict(const struct coll_comm *comm, enum coll_func f,
                           const struct coll_args *a, const struct coll_model *m)
{
    int n = comm->nranks;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    if (n == 1)
        return 0;
    bool allreduce = f == COLL_FUNC_ALLREDUCE;
    int ntrees = allreduce && S >= (double)TREE_SPLIT_MIN_BYTES ? 2 : 1;
    double part = ntrees == 2 ? S / 2 : S; /* the bigger half goes on tree A */
    double maxbytes = 0, total = 0, maxred = 0, maxmsgs = 0;
    /* Both trees reach rank 1's position from the root's child, a power of two,
     * by halving: the height is exactly ceil(log2 n). */
    int height = coll_log2_ceil(n);
    int phases = allreduce ? 2 : 1; /* allreduce uses each edge both ways */
    for (int r = 0; r < n; r++) {
        double bytes = 0, red = 0, msgs = 0;
        for (int t = 0; t < ntrees; t++) {
            int parent, nc, up;
            tree_place(r, n, t == 1, &parent, &nc);
            up = parent >= 0;
            double b = t == 0 ? part : S - part;
            bytes += phases * (nc + up) * b; /* sent + received */
            msgs += phases * (nc + up);
            red += nc * b;
        }
        total += bytes;
        maxbytes = bytes > maxbytes ? bytes : maxbytes;
        maxmsgs = msgs > maxmsgs ? msgs : maxmsgs;
        maxred = red > maxred ? red : maxred;
    }
    double slice = part < (double)comm->chunk_bytes ? part : (double)comm->chunk_bytes;
    double fill = 2 * (height - 1) * slice; /* the pipeline filling up */
    double K = slice > 0 ? ceil(part / slice) : 1; /* slices per tree: a message each */
    struct coll_cost c = {.rounds = phases * height, .msgs = phases * ntrees * (n - 1) * K,
                          .busiest_msgs = maxmsgs * K, .rank_bytes = maxbytes + phases * fill,
                          .total_bytes = total};
    switch (f) {
    case COLL_FUNC_BROADCAST:
        return coll_model_cost(m, n, &c);
    case COLL_FUNC_REDUCE:
    case COLL_FUNC_ALLREDUCE:
        c.reduce_bytes = maxred;
        return coll_model_cost(m, n, &c);
    default:
        return 1e300;
    }
}

const struct coll_algo coll_algo_tree = {
    .name = "tree",
    .can_run = tree_can_run,
    .build = {[COLL_FUNC_ALLREDUCE] = tree_allreduce,
            [COLL_FUNC_BROADCAST] = tree_broadcast,
            [COLL_FUNC_REDUCE] = tree_reduce},
    .predict = tree_predict,
};
