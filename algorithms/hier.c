/* Hierarchical allreduce: two levels, the ranks of a host over shared memory
 * and the hosts over the network (comm->hosts: which ranks share a host).
 *
 * H hosts, host h with L_h ranks; C = the fewest ranks of any host (channels):
 *   1. within each host, the reduce-scatter half of a ring allreduce over its
 *      ranks, the buffer cut into C segments: the rank at place p of its host
 *      then holds segment (p + 1) mod L_h summed over the host (places from
 *      C - 1 to L_h - 2 hold an empty one when L_h > C);
 *   2. for each segment j, the H ranks that hold it (one per host, host order)
 *      allreduce it in a ring of their own: the C rings run at once, each on
 *      its own connections, so C flows share a host's link as NCCL's rings do;
 *   3. within each host, the allgather half: every rank ends with all of it.
 *
 *   H = 2, L = 2, segments a b      1. host rs        2. across      3. host ag
 *   host 0: rank 0 a0 b0, 1 a1 b1    0: b0+b1         0 <-> 2: b      everyone
 *   host 1: rank 2 a2 b2, 3 a3 b3    1: a0+a1, ...    1 <-> 3: a      a and b
 *
 * Bytes per rank over the network: 2 (H - 1) / H of S / C, against the flat
 * ring's 2 (N - 1) / N of S through the one NIC of L ranks; steps: 2 (L - 1) +
 * 2 (H - 1) against 2 (H L - 1).  Every element is reduced in a fixed order (its
 * host's ring, then the hosts' ring), so every rank gets the same bytes, run
 * after run; collAvg divides once, by N, at the end of step 2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "flight.h"
#include "group.h"
#include "internal.h"
#include "pattern.h"
#include "reduce.h"
#include "ring.h"

/* The rank at place `place` of host h. */
static int hier_rank(const struct coll_hosts *h, int host, int place)
{
    return h->order[h->start[host] + place];
}

/* Blocks of the pipelined form: at least this many bytes each, at most
 * HIER_BLOCKS_MAX of them. */
#define HIER_BLOCK_MIN (256u << 10)
#define HIER_BLOCKS_MAX 8

/* The across group of segment seg (the rank holding it on each host). */
static void hier_across_members(const struct coll_hosts *h, int seg, int *members)
{
    for (int j = 0; j < h->n; j++) {
        int Lj = h->start[j + 1] - h->start[j];
        members[j] = hier_rank(h, j, (seg - 1 + Lj) % Lj);
    }
}

/* Each level of a hier call cuts its part of the buffer its own way, which a
 * pair of numbers does not describe: the call records no cut (flight.h). */
static void hier_cut_apart(struct coll_comm *comm)
{
    coll_flight_cut(comm, 0, 0);
}

/* --- broadcast, reduce, allgather and reduce-scatter ---
 *
 * Each host has a leader: the root on the root's host, else the host's first
 * rank.  The network is crossed by the leaders only, in a chain or ring of one
 * flow per host; within a host a chain over shared memory.  The steps run one
 * after the other, so hier gains where the flat ring's steps cost more than its
 * bytes (small buffers, many ranks), and the planner weighs that:
 *   broadcast        across: chain of the leaders from the root; then within
 *                    each host: chain from its leader;
 *   reduce           within each host: chain reduce to its leader; across:
 *                    chain reduce of the hosts' sums to the root (collAvg
 *                    divides there, once);
 *   allgather        within: ring allgather of the host's blocks; across: ring
 *                    allgather of whole hosts' blocks by the leaders; within:
 *                    chain broadcast from the leader of the other hosts' blocks;
 *   reduce_scatter   within: chain reduce of the whole buffer to the leader;
 *                    across: ring reduce-scatter of hosts' regions by the
 *                    leaders; within: chain broadcast of the host's region.
 * Allgather and reduce-scatter work in host order (comm->hosts.order, where a
 * host's blocks are contiguous): with ranks numbered host by host that is rank
 * order and the output itself, else a scratch copy permuted at the end (or, for
 * reduce-scatter, after the first step). */

