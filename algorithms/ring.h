/* The ring's pieces that other algorithms build on (algorithms/hier.c): rings
 * over some of the communicator's ranks, and the two halves of an allreduce. */
#ifndef COLL_RING_H
#define COLL_RING_H

#include <stdbool.h>
#include <stddef.h>

#include "algo.h"

/* A ring of n ranks: members[p] is the rank at place p, this rank is at pos;
 * each sends to the next place and receives from the previous one. */
struct coll_ring_group {
    int n, pos;
    const int *members;
};

/* The flat ring: every rank, host by host (comm->hosts.order), so that it
 * crosses the network once per host whatever the rank numbering. */
struct coll_ring_group coll_ring_flat(const struct coll_comm *comm);

/* Segment j of count elements cut into nsegs balanced segments; from nsegs on
 * empty (off 0, len 0). */
void coll_ring_segment(size_t count, int nsegs, int j, size_t *off_p, size_t *len_p);

/* An allreduce of a over the ranks of g; collAvg divides by avg_div (the
 * ranks whose contributions the inputs hold) at its end.  last as in pipe.h. */
collResult_t coll_ring_allreduce_group(struct coll_comm *comm, const struct coll_args *a,
                                       const struct coll_ring_group *g, int avg_div, bool last);
/* Its reduce-scatter half, over a->count cut into nsegs <= g->n segments: after
 * it the rank at place p holds segment (p + 1) mod g->n of a->recvbuf reduced
 * over g (collAvg: summed, not divided).  a may be in place. */
collResult_t coll_ring_allreduce_rs(struct coll_comm *comm, const struct coll_args *a,
                                    const struct coll_ring_group *g, int nsegs, bool last);
/* Its allgather half: from the segments the reduce-scatter left, every rank of
 * g ends with all of a->recvbuf. */
collResult_t coll_ring_allreduce_ag(struct coll_comm *comm, const struct coll_args *a,
                                    const struct coll_ring_group *g, int nsegs, bool last);

#endif
