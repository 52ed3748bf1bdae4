/* Collectives over a group of the communicator's ranks (struct coll_ring_group,
 * ring.h), the pieces the hierarchical algorithms (hier.c) build on: a
 * pipelined chain broadcast and reduce, and a ring allgather and reduce-scatter
 * of uneven regions.  Each builds its call's program into the frame fr
 * (prog.h): one pipelined stage (pipe.h), or the trees' one message per stage;
 * none allocates beyond the frame: what needs room takes it from the caller,
 * and what it points at (g, the regions) must live as long as the program.
 * Members not in the group build nothing. */
#ifndef COLL_GROUP_H
#define COLL_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "prog.h"
#include "ring.h"

/* A chain broadcast of `bytes` bytes from the member at place root: it sends
 * from src; every other member receives into dst and passes each slice on to
 * the next place (root + 1, root + 2, ... mod g->n).  last as in pipe.h. */
collResult_t coll_group_bcast(struct coll_frame *fr, const struct coll_ring_group *g, int root,
                              const void *src, void *dst, size_t bytes, bool last);

/* Bytes of `slots` that coll_group_reduce needs on a member that receives. */
size_t coll_group_reduce_slots(const struct coll_comm *comm, size_t count,
                               collDataType_t dtype);
/* A chain reduce of count elements toward the member at place root: own is each
 * member's contribution, the chain runs root + 1, root + 2, ..., root, and the
 * root gets the reduction in dst (which may be own).  avg_div > 1: the root
 * divides by it (collAvg).  slots: coll_group_reduce_slots bytes, on every
 * member but the first of the chain. */
collResult_t coll_group_reduce(struct coll_frame *fr, const struct coll_ring_group *g, int root,
                               const void *own, void *dst, size_t count, collDataType_t dtype,
                               collRedOp_t op, int avg_div, void *slots, bool last);

/* The same two over a binomial tree (ceil(log2 n) rounds, each moving the whole
 * buffer, one message per round, unpipelined): for small buffers over many
 * members, where rounds cost more than bytes.  The tree reduce takes `work`:
 * bytes of scratch on every member (coll_group_tree_reduce_work), and reduces
 * in a fixed order (the root's result is the same run after run). */
collResult_t coll_group_tree_bcast(struct coll_frame *fr, const struct coll_ring_group *g,
                                   int root, const void *src, void *dst, size_t bytes);
size_t coll_group_tree_reduce_work(size_t count, collDataType_t dtype);
collResult_t coll_group_tree_reduce(struct coll_frame *fr, const struct coll_ring_group *g,
                                    int root, const void *own, void *dst, size_t count,
                                    collDataType_t dtype, collRedOp_t op, int avg_div,
                                    void *work);

/* A ring allgather in buf of uneven regions: the member at place j holds bytes
 * [off[j], off[j] + len[j]) of buf, and after it every member holds all of them
 * (n - 1 steps, each region crossing each link once). */
collResult_t coll_group_allgatherv(struct coll_frame *fr, const struct coll_ring_group *g,
                                   void *buf, const size_t *off, const size_t *len, bool last);

/* A ring reduce-scatter of uneven regions: in holds every member's contribution
 * to all of them (region j: elements [off[j], off[j] + len[j]) of in); after it
 * the member at place g->pos has its own region reduced over the group in out
 * (len[pos] elements), divided by avg_div when that is > 1 (collAvg).  work:
 * 2 x the largest len elements. */
collResult_t coll_group_reduce_scatterv(struct coll_frame *fr, const struct coll_ring_group *g,
                                        const void *in, void *out, const size_t *off,
                                        const size_t *len, collDataType_t dtype, collRedOp_t op,
                                        int avg_div, void *work, bool last);

#endif