struct hier_view {
    const struct coll_hosts *h;
    int host, L, H;
    struct coll_ring_group local;
};

static struct hier_view hier_view_of(const struct coll_comm *comm)
{
    const struct coll_hosts *h = &comm->hosts;
    int host = h->host[comm->rank];
    struct hier_view v = {.h = h, .host = host, .H = h->n,
                          .L = h->start[host + 1] - h->start[host]};
    v.local = (struct coll_ring_group){.n = v.L, .pos = h->index[comm->rank],
                                       .members = &h->order[h->start[host]]};
    return v;
}

/* The leaders' group: host j's leader is the root on the root's host (root >=
 * 0), else its first rank.  members: H entries. */
static struct coll_ring_group hier_leaders(const struct hier_view *v, int root, int *members)
{
    for (int j = 0; j < v->H; j++)
        members[j] = root >= 0 && j == v->h->host[root] ? root : hier_rank(v->h, j, 0);
    return (struct coll_ring_group){.n = v->H, .pos = v->host, .members = members};
}

/* Whether the hosts' order is the rank order (ranks numbered host by host). */
static bool hier_order_is_ranks(const struct coll_comm *comm)
{
    for (int i = 0; i < comm->nranks; i++)
        if (comm->hosts.order[i] != i)
            return false;
    return true;
}

/* Whether the hosts' step of a broadcast or reduce of S bytes goes over a
 * binomial tree of the leaders rather than the pipelined chain: COLL_HIER_ACROSS,
 * else the model (the same on every rank): the chain takes H - 1 rounds and the
 * bytes once, the tree ceil(log2 H) rounds with the bytes in each. */
static bool hier_across_tree(const struct coll_comm *comm, double S)
{
    const char *how = coll_param_str(COLL_PARAM_HIER_ACROSS);
    if (how != NULL && strcmp(how, "tree") == 0)
        return true;
    if (how != NULL && strcmp(how, "chain") == 0)
        return false;
    const struct coll_model *m = &comm->model;
    int H = comm->hosts.n;
    double a = m->net_alpha_us > 0 ? m->net_alpha_us : m->alpha_us;
    double us_per_byte = 1.0 / ((m->net_gbs > 0 ? m->net_gbs : m->core_gbs) * 1e3);
    double chain = (H - 1) * a + S * us_per_byte;
    double tree = coll_log2_ceil(H) * (a + S * us_per_byte);
    return tree < chain;
}

static collResult_t hier_comm_init(struct coll_comm *comm)
{
    const char *how = coll_param_str(COLL_PARAM_HIER_ACROSS);
    if (how != NULL && strcmp(how, "auto") != 0 && strcmp(how, "tree") != 0 &&
        strcmp(how, "chain") != 0) {
        coll_set_error(comm, "COLL_HIER_ACROSS=%s: want auto, chain or tree", how);
        return collInvalidArgument;
    }
    return collSuccess;
}

/* --- the program: a call's steps, each a call of ring.c or group.c over a
 * group of ranks, built in turn into the frame's sub frame (prog.h) --- */

/* A hier call between its steps (the frame's state). */
struct hier_run {
    struct coll_frame *fr;
    const struct coll_args *a;
    /* Builds the step after the last one (or does the local work between
     * them) into the frame's sub frame; done: the call is over. */
    collResult_t (*step)(struct hier_run *x);
    int pc;
    bool done;
    struct hier_view v;
    struct coll_ring_group across;
    int *members;                /* the across group's, H of them */
    size_t *off, *len;           /* regions of the allgather and reduce-scatter */
    int root, lead_place, C, N, P, seg, avg;
    bool leader, direct;
    size_t esize, bytes;
    char *G, *R, *work;          /* scratch: the gathered copy, the host's region, slots */
    void *sum;
    const void *host_sum;
    struct coll_args s, g;       /* the arguments of a step's call */
    struct coll_ring_line lines[2];
};

static collResult_t hier_next(struct coll_prog *prog)
{
    struct coll_frame *fr = (struct coll_frame *)prog;
    struct hier_run *x = fr->state;
    for (;;) {
        if (fr->sub_on) {
            bool more;
            COLL_CHECK(coll_frame_sub_next(fr, &more));
            if (more)
                return collSuccess;
        }
        prog->sched = NULL;
        if (x->done)
            return collSuccess;
        COLL_CHECK(x->step(x));
    }
}

