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
#include <stdlib.h>

#include "algo.h"
#include "internal.h"
#include "reduce.h"
#include "ring.h"

/* The rank at place `place` of host h. */
static int hier_rank(const struct coll_hosts *h, int host, int place)
{
    return h->order[h->start[host] + place];
}

static collResult_t hier_allreduce(struct coll_comm *comm, const struct coll_args *a)
{
    const struct coll_hosts *h = &comm->hosts;
    int me = comm->rank, host = h->host[me];
    int L = h->start[host + 1] - h->start[host], C = h->min_local;
    size_t esize = coll_dtype_size(a->dtype);
    struct coll_ring_group local = {.n = L, .pos = h->index[me],
                                    .members = &h->order[h->start[host]]};
    if (h->n == 1)
        return coll_ring_allreduce_group(comm, a, &local, comm->nranks, true);

    COLL_CHECK(coll_ring_allreduce_rs(comm, a, &local, C, false));
    int seg = (local.pos + 1) % L; /* what step 1 left here */
    if (seg < C) {
        size_t off, len;
        coll_ring_segment(a->count, C, seg, &off, &len);
        int *members;
        COLL_CHECK(coll_calloc(&members, (size_t)h->n));
        for (int j = 0; j < h->n; j++) {
            int Lj = h->start[j + 1] - h->start[j];
            members[j] = hier_rank(h, j, (seg - 1 + Lj) % Lj);
        }
        struct coll_ring_group across = {.n = h->n, .pos = host, .members = members};
        char *p = (char *)a->recvbuf + off * esize;
        struct coll_args s = {.sendbuf = p, .recvbuf = p, .count = len, .dtype = a->dtype,
                              .op = a->op, .root = 0};
        collResult_t res = coll_ring_allreduce_group(comm, &s, &across, comm->nranks, false);
        free(members);
        COLL_CHECK(res);
    }
    struct coll_args g = *a;
    g.sendbuf = a->recvbuf;
    return coll_ring_allreduce_ag(comm, &g, &local, C, true);
}

static bool hier_can_run(const struct coll_comm *comm, enum coll_func f,
                         const struct coll_args *a)
{
    return f == COLL_FUNC_ALLREDUCE;
}

/* With one host, or one rank per host, this is the flat ring with more steps:
 * never predicted to win.  Otherwise the outer steps at the speed the model
 * measured within a host, the middle one at the link's (net_gbs: the bytes one
 * way through a host's link, which the C rings of a host share). */
static double hier_predict(const struct coll_comm *comm, enum coll_func f,
                           const struct coll_args *a, const struct coll_model *m)
{
    const struct coll_hosts *h = &comm->hosts;
    if (f != COLL_FUNC_ALLREDUCE || h->n == 1 || h->max_local == 1 || m->net_gbs <= 0)
        return 1e300;
    double S = (double)(a->count * coll_dtype_size(a->dtype));
    int H = h->n, L = h->max_local, C = h->min_local;
    double local_frac = (double)(L - 1) / L, across_frac = (double)(H - 1) / H;
    double rs = m->lend ? 2.0 / 3.0 : 1.0;
    struct coll_model in = *m;
    in.core_gbs = m->local_core_gbs;
    in.host_gbs = m->local_host_gbs;
    in.local_ranks = L;
    double in_host = coll_model_cost(&in, L, &(struct coll_cost){
        .rounds = 2 * (L - 1), .msgs = 2.0 * L * (L - 1), .busiest_msgs = 4.0 * (L - 1),
        .rank_bytes = (2 + 2 * rs) * local_frac * S, .total_bytes = (2 + 2 * rs) * (L - 1) * S,
        .reduce_bytes = local_frac * S});
    double link_bytes = 2 * across_frac * S; /* one way, all C rings of a host */
    double across = 2 * (H - 1) * m->lat_us + 4.0 * (H - 1) * m->msg_us +
                    link_bytes / (m->net_gbs * 1e3) + across_frac * S / C / (m->reduce_gbs * 1e3);
    return in_host + across;
}

const struct coll_algo coll_algo_hier = {
    .name = "hier",
    .can_run = hier_can_run,
    .run = {[COLL_FUNC_ALLREDUCE] = hier_allreduce},
    .predict = hier_predict,
};
