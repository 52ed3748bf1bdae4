/* The ring's pieces that other algorithms build on (algorithms/hier.c): rings
 * over some of the communicator's ranks, and the two halves of an allreduce. */
#ifndef COLL_RING_H
#define COLL_RING_H

#include <stdbool.h>
#include <stddef.h>

#include "algo.h"
#include "prog.h"

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

/* The builders (prog.h) put the call's stage in frame fr; a and g, and what
 * they point at, must live as long as the program.  The coll_ring_allreduce_
 * calls run it alone. */

/* An allreduce of a over the ranks of g; collAvg divides by avg_div (the
 * ranks whose contributions the inputs hold) at its end.  last as in pipe.h. */
collResult_t coll_ring_build_allreduce(struct coll_frame *fr, const struct coll_args *a,
                                       const struct coll_ring_group *g, int avg_div, bool last);
collResult_t coll_ring_allreduce_group(struct coll_comm *comm, const struct coll_args *a,
                                       const struct coll_ring_group *g, int avg_div, bool last);
/* Its reduce-scatter half, over a->count cut into nsegs <= g->n segments: after
 * it the rank at place p holds segment (p + 1) mod g->n of a->recvbuf reduced
 * over g (collAvg: summed, not divided).  a may be in place. */
collResult_t coll_ring_build_rs(struct coll_frame *fr, const struct coll_args *a,
                                const struct coll_ring_group *g, int nsegs, bool last);
/* Its allgather half: from the segments the reduce-scatter left, every rank of
 * g ends with all of a->recvbuf. */
collResult_t coll_ring_build_ag(struct coll_frame *fr, const struct coll_args *a,
                                const struct coll_ring_group *g, int nsegs, bool last);
collResult_t coll_ring_allreduce_ag(struct coll_comm *comm, const struct coll_args *a,
                                    const struct coll_ring_group *g, int nsegs, bool last);

/* Steps [step0, step0 + nsteps) of an allreduce of a over g, its count cut
 * into nsegs segments (as the three calls above make them), collAvg dividing by
 * avg_div at the last reduce-scatter step. */
struct coll_ring_steps {
    struct coll_args a;
    struct coll_ring_group g;
    int nsegs, avg_div, step0, nsteps;
};

/* A line: sets of steps over one group, passed one after another on one pipe. */
#define COLL_RING_LINE_MAX 2
struct coll_ring_line {
    struct coll_ring_steps set[COLL_RING_LINE_MAX];
    int nsets;
};

/* Bytes of receive slots that coll_ring_build_lines needs (sets in place). */
size_t coll_ring_lines_slots(const struct coll_comm *comm, const struct coll_ring_line *lines,
                             int nlines);
/* lines[0..nlines) at once, one pipe each, as one stage (pipe.h,
 * coll_pipes_stage): the lines must be on distinct connections (groups of other
 * ranks, or the same ranks in the other direction).  Sets with nothing to move
 * (one rank, no elements) are skipped.  slots: coll_ring_lines_slots bytes. */
collResult_t coll_ring_build_lines(struct coll_frame *fr, const struct coll_ring_line *lines,
                                   int nlines, void *slots, bool last);

#endif