/* The frame's state for a hier call made of steps, with step() to build them. */
static collResult_t hier_start(struct coll_frame *fr, const struct coll_args *a,
                               collResult_t (*step)(struct hier_run *), struct hier_run **x_p)
{
    struct hier_run *x;
    COLL_CHECK(coll_frame_alloc(fr, sizeof(*x), (void **)&x));
    struct coll_comm *comm = fr->prog.comm;
    x->fr = fr;
    x->a = a;
    x->step = step;
    x->v = hier_view_of(comm);
    x->N = comm->nranks;
    x->esize = coll_dtype_size(a->dtype);
    x->bytes = a->count * x->esize;
    COLL_CHECK(coll_frame_alloc(fr, (size_t)x->v.H * sizeof(*x->members), (void **)&x->members));
    struct coll_frame *sub; /* made now, so that hier_sub cannot fail later */
    COLL_CHECK(coll_frame_sub(fr, &sub));
    fr->sub_on = false;
    fr->state = x;
    fr->prog.next = hier_next;
    *x_p = x;
    return collSuccess;
}

/* The sub frame for the next step. */
static struct coll_frame *hier_sub(struct hier_run *x)
{
    struct coll_frame *sub = NULL;
    (void)coll_frame_sub(x->fr, &sub); /* made by hier_start: it cannot fail */
    return sub;
}

/* --- allreduce --- */

/* The three steps, pipelined over P blocks of the buffer: in phase t the host's
 * ring runs the allgather of block t - 2 and then the reduce-scatter of block t
 * on its connections, while the ring across carries block t - 1 on its own, so
 * the network and the shared memory work at once (P + 2 phases; each block's
 * steps as in hier_allreduce_step below).  Step t is phase t. */
static collResult_t hier_allreduce_blocks(struct hier_run *x)
{
    const struct coll_args *a = x->a;
    struct coll_comm *comm = x->fr->prog.comm;
    const struct coll_hosts *h = x->v.h;
    int t = x->pc++, P = x->P, L = x->v.L, C = x->C;
    size_t esize = x->esize;
    if (t == P + 2) {
        x->done = true;
        return collSuccess;
    }
    struct coll_ring_line *lines = x->lines;
    lines[0].nsets = lines[1].nsets = 0;
    for (int b = t - 2; b <= t; b += 2) { /* the host's line: ag of t - 2, rs of t */
        if (b < 0 || b >= P)
            continue;
        size_t boff, blen;
        coll_ring_chunk(a->count, P, b, &boff, &blen);
        struct coll_ring_steps *st = &lines[0].set[lines[0].nsets++];
        *st = (struct coll_ring_steps){
            .a = {.sendbuf = b == t ? (const char *)a->sendbuf + boff * esize
                                    : (const char *)a->recvbuf + boff * esize,
                  .recvbuf = (char *)a->recvbuf + boff * esize, .count = blen,
                  .dtype = a->dtype, .op = a->op},
            .g = x->v.local, .nsegs = C, .step0 = b == t ? 0 : L - 1, .nsteps = L - 1};
    }
    int b = t - 1;
    if (b >= 0 && b < P && x->seg < C) { /* across: this rank's segment of block t - 1 */
        size_t boff, blen, off, len;
        coll_ring_chunk(a->count, P, b, &boff, &blen);
        coll_ring_segment(blen, C, x->seg, &off, &len);
        char *q = (char *)a->recvbuf + (boff + off) * esize;
        /* A host of one rank has no step within: straight from its input. */
        const char *in = L > 1 ? q : (const char *)a->sendbuf + (boff + off) * esize;
        lines[1].set[0] = (struct coll_ring_steps){
            .a = {.sendbuf = in, .recvbuf = q, .count = len, .dtype = a->dtype, .op = a->op},
            .g = x->across, .nsegs = h->n, .avg_div = x->N, .step0 = 0,
            .nsteps = 2 * (h->n - 1)};
        lines[1].nsets = 1;
    }
    /* Each phase's slots (the scratch of the last phase, grown if need be:
     * blocks of one element fewer may cut bigger slices). */
    void *slots;
    size_t bytes = coll_ring_lines_slots(comm, lines, 2);
    COLL_CHECK(coll_comm_scratch(comm, bytes ? bytes : 1, &slots));
    return coll_ring_build_lines(hier_sub(x), lines, 2, slots, t == P + 1);
}

static collResult_t hier_allreduce_step(struct hier_run *x)
{
    const struct coll_args *a = x->a;
    int L = x->v.L, C = x->C;
    switch (x->pc++) {
    case 0: /* within: the reduce-scatter half (a host of one rank has none) */
        return L > 1 ? coll_ring_build_rs(hier_sub(x), a, &x->v.local, C, false)
                     : collSuccess;
    case 1: /* across: this rank's segment, with the ranks holding it on every host */
        if (x->seg < C) {
            size_t off, len;
            coll_ring_segment(a->count, C, x->seg, &off, &len);
            char *p = (char *)a->recvbuf + off * x->esize;
            /* A host of one rank takes part straight from its input (as the flat
             * ring does), not from a copy reduced in place. */
            const char *in = L > 1 ? p : (const char *)a->sendbuf + off * x->esize;
            x->s = (struct coll_args){.sendbuf = in, .recvbuf = p, .count = len,
                                      .dtype = a->dtype, .op = a->op};
            return coll_ring_build_allreduce(hier_sub(x), &x->s, &x->across, x->N, L == 1);
        }
        return collSuccess;
    case 2: /* within: the allgather half */
        if (L > 1) {
            x->g = *a;
            x->g.sendbuf = a->recvbuf;
            return coll_ring_build_ag(hier_sub(x), &x->g, &x->v.local, C, true);
        }
        return collSuccess;
    default:
        x->done = true;
        return collSuccess;
    }
}

static collResult_t hier_allreduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    hier_cut_apart(comm);
    const struct coll_hosts *h = &comm->hosts;
    struct hier_view v = hier_view_of(comm);
    if (h->n == 1)
        return coll_ring_build_allreduce(fr, a, &v.local, comm->nranks, true);
    struct hier_run *x;
    COLL_CHECK(hier_start(fr, a, hier_allreduce_step, &x));
    x->C = h->min_local;
    x->seg = (x->v.local.pos + 1) % x->v.L; /* what the reduce-scatter leaves here */
    hier_across_members(h, x->seg, x->members);
    x->across = (struct coll_ring_group){.n = h->n, .pos = x->v.host, .members = x->members};
    /* The same choice on every rank, hosts of one rank included. */
    if (h->max_local > 1 && x->bytes >= 2 * (size_t)HIER_BLOCK_MIN) {
        size_t P = x->bytes / HIER_BLOCK_MIN;
        x->P = P > HIER_BLOCKS_MAX ? HIER_BLOCKS_MAX : (int)P;
        x->step = hier_allreduce_blocks;
    }
    return collSuccess;
}

static collResult_t hier_broadcast_step(struct hier_run *x)
{
    const struct coll_args *a = x->a;
    switch (x->pc++) {
    case 0: /* across: the leaders, from the root */
        if (x->leader && x->v.H > 1) {
            x->across = hier_leaders(&x->v, x->root, x->members);
            int from = x->v.h->host[x->root];
            struct coll_frame *sub = hier_sub(x);
            return hier_across_tree(sub->prog.comm, (double)x->bytes)
                       ? coll_group_tree_bcast(sub, &x->across, from, a->recvbuf, a->recvbuf,
                                               x->bytes)
                       : coll_group_bcast(sub, &x->across, from, a->recvbuf, a->recvbuf,
                                          x->bytes, x->v.L == 1);
        }
        return collSuccess;
    case 1: /* within: from the host's leader */
        return coll_group_bcast(hier_sub(x), &x->v.local, x->lead_place, a->recvbuf,
                                a->recvbuf, x->bytes, true);
    default:
        x->done = true;
        return collSuccess;
    }
}

static collResult_t hier_broadcast(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    hier_cut_apart(comm);
    size_t bytes = a->count * coll_dtype_size(a->dtype);
    if (comm->rank == a->root && a->recvbuf != a->sendbuf && bytes > 0)
        memcpy(a->recvbuf, a->sendbuf, bytes);
    if (comm->nranks == 1 || bytes == 0)
        return collSuccess;
    struct hier_run *x;
    COLL_CHECK(hier_start(fr, a, hier_broadcast_step, &x));
    x->root = a->root;
    x->lead_place = x->v.host == x->v.h->host[a->root] ? x->v.h->index[a->root] : 0;
    x->leader = x->v.local.pos == x->lead_place;
    return collSuccess;
}

static collResult_t hier_reduce_step(struct hier_run *x)
{
    const struct coll_args *a = x->a;
    switch (x->pc++) {
    case 0: /* within: to the host's leader */
        if (x->v.L > 1) {
            x->host_sum = x->sum;
            return coll_group_reduce(hier_sub(x), &x->v.local, x->lead_place, a->sendbuf, x->sum,
                                     a->count, a->dtype, a->op, x->v.H == 1 ? x->avg : 0,
                                     x->work + x->bytes, x->v.H == 1);
        }
        return collSuccess;
    case 1: /* across: the leaders, to the root */
        if (x->leader && x->v.H > 1) {
            x->across = hier_leaders(&x->v, x->root, x->members);
            int to = x->v.h->host[x->root];
            struct coll_frame *sub = hier_sub(x);
            return hier_across_tree(sub->prog.comm, (double)x->bytes)
                       ? coll_group_tree_reduce(sub, &x->across, to, x->host_sum, a->recvbuf,
                                                a->count, a->dtype, a->op, x->avg,
                                                x->work + x->bytes)
                       : coll_group_reduce(sub, &x->across, to, x->host_sum, a->recvbuf,
                                           a->count, a->dtype, a->op, x->avg,
                                           x->work + x->bytes, true);
        }
        return collSuccess;
    default:
        x->done = true;
        return collSuccess;
    }
}

static collResult_t hier_reduce(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    hier_cut_apart(comm);
    size_t esize = coll_dtype_size(a->dtype), bytes = a->count * esize;
    int root = a->root, me = comm->rank, N = comm->nranks;
    if (N == 1 || bytes == 0) {
        if (me == root && a->recvbuf != a->sendbuf && bytes > 0)
            memcpy(a->recvbuf, a->sendbuf, bytes);
        return collSuccess;
    }
    struct hier_run *x;
    COLL_CHECK(hier_start(fr, a, hier_reduce_step, &x));
    x->root = root;
    x->avg = a->op == collAvg ? N : 0;
    x->lead_place = x->v.host == x->v.h->host[root] ? x->v.h->index[root] : 0;
    x->leader = x->v.local.pos == x->lead_place;
    /* The host's sum: the root's output, another leader's scratch. */
    size_t slots = coll_group_reduce_slots(comm, a->count, a->dtype);
    size_t tree_work = coll_group_tree_reduce_work(a->count, a->dtype);
    COLL_CHECK(coll_comm_scratch(comm, bytes + (slots > tree_work ? slots : tree_work),
                                 (void **)&x->work));
    x->sum = me == root ? a->recvbuf : x->work;
    x->host_sum = a->sendbuf;
    return collSuccess;
}

static collResult_t hier_allgather_step(struct hier_run *x)
{
    const struct coll_hosts *h = x->v.h;
    size_t B = x->bytes, total = (size_t)x->N * B;
    size_t lo = (size_t)h->start[x->v.host] * B, hi = (size_t)h->start[x->v.host + 1] * B;
    switch (x->pc++) {
    case 0: /* within: the host's blocks */
        for (int j = 0; j < x->v.L; j++) {
            x->off[j] = ((size_t)h->start[x->v.host] + j) * B;
            x->len[j] = B;
        }
        return coll_group_allgatherv(hier_sub(x), &x->v.local, x->G, x->off, x->len, false);
    case 1: /* across: whole hosts' blocks, by the leaders */
        if (x->v.local.pos == 0 && x->v.H > 1) {
            x->across = hier_leaders(&x->v, -1, x->members);
            for (int k = 0; k < x->v.H; k++) {
                x->off[k] = (size_t)h->start[k] * B;
                x->len[k] = (size_t)(h->start[k + 1] - h->start[k]) * B;
            }
            return coll_group_allgatherv(hier_sub(x), &x->across, x->G, x->off, x->len, false);
        }
        return collSuccess;
    case 2: /* within: the other hosts' blocks, before this host's */
        return x->v.H > 1 ? coll_group_bcast(hier_sub(x), &x->v.local, 0, x->G, x->G, lo, false)
                          : collSuccess;
    case 3: /* and after */
        return x->v.H > 1 ? coll_group_bcast(hier_sub(x), &x->v.local, 0, x->G + hi, x->G + hi,
                                             total - hi, true)
                          : collSuccess;
    default:
        if (!x->direct)
            for (int p = 0; p < x->N; p++)
                memcpy((char *)x->a->recvbuf + (size_t)h->order[p] * B, x->G + (size_t)p * B,
                       B);
        x->done = true;
        return collSuccess;
    }
}

static collResult_t hier_allgather(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    hier_cut_apart(comm);
    const struct coll_hosts *h = &comm->hosts;
    int N = comm->nranks, me = comm->rank;
    size_t B = a->count * coll_dtype_size(a->dtype), total = (size_t)N * B;
    bool direct = hier_order_is_ranks(comm);
    char *G = a->recvbuf;
    if (!direct && B > 0)
        COLL_CHECK(coll_comm_scratch(comm, total, (void **)&G));
    char *mine = G + (size_t)h->pos[me] * B;
    if (B > 0 && (const char *)a->sendbuf != mine)
        memmove(mine, a->sendbuf, B);
    if (N == 1 || B == 0)
        return collSuccess;
    struct hier_run *x;
    COLL_CHECK(hier_start(fr, a, hier_allgather_step, &x));
    x->direct = direct;
    x->G = G;
    int most = x->v.H > h->max_local ? x->v.H : h->max_local;
    COLL_CHECK(coll_frame_alloc(fr, 2 * (size_t)most * sizeof(size_t), (void **)&x->off));
    x->len = x->off + most;
    return collSuccess;
}

static collResult_t hier_reduce_scatter_step(struct hier_run *x)
{
    const struct coll_args *a = x->a;
    const struct coll_hosts *h = x->v.h;
    size_t B = x->bytes, count_all = (size_t)x->N * a->count;
    switch (x->pc++) {
    case 0: /* within: the whole buffer, to the host's leader */
        if (x->v.L > 1) {
            x->host_sum = x->sum;
            return coll_group_reduce(hier_sub(x), &x->v.local, 0, a->sendbuf, x->sum, count_all,
                                     a->dtype, a->op, 0, x->work, false);
        }
        return collSuccess;
    case 1: /* across: the hosts' regions, by the leaders (in host order) */
        if (x->leader) {
            const char *in = x->host_sum;
            if (!x->direct) {
                for (int p = 0; p < x->N; p++)
                    memcpy(x->G + (size_t)p * B, (const char *)x->host_sum + (size_t)h->order[p] * B,
                           B);
                in = x->G;
            }
            for (int k = 0; k < x->v.H; k++) {
                x->off[k] = (size_t)h->start[k] * a->count;
                x->len[k] = (size_t)(h->start[k + 1] - h->start[k]) * a->count;
            }
            x->across = hier_leaders(&x->v, -1, x->members);
            return coll_group_reduce_scatterv(hier_sub(x), &x->across, in, x->R, x->off, x->len,
                                              a->dtype, a->op, x->avg, x->work, x->v.L == 1);
        }
        return collSuccess;
    case 2: /* within: the host's region, from the leader */
        return coll_group_bcast(hier_sub(x), &x->v.local, 0, x->R, x->R, (size_t)x->v.L * B,
                                true);
    default:
        memcpy(a->recvbuf, x->R + (size_t)x->v.local.pos * B, B);
        x->done = true;
        return collSuccess;
    }
}

static collResult_t hier_reduce_scatter(struct coll_frame *fr, const struct coll_args *a)
{
    struct coll_comm *comm = fr->prog.comm;
    hier_cut_apart(comm);
    const struct coll_hosts *h = &comm->hosts;
    int N = comm->nranks, me = comm->rank;
    size_t esize = coll_dtype_size(a->dtype), B = a->count * esize, total = (size_t)N * B;
    size_t count_all = (size_t)N * a->count;
    bool direct = hier_order_is_ranks(comm);
    if (N == 1 || B == 0) {
        const char *own = (const char *)a->sendbuf + (size_t)me * B;
        if (B > 0 && (const char *)a->recvbuf != own)
            memcpy(a->recvbuf, own, B);
        return collSuccess;
    }
    struct hier_run *x;
    COLL_CHECK(hier_start(fr, a, hier_reduce_scatter_step, &x));
    x->direct = direct;
    x->avg = a->op == collAvg ? N : 0;
    x->leader = x->v.local.pos == 0;
    /* Scratch: the host's sum P (rank order), G (host order, when that differs),
     * R (this host's region, reduced over all), then room for slots or partials. */
    size_t region = (size_t)x->v.L * B;
    size_t slots = coll_group_reduce_slots(comm, count_all, a->dtype);
    size_t most = (size_t)h->max_local * B;
    size_t room = slots > 2 * most ? slots : 2 * most;
    char *P;
    COLL_CHECK(coll_comm_scratch(comm, total + (direct ? 0 : total) + region + room,
                                 (void **)&P));
    x->sum = P;
    x->G = direct ? P : P + total;
    x->R = x->G + total;
    x->work = x->R + region;
    x->host_sum = a->sendbuf;
    COLL_CHECK(coll_frame_alloc(fr, 2 * (size_t)x->v.H * sizeof(size_t), (void **)&x->off));
    x->len = x->off + x->v.H;
    return collSuccess;
}

static bool hier_can_run(const struct coll_comm *comm, enum coll_func f,
                         const struct coll_args *a)
{
    return f == COLL_FUNC_ALLREDUCE || f == COLL_FUNC_BROADCAST || f == COLL_FUNC_REDUCE ||
           f == COLL_FUNC_ALLGATHER || f == COLL_FUNC_REDUCE_SCATTER;
}

/* A chain over the L ranks of a host moving `bytes` (reduced or not), under
 * the model within a host. */
static double hier_chain_in(const struct coll_comm *comm, const struct coll_model *in, int L,
                            double bytes, bool reduce)
{
    if (L < 2 || bytes <= 0)
        return 0;
    double slice = fmin(bytes, (double)comm->chunk_bytes);
    return coll_model_cost(in, L, &(struct coll_cost){
        .rounds = L - 1, .msgs = L - 1, .busiest_msgs = 2,
        .rank_bytes = 2 * bytes + 2 * (L - 2) * slice, .total_bytes = 2.0 * (L - 1) * bytes,
        .reduce_bytes = reduce ? bytes : 0});
}

/* rounds steps across the hosts moving link_bytes one way through a host's
 * link, reducing reduce_bytes on the way. */
static double hier_across(const struct coll_model *m, int rounds, double link_bytes,
                          double reduce_bytes)
{
    double round_us = m->net_alpha_us > 0 ? m->net_alpha_us : m->lat_us + 2.0 * m->msg_us;
    return rounds * round_us + link_bytes / (m->net_gbs * 1e3) +
           reduce_bytes / (m->reduce_gbs * 1e3);
}

/* With one host, or one rank per host, this is the flat ring (or chain) with
 * more steps: never predicted to win.  Otherwise the steps within the hosts at
 * the speed and round time the model measured there (local_*), those across at
 * the link's (net_gbs: the bytes one way through a host's link, which the C
 * rings of a host share; net_alpha_us a round), one after the other. */
static double hier_predict(const struct coll_comm *comm, enum coll_func f,
                           const struct coll_args *a, const struct coll_model *m)
{
    const struct coll_hosts *h = &comm->hosts;
    if (!hier_can_run(comm, f, a) || h->n == 1 || h->max_local == 1 || m->net_gbs <= 0)
        return 1e300;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    int H = h->n, L = h->max_local, C = h->min_local, N = comm->nranks;
    double local_frac = (double)(L - 1) / L, across_frac = (double)(H - 1) / H;
    double rs = m->lend ? 2.0 / 3.0 : 1.0;
    struct coll_model in = *m;
    in.core_gbs = m->local_core_gbs;
    in.host_gbs = m->local_host_gbs;
    in.local_ranks = L;
    if (m->local_alpha_us > 0 && m->alpha_us > 0) { /* a round within a host */
        double k = m->local_alpha_us / m->alpha_us;
        in.lat_us *= k;
        in.msg_us *= k;
        in.wake_us *= k;
    }
    switch (f) {
    case COLL_FUNC_ALLREDUCE: {
        /* From 2 blocks on (hier_allreduce_blocks): P phases as long as the
         * slower of a block's steps within the host and across, and the first
         * reduce-scatter and last allgather, which nothing overlaps. */
        int P = 1;
        if (S >= 2.0 * HIER_BLOCK_MIN)
            P = S / HIER_BLOCK_MIN > HIER_BLOCKS_MAX ? HIER_BLOCKS_MAX : (int)(S / HIER_BLOCK_MIN);
        double B = S / P;
        double in_host = coll_model_cost(&in, L, &(struct coll_cost){
            .rounds = 2 * (L - 1), .msgs = 2.0 * L * (L - 1), .busiest_msgs = 4.0 * (L - 1),
            .rank_bytes = (2 + 2 * rs) * local_frac * B,
            .total_bytes = (2 + 2 * rs) * (L - 1) * B, .reduce_bytes = local_frac * B});
        /* one way, all C rings of a host */
        double across = hier_across(m, 2 * (H - 1), 2 * across_frac * B, across_frac * B / C);
        return P == 1 ? in_host + across : P * fmax(in_host, across) + in_host;
    }
    case COLL_FUNC_BROADCAST:
    case COLL_FUNC_REDUCE: { /* across: a chain, or a tree of whole messages */
        double red = f == COLL_FUNC_REDUCE ? S : 0;
        double across = hier_across_tree(comm, S)
                            ? coll_log2_ceil(H) * hier_across(m, 1, S, red)
                            : hier_across(m, H - 1, S, red);
        return across + hier_chain_in(comm, &in, L, S, f == COLL_FUNC_REDUCE);
    }
    case COLL_FUNC_ALLGATHER: { /* S per rank; the output is N S */
        double ring_in = coll_model_cost(&in, L, &(struct coll_cost){
            .rounds = L - 1, .msgs = (double)L * (L - 1), .busiest_msgs = 2.0 * (L - 1),
            .rank_bytes = 2 * (L - 1) * S, .total_bytes = 2.0 * L * (L - 1) * S});
        return ring_in + hier_across(m, H - 1, (double)(N - h->min_local) * S, 0) +
               hier_chain_in(comm, &in, L, (double)(N - h->min_local) * S, false);
    }
    case COLL_FUNC_REDUCE_SCATTER: /* S per rank; the input is N S */
        return hier_chain_in(comm, &in, L, (double)N * S, true) +
               hier_across(m, H - 1, across_frac * N * S, across_frac * N * S) +
               hier_chain_in(comm, &in, L, (double)L * S, false);
    default:
        return 1e300;
    }
}

const struct coll_algo coll_algo_hier = {
    .name = "hier",
    .can_run = hier_can_run,
    .build = {[COLL_FUNC_ALLREDUCE] = hier_allreduce,
              [COLL_FUNC_BROADCAST] = hier_broadcast,
              [COLL_FUNC_REDUCE] = hier_reduce,
              [COLL_FUNC_ALLGATHER] = hier_allgather,
              [COLL_FUNC_REDUCE_SCATTER] = hier_reduce_scatter},
    .predict = hier_predict,
    .comm_init = hier_comm_init,
};
